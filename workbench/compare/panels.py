"""Panel data: the numbers a dashboard panel shows, computed here so that :mod:`workbench.viz` only
draws them (rliable's split: data and statistics apart from plots).

A **curve panel** (:func:`curve_panel`) is one metric of every group (arm; variant without a grid)
on a common x axis (``step``, ``samples`` or ``tokens``): per group and x the centre (mean or IQM
across runs), the interval (lower, upper), the number of runs ``n`` and the name of the interval
method; or, with ``aggregation="none"``, every run's own curve. Health-rule events can be placed
on the curve as markers. A **summary panel** (:func:`summary_panel`) is the comparison table of
per-run summary metrics with the per-run values beside it.

    from workbench.compare.panels import curve_panel

    panel = curve_panel(history, runs, "reward/mean", x="step", aggregation="mean")
    panel.bands        # group, step, n, estimate, lo, hi   (one row per group and step)
    panel.interval     # '95% t interval of the mean across runs at each x'
    panel.checkpoint   # eval/accuracy only: group, step, n_problems, lo, hi (binomial over problems)

A proportion over a logged count of trials (``eval/accuracy`` over ``eval/n_problems``,
:data:`BINOMIAL_DENOMINATORS`) also gets each checkpoint's own noise: a Wilson interval over the
problems of that eval (:func:`checkpoint_noise`). It is a different quantity from the band: the band
is the spread over runs (seeds) on the same problems; the checkpoint interval is how far the
accuracy could move on another draw of as many problems. A run that did not log the count (older
runs) gets no interval: n is never guessed.

The statistics are :mod:`workbench.compare.stats`' (:func:`~workbench.compare.stats.curve_bands`,
:func:`~workbench.compare.decide.compare_variants`); this module only chooses what goes in which
panel. Pure pandas/numpy: no plotting, no MLflow.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from statsmodels.stats.proportion import proportion_confint

from workbench.metrics.catalogue import metric_bounds
from workbench.metrics.names import EVAL_ACCURACY, EVAL_N_PROBLEMS

from .arms import arm_column, arm_variants, match_baselines, runs_by_arm
from .checkpoints import CHECKPOINT_COLUMN, cold_start_segment
from .decide import CompareSettings, compare_variants
from .stats import curve_bands
from .summary import align_curves, summarize_runs
from .table import ComparisonTable

__all__ = [
    "AGGREGATIONS",
    "BINOMIAL_DENOMINATORS",
    "MARKER_COLUMNS",
    "CurvePanel",
    "SummaryPanel",
    "band_interval_name",
    "checkpoint_interval_name",
    "checkpoint_noise",
    "curve_panel",
    "event_markers",
    "interval_bounds",
    "panel_groups",
    "resolve_baseline",
    "run_labels",
    "seed_points",
    "summary_panel",
    "thin_steps",
]

#: How a curve panel combines the runs of a group: a centre with an interval, or none (every run).
AGGREGATIONS: tuple[str, ...] = ("mean", "iqm", "none")
#: Columns of a markers frame: one health-rule event placed on a run's curve.
MARKER_COLUMNS: tuple[str, ...] = ("step", "y", "severity", "rule", "label", "message")
#: A proportion metric -> the logged count it is a fraction of: each checkpoint's value is binomial over
#: that many trials (an eval's accuracy over its problems), so its points get a Wilson interval.
BINOMIAL_DENOMINATORS: dict[str, str] = {EVAL_ACCURACY: EVAL_N_PROBLEMS}


# --------------------------------------------------------------------------------------------
# Groups, baseline and labels
# --------------------------------------------------------------------------------------------


def panel_groups(history: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    """The groups panels show, in order: the runs' arms (their variants in a study without a
    grid), or the history's variants when there is no runs frame."""
    return list(pd.unique(arm_column(runs))) if len(runs) else list(pd.unique(history["variant"]))


def resolve_baseline(runs: pd.DataFrame, baseline: str | None, groups: Sequence[str]) -> tuple[str | None, list[str]]:
    """``(baseline, baseline arms)``: ``baseline`` if it names a variant or an arm of ``runs``, else
    the first variant; the arms that are baselines (one per grid point)."""
    if not len(runs):
        base = baseline if baseline in groups else (groups[0] if groups else None)
        return base, [base] if base is not None else []
    pairs = arm_variants(runs)
    names = list(dict.fromkeys(pairs.values()))
    base = baseline if baseline in names or baseline in pairs else names[0]
    return base, [a for a, b in match_baselines(pairs, base).items() if a == b]


