"""``workbench compare STUDY`` and ``workbench dashboard STUDY``: statistics and plots of a study,
in the terminal and as self-contained HTML logged to the study's parent MLflow run.

Data flow: :mod:`workbench.results.reader` (frames) → :mod:`workbench.analysis.comparison` (the runs
compared, the comparison: :mod:`workbench.compare`'s summaries and statistics) → :mod:`workbench.viz`
(figures, HTML) → MLflow artifacts:
* ``reports/compare.html`` (+ ``compare.csv``, ``compare.json``, ``compare.md``) on the parent run;
* ``dashboards/<spec name>.html`` on the parent run (on the run itself with ``--run``).
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from workbench.analysis.health_table import health_cells, health_events
from workbench.analysis.selection import SUPERSEDED, labelled_by_arm
from workbench.analysis.target import Target, parent_run
from workbench.cli.common import (
    TrackingOpt,
    fmt_ci,
    fmt_num,
    fmt_p,
    log_artifacts_once,
    log_artifacts_text,
    resolve_target,
)
from workbench.cli.invocation import DEFAULT_UI_BASE, ui_base_url, workbench_command
from workbench.cli.output import console, fail, note
from workbench.errors import AnalysisError
from workbench.tracking.redact import redact_uri

if TYPE_CHECKING:
    import pandas as pd

    from workbench.analysis.comparison import Comparison

__all__ = ["build_compare_report", "compare", "dashboard"]

REPORT_DIR = "reports"
#: Parent-run tag: SHA-256 of the reports/compare.* last logged, so the same content is logged once.
REPORT_SHA_TAG = "workbench.compare_report_sha256"
DASHBOARD_DIR = "dashboards"

# --------------------------------------------------------------------------------------------
# Pieces (pure: frames in, frames/HTML out)
# --------------------------------------------------------------------------------------------


def _verdict_class(v: Any) -> str:
    from workbench.compare.wording import status  # deferred: scipy

    s = status(v)
    # a sequential design's own words (futile, open: #52) are no decision for or against either
    undecided = s in ("inconclusive", "withheld", "not testable") or str(v).startswith(("futile", "open"))
    return {"better": "better", "worse": "worse"}.get(s, "nd" if undecided else "")


def comparison_table_html(table: Any) -> str:
    import pandas as pd  # deferred: keeps `workbench --help` light

    from workbench.compare.table import DELTA_HEADER, delta_cell, runs_phrase  # deferred: scipy
    from workbench.compare.wording import level_percent  # deferred: scipy
    from workbench.viz.html import df_table_html  # deferred: plotly, pydantic

    parts = []
    level = level_percent(table.confidence)
    for metric in table.metrics:
        rows = table.for_metric(metric)
        hib = table.higher_is_better.get(metric)
        direction = {True: "higher is better", False: "lower is better", None: "no preferred direction"}[hib]
        base = (rows["verdict"] == "baseline").tolist()
        vs = (
            {"baseline arm": ["—" if b else (a or "—") for b, a in zip(base, rows["baseline_arm"], strict=True)]}
            if table.per_grid_point
            else {}
        )
        view = pd.DataFrame(
            {
                "rank": [fmt_num(r) for r in rows["rank"]],
                table.unit: [table.arm_label(str(v)) for v in rows["variant"]],  # a control arm says so
                "verdict": rows["verdict"],  # next to the name: in view in a narrow frame (MLflow's artifact viewer)
                **vs,
                "n_seeds": rows["n_seeds"],
                "runs": [runs_phrase(r) for r in rows.to_dict("records")],
                f"mean [{level} CI]": [
                    fmt_ci(*x) for x in zip(rows["mean"], rows["mean_lo"], rows["mean_hi"], strict=True)
                ],
                f"IQM [{level} CI]": [
                    fmt_ci(*x) for x in zip(rows["iqm"], rows["iqm_lo"], rows["iqm_hi"], strict=True)
                ],
                DELTA_HEADER: ["—" if b else delta_cell(r) for b, r in zip(base, rows.to_dict("records"), strict=True)],
                f"P(improve) [{level} CI]": [
                    "—" if b else fmt_ci(p, lo, hi, thresholds=(0.5,))
                    for b, p, lo, hi in zip(
                        base, rows["p_improve"], rows["p_improve_lo"], rows["p_improve_hi"], strict=True
                    )
                ],
                f"p ({table.correction})": [fmt_p(p) for p in rows["p_adjusted"]],
                "status": rows["status"],
                "test": rows["test"],
                **_two_way_html_columns(table, metric, rows, level),
            }
        )
        parts.append(
            f"<h3>{html.escape(metric)} <small>({table.title_role(metric)}{direction}; baseline: "
            f"{html.escape(table.baseline_phrase())})</small></h3>"
        )
        parts.append(
            df_table_html(
                view,
                left=(table.unit, *vs, "runs", "verdict", "test"),
                cell_class={"verdict": _verdict_class},
                row_class=lambda r: "baseline" if r["verdict"] == "baseline" else "",
            )
        )
        notes = [f"{r['variant']}: {r['note']}" for r in rows.to_dict("records") if r["note"]]
        if table.two_way(metric):
            notes.append(table.two_way(metric))
        if notes:
            parts.append("<ul class='note'>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    return "\n".join(parts)


def _looks_html(table: Any) -> str:
    """The study's sequential design and a seeds-added-after-looking flag, as set by ``compare``."""
    return "".join(
        f"<p class='note'><b>{html.escape(table.settings[k])}</b></p>"
        for k in ("sequential", "seeds_added", "earlier_design")
        if table.settings.get(k)
    )


