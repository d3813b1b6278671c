"""Dashboards as code: YAML specs of panels, validated, rendered to one plotly figure.

A spec (``dashboards/*.yaml``; add your own, no code needed)::

    name: health                      # default: the file name
    title: Run health
    description: what to look at      # shown under the title
    layout: {cols: 2, panel_height: 300}
    defaults: {aggregation: mean, group_by: variant, x: step, band: true, health_markers: false}
    panels:
      - title: Reward
        metrics: [reward/mean]        # or `metric: reward/mean`
      - title: Length, correct vs incorrect
        metrics: [length/correct_mean, length/incorrect_mean]   # line dash tells them apart
        health_markers: true          # health-rule trigger markers from health.json
      - {title: Entropy per run, metrics: [entropy/mean], aggregation: none, group_by: run}
      - {title: Final eval accuracy, kind: summary, metrics: [final_eval_accuracy]}
      - {title: Health, kind: health_matrix, width: 2}

Panel fields: ``kind`` (``curve`` | ``summary`` | ``health_matrix``), ``metrics``,
``aggregation`` (``mean`` | ``iqm``: across the runs of a group, with a 95% bootstrap band;
``none``: every run's own line), ``group_by`` (``variant`` | ``run``; a "variant" group is an
arm, variant and grid point, in a study with a grid), ``x`` (``step`` |
``samples`` | ``tokens``), ``band``, ``health_markers``, ``log_y``, ``y_title``, ``width``
(columns spanned), ``optional`` (left out when its metrics were never logged), ``row``/``col``
(1-based, optional: panels are placed row by row otherwise).
Every mistake is reported with the spec file, line and field, e.g.
``dashboards/mine.yaml:7: panels[1].aggregation: must be one of mean, iqm, none (got 'median')``.

Rendering takes the frames of :mod:`workbench.results.reader`, turns each panel into plain data
with :mod:`workbench.compare.panels` (alignment, thinning, bands, summaries, marker positions: every
number is computed there) and draws that data with the traces of :mod:`workbench.viz.figures`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from workbench.errors import did_you_mean, explain_pydantic_error

__all__ = [
    "DashboardData",
    "DashboardSpec",
    "PanelSpec",
    "RenderedDashboard",
    "SpecError",
    "builtin_spec_dirs",
    "find_spec",
    "list_specs",
    "load_spec",
    "parse_spec",
    "render_dashboard",
]

Aggregation = Literal["mean", "iqm", "none"]
GroupBy = Literal["variant", "run"]
XAxis = Literal["step", "samples", "tokens"]
Kind = Literal["curve", "summary", "health_matrix"]


class SpecError(ValueError):
    """An invalid dashboard spec; ``str()`` has one line per problem: file:line: field: message."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__("\n".join(self.problems) if self.problems else f"{source}: invalid dashboard spec")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PanelDefaults(_Strict):
    """Values a panel takes when it does not set them."""

    aggregation: Aggregation = "mean"
    group_by: GroupBy = "variant"
    x: XAxis = "step"
    band: bool = True
    health_markers: bool = False


class LayoutSpec(_Strict):
    cols: int = Field(2, ge=1, le=4, description="panels per row")
    panel_height: int = Field(300, ge=150, le=1200, description="pixels per row of panels")


