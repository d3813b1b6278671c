"""The dashboard spec schema: what a ``dashboards/*.yaml`` file may say, as pydantic models.

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
      - {title: Log-ratio histogram, kind: mismatch_record, width: 2, log_y: true}

Panel fields: ``kind`` (``curve`` | ``summary`` | ``health_matrix`` | ``mismatch_record``: each run's
sampler/learner log-ratio histogram at its first and last recorded steps and, below the figure, its worst
tokens, from the runs' ``mismatch.json``), ``metrics``,
``aggregation`` (``mean`` | ``iqm``: across the runs of a group, with a 95% bootstrap band;
``none``: every run's own line), ``group_by`` (``variant`` | ``run``; a "variant" group is an
arm, variant and grid point, in a study with a grid), ``x`` (``step`` |
``samples`` | ``tokens``), ``band``, ``health_markers``, ``log_y``, ``y_title``, ``width``
(columns spanned), ``optional`` (left out when its metrics were never logged), ``row``/``col``
(1-based, optional: panels are placed row by row otherwise).

Reading a file, with errors that name its line, is :mod:`workbench.viz.spec_loader`'s job;
drawing a spec is :mod:`workbench.viz.dashboard`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["DashboardSpec", "LayoutSpec", "PanelDefaults", "PanelSpec", "SpecError"]

Aggregation = Literal["mean", "iqm", "none"]
GroupBy = Literal["variant", "run"]
XAxis = Literal["step", "samples", "tokens"]
Kind = Literal["curve", "summary", "health_matrix", "mismatch_record"]


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
                raise ValueError(
                    "a summary panel needs `metrics`: summary metric names such as "
                    "final_eval_accuracy, or logged metrics (their final value)"
                )
            from workbench.compare.summary import summary_name  # deferred: pandas (a spec loads without it)

            for m in self.metrics:
                summary_name(m)  # ValueError naming the valid summaries
        if self.kind == "health_matrix" and self.metrics:
            raise ValueError("a health_matrix panel takes no `metrics` (it shows every health rule)")
        if self.kind == "mismatch_record" and self.metrics:
            raise ValueError("a mismatch_record panel takes no `metrics` (it shows the runs' mismatch.json)")
        if self.group_by == "run" and self.aggregation in ("mean", "iqm"):
            raise ValueError(
                f"aggregation {self.aggregation!r} needs group_by: variant "
                "(one run has nothing to aggregate); use aggregation: none with group_by: run"
            )
        if (self.row is None) != (self.col is None):
            raise ValueError("give both `row` and `col`, or neither")
        return self

    def resolved(self, d: PanelDefaults) -> PanelSpec:
        """This panel with unset fields filled from ``d`` (``group_by: run`` implies ``aggregation: none``)."""
        group_by = self.group_by or d.group_by
        agg = self.aggregation or ("none" if group_by == "run" else d.aggregation)
        return self.model_copy(
            update={
                "aggregation": agg,
                "group_by": group_by,
                "x": self.x or d.x,
                "band": d.band if self.band is None else self.band,
                "health_markers": d.health_markers if self.health_markers is None else self.health_markers,
            }
        )


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