def _two_way_html_columns(table: Any, metric: str, rows: pd.DataFrame, level: str) -> dict[str, list[str]]:
    """The intervals over seeds and problems, when the metric has them (else no columns)."""
    if not table.two_way(metric):
        return {}
    records = rows.to_dict("records")
    return {
        f"mean [{level} CI over seeds and problems]": [
            fmt_ci(r["mean"], r["mean_2way_lo"], r["mean_2way_hi"]) if r["two_way_method"] else "—" for r in records
        ],
        "Δ [CI over seeds and problems]": [_two_way_delta(r) for r in records],
    }


def _runs_overview_html(runs: pd.DataFrame, excluded: dict[str, int]) -> str:
    from workbench.analysis.comparison import runs_overview  # deferred: pandas, scipy
    from workbench.viz.html import df_table_html  # deferred: plotly, pydantic

    view = runs_overview(runs)
    unit = view.columns[0]
    out = df_table_html(view, left=(unit, "seed values"))
    if excluded:
        out += (
            "<p class='note'>Not compared: "
            + ", ".join(f"{n} {s}" for s, n in excluded.items())
            + (
                ". Use --include-unfinished to count the running ones as not finished"
                if set(excluded) - {SUPERSEDED}
                else ""
            )
            + (
                ". A run executed more than once (same run_key) counts once: its FINISHED attempt, else its latest"
                if SUPERSEDED in excluded
                else ""
            )
            + ".</p>"
        )
    return out