class PanelSpec(_Strict):
    """One panel. Unset fields come from the spec's ``defaults``."""

    title: str | None = None
    kind: Kind = "curve"
    metrics: list[str] = Field(default_factory=list)
    aggregation: Aggregation | None = None
    group_by: GroupBy | None = None
    x: XAxis | None = None
    band: bool | None = None
    health_markers: bool | None = None
    log_y: bool = False
    y_title: str | None = None
    width: int = Field(1, ge=1, le=4, description="columns spanned")
    optional: bool = False
    """Leave the panel out when none of its metrics was logged (e.g. ``kl/ref`` without a reference
    policy) instead of showing an empty panel."""
    row: int | None = Field(None, ge=1)
    col: int | None = Field(None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _metric_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "metric" in data:
            if "metrics" in data:
                raise ValueError("give either `metric` or `metrics`, not both")
            data = dict(data)
            m = data.pop("metric")
            data["metrics"] = m if isinstance(m, list) else [m]
        return data

    @field_validator("metrics")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for m in v:
            if not m.strip():
                raise ValueError("metric names must be non-empty")
        if len(set(v)) != len(v):
            raise ValueError(f"a metric is listed twice: {v}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> PanelSpec:
        if self.kind == "curve" and not self.metrics:
            raise ValueError("a curve panel needs `metrics` (e.g. metrics: [reward/mean])")
        if self.kind == "summary":
            if not self.metrics:
                raise ValueError("a summary panel needs `metrics`: summary metric names such as "
                                 "final_eval_accuracy, or logged metrics (their final value)")
            for m in self.metrics:
                summary_name(m)  # ValueError naming the valid summaries
        if self.kind == "health_matrix" and self.metrics:
            raise ValueError("a health_matrix panel takes no `metrics` (it shows every health rule)")
        if self.group_by == "run" and self.aggregation in ("mean", "iqm"):
            raise ValueError(f"aggregation {self.aggregation!r} needs group_by: variant "
                             "(one run has nothing to aggregate); use aggregation: none with group_by: run")
        if (self.row is None) != (self.col is None):
            raise ValueError("give both `row` and `col`, or neither")
        return self

    def resolved(self, d: PanelDefaults) -> PanelSpec:
        """This panel with unset fields filled from ``d`` (``group_by: run`` implies ``aggregation: none``)."""
        group_by = self.group_by or d.group_by
        agg = self.aggregation or ("none" if group_by == "run" else d.aggregation)
        return self.model_copy(update={
            "aggregation": agg, "group_by": group_by, "x": self.x or d.x,
            "band": d.band if self.band is None else self.band,
            "health_markers": d.health_markers if self.health_markers is None else self.health_markers,
        })


class DashboardSpec(_Strict):
    name: str = Field("", description="default: the spec file's name")
    title: str | None = None
    description: str = ""
    layout: LayoutSpec = LayoutSpec()
    defaults: PanelDefaults = PanelDefaults()
    panels: list[PanelSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _placement(self) -> DashboardSpec:
        cols = self.layout.cols
        for i, p in enumerate(self.panels):
            if p.width > cols:
                raise ValueError(f"panels[{i}].width {p.width} exceeds layout.cols {cols}")
            if p.col is not None and p.col + p.width - 1 > cols:
                raise ValueError(f"panels[{i}] at col {p.col} with width {p.width} exceeds layout.cols {cols}")
        self.placements()  # overlap -> ValueError
        return self

    def placements(self) -> list[tuple[int, int]]:
        """1-based ``(row, col)`` of every panel: explicit ones where given, the others row by row."""
        cols = self.layout.cols
        taken: dict[tuple[int, int], int] = {}

        def claim(i: int, r: int, c: int, w: int) -> None:
            for k in range(c, c + w):
                if (r, k) in taken:
                    raise ValueError(f"panels[{i}] overlaps panels[{taken[(r, k)]}] at row {r}, col {k}")
            for k in range(c, c + w):
                taken[(r, k)] = i

        out: dict[int, tuple[int, int]] = {}
        for i, p in enumerate(self.panels):
            if p.row is not None and p.col is not None:
                claim(i, p.row, p.col, p.width)
                out[i] = (p.row, p.col)
        r, c = 1, 1
        for i, p in enumerate(self.panels):
            if i in out:
                continue
            while True:
                if c + p.width - 1 > cols:
                    r, c = r + 1, 1
                    continue
                if all((r, k) not in taken for k in range(c, c + p.width)):
                    break
                c += 1
            claim(i, r, c, p.width)
            out[i] = (r, c)
            c += p.width
        return [out[i] for i in range(len(self.panels))]


def summary_name(metric: str) -> str:
    """A summary-panel metric as a summary metric name: registered names as they are, logged
    metric names (with a ``/``) as ``final:<metric>``."""
    from workbench.compare import SUMMARY_METRICS, resolve_summary

    if metric in SUMMARY_METRICS or metric.startswith("final:"):
        resolve_summary(metric)
        return metric
    if "/" in metric:
        return f"final:{metric}"
    resolve_summary(metric)  # ValueError: unknown summary metric ... (valid: ...)
    return metric


# --------------------------------------------------------------------------------------------
# Loading, with file:line: field errors
# --------------------------------------------------------------------------------------------

def _loc_str(loc: Sequence[Any]) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _node_at(node: Any, loc: Sequence[Any]) -> Any:
    for p in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == p:
                    nxt = k if p == loc[-1] else v
                    break
            if nxt is None:
                return node
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(p, int) and p < len(node.value):
            node = node.value[p]
        else:
            return node
    return node


_FIELDS = {"": DashboardSpec, "layout": LayoutSpec, "defaults": PanelDefaults, "panels": PanelSpec}


def _explain(err: dict[str, Any]) -> str:
    """The shared explanation (:func:`workbench.errors.explain_pydantic_error`), with the fields
    of the spec section that holds an unknown key for its did-you-mean."""
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "literal"))))
    valid = None
    if err["type"] == "extra_forbidden":
        parent = next((str(p) for p in reversed(loc[:-1]) if isinstance(p, str)), "")
        model = _FIELDS.get(parent, DashboardSpec)
        valid = [*model.model_fields, *(["metric"] if model is PanelSpec else [])]
    return explain_pydantic_error({**err, "loc": loc}, valid)