def run_labels(runs: pd.DataFrame) -> dict[str, str]:
    """``run_id -> "<arm>/seed=<seed>"`` for legends and hover text."""
    if not len(runs):
        return {}
    ckpt = runs[CHECKPOINT_COLUMN] if CHECKPOINT_COLUMN in runs.columns else [None] * len(runs)
    return {
        r: f"{v}{cold_start_segment(c)}/seed={s}"
        for r, v, c, s in zip(runs["run_id"], arm_column(runs), ckpt, runs["seed"], strict=True)
    }


# --------------------------------------------------------------------------------------------
# Curve panels
# --------------------------------------------------------------------------------------------


def band_interval_name(statistic: str, confidence: float) -> str:
    """What :func:`~workbench.compare.stats.curve_bands` computes, in words (legends, hover, docs)."""
    if statistic == "iqm":
        return (
            f"{confidence:.0%} CI of the IQM across runs at each x (trimmed-mean t from 4 runs, "
            "t interval of the mean below)"
        )
    return f"{confidence:.0%} t interval of the mean across runs at each x"


def checkpoint_interval_name(confidence: float, *, aggregated: bool) -> str:
    """What :func:`checkpoint_noise` computes, in words (legends, hover, docs)."""
    name = f"binomial over problems, this checkpoint ({confidence:.0%} Wilson interval over its eval problems"
    if aggregated:  # Var(mean over runs of per-problem outcomes) <= p(1-p)/n: the runs share the problems
        return name + ", at the mean over runs: an upper bound for the mean, whose runs share the problems)"
    return name + ")"