def build_compare_report(
    study: str,
    table: Any,
    summary: pd.DataFrame,
    history: pd.DataFrame,
    runs: pd.DataFrame,
    cells: pd.DataFrame | None,
    *,
    spec: Any = None,
    tracking_uri: str = "",
    excluded: dict[str, int] | None = None,
    n_resamples: int = 1000,
    answers: Mapping[str, pd.DataFrame] | None = None,
) -> tuple[str, list[str]]:
    """The HTML report (and rendering warnings): runs, comparison table, summary bars with CIs,
    curves with CI bands (the curve panels of ``spec``), health matrix, and ``answers``
    (:func:`workbench.analysis.rollouts.differing_answers`): same-problem pairs where a variant and the
    baseline differ."""
    import pandas as pd  # deferred: keeps `workbench --help` light

    from workbench.compare.arms import arm_column  # deferred: scipy
    from workbench.viz.dashboard import DashboardData, render_dashboard  # deferred: plotly, pydantic
    from workbench.viz.figures import (  # deferred: plotly, pydantic
        health_legend_html,
        health_matrix_figure,
        summary_figure,
    )
    from workbench.viz.html import Section, html_page  # deferred: plotly, pydantic
    from workbench.viz.style import variant_colors  # deferred: plotly, pydantic

    colors = variant_colors(pd.unique(arm_column(runs)), table.baseline_arms)
    unit = table.unit
    grid_note = (
        " An arm is a variant at one grid point (its run label without the seed); the runs of an arm "
        "are its seeds. Each arm is compared with the baseline variant's arm at the same grid point"
        + ("" if table.per_grid_point else f" (here: every arm with {table.baseline})")
        + "."
        if table.by_arm
        else ""
    )
    sections = [
        Section("Runs", body_html=_runs_overview_html(runs, excluded or {})),
        Section(
            "Which variant wins",
            body_html=_looks_html(table) + comparison_table_html(table),
            note=(
                f"Per-run summary metrics compared across seeds. Δ = {unit} − baseline "
                f"({'paired t-test on matched seeds' if table.df['paired'].fillna(False).any() else 'Welch t-test'}; "
                f"the CI of Δ at the level the row's own test used: the {table.correction}-corrected test's beside "
                "better/worse/inconclusive, the TOST's 1 − 2α/d beside equivalent; bounds rounded outward; verdicts by "
                f"{table.correction}-corrected tests, {table.family_words()}); mean CIs: t interval; IQM CIs: "
                "trimmed-mean t (Tukey-McLaughlin; t below 4 seeds); P(improvement): paired by seed with an exact "
                "binomial CI, else over all run pairs (Mann-Whitney) with Newcombe's score interval. 'runs' counts each {unit}'s "
                "runs as finished / failed / stopped early / censored (threshold never reached, nothing correct) / "
                "missing; failed, stopped and censored runs are ranked worst (Mann-Whitney test) and a verdict they "
                f"could change is withheld, with the reason. A {unit} is called better or "
                "worse only when the corrected test rejects; equivalent when the TOST at the study's compare.sesoi "
                "rejects (corrected the same way); otherwise inconclusive, with the minimum detectable effect (MDE) "
                "at the seeds run (80% power at the level tested)." + grid_note
            ),
        ),
        Section("Summary metrics", figure=summary_figure(table, summary, colors=colors)),
    ]
    warnings: list[str] = []
    if spec is not None:
        curve_spec = spec.model_copy(
            update={
                "panels": [p.model_copy(update={"row": None, "col": None}) for p in spec.panels if p.kind == "curve"]
            }
        )
        if curve_spec.panels:
            data = DashboardData(history, runs, baseline=table.baseline, n_resamples=n_resamples)
            rendered = render_dashboard(curve_spec, data)
            warnings += rendered.warnings
            rendered.figure.update_layout(title=None)
            sections.append(
                Section(
                    "Curves",
                    figure=rendered.figure,
                    note=(
                        f"Mean over the runs of each {unit} with its 95% t interval at each step (the interval of the "
                        "summaries, pointwise); "
                        "x = RL step. Dashed/dotted lines: the second/third metric of a panel (see its title). "
                        "Error bars on eval accuracy: binomial over problems, this checkpoint (95% Wilson interval over "
                        "its eval problems at the mean; the runs share the problems, so it bounds the mean's "
                        "problem-draw noise from above); none for runs that logged no eval/n_problems."
                    ),
                )
            )
    if cells is not None and len(cells):
        sections.append(
            Section(
                "Health",
                body_html=health_legend_html(),
                figure=health_matrix_figure(cells, title=None),
                note=(
                    "Each cell: one health rule on one run (from health.json). `workbench health STUDY` prints the same "
                    "table."
                ),
            )
        )
    if answers:
        from workbench.viz.html import df_table_html  # deferred: plotly, pydantic

        body = "".join(
            f"<h3>{html.escape(variant)} vs {html.escape(table.baseline)}</h3>"
            + df_table_html(pairs, left=[c for c in pairs.columns if c.startswith(("prompt", "answer", "text"))])
            for variant, pairs in answers.items()
        )
        sections.append(
            Section(
                "Same problems, different answers",
                body_html=body,
                note=(
                    "At the last eval step both arms stored: eval problems one arm answered correctly and the other did not "
                    "(up to 3 per variant), each arm's completion as sampled. `workbench rollouts STUDY --same-prompts A B "
                    "--differing` lists them all (docs/rollouts.md)."
                ),
            )
        )
    subtitle = f"study <b>{html.escape(study)}</b> · {len(runs)} runs · store {html.escape(redact_uri(tracking_uri))}"
    return html_page(
        f"Comparison report: {study}", sections, subtitle=subtitle, lead_html=headline_html(table)
    ), warnings