def parse_spec(text: str, source: str = "<spec>") -> DashboardSpec:
    """Validate spec YAML text; ``SpecError`` lists every problem as ``source:line: field: message``."""
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise SpecError(source, [f"{where}: invalid YAML: {getattr(e, 'problem', None) or e}"]) from None
    if not isinstance(data, dict):
        raise SpecError(source, [f"{source}: a dashboard spec is a mapping with `panels:` (got {type(data).__name__})"])
    if not data.get("name"):
        data["name"] = Path(source).stem if source != "<spec>" else "dashboard"
    try:
        return DashboardSpec.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "literal")))]
            node = _node_at(root, loc)
            line = f":{node.start_mark.line + 1}" if node is not None and hasattr(node, "start_mark") else ""
            where = _loc_str(loc)
            problems.append(f"{source}{line}: {where + ': ' if where else ''}{_explain(err)}")
        raise SpecError(source, problems) from None


def load_spec(path: str | Path) -> DashboardSpec:
    """Read and validate a spec file (``SpecError`` on any problem, naming the file)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError(str(path), [f"{path}: cannot read dashboard spec: {e.strerror or e}"]) from None
    return parse_spec(text, str(path))


def builtin_spec_dirs() -> list[Path]:
    """Where named specs are looked up: ``./dashboards``, then the project's ``dashboards/``."""
    project = Path(__file__).resolve().parents[2] / "dashboards"
    dirs = [Path.cwd() / "dashboards", project]
    return list(dict.fromkeys(d.resolve() for d in dirs))


def list_specs() -> dict[str, Path]:
    """``name -> file`` of every spec found in :func:`builtin_spec_dirs` (first one wins)."""
    out: dict[str, Path] = {}
    for d in builtin_spec_dirs():
        for p in sorted(d.glob("*.y*ml")) if d.is_dir() else []:
            out.setdefault(p.stem, p)
    return out


def find_spec(name_or_path: str | Path) -> Path:
    """A spec file by path, or by name in :func:`builtin_spec_dirs`."""
    p = Path(name_or_path)
    if p.is_file():
        return p
    specs = list_specs()
    if str(name_or_path) in specs:
        return specs[str(name_or_path)]
    hint = did_you_mean(name_or_path, specs)
    raise SpecError(str(name_or_path), [f"{name_or_path}: no such dashboard spec file or name{hint} "
                                        f"(known: {', '.join(specs) or 'none'})"])


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------

