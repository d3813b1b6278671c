"""The comparison of ``workbench compare`` and the notebook's ``Study.compare``: which summary metrics,
which smallest effects, which runs, which baseline and which level, and the table that results.

Two steps, so that the command line can say which runs were left out before the statistics run (and
fail on them): :func:`load_comparison` reads the study's runs and selects those compared;
:func:`compare_loaded` compares them. :func:`compute_comparison` does both.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.analysis.looks import LooksReport, looks_report, record_first_look
from workbench.analysis.metric_roles import comparison_metrics, secondary_metrics
from workbench.analysis.selection import in_study_order, select_runs
from workbench.analysis.target import Target, parent_run
from workbench.errors import AnalysisError

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_LEVEL = 0.05  # compare_variants' own default (confidence 0.95) when no sequential design sets it


def uncomputed_summaries(summary: pd.DataFrame, history: pd.DataFrame, names: Sequence[str]) -> list[str]:
    """One line per summary metric that is NaN for some runs, with what those runs lack
    (e.g. an imported run has no ``eval/accuracy``), so a missing summary is said, not silent."""
    from workbench.compare import resolve_summary  # deferred: scipy

    lines = []
    logged: dict[str, set[str]] | None = None
    for name in names:
        bad = summary.loc[summary[name].isna(), "run_id"].tolist()
        if not bad:
            continue
        if logged is None:  # only when some summary is missing: a set per run costs seconds at 3000 runs
            logged = history.groupby("run_id")["metric"].agg(set).to_dict() if len(history) else {}
        missing = sorted({m for rid in bad for m in resolve_summary(name).reads if m not in logged.get(rid, set())})
        why = f"needs {', '.join(missing)}" if missing else "too few finite values"
        lines.append(f"could not compute {name} for {len(bad)} of {len(summary)} runs: {why}")
    return lines


def smallest_effects(compare_cfg: dict[str, Any], options: Sequence[str] | None, where: str) -> dict[str, float]:
    """Metric -> smallest effect of interest: the study's ``compare.sesoi``, overridden by
    ``--sesoi METRIC=VALUE``; logged metric names become ``final:<name>`` as in ``--metric``.
    A bad value: :class:`AnalysisError` naming the field and ``where`` (the study)."""
    from workbench.compare.summary import summary_name  # deferred: scipy

    declared = compare_cfg.get("sesoi") or {}
    if not isinstance(declared, dict):
        raise AnalysisError(
            f"{where}: compare.sesoi: expected a mapping of metric -> smallest effect of interest, got {declared!r}"
        )
    out: dict[str, float] = {}
    given = [(f"compare.sesoi.{m}", m, v) for m, v in declared.items()]
    for option in options or []:
        m, _, v = option.partition("=")
        try:
            given.append(("--sesoi", m.strip(), float(v)))
        except ValueError:
            raise AnalysisError(f"--sesoi: expected METRIC=VALUE with a number, got {option!r}") from None
    for source, m, v in given:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        if not m or not ok:
            raise AnalysisError(f"{where}: {source}: must be a positive number in the metric's units, got {v!r}")
        out[summary_name(m)] = float(v)
    _refuse_sesoi_beyond_phenomenon(compare_cfg, out, where)
    return out


def _refuse_sesoi_beyond_phenomenon(compare_cfg: dict[str, Any], sesoi: dict[str, float], where: str) -> None:
    """An equivalence question (a metric with a SESOI: TOST decides "equivalent") whose SESOI is at least
    the measured size of the phenomenon it would deny (``compare.sesoi_pedigree.<metric>.phenomenon``) is
    refused: "equivalent" would then read the same whether the phenomenon is there or not (issue 52)."""
    from workbench.compare.summary import summary_name  # deferred: scipy

    pedigree = compare_cfg.get("sesoi_pedigree") or {}
    if not isinstance(pedigree, dict):
        return  # the schema reports it
    for m, entry in pedigree.items():
        size = entry.get("phenomenon") if isinstance(entry, dict) else None
        value = sesoi.get(summary_name(m))
        if isinstance(size, (int, float)) and value is not None and value >= size:
            raise AnalysisError(
                f"{where}: compare.sesoi.{m} = {value:g} is at least the size of the phenomenon "
                f"it would deny (compare.sesoi_pedigree.{m}.phenomenon = {size:g}): an 'equivalent' "
                f"could not exclude it; set a SESOI below {size:g}"
            )


def load_spec(name: str) -> Any:
    """The dashboard spec ``name`` (a file, or a name in ./dashboards or the project's dashboards/)."""
    from workbench.viz.spec import SpecError  # deferred: plotly, pydantic, scipy
    from workbench.viz.spec_loader import find_spec, load_spec  # deferred: plotly, pydantic, scipy

    try:
        return load_spec(find_spec(name))
    except SpecError as e:
        raise AnalysisError(str(e)) from e


def spec_metrics(spec: Any) -> set[str]:
    """The logged metrics the panels of ``spec`` read."""
    from workbench.compare import resolve_summary  # deferred: scipy
    from workbench.compare.panels import BINOMIAL_DENOMINATORS  # deferred: scipy, statsmodels
    from workbench.compare.summary import COUNT_METRICS, summary_name  # deferred: scipy

    out: set[str] = set()
    for p in spec.panels:
        if p.kind == "curve":
            out |= set(p.metrics)
            out |= {BINOMIAL_DENOMINATORS[m] for m in p.metrics if m in BINOMIAL_DENOMINATORS}  # eval error bars
            if (p.x or spec.defaults.x) != "step":
                out |= set(COUNT_METRICS)
        elif p.kind == "summary":
            for m in p.metrics:
                out |= set(resolve_summary(summary_name(m)).reads)
    return out


@dataclass
class LoadedComparison:
    """A study's runs read for a comparison, and those selected for it (before any statistics)."""

    target: Target
    names: list[str]  # the compared summary metrics
    effects: dict[str, float]  # summary metric -> smallest effect of interest
    frames: Any  # the StudyFrames loaded
    runs: pd.DataFrame  # the runs selected (one outcome each), in the order loaded
    excluded: dict[str, int]  # runs left out, by reason (a count each)
    spec: Any  # the dashboard spec whose curve panels the report shows
    where: str = ""  # the study as given (its YAML file, or its name in the store)


@dataclass
class Comparison:
    """What ``workbench compare`` computed, before it prints or logs anything (the notebook API's
    ``Study.compare`` returns its ``table``: the object the CLI prints)."""

    table: Any  # ComparisonTable
    summary: pd.DataFrame  # one row per compared run, one column per summary metric
    history: pd.DataFrame  # the compared runs' metric history
    runs: pd.DataFrame  # the compared runs, in study order
    excluded: dict[str, int]  # runs left out, by reason
    frames: Any  # the StudyFrames loaded
    spec: Any  # the dashboard spec whose curve panels the report shows
    uncomputed: list[str] = field(default_factory=list)  # a line per summary some runs lack (uncomputed_summaries)
    looks: LooksReport = field(default_factory=LooksReport)  # what the study's recorded looks say


def load_comparison(
    target: Target,
    metric: Sequence[str] | None = None,
    *,
    sesoi: Sequence[str] | None = None,
    spec: str = "compare",
    include_unfinished: bool = False,
    where: str | None = None,
) -> LoadedComparison:
    """The summary metrics, smallest effects and dashboard spec of a comparison (the options of
    ``workbench compare``, by name), and the runs it compares (:func:`select_runs`)."""
    from workbench.compare import resolve_summary  # deferred: scipy

    try:
        names = comparison_metrics(metric, target.compare)
    except ValueError as e:  # an unknown summary metric
        raise AnalysisError(str(e)) from e
    effects = smallest_effects(target.compare, sesoi, where or target.study)
    dash = load_spec(spec)
    needed = {m for n in names for m in resolve_summary(n).reads} | spec_metrics(dash)
    frames = target.reader.load(target.study, sorted(needed))
    runs, excluded = select_runs(frames.runs, include_unfinished)
    return LoadedComparison(target, names, effects, frames, runs, excluded, dash, where or target.study)


def compare_loaded(loaded: LoadedComparison, *, baseline: str | None = None, record_look: bool = True) -> Comparison:
    """The comparison of the runs :func:`load_comparison` selected. ``record_look``: record this
    comparison as the study's first look if it has none (creating the study's parent run if need be).
    Every bad input: :class:`AnalysisError` with one line."""
    import pandas as pd  # deferred: keeps `workbench --help` light

    from workbench.compare import CompareSettings, compare_variants, summarize_runs  # deferred: scipy
    from workbench.compare.arms import arm_column, control_arms  # deferred: scipy
    from workbench.compare.problems import TWO_WAY_SUMMARIES  # deferred: scipy

    target, names, excluded = loaded.target, loaded.names, loaded.excluded
    runs = loaded.runs
    if runs.empty:
        raise AnalysisError(
            f"study {target.study!r} has no FINISHED runs to compare"
            + (f" ({', '.join(f'{n} {s}' for s, n in excluded.items())}; try --include-unfinished)" if excluded else "")
        )
    history = loaded.frames.history[loaded.frames.history["run_id"].isin(set(runs["run_id"]))]
    runs = in_study_order(runs, target.variants_order)
    variants = list(pd.unique(runs["variant"]))
    arms = list(pd.unique(arm_column(runs)))
    base = baseline or target.compare.get("baseline") or variants[0]
    if base not in variants and base not in arms:  # a variant (matched per grid point) or one arm
        grid = f"; arms: {', '.join(arms)}" if arms != variants else ""
        raise AnalysisError(
            f"baseline {base!r} is not a variant{' or arm' if grid else ''} of study "
            f"{target.study!r} (variants: {', '.join(variants)}{grid})"
        )
    problems = None
    if any(n in TWO_WAY_SUMMARIES for n in names):  # eval-based: intervals over seeds and problems too
        problems = target.reader.problem_results(runs)
    # a variant of the study file without runs yet may be named in compare.activity
    gates = _activity_gates(target, runs, history, base, list(dict.fromkeys([*target.variants_order, *variants])))
    looks = _looks(target, runs, record=record_look)  # sequential design; seeds added after looking
    # Run with --until-decided: test at the level of the design's last look (O'Brien-Fleming: 0.034 at the
    # last of 3), not at 0.05 over seeds the design already spent part of its alpha on.
    level = looks.level if looks.level is not None else DEFAULT_LEVEL
    # one study-wide Holm family over the primary metrics; each secondary metric its own, exploratory (#52)
    secondary = secondary_metrics(names, target.compare)
    # a sequential study's arms stop at different looks: its re-test pairs each arm with its baseline on their
    # common seeds (#52), not Welch over unequal seed sets; elsewhere pairing needs the same seeds
    sequential = looks.record is not None and base == looks.record.get("baseline")
    try:
        summary = summarize_runs(history, runs, names)
        table = compare_variants(
            summary,
            base,
            names,
            CompareSettings(
                sesoi=loaded.effects,
                confidence=1.0 - level,
                secondary=secondary,
                pairing="paired" if sequential else "auto",
            ),
            problems=problems,
            activity=gates,
        )
    except ValueError as e:
        raise AnalysisError(str(e)) from e
    uncomputed = uncomputed_summaries(summary, history, names)
    if sequential:  # one verdict per sequential question
        _design_verdicts(table, looks.record, summary, loaded, runs, history, base, variants)
    table.settings |= looks.settings()
    controls = control_arms(runs)  # reward.control arms: their comparisons read as controls, not treatments
    if controls:
        table.settings["controls"] = controls
    return Comparison(table, summary, history, runs, excluded, loaded.frames, loaded.spec, uncomputed, looks)


def compute_comparison(
    target: Target,
    metric: Sequence[str] | None = None,
    *,
    baseline: str | None = None,
    sesoi: Sequence[str] | None = None,
    spec: str = "compare",
    include_unfinished: bool = False,
    record_look: bool = True,
    where: str | None = None,
) -> Comparison:
    """:func:`load_comparison` then :func:`compare_loaded`."""
    loaded = load_comparison(target, metric, sesoi=sesoi, spec=spec, include_unfinished=include_unfinished, where=where)
    return compare_loaded(loaded, baseline=baseline, record_look=record_look)


def runs_overview(runs: pd.DataFrame) -> pd.DataFrame:
    """The compared runs per arm (the report's "Runs" table): the arm (the column is named ``variant``
    without a grid, else ``arm``), its runs, how many finished / failed / stopped early, its seeds, and
    its runs' health."""
    import pandas as pd  # deferred: keeps `workbench --help` light

    from workbench.compare.arms import arm_column  # deferred: scipy
    from workbench.compare.checkpoints import CHECKPOINT_COLUMN  # deferred: scipy

    arms = arm_column(runs)
    unit = "variant" if (arms == runs["variant"].astype(str)).all() else "arm"
    g = runs.groupby(arms.to_numpy(), sort=False)
    stopped = (
        runs["stopped_early"].fillna(False).astype(bool)
        if "stopped_early" in runs.columns
        else pd.Series(False, index=runs.index)
    )
    status = runs["status"].astype(str)
    ckpt = (
        pd.to_numeric(runs[CHECKPOINT_COLUMN], errors="coerce").fillna(0)
        if CHECKPOINT_COLUMN in runs.columns
        else pd.Series(0, index=runs.index)
    )
    replicated = bool((ckpt.groupby(arms.to_numpy()).nunique() > 1).any())  # only then: the table as it was
    return pd.DataFrame(
        {
            unit: list(g.groups),
            "runs": g.size().to_numpy(),
            "finished / failed / stopped early": [
                f"{((status[i] == 'FINISHED') & ~stopped[i]).sum()} / {(status[i] != 'FINISHED').sum()} / "
                f"{((status[i] == 'FINISHED') & stopped[i]).sum()}"
                for i in g.groups.values()
            ],
            **({"cold starts": [int(ckpt[i].nunique()) for i in g.groups.values()]} if replicated else {}),
            "n_seeds": [int(x.dropna().nunique()) for _, x in g["seed"]],
            "seed values": [", ".join(str(s) for s in sorted(x.dropna().unique().tolist())) for _, x in g["seed"]],
            "health ok / warn / fail": [
                f"{(x == 'ok').sum()} / {(x == 'warn').sum()} / {(x == 'fail').sum()}" for _, x in g["health"]
            ],
        }
    )


def _looks(target: Target, runs: pd.DataFrame, *, record: bool) -> LooksReport:
    """What the study's recorded looks say (:func:`workbench.analysis.looks.looks_report`); with
    ``record``, this comparison is recorded as the study's first look if it has none."""
    parent = parent_run(target, create=record)
    if parent is None:
        return LooksReport()
    found = looks_report(target.reader, target.study, parent, runs)
    if record:
        record_first_look(target.tracking_uri, parent, runs)
    if found.record is not None and target.compare and not target.compare.get("sequential"):
        # redesigned without looks (priming: seeds do not add cold starts): the old looks decided another design
        from workbench.compare.sequential import Design  # deferred: scipy

        looks = found.record["looks"]
        phrase = Design.from_dict(found.record["design"]).phrase(len(looks))
        found = dataclasses.replace(
            found,
            sequential=None,
            level=None,
            record=None,
            earlier_design=(
                f"the store also holds the looks of an earlier sequential design ({phrase}); the study file now "
                "declares none (no compare.sequential), so each verdict here is this design's own test"
            ),
        )
    return found


def _design_verdicts(
    table: Any,
    record: dict[str, Any],
    summary: pd.DataFrame,
    loaded: LoadedComparison,
    runs: pd.DataFrame,
    history: pd.DataFrame,
    base: str,
    variants: list[str],
) -> None:
    """Each compared row of a sequential study says its design's decision, at the look it was taken
    (:func:`workbench.analysis.sequential.design_verdicts`); the table's test on all seeds is a re-test."""
    from workbench.analysis.sequential import apply_design_verdicts, design_verdicts  # deferred: a cycle

    def gates_at(seeds: list[int]) -> dict[str, Any]:
        at = runs[runs["seed"].isin(seeds)]
        return _activity_gates(loaded.target, at, history[history["run_id"].isin(set(at["run_id"]))], base, variants)

    try:
        verdicts = design_verdicts(record, summary, loaded.target.compare, loaded.effects, gates_at)
    except ValueError as e:
        raise AnalysisError(str(e)) from e
    apply_design_verdicts(table, verdicts)


def _activity_gates(
    target: Target, runs: pd.DataFrame, history: pd.DataFrame, baseline: str, variants: list[str]
) -> dict[str, Any]:
    """Each compared arm's knob-activity gate (:mod:`workbench.compare.activity`), reading the
    activity metrics the comparison's history lacks; a bad ``compare.activity``: :class:`AnalysisError`."""
    from workbench.compare.activity import activity_gates, parse_settings  # deferred: scipy

    try:
        settings = parse_settings(target.compare, variants)
    except ValueError as e:  # a study file was checked when it loaded: these settings were logged with the study
        raise AnalysisError(f"{e} (in the study.yaml logged with study {target.study!r})") from e
    return activity_gates(
        runs,
        history,
        baseline,
        settings,
        read_more=lambda metrics: target.reader.load(target.study, metrics, run_ids=runs["run_id"].tolist()).history,
    )