def headline_html(table: Any) -> str:
    """The headline sentences (one per comparison) and what each metric is: the top of the report."""
    # a headline may carry its next step on a second line ("to decide it: ..."): a paragraph of its own
    lines = "".join(
        f"<p class='headline'>{html.escape(first)}</p>"
        + "".join(f"<p class='note'>{html.escape(rest)}</p>" for rest in more)
        for first, *more in (headline.split("\n") for headline in table.headlines())
    )
    defined = "".join(f"<p class='note'>{html.escape(line)}</p>" for line in table.definitions())
    return lines + defined


# --------------------------------------------------------------------------------------------
# Terminal output
# --------------------------------------------------------------------------------------------


def _table_cells(table: Any, metric: str) -> tuple[list[str], list[list[str]], list[str]]:
    """Headers, one row of whole cell texts per arm, and each row's verdict (no markup)."""
    from workbench.compare.table import DELTA_HEADER, delta_cell, runs_phrase  # deferred: scipy
    from workbench.compare.wording import level_percent  # deferred: scipy

    level = level_percent(table.confidence)
    vs = table.per_grid_point
    head = [
        table.unit,
        *(["baseline arm"] if vs else []),
        "runs",
        f"mean [{level} CI]",
        DELTA_HEADER,
        f"P(improve) [{level} CI]",
        f"p ({table.correction})",
        "verdict",
        "status",
    ]
    two_way = bool(table.two_way(metric))
    if two_way:  # last, so the columns before keep their places for `cut`
        head += ["Δ [CI over seeds and problems]"]
    rows, verdicts = [], []
    for r in table.for_metric(metric).to_dict("records"):
        base = r["verdict"] == "baseline"
        rows.append(
            [
                table.arm_label(str(r["variant"])),
                *([("—" if base else (r["baseline_arm"] or "—"))] if vs else []),
                runs_phrase(r),
                fmt_ci(r["mean"], r["mean_lo"], r["mean_hi"]),
                "—" if base else delta_cell(r),
                "—" if base else fmt_ci(r["p_improve"], r["p_improve_lo"], r["p_improve_hi"], thresholds=(0.5,)),
                "—" if base else fmt_p(r["p_adjusted"]),
                str(r["verdict"]),
                str(r["status"]),
                *([_two_way_delta(r)] if two_way else []),
            ]
        )
        verdicts.append(str(r["verdict"]))
    return head, rows, verdicts


def _two_way_delta(r: dict) -> str:
    if r["verdict"] == "baseline" or not math.isfinite(r["delta_2way_lo"]):
        return "—"
    from workbench.compare.wording import delta_thresholds  # deferred: scipy

    return fmt_ci(
        r["delta"], r["delta_2way_lo"], r["delta_2way_hi"], thresholds=delta_thresholds(float(r.get("sesoi", math.nan)))
    )


def _title(table: Any, metric: str) -> str:
    direction = {True: "↑ better", False: "↓ better", None: "no direction"}[table.higher_is_better.get(metric)]
    return f"{metric} ({table.title_role(metric)}{direction}; baseline {table.baseline_phrase()}; best first)"