@dataclass
class DashboardData:
    """What a dashboard draws from.

    ``history``/``runs``: :func:`workbench.results.reader.load_study_frames` output.
    ``health_cells``: runs × rules (``workbench.cli.health.health_cells``), for
    ``health_matrix`` panels. ``health_events``: one row per fired rule and run (columns
    ``run_id, rule, step, severity, message, watches``), for markers. ``baseline``: the variant
    the summary panels compare against (default: the first), matched per grid point, or one arm.

    Groups (colours, bands, legend entries, summary bars) are the runs' **arms** when ``runs``
    has an ``arm`` column (:mod:`workbench.compare.arms`: variant and grid point, e.g.
    ``dapo/lr=3e-05``), else their variants; without a grid the two are the same.
    """

    history: pd.DataFrame
    runs: pd.DataFrame
    health_cells: pd.DataFrame | None = None
    health_events: pd.DataFrame | None = None
    baseline: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    confidence: float = 0.95
    n_resamples: int = 1000
    seed: int = 0
    max_points: int = 300
    """Curves on x = step with more logged steps than this are drawn (and their bands computed) on
    an evenly spaced subset of the steps, shared by all runs: the figure stays light and the
    bootstrap fast; summaries and statistics always use every point."""

    def __post_init__(self) -> None:
        from workbench.compare.panels import run_labels

        if not self.labels and len(self.runs):
            self.labels = run_labels(self.runs)

    @property
    def variants(self) -> list[str]:
        """The groups drawn: arms (variants in a study without a grid), in order."""
        from workbench.compare.panels import panel_groups

        return panel_groups(self.history, self.runs)

    def resolved_baseline(self) -> tuple[str | None, list[str]]:
        """The baseline the summary panels use (``baseline`` if it names a variant or an arm, else
        the first variant) and the arms that are baselines (drawn grey)."""
        from workbench.compare.panels import resolve_baseline

        return resolve_baseline(self.runs, self.baseline, self.variants)


@dataclass
class RenderedDashboard:
    spec: DashboardSpec
    figure: Any
    warnings: list[str]
    panels_with_data: int

    def to_html(self, *, subtitle: str = "", extra_sections: Sequence[Any] = ()) -> str:
        from .html import Section, html_page

        note = self.spec.description.strip()
        sections = [Section(self.spec.title or self.spec.name, figure=self.figure, note=note), *extra_sections]
        return html_page(self.spec.title or f"dashboard: {self.spec.name}", sections, subtitle=subtitle)