def wilson_bounds(proportion: np.ndarray, n: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Wilson interval of each ``proportion`` over ``n`` trials; NaN where ``n`` is missing or < 1."""
    proportion, n = np.asarray(proportion, dtype=float), np.asarray(n, dtype=float)
    lo, hi = np.full(proportion.shape, np.nan), np.full(proportion.shape, np.nan)
    ok = np.isfinite(proportion) & np.isfinite(n) & (n >= 1)
    if ok.any():
        lo[ok], hi[ok] = proportion_confint(proportion[ok] * n[ok], n[ok], alpha=1 - confidence, method="wilson")
    return lo, hi


def checkpoint_noise(
    history: pd.DataFrame,
    metric: str,
    curves: pd.DataFrame,
    x: str,
    *,
    bands: pd.DataFrame | None = None,
    confidence: float = 0.95,
) -> pd.DataFrame | None:
    """Each checkpoint's binomial interval over problems, or None when ``metric`` has no denominator
    (:data:`BINOMIAL_DENOMINATORS`) or ``x`` is tokens (those curves are interpolated between checkpoints).

    ``curves``: the aligned per-run points (``run_id, variant, <x>, value``, and ``step`` unless x is step).
    Without ``bands``: one row per run and point, ``run_id, variant, <x>, n_problems, lo, hi``. With
    ``bands`` (``curve_bands`` output): one row per group and x, the interval at the group's estimate over
    the fewest problems any of its runs logged there, ``variant, <x>, n_problems, lo, hi``; NaN where
    some run at that x logged no count (n is never guessed)."""
    denominator = BINOMIAL_DENOMINATORS.get(metric)
    if denominator is None or x == "tokens":
        return None
    counts = history.loc[history["metric"] == denominator, ["run_id", "step", "value"]]
    counts = counts.drop_duplicates(["run_id", "step"], keep="last").rename(columns={"value": "n_problems"})
    step = "step" if "step" in curves.columns else x  # x = step: the x values are the steps
    points = curves[["run_id", "variant", x, "value"] + ([] if step == x else ["step"])]
    points = points.merge(counts.rename(columns={"step": step}), on=["run_id", step], how="left")
    if bands is None:
        lo, hi = wilson_bounds(points["value"], points["n_problems"], confidence)
        return points.assign(lo=lo, hi=hi)[["run_id", "variant", x, "n_problems", "lo", "hi"]]
    points = points[np.isfinite(points["value"].to_numpy(dtype=float))]
    fewest = points.groupby(["variant", x], sort=False)["n_problems"].agg(
        lambda n: n.min() if n.notna().all() else np.nan
    )  # one run without a count: no interval
    out = bands[["variant", x, "estimate"]].merge(
        fewest.rename("n_problems").reset_index(), on=["variant", x], how="left"
    )
    lo, hi = wilson_bounds(out["estimate"], out["n_problems"], confidence)
    return out.assign(lo=lo, hi=hi)[["variant", x, "n_problems", "lo", "hi"]]


@dataclass
class CurvePanel:
    """One metric's curves of every group, ready to draw.

    ``bands`` (``aggregation`` mean or iqm): :func:`~workbench.compare.stats.curve_bands` output,
    columns ``variant, <x>, n, estimate, lo, hi`` (``variant`` holds the group: the arm);
    ``lo``/``hi`` are NaN where fewer than 2 runs have a value. ``curves`` (``aggregation`` none):
    the aligned per-run curves ``run_id, variant, seed, <x>, value``. ``markers``: health-rule
    events on the curves (:data:`MARKER_COLUMNS`), when asked for and ``x`` is step; else None.
    ``interval`` names the interval method ("" without one). ``checkpoint``: each point's binomial
    interval over its eval problems (:func:`checkpoint_noise`; per group with bands, per run without),
    named by ``checkpoint_interval``; None for a metric that is no proportion of a logged count.
    """

    metric: str
    x: str
    aggregation: str
    interval: str
    bands: pd.DataFrame | None = None
    curves: pd.DataFrame | None = None
    markers: pd.DataFrame | None = None
    checkpoint: pd.DataFrame | None = None
    checkpoint_interval: str = ""

    @property
    def groups(self) -> list[str]:
        """The groups with data, in the order they appear."""
        frame = self.bands if self.bands is not None else self.curves
        return [] if frame is None else list(pd.unique(frame["variant"]))

    def band(self, group: str) -> pd.DataFrame:
        """One group's rows of ``bands``, sorted by x: ``<x>, n, estimate, lo, hi``."""
        if self.bands is None:
            raise ValueError(f"panel of {self.metric!r} has no bands (aggregation {self.aggregation!r})")
        return self.bands[self.bands["variant"] == group].sort_values(self.x)


def thin_steps(hist: pd.DataFrame, max_points: int) -> pd.DataFrame:
    """Keep at most ``max_points`` distinct steps (evenly spaced, first and last kept), the same
    steps for every run, so a long curve stays light to draw and fast to bootstrap."""
    steps = np.unique(hist["step"].to_numpy())
    if len(steps) <= max_points:
        return hist
    keep = steps[np.unique(np.linspace(0, len(steps) - 1, max_points).round().astype(int))]
    return hist[hist["step"].isin(keep)]


def _value_at(run_metric: pd.DataFrame, step: int) -> float:
    """A run's value of a metric at ``step``: the last point at or before it (the first point when
    the event precedes them all), so a marker sits on the drawn line."""
    before = run_metric[run_metric["step"] <= step]
    row = before.iloc[-1] if len(before) else run_metric.iloc[0]
    return float(row["value"])


def event_markers(
    events: pd.DataFrame | None, metric: str, hist: pd.DataFrame, labels: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """The health events that watch ``metric`` (columns ``run_id, rule, step, severity, message``
    and ``watches`` or ``metric``), each placed on its run's curve in ``hist`` (the metric's
    points ``run_id, step, value``): :data:`MARKER_COLUMNS`. Events of runs without points of
    ``metric`` have nowhere to sit and are left out."""
    labels = labels or {}
    if events is None or events.empty:
        return pd.DataFrame(columns=list(MARKER_COLUMNS))
    rows = []
    for e in events.to_dict("records"):
        watches = set(e.get("watches") or ()) | {e.get("metric")}
        if metric not in watches:
            continue
        h = hist[hist["run_id"] == e["run_id"]].sort_values("step")
        if h.empty:
            continue
        rows.append(
            {
                "step": int(e["step"]),
                "y": _value_at(h, int(e["step"])),
                "severity": e["severity"],
                "rule": e["rule"],
                "label": labels.get(e["run_id"], e["run_id"][:8]),
                "message": e["message"],
            }
        )
    return pd.DataFrame(rows, columns=list(MARKER_COLUMNS))


def curve_panel(
    history: pd.DataFrame,
    runs: pd.DataFrame,
    metric: str,
    *,
    x: str = "step",
    aggregation: str = "mean",
    confidence: float = 0.95,
    max_points: int = 300,
    health_events: pd.DataFrame | None = None,
    markers: bool = False,
    labels: Mapping[str, str] | None = None,
) -> CurvePanel | None:
    """The data of one metric's curve panel, or None when no run logged ``metric``.

    ``history``/``runs``: :func:`workbench.results.reader.load_study_frames` output. Runs are
    grouped by arm (grid points are not seeds). On x = step, at most ``max_points`` steps are kept
    (:func:`thin_steps`); samples and tokens are aligned from the full history (they need the
    count metrics). ``aggregation`` mean or iqm: bands by
    :func:`~workbench.compare.stats.curve_bands` (pointwise t intervals, cut to the catalogue's
    bounds of ``metric``); none: every run's curve.
    ``markers``: place ``health_events`` on the curves (x = step only; None otherwise).
    ``checkpoint``: for ``eval/accuracy``, each point's binomial interval over problems
    (:func:`checkpoint_noise`). Raises ``ValueError`` when the curves cannot be aligned on ``x`` (missing count metrics) or
    ``aggregation`` is unknown.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r} (valid: {', '.join(AGGREGATIONS)})")
    full = history[history["metric"] == metric]
    if full.empty:
        return None
    if x == "step":
        aligned = align_curves(thin_steps(full, max_points), metric, "step")
    else:
        aligned = align_curves(history, metric, x, runs=runs)
    aligned = runs_by_arm(aligned, runs)
    panel = CurvePanel(metric, x, aggregation, "")
    if aggregation in ("mean", "iqm"):
        with warnings.catch_warnings():  # all-NaN columns (no run at some x) are expected
            warnings.simplefilter("ignore", RuntimeWarning)
            panel.bands = curve_bands(
                aligned, x=x, statistic=aggregation, confidence=confidence, bounds=metric_bounds(metric)
            )
        panel.interval = band_interval_name(aggregation, confidence)
    else:
        panel.curves = aligned
    panel.checkpoint = checkpoint_noise(history, metric, aligned, x, bands=panel.bands, confidence=confidence)
    if panel.checkpoint is not None:
        panel.checkpoint_interval = checkpoint_interval_name(confidence, aggregated=panel.bands is not None)
    if markers and x == "step":
        panel.markers = event_markers(health_events, metric, full, labels)
    return panel


# --------------------------------------------------------------------------------------------
# Summary panels
# --------------------------------------------------------------------------------------------


@dataclass
class SummaryPanel:
    """Summary metrics per group: ``table`` (:class:`~workbench.compare.ComparisonTable`: estimate
    with CI, Δ to the baseline, verdict) and ``values`` (one row per run, the summaries as columns)."""

    metrics: list[str]
    values: pd.DataFrame
    table: ComparisonTable

    def rows(self) -> Iterable[tuple[str, pd.DataFrame]]:
        """``(metric, its table rows)`` of every metric that has at least one run's value."""
        for m in self.metrics:
            rows = self.table.for_metric(m)
            if rows["n_seeds"].sum() > 0:
                yield m, rows


def summary_panel(
    history: pd.DataFrame,
    runs: pd.DataFrame,
    metrics: Sequence[str],
    baseline: str | None,
    *,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> SummaryPanel:
    """Per-run summaries of ``metrics`` (summary metric names) and their comparison with
    ``baseline`` (:func:`~workbench.compare.compare_variants`). Raises ``ValueError`` on an
    unknown metric or baseline."""
    names = list(metrics)
    ids = [c for c in ("run_id", "variant", "arm", "seed") if c in runs.columns]
    values = summarize_runs(history, runs[ids], names)
    table = compare_variants(values, baseline, names, CompareSettings(confidence=confidence, rng=seed))
    return SummaryPanel(names, values, table)


def interval_bounds(rows: pd.DataFrame, statistic: str = "mean") -> tuple[np.ndarray, np.ndarray]:
    """The CI of ``statistic`` per row of a comparison table, from whichever columns it has:
    ``<statistic>_lo/_hi`` or ``<statistic>_ci_lo/_ci_hi`` or ``lo/hi``; NaN (no interval) when none."""
    for lo, hi in ((f"{statistic}_lo", f"{statistic}_hi"), (f"{statistic}_ci_lo", f"{statistic}_ci_hi"), ("lo", "hi")):
        if lo in rows.columns and hi in rows.columns:
            return rows[lo].to_numpy(dtype=float), rows[hi].to_numpy(dtype=float)
    nan = np.full(len(rows), np.nan)
    return nan, nan.copy()


def seed_points(values: pd.DataFrame | None, metric: str, arms: Sequence[Any]) -> pd.DataFrame:
    """The per-run values of ``metric`` (columns ``variant``, ``metric`` and ``arm`` when the rows are
    arms) of the given arms, as ``variant, value``; empty when there are none."""
    if values is None or metric not in values.columns:
        return pd.DataFrame({"variant": [], "value": []})
    pts = values.assign(variant=arm_column(values))[["variant", metric]].dropna()
    pts = pts[pts["variant"].astype(str).isin([str(a) for a in arms])]
    return pd.DataFrame({"variant": pts["variant"].astype(str).to_numpy(), "value": pts[metric].to_numpy(float)})