def print_table(table: Any, out: Any = None) -> None:
    """The comparison in the terminal, every name and number whole at any width: first the
    headline, one sentence per comparison, and what each metric is; then the tables.

    Not a terminal (a pipe, a file): plain tab-separated lines, one per arm under a ``# metric``
    title, for ``cut``/``awk``. A terminal wide enough for the table: a table. A narrower one
    (``COLUMNS=80``): one block per arm, a ``field  value`` line per column, wrapped by the
    terminal rather than cut.
    """
    from rich.markup import escape
    from rich.measure import Measurement
    from rich.table import Table

    out = out or console
    styles = {"better": "bold green", "worse": "bold red", "baseline": "bold"}
    # the first lines, terminal or not: one sentence per comparison, then what each metric is; a terminal
    # wraps them at its width between words, a pipe gets one line each
    for line in table.headlines():
        out.print(escape(line), soft_wrap=not out.is_terminal, highlight=False)
    for line in table.definitions():
        out.print(
            f"[dim]{escape(line)}[/dim]" if out.is_terminal else escape(line),
            soft_wrap=not out.is_terminal,
            highlight=False,
        )
    out.print("")
    for metric in table.metrics:
        head, rows, verdicts = _table_cells(table, metric)
        method = table.two_way(metric)  # names the method of the intervals over seeds and problems
        if not out.is_terminal:
            out.file.write(
                f"# {_title(table, metric)}\n"
                + "\t".join(head)
                + "\n"
                + "".join("\t".join(r) + "\n" for r in rows)
                + (f"# {method}\n" if method else "")
            )
            continue
        t = Table(title=escape(_title(table, metric)), title_justify="left")
        for i, col in enumerate(head):
            left = i == 0 or col in ("baseline arm", "runs", "verdict")
            t.add_column(col, justify="left" if left else "right", no_wrap=True)
        for r, v in zip(rows, verdicts, strict=True):
            style = styles.get(v, "dim")
            cells = [escape(c) for c in r]  # a grid value can look like markup ("[1,2]")
            cells[head.index("verdict")] = f"[{style}]{cells[head.index('verdict')]}[/{style}]"
            if v == "baseline":
                cells[0] = f"[bold]{cells[0]}[/bold]"
            t.add_row(*cells)
        natural = Measurement.get(out, out.options.update(max_width=1_000_000), t).maximum  # unwrapped width
        if natural <= out.width:
            out.print(t)
            if method:
                out.print(escape(method), soft_wrap=True, highlight=False)
            continue
        out.print(escape(_title(table, metric)), soft_wrap=True, highlight=False)
        key_width = max(len(h) for h in head[1:])
        for r, v in zip(rows, verdicts, strict=True):
            style = styles.get(v, "")
            out.print(f"[bold]{escape(r[0])}[/bold]", soft_wrap=True, highlight=False)
            for h, c in zip(head[1:], r[1:], strict=True):
                value = f"[{style}]{escape(c)}[/{style}]" if h == "verdict" and style else escape(c)
                out.print(f"  {h.ljust(key_width)}  {value}", soft_wrap=True, highlight=False)
        if method:
            out.print(escape(method), soft_wrap=True, highlight=False)
        out.print("")


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


StudyArg = Annotated[str, typer.Argument(help="study YAML file or study name (its MLflow experiment)")]


def _check_png_target(png: Path) -> None:
    """Before any work: a bad --png is one line and exit 2, with nothing written."""
    from workbench.viz.snapshot import missing_requirement  # deferred: plotly, pydantic

    if png.suffix.lower() != ".png":
        raise fail(f"--png: {png} must end in .png")
    if png.is_dir():
        raise fail(f"--png: {png} is a directory")
    lacking = missing_requirement()
    if lacking:
        raise fail(f"--png: {lacking}")


def _save_png(page: str, png: Path, sections: list[str]) -> None:
    import tempfile

    from workbench.viz.snapshot import SnapshotError, save_sections_png  # deferred: plotly, pydantic

    with tempfile.TemporaryDirectory(prefix="workbench-png-") as tmp:
        html_file = Path(tmp) / "report.html"
        html_file.write_text(page, encoding="utf-8")
        present = [s for s in sections if f"<h2>{s}</h2>" in page]
        try:
            save_sections_png(html_file, png, present)
        except SnapshotError as e:
            raise fail(f"--png: {e}") from None
    note(f"wrote {png} ({', '.join(present).lower()})")