def render_dashboard(spec: DashboardSpec, data: DashboardData) -> RenderedDashboard:
    """Render ``spec`` over ``data`` as one plotly figure (a grid of panels).

    A panel whose metrics have no data shows a note in its place and is listed in ``warnings``.
    """
    from plotly.subplots import make_subplots

    from workbench.compare.panels import curve_panel, summary_panel
    from workbench.metrics.catalogue import metric_bounds

    from . import figures as F
    from .style import PALETTE, dash_for, dash_legend, variant_colors

    logged = set(pd.unique(data.history["metric"])) if len(data.history) else set()
    keep = [p for p in spec.panels if not (p.optional and p.kind == "curve" and not logged & set(p.metrics))]
    if len(keep) < len(spec.panels):
        if not keep:
            keep = spec.panels[:1]
        spec = spec.model_copy(update={"panels": [p.model_copy(update={"row": None, "col": None}) for p in keep]})
    cols = spec.layout.cols
    places = spec.placements()
    n_rows = max(r for r, _ in places)
    grid: list[list[dict | None]] = [[{} for _ in range(cols)] for _ in range(n_rows)]
    for p, (r, c) in zip(spec.panels, places, strict=True):
        grid[r - 1][c - 1] = {"colspan": p.width} if p.width > 1 else {}
        for k in range(1, p.width):
            grid[r - 1][c - 1 + k] = None
    panels = [p.resolved(spec.defaults) for p in spec.panels]
    titles_by_pos = {}
    for p, (r, c) in zip(panels, places, strict=True):
        t = p.title or ", ".join(p.metrics) or p.kind.replace("_", " ")
        if p.kind == "curve" and len(p.metrics) > 1:
            t += f"<br><span style='font-size:11px'>{dash_legend(p.metrics)}</span>"
        titles_by_pos[(r, c)] = t
    titles = [titles_by_pos.get((r, c), "") for r in range(1, n_rows + 1) for c in range(1, cols + 1)
              if grid[r - 1][c - 1] is not None]
    fig = make_subplots(rows=n_rows, cols=cols, specs=grid, subplot_titles=titles,
                        vertical_spacing=min(0.25, 0.35 / max(1, n_rows) + 0.04), horizontal_spacing=0.08)
    variants = data.variants  # arms (= variants without a grid)
    baseline, baseline_arms = data.resolved_baseline()
    colors = variant_colors(variants, baseline_arms)
    run_ids = list(data.runs["run_id"]) if len(data.runs) else list(pd.unique(data.history["run_id"]))
    run_colors = {r: PALETTE[i % len(PALETTE)] for i, r in enumerate(run_ids)}
    shown: set[str] = set()
    problems: list[str] = []
    with_data = 0
    table_cache: dict[tuple[str, ...], Any] = {}

    for i, (p, (r, c)) in enumerate(zip(panels, places, strict=True)):
        name = p.title or ", ".join(p.metrics) or p.kind
        traces: list[Any] = []
        if p.kind == "curve":
            for j, metric in enumerate(p.metrics):
                try:  # samples/tokens need the count metrics and params: the full history and runs
                    panel = curve_panel(data.history, data.runs, metric, x=p.x, aggregation=p.aggregation,
                                        confidence=data.confidence, max_points=data.max_points,
                                        health_events=data.health_events, markers=p.health_markers,
                                        labels=data.labels)
                except ValueError as e:
                    problems.append(f"panel {name!r}: {e}")
                    continue
                if panel is None:
                    continue
                dash = dash_for(j)
                if panel.bands is not None:
                    drawn = set(panel.groups)
                    for v in [v for v in variants if v in drawn]:
                        traces += F.band_traces(panel.band(v), p.x, name=str(v), color=colors[v],
                                                dash=dash, showlegend=v not in shown, band=p.band,
                                                statistic=p.aggregation, metric=metric)
                        shown.add(v)
                else:
                    traces += F.run_traces(panel.curves, p.x, colors=run_colors if p.group_by == "run" else colors,
                                           color_by=p.group_by, labels=data.labels, dash=dash, shown=shown,
                                           metric=metric)
                if p.health_markers:
                    if panel.markers is None:
                        problems.append(f"panel {name!r}: health markers are drawn on x: step only")
                    else:
                        traces += F.marker_traces(panel.markers, "step", shown=shown)
        elif p.kind == "summary":
            names = [summary_name(m) for m in p.metrics]
            key = tuple(names)
            try:
                if key not in table_cache:
                    table_cache[key] = summary_panel(data.history, data.runs, names, baseline,
                                                     confidence=data.confidence, seed=data.seed)
                summary = table_cache[key]
                for m, rows in summary.rows():
                    traces += F.summary_bar_traces(rows, summary.values, m, colors=colors, baseline=baseline,
                                                   shown=shown)
            except ValueError as e:
                problems.append(f"panel {name!r}: {e}")
        elif p.kind == "health_matrix":
            cells = data.health_cells
            if cells is not None and len(cells):
                present = set(cells["run_id"])
                traces.append(F.health_heatmap_trace(cells, run_order=[r for r in run_ids if r in present]))
        if traces:
            with_data += 1
            for t in traces:
                fig.add_trace(t, row=r, col=c)
        else:
            what = ", ".join(p.metrics) if p.metrics else "health reports"
            problems.append(f"panel {name!r}: no data for {what}")
            fig.add_annotation(text=f"no data for {what}", showarrow=False, font={"color": "#999"},
                               xref="x domain", yref="y domain", x=0.5, y=0.5, row=r, col=c)
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
    height = int(spec.layout.panel_height * n_rows + 120)
    F.base_layout(fig, title=spec.title or spec.name, height=height)
    return RenderedDashboard(spec, fig, problems, with_data)

