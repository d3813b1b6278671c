"""Rendering a dashboard spec (:mod:`workbench.viz.spec`) over a study's frames: one plotly figure.

Rendering takes the frames of :mod:`workbench.results.reader`, turns each panel into plain data
with :mod:`workbench.compare.panels` (alignment, thinning, bands, summaries, marker positions: every
number is computed there) and draws that data with the traces of :mod:`workbench.viz.figures`.
Specs are found and read by :mod:`workbench.viz.spec_loader`.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from plotly.subplots import make_subplots

from workbench.compare.summary import summary_name
from workbench.metrics.catalogue import metric_bounds

from . import figures as F
from .html import Section, df_table_html, html_page
from .spec import DashboardSpec, PanelSpec
from .style import PALETTE, dash_for, dash_legend, variant_colors

__all__ = ["DashboardData", "RenderedDashboard", "render_dashboard"]


@dataclass
class DashboardData:
    """What a dashboard draws from.

    ``history``/``runs``: :func:`workbench.results.reader.load_study_frames` output.
    ``health_cells``: runs × rules (``workbench.analysis.health_table.health_cells``), for
    ``health_matrix`` panels. ``health_events``: one row per fired rule and run (columns
    ``run_id, rule, step, severity, message, watches``), for markers. ``baseline``: the variant
    the summary panels compare against (default: the first), matched per grid point, or one arm.
    ``mismatch_records``: the runs' ``mismatch.json`` (:meth:`workbench.results.reader.StudyReader.mismatch_records`),
    for ``mismatch_record`` panels; ``token_decoders``: run_id -> token id to text, where the run's tokenizer
    is at hand (:func:`workbench.models.tokenizer.token_decoder`), else the worst-token table shows ids.

    Groups (colours, bands, legend entries, summary bars) are the runs' **arms** when ``runs``
    has an ``arm`` column (:mod:`workbench.compare.arms`: variant and grid point, e.g.
    ``dapo/lr=3e-05``), else their variants; without a grid the two are the same.
    """

    history: pd.DataFrame
    runs: pd.DataFrame
    health_cells: pd.DataFrame | None = None
    health_events: pd.DataFrame | None = None
    baseline: str | None = None
    mismatch_records: Any = None  # workbench.results.reader.MismatchRecords
    token_decoders: dict[str, Callable[[int], str] | None] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    confidence: float = 0.95
    n_resamples: int = 1000
    seed: int = 0
    max_points: int = 300
    """Curves on x = step with more logged steps than this are drawn (and their bands computed) on
    an evenly spaced subset of the steps, shared by all runs: the figure stays light and the
    bootstrap fast; summaries and statistics always use every point."""

    def __post_init__(self) -> None:
        from workbench.compare.panels import run_labels  # deferred: scipy

        if not self.labels and len(self.runs):
            self.labels = run_labels(self.runs)

    @property
    def variants(self) -> list[str]:
        """The groups drawn: arms (variants in a study without a grid), in order."""
        from workbench.compare.panels import panel_groups  # deferred: scipy

        return panel_groups(self.history, self.runs)

    def resolved_baseline(self) -> tuple[str | None, list[str]]:
        """The baseline the summary panels use (``baseline`` if it names a variant or an arm, else
        the first variant) and the arms that are baselines (drawn grey)."""
        from workbench.compare.panels import resolve_baseline  # deferred: scipy

        return resolve_baseline(self.runs, self.baseline, self.variants)


@dataclass
class RenderedDashboard:
    spec: DashboardSpec
    figure: Any
    warnings: list[str]
    panels_with_data: int
    sections: list[Section] = field(default_factory=list)
    """What panels show below the figure, in panel order (a mismatch_record panel's worst-token table)."""

    def to_html(self, *, subtitle: str = "", extra_sections: Sequence[Any] = ()) -> str:
        note = self.spec.description.strip()
        sections = [
            Section(self.spec.title or self.spec.name, figure=self.figure, note=note),
            *self.sections,
            *extra_sections,
        ]
        return html_page(self.spec.title or f"dashboard: {self.spec.name}", sections, subtitle=subtitle)


def render_dashboard(spec: DashboardSpec, data: DashboardData) -> RenderedDashboard:
    """Render ``spec`` over ``data`` as one plotly figure (a grid of panels).

    A panel whose metrics have no data shows a note in its place and is listed in ``warnings``.
    """
    spec = _without_unlogged_panels(spec, data.history)
    places = spec.placements()
    panels = [p.resolved(spec.defaults) for p in spec.panels]
    fig = _subplot_grid(spec, panels, places)
    canvas = _Canvas(data)
    with_data = 0
    for p, (r, c) in zip(panels, places, strict=True):
        canvas.panel_note = ""
        traces = _panel_traces(p, canvas)
        if traces:
            with_data += 1
            for t in traces:
                fig.add_trace(t, row=r, col=c)
        elif not canvas.panel_note:
            what = ", ".join(p.metrics) if p.metrics else "health reports"
            canvas.problems.append(f"panel {_panel_name(p)!r}: no data for {what}")
            canvas.panel_note = f"no data for {what}"
        if canvas.panel_note:  # in the panel: its centre when it has nothing else, else its top
            fig.add_annotation(
                text=canvas.panel_note,
                showarrow=False,
                font={"color": "#999"},
                xref="x domain",
                yref="y domain",
                x=0.5,
                y=0.97 if traces else 0.5,
                yanchor="top" if traces else "middle",
                row=r,
                col=c,
            )
        _style_axes(fig, p, r, c, canvas)
    n_rows = max(r for r, _ in places)
    F.base_layout(fig, title=spec.title or spec.name, height=int(spec.layout.panel_height * n_rows + 120))
    return RenderedDashboard(spec, fig, canvas.problems, with_data, canvas.sections)


# --------------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------------


def _without_unlogged_panels(spec: DashboardSpec, history: pd.DataFrame) -> DashboardSpec:
    """``spec`` without its optional curve panels whose metrics were never logged (the rest placed
    row by row again); the first panel is kept if none would be left."""
    logged = set(pd.unique(history["metric"])) if len(history) else set()
    keep = [p for p in spec.panels if not (p.optional and p.kind == "curve" and not logged & set(p.metrics))]
    if len(keep) == len(spec.panels):
        return spec
    if not keep:
        keep = spec.panels[:1]
    return spec.model_copy(update={"panels": [p.model_copy(update={"row": None, "col": None}) for p in keep]})


def _panel_title(p: PanelSpec) -> str:
    """A panel's subplot title; a curve panel of several metrics says which dash is which."""
    title = p.title or ", ".join(p.metrics) or p.kind.replace("_", " ")
    if p.kind == "curve" and len(p.metrics) > 1:
        title += f"<br><span style='font-size:11px'>{dash_legend(p.metrics)}</span>"
    if p.kind == "mismatch_record":
        title += "<br><span style='font-size:11px'>solid: last recorded step · dotted: first</span>"
    return title


def _subplot_grid(spec: DashboardSpec, panels: list[PanelSpec], places: list[tuple[int, int]]) -> Any:
    """The empty figure: a ``rows x layout.cols`` grid of subplots, wide panels spanning columns."""
    cols = spec.layout.cols
    n_rows = max(r for r, _ in places)
    grid: list[list[dict | None]] = [[{} for _ in range(cols)] for _ in range(n_rows)]
    for p, (r, c) in zip(panels, places, strict=True):
        grid[r - 1][c - 1] = {"colspan": p.width} if p.width > 1 else {}
        for k in range(1, p.width):
            grid[r - 1][c - 1 + k] = None
    titles_by_pos = {place: _panel_title(p) for p, place in zip(panels, places, strict=True)}
    titles = [
        titles_by_pos.get((r, c), "")
        for r in range(1, n_rows + 1)
        for c in range(1, cols + 1)
        if grid[r - 1][c - 1] is not None
    ]
    return make_subplots(
        rows=n_rows,
        cols=cols,
        specs=grid,
        subplot_titles=titles,
        vertical_spacing=min(0.25, 0.35 / max(1, n_rows) + 0.04),
        horizontal_spacing=0.08,
    )


def _style_axes(fig: Any, p: PanelSpec, r: int, c: int, canvas: _Canvas) -> None:
    """Axis titles and scales of one panel (a curve of fractions or counts starts at 0)."""
    if p.kind == "curve":
        fig.update_xaxes(title_text=p.x, row=r, col=c)
        if p.log_y:
            fig.update_yaxes(type="log", row=r, col=c)
        elif p.metrics and all(metric_bounds(m)[0] >= 0 for m in p.metrics):
            fig.update_yaxes(rangemode="nonnegative", row=r, col=c)  # a fraction's axis stops at 0
        if p.y_title or len(p.metrics) == 1:
            fig.update_yaxes(title_text=p.y_title or p.metrics[0], row=r, col=c)
    elif p.kind == "health_matrix":
        fig.update_yaxes(autorange="reversed", row=r, col=c)
    elif p.kind == "mismatch_record":
        ticks, labels = F.log_ratio_ticks(canvas.mismatch_edges)
        fig.update_xaxes(
            title_text="Δ = log π_learner − log π_sampler (nats; log-spaced bins, open at the ends)",
            tickvals=ticks,
            ticktext=labels,
            row=r,
            col=c,
        )
        fig.update_yaxes(
            title_text=p.y_title or "share of response tokens", type="log" if p.log_y else None, row=r, col=c
        )


# --------------------------------------------------------------------------------------------
# Panels
# --------------------------------------------------------------------------------------------


class _Canvas:
    """What every panel of one figure shares: the data, colours per group and per run, the legend
    entries already shown, the problems found, and the summary tables computed so far."""

    def __init__(self, data: DashboardData) -> None:
        self.data = data
        self.variants = data.variants  # arms (= variants without a grid)
        self.baseline, baseline_arms = data.resolved_baseline()
        self.colors = variant_colors(self.variants, baseline_arms)
        self.run_ids = list(data.runs["run_id"]) if len(data.runs) else list(pd.unique(data.history["run_id"]))
        self.run_colors = {r: PALETTE[i % len(PALETTE)] for i, r in enumerate(self.run_ids)}
        self.shown: set[str] = set()
        self.problems: list[str] = []
        self.tables: dict[tuple[str, ...], Any] = {}
        self.sections: list[Section] = []  # shown below the figure
        self.panel_note = ""  # the panel being drawn says this in its area
        self.mismatch_edges: list[float] = []  # the x ticks of mismatch_record panels


def _panel_name(p: PanelSpec) -> str:
    """How warnings name a panel."""
    return p.title or ", ".join(p.metrics) or p.kind


def _panel_traces(p: PanelSpec, canvas: _Canvas) -> list[Any]:
    """The traces of one panel (empty when it has no data; problems go to ``canvas.problems``)."""
    if p.kind == "curve":
        return [t for j, metric in enumerate(p.metrics) for t in _curve_traces(p, metric, dash_for(j), canvas)]
    if p.kind == "summary":
        return _summary_traces(p, canvas)
    if p.kind == "health_matrix":
        return _health_traces(canvas)
    if p.kind == "mismatch_record":
        return _mismatch_traces(p, canvas)
    return []


def _curve_traces(p: PanelSpec, metric: str, dash: str, canvas: _Canvas) -> list[Any]:
    """One metric of a curve panel: a band per group (or a line per run), and health markers."""
    from workbench.compare.panels import curve_panel  # deferred: scipy

    data = canvas.data
    try:  # samples/tokens need the count metrics and params: the full history and runs
        panel = curve_panel(
            data.history,
            data.runs,
            metric,
            x=p.x,
            aggregation=p.aggregation,
            confidence=data.confidence,
            max_points=data.max_points,
            health_events=data.health_events,
            markers=p.health_markers,
            labels=data.labels,
        )
    except ValueError as e:
        canvas.problems.append(f"panel {_panel_name(p)!r}: {e}")
        return []
    if panel is None:
        return []
    traces: list[Any] = []
    noise = panel.checkpoint
    if panel.bands is not None:
        drawn = set(panel.groups)
        for v in [v for v in canvas.variants if v in drawn]:
            traces += F.band_traces(
                panel.band(v),
                p.x,
                name=str(v),
                color=canvas.colors[v],
                dash=dash,
                showlegend=v not in canvas.shown,
                band=p.band,
                statistic=p.aggregation,
                metric=metric,
                checkpoint=None if noise is None else noise[noise["variant"] == v],
                checkpoint_label=panel.checkpoint_interval,
            )
            canvas.shown.add(v)
    else:
        colors = canvas.run_colors if p.group_by == "run" else canvas.colors
        traces += F.run_traces(
            panel.curves,
            p.x,
            colors=colors,
            color_by=p.group_by,
            labels=data.labels,
            dash=dash,
            shown=canvas.shown,
            metric=metric,
            checkpoint=noise,
            checkpoint_label=panel.checkpoint_interval,
        )
    if noise is not None:
        traces += _checkpoint_legend(p, panel, canvas)
    if p.health_markers:
        if panel.markers is None:
            canvas.problems.append(f"panel {_panel_name(p)!r}: health markers are drawn on x: step only")
        else:
            traces += F.marker_traces(panel.markers, "step", shown=canvas.shown)
    return traces


def _checkpoint_legend(p: PanelSpec, panel: Any, canvas: _Canvas) -> list[Any]:
    """Say once per figure what the error bars on eval points are; and, when some points have none
    because their runs logged no problem count (older runs), say that too (here and in the warnings)."""
    missing = int(panel.checkpoint["n_problems"].isna().sum())
    label = f"{F.CHECKPOINT_LABEL} ({canvas.data.confidence:.0%} Wilson)"
    traces = []
    for logged in (True, False):
        key = f"checkpoint-noise:{logged}"
        present = missing < len(panel.checkpoint) if logged else missing > 0
        if present and key not in canvas.shown:
            traces.append(F.checkpoint_legend_trace(label, logged=logged))
            canvas.shown.add(key)
    if missing:
        canvas.problems.append(
            f"panel {_panel_name(p)!r}: {missing} point(s) of {panel.metric} have no "
            f"binomial interval: their runs logged no eval/n_problems (older runs)"
        )
    return traces


def _summary_traces(p: PanelSpec, canvas: _Canvas) -> list[Any]:
    """A summary panel: bars with CIs per group and metric (tables shared between panels)."""
    from workbench.compare.panels import summary_panel  # deferred: scipy

    data = canvas.data
    traces: list[Any] = []
    names = [summary_name(m) for m in p.metrics]
    key = tuple(names)
    try:
        if key not in canvas.tables:
            canvas.tables[key] = summary_panel(
                data.history, data.runs, names, canvas.baseline, confidence=data.confidence, seed=data.seed
            )
        summary = canvas.tables[key]
        for m, rows in summary.rows():
            traces += F.summary_bar_traces(
                rows, summary.values, m, colors=canvas.colors, baseline=canvas.baseline, shown=canvas.shown
            )
    except ValueError as e:
        canvas.problems.append(f"panel {_panel_name(p)!r}: {e}")
    return traces


HEALTH_LEGEND_TITLE = "Health matrix: what a cell says"


def _health_traces(canvas: _Canvas) -> list[Any]:
    """A health matrix panel: one heatmap of runs x rules."""
    cells = canvas.data.health_cells
    if cells is None or not len(cells):
        return []
    present = set(cells["run_id"])
    if not any(section.title == HEALTH_LEGEND_TITLE for section in canvas.sections):  # once, however many matrices
        canvas.sections.append(Section(HEALTH_LEGEND_TITLE, body_html=F.health_legend_html()))
    return [F.health_heatmap_trace(cells, run_order=[r for r in canvas.run_ids if r in present])]


def _mismatch_traces(p: PanelSpec, canvas: _Canvas) -> list[Any]:
    """A mismatch_record panel: each run's log-ratio histogram at its first and last recorded steps; its
    worst tokens at the last one go below the figure (:func:`_worst_tokens_section`). Runs without a record
    are named in the panel, in the table's section and in the warnings."""
    from workbench.compare.mismatch_panel import mismatch_panel  # deferred: scipy

    data = canvas.data
    if data.mismatch_records is None:
        canvas.problems.append(f"panel {_panel_name(p)!r}: the runs' mismatch records were not loaded")
        canvas.panel_note = "mismatch records not loaded"
        return []
    panel = mismatch_panel(
        data.runs, data.mismatch_records.records, data.mismatch_records.unreadable, data.token_decoders
    )
    canvas.mismatch_edges = panel.edges
    canvas.problems += [f"panel {_panel_name(p)!r}: {problem}" for problem in panel.problems]
    for why in dict.fromkeys(panel.missing.values()):  # one warning per reason, naming its runs
        runs = ", ".join(data.labels.get(r, r) for r, w in panel.missing.items() if w == why)
        canvas.problems.append(f"panel {_panel_name(p)!r}: {why}: {runs}")
    if panel.missing:
        shown = list(panel.missing)[:3]
        more = f" and {len(panel.missing) - len(shown)} more" if len(panel.missing) > len(shown) else ""
        canvas.panel_note = (
            "<br>".join(f"{html.escape(data.labels.get(r, r))}: {html.escape(panel.missing[r])}" for r in shown) + more
        )
    canvas.sections.append(_worst_tokens_section(p, panel, data.labels))
    colors = canvas.run_colors if p.group_by == "run" else canvas.colors
    return F.mismatch_histogram_traces(
        panel.histograms, colors=colors, color_by=p.group_by or "variant", labels=data.labels, shown=canvas.shown
    )


def _worst_tokens_section(p: PanelSpec, panel: Any, labels: dict[str, str]) -> Section:
    """The worst tokens (largest |Δ|) of each run at its last recorded step, as an HTML table, and one line
    per run that has no record."""
    worst = panel.worst
    table = pd.DataFrame(
        {
            "run": [labels.get(r, r) for r in worst["run_id"]],
            "step": worst["step"],
            "#": worst["rank"],
            "sequence": worst["sequence"],
            "position": worst["position"],
            "token": [repr(t) if t is not None else "—" for t in worst["token"]],
            "token id": worst["token_id"],
            "log p learner": worst["learner_logp"],
            "log p sampler": worst["sampler_logp"],
            "Δ": worst["log_ratio"],
        }
    )
    body = df_table_html(table, left=("run", "token")) if len(table) else ""
    if panel.missing:
        body += "".join(
            f"<p class='note'>{html.escape(labels.get(r, r))}: {html.escape(why)}</p>"
            for r, why in panel.missing.items()
        )
    return Section(
        f"{_panel_name(p)}: worst tokens at the last recorded step",
        body_html=body,
        note=(
            "Per run, the response tokens where sampler and learner disagree most (largest |Δ|, Δ = log p learner − "
            "log p sampler, the learner before that step's update) at the run's last recorded step "
            "(health.mismatch_record_every). sequence and position: the response's row in the step's batch and "
            "the token's place in it. token: the id decoded with the run's tokenizer where it is at hand here "
            "(the built-in tiny model's, or a model.path directory on this machine); — where it is not."
        ),
    )