def _comparison(
    target: Target,
    metric: Sequence[str] | None,
    *,
    baseline: str | None,
    sesoi: Sequence[str] | None,
    spec: str,
    include_unfinished: bool,
    record_look: bool,
    where: str,
) -> Comparison:
    """The comparison (:mod:`workbench.analysis.comparison`), its notes on stderr as it goes; a bad input:
    one line, exit 2."""
    from rich.markup import escape

    from workbench.analysis.comparison import compare_loaded, load_comparison  # deferred: pandas, scipy
    from workbench.analysis.next_step import add_next_steps  # deferred: pandas, scipy

    try:
        loaded = load_comparison(
            target, metric, sesoi=sesoi, spec=spec, include_unfinished=include_unfinished, where=where
        )
        if loaded.excluded.get(SUPERSEDED):
            note(
                f"{loaded.excluded[SUPERSEDED]} earlier attempt(s) of runs executed again left out: each run "
                "counts once (its FINISHED attempt, else its latest)"
            )
        done = compare_loaded(loaded, baseline=baseline, record_look=record_look)
        add_next_steps(loaded, done)  # an inconclusive verdict says what would decide it (#52)
    except AnalysisError as e:
        raise fail(str(e)) from None
    for line in done.uncomputed:
        note(f"[yellow]{line}[/yellow]")
    for line, style in (
        (done.looks.sequential, "bold"),
        (done.looks.seeds_added, "yellow"),
        (done.looks.earlier_design, "yellow"),
    ):
        if line is not None:
            note(f"[{style}]{escape(line)}[/{style}]")
    return done


def _load_spec(name: str) -> Any:
    """The dashboard spec ``name``; one that does not load: one line, exit 2."""
    from workbench.analysis.comparison import load_spec  # deferred: plotly, pydantic, scipy

    try:
        return load_spec(name)
    except AnalysisError as e:
        raise fail(str(e)) from None


def compare(
    study: StudyArg,
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            "-m",
            help="summary metric (final_eval_accuracy, "
            "eval_auc, ...) or logged metric (its final value); repeatable; "
            "default: the study's compare.metrics",
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(help="baseline variant (default: the study's compare.baseline, else the first variant)"),
    ] = None,
    format: Annotated[str, typer.Option("--format", help="table | csv | json | md (to stdout)")] = "table",
    out: Annotated[Path | None, typer.Option("--out", help="also write the HTML report to this file")] = None,
    png: Annotated[
        Path | None,
        typer.Option(
            "--png",
            help="also save the report's summary and curve figures as a PNG (headless Chromium; for docs and papers)",
        ),
    ] = None,
    spec: Annotated[str, typer.Option(help="dashboard spec whose curve panels the report shows")] = "compare",
    sesoi: Annotated[
        list[str] | None,
        typer.Option(
            "--sesoi",
            help="METRIC=VALUE: smallest effect of interest "
            "in the metric's units (equivalence test, TOST); repeatable; "
            "overrides the study's compare.sesoi",
        ),
    ] = None,
    include_unfinished: Annotated[
        bool,
        typer.Option(
            help="also compare runs still RUNNING (counted as not finished; FAILED/KILLED runs are always compared, ranked worst)"
        ),
    ] = False,
    log: Annotated[bool, typer.Option("--log/--no-log", help="log the report to the study's parent MLflow run")] = True,
    tracking_uri: TrackingOpt = None,
) -> None:
    """Which variant wins, by how much, with what confidence: table + HTML report logged to MLflow.

    With a grid, each (variant, grid point) is an arm, compared with the baseline variant's arm at
    the same grid point (paired by seed); ``--baseline VARIANT/KEY=VALUE`` compares every arm with
    that one arm."""
    if format not in ("table", "csv", "json", "md"):
        raise fail(f"--format must be one of table, csv, json, md; got {format!r}")
    if png is not None:
        _check_png_target(png)
    t0 = time.perf_counter()
    target: Target = resolve_target(study, tracking_uri, allow_run=False)
    done = _comparison(
        target,
        metric,
        baseline=baseline,
        sesoi=sesoi,
        spec=spec,
        include_unfinished=include_unfinished,
        record_look=log,
        where=study,
    )
    table, summary, history, runs, excluded, frames, dash = (
        done.table,
        done.summary,
        done.history,
        done.runs,
        done.excluded,
        done.frames,
        done.spec,
    )
    if format == "table":
        print_table(table)
    elif format == "csv":
        print(table.to_csv(), end="")
    elif format == "json":
        print(table.to_json())
    else:
        print(table.to_markdown(), end="")

    reports = target.reader.health_reports(runs)
    cells = health_cells(labelled_by_arm(runs), reports)
    from workbench.analysis.rollouts import differing_answers  # deferred: pandas

    wanted = out is not None or png is not None or log  # reading every run's completions only for a page kept
    answers = (
        differing_answers(
            target.study, str(table.baseline), [str(v) for v in runs["variant"].unique()], reader=target.reader
        )
        if wanted and not table.by_arm
        else {}
    )
    page, warnings = build_compare_report(
        target.study,
        table,
        summary,
        history,
        runs,
        cells,
        spec=dash,
        tracking_uri=target.tracking_uri,
        excluded=excluded,
        answers=answers,
    )
    for w in warnings:
        note(f"[dim]{w}[/dim]")
    size = len(page.encode())
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page, encoding="utf-8")
        note(f"wrote {out} ({size / 1e6:.1f} MB)")
    if png is not None:
        _save_png(page, png, ["Summary metrics", "Curves"])
    if log:
        parent = parent_run(target)
        where, logged = log_artifacts_once(
            target.tracking_uri,
            parent,
            {
                f"{REPORT_DIR}/compare.html": page,
                f"{REPORT_DIR}/compare.csv": table.to_csv(),
                f"{REPORT_DIR}/compare.json": table.to_json(),
                f"{REPORT_DIR}/compare.md": table.to_markdown(),
            },
            tag=REPORT_SHA_TAG,
            content=_report_content,
        )
        if logged:
            note(f"logged to MLflow run {parent} (study {target.study}): {where[0]} ({size / 1e6:.1f} MB)")
        else:
            note(f"unchanged since it was logged to MLflow run {parent} (study {target.study}): {where[0]}")
    note(f"[dim]{frames.stats.summary()}; total {time.perf_counter() - t0:.1f} s[/dim]")


def _report_content(path: str, text: str) -> str:
    """What a report file says, for its hash: an HTML page without the minute it was generated."""
    from workbench.viz.html import without_generated_time  # deferred: plotly

    return without_generated_time(text) if path.endswith(".html") else text


def dashboard(
    study: StudyArg,
    spec: Annotated[
        str | None,
        typer.Option(
            help="spec file or name in ./dashboards or the project's dashboards/ (default: compare; health with --run)"
        ),
    ] = None,
    run: Annotated[
        str | None, typer.Option("--run", help="only this run (its id); the dashboard is logged to that run")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="also write the HTML to this file")] = None,
    log: Annotated[bool, typer.Option("--log/--no-log", help="log the HTML to MLflow")] = True,
    tracking_uri: TrackingOpt = None,
) -> None:
    """Render a dashboard spec (YAML panels) for a study to self-contained HTML logged to MLflow."""
    target = resolve_target(study, tracking_uri)
    run_id = run or target.run_id
    dash = _load_spec(spec or ("health" if run_id else "compare"))
    view_specs = _view_specs(dash) if log else []  # every spec validated before anything is written
    needs_health = any(
        p.kind == "health_matrix"
        or (p.health_markers if p.health_markers is not None else dash.defaults.health_markers)
        for p in dash.panels
    )
    from workbench.analysis.comparison import spec_metrics  # deferred: pandas, scipy

    frames = target.reader.load(target.study, sorted(spec_metrics(dash)), run_ids=[run_id] if run_id else None)
    if frames.runs.empty:
        raise fail(
            f"no run {run_id} in study {target.study!r}"
            if run_id
            else f"study {target.study!r} has no runs in {redact_uri(target.tracking_uri)}"
        )
    cells = events = None
    if needs_health:
        reports = target.reader.health_reports(frames.runs)
        cells, events = health_cells(labelled_by_arm(frames.runs), reports), health_events(reports)
    records, decoders = None, {}
    if any(p.kind == "mismatch_record" for p in dash.panels):
        records = target.reader.mismatch_records(frames.runs)
        decoders = _token_decoders(frames.runs[frames.runs["run_id"].isin(set(records.records))])
    from workbench.viz.dashboard import DashboardData, render_dashboard  # deferred: plotly, pydantic

    baseline = target.compare.get("baseline")
    data = DashboardData(
        frames.history,
        frames.runs,
        health_cells=cells,
        health_events=events,
        baseline=baseline,
        mismatch_records=records,
        token_decoders=decoders,
    )
    rendered = render_dashboard(dash, data)
    for w in rendered.warnings:
        note(f"[dim]{w}[/dim]")
    what = f"run {data.labels.get(run_id, run_id)}" if run_id else f"{len(frames.runs)} runs"
    page = rendered.to_html(
        subtitle=f"study <b>{html.escape(target.study)}</b> · {html.escape(what)} · spec {html.escape(dash.name)}"
    )
    size = len(page.encode())
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page, encoding="utf-8")
        note(f"wrote {out} ({size / 1e6:.1f} MB)")
    artifact = f"{DASHBOARD_DIR}/{dash.name}.html"
    if log:
        owner = run_id or parent_run(target)
        where = log_artifacts_text(target.tracking_uri, owner, {artifact: page})
        shown = f"{rendered.panels_with_data}/{len(rendered.spec.panels)}"
        console.print(
            f"dashboard [bold]{dash.name}[/bold] ({shown} panels "
            f"with data, {size / 1e6:.1f} MB) logged to MLflow run {owner} as [bold]{artifact}[/bold]",
            highlight=False,
        )
        console.print(where[0], highlight=False, soft_wrap=True)
        _refresh_views(target, view_specs)
    else:
        shown = f"{rendered.panels_with_data}/{len(rendered.spec.panels)}"
        console.print(f"dashboard {dash.name}: {shown} panels with data", highlight=False)


def _token_decoders(runs: pd.DataFrame) -> dict[str, Any]:
    """``run_id -> token id to text`` for the worst-token tables, from each run's ``model.builtin`` and
    ``model.path`` params (one tokenizer per distinct model; None where it is not at hand here)."""
    import pandas as pd  # deferred: keeps `workbench --help` light

    from workbench.models.tokenizer import token_decoder  # deferred: tokenizers, transformers

    def param(name: str) -> pd.Series:
        values = runs[name] if name in runs.columns else pd.Series([None] * len(runs), index=runs.index)
        return values.astype(object).where(values.notna(), None)

    by_model: dict[tuple[Any, Any], Any] = {}
    out = {}
    for rid, builtin, path in zip(runs["run_id"], param("model.builtin"), param("model.path"), strict=True):
        key = (builtin, path)
        if key not in by_model:
            by_model[key] = token_decoder(builtin, None if path is None else str(path))
        out[rid] = by_model[key]
    return out


def _view_specs(dash) -> list:
    """The specs whose MLflow saved views ``workbench dashboard`` rewrites: every spec found
    (project and ./dashboards), plus ``dash`` when it is a file found nowhere else."""
    from workbench.viz.mlflow_views import load_view_specs  # deferred: plotly, pydantic
    from workbench.viz.spec import SpecError  # deferred: plotly, pydantic, scipy

    try:
        specs = load_view_specs()
    except SpecError as e:
        raise fail(str(e)) from None
    return specs if any(s.name == dash.name for s in specs) else [*specs, dash]


def _refresh_views(target: Target, specs: Sequence[Any]) -> None:
    """Rewrite the study's saved views, description, run colours and health lines (same ids)."""
    from mlflow import MlflowClient

    from workbench.viz.mlflow_views import StudyLayout, publish_study_views, read_layout  # deferred: plotly, pydantic

    client = MlflowClient(target.tracking_uri)
    experiment_id = client.get_experiment_by_name(target.study).experiment_id
    layout = read_layout(client, experiment_id) or StudyLayout(
        study=target.study, variants=list(target.variants_order), baseline=target.compare.get("baseline")
    )
    try:
        links = publish_study_views(client, experiment_id, layout, specs)
    except ValueError as e:  # a spec too large for one MLflow tag
        raise fail(str(e)) from None
    base = ui_base_url(target.tracking_uri)  # full URLs (user:password never: only scheme, host, port, path)
    served = f" (served by `{workbench_command()} ui`)" if base == DEFAULT_UI_BASE else ""
    console.print(f"MLflow saved views of {target.study}{served}:", highlight=False, markup=False)
    for link in links:
        console.print(f"  {link.name}: {link.url(base)}", highlight=False, soft_wrap=True, markup=False)
