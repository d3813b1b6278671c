"""Plotly figures from :mod:`workbench.compare` data (drawing only: no statistics, no MLflow).

The split follows rliable (``metrics.py`` / ``library.py`` / ``plot_utils.py``): the numbers come
from ``workbench.compare`` (``curve_bands``, ``ComparisonTable``, ``summarize_runs``, the panel data
of :mod:`workbench.compare.panels`) and from the health cells of ``workbench.analysis.health_table``;
this module only turns frames into traces.

Trace builders return lists of ``go.Scatter``/``go.Box``/``go.Heatmap`` that a caller places in a
subplot (the dashboard renderer); the ``*_figure`` functions wrap them into standalone figures.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .style import FONT, SEVERITY_COLORS, SEVERITY_SYMBOLS, TEMPLATE, variant_colors, with_alpha

__all__ = [
    "HEALTH_LEGEND",
    "HEALTH_STATES",
    "band_traces",
    "base_layout",
    "checkpoint_legend_trace",
    "curve_figure",
    "health_cell_text",
    "health_heatmap_trace",
    "health_legend_html",
    "health_matrix_figure",
    "log_ratio_ticks",
    "marker_traces",
    "mismatch_histogram_traces",
    "run_traces",
    "is_interval_trace",
    "summary_bar_traces",
    "summary_figure",
    "summary_interval_traces",
    "summary_range",
    "zoomed_range",
]

#: Health cell states and their heatmap codes (``off``: rule disabled or not applicable to the run).
HEALTH_STATES: dict[str, float] = {"ok": 0.0, "warn": 1.0, "fail": 2.0, "unknown": 0.5, "off": 0.8}
_HEALTH_SCALE = [
    [0.0, "#E8F5E9"],
    [0.24, "#E8F5E9"],  # ok
    [0.25, "#EEEEEE"],
    [0.37, "#EEEEEE"],  # unknown (no health.json, no reasons tag)
    [0.38, "#FFFFFF"],
    [0.49, "#FFFFFF"],  # off
    [0.5, "#FFE0A3"],
    [0.74, "#FFE0A3"],  # warn
    [0.75, "#F5B7B1"],
    [1.0, "#F5B7B1"],  # fail
]
#: What a health cell says, in the cell and in the legend under the matrix: a colour never stands alone.
HEALTH_LEGEND: dict[str, tuple[str, str]] = {  # state -> (colour, cell text and its meaning)
    "ok": ("#E8F5E9", "ok: the rule watched the whole run and never fired"),
    "warn": ("#FFE0A3", "warn@120: fired at step 120 with severity warn"),
    "fail": ("#F5B7B1", "fail@120: fired at step 120 with severity fail (the run may have been stopped)"),
    "off": ("#FFFFFF", "off: rule disabled, or the run logs none of its metrics"),
    "unknown": ("#EEEEEE", "?: no health report for this run"),
}


def health_cell_text(state: str, step: Any) -> str:
    """A health cell's text: ``ok``, ``warn@120``, ``fail@120``, ``off`` or ``?``."""
    if state in ("warn", "fail"):
        return state if pd.isna(step) else f"{state}@{int(step)}"
    return {"ok": "ok", "off": "off"}.get(state, "?")


def health_legend_html() -> str:
    """The legend of the health matrix (colour swatch, cell text, meaning), as HTML."""
    items = "".join(
        f"<span style='display:inline-block;margin-right:14px'><span style='display:inline-block;width:12px;"
        f"height:12px;background:{colour};border:1px solid #ccc;vertical-align:middle'></span> "
        f"{html.escape(text)}</span>"
        for colour, text in HEALTH_LEGEND.values()
    )
    return f"<p class='note'>{items}</p>"


def base_layout(fig: go.Figure, *, title: str | None = None, height: int | None = None) -> go.Figure:
    fig.update_layout(
        template=TEMPLATE,
        font={"family": FONT, "size": 12},
        hovermode="closest",
        margin={"l": 60, "r": 20, "t": 70 if title else 40, "b": 50},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        title={"text": title, "x": 0.01} if title else None,
        height=height,
    )
    return fig


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{float(v):.4g}"


# --------------------------------------------------------------------------------------------
# Curves
# --------------------------------------------------------------------------------------------


NO_COUNT_NOTE = "no eval/n_problems logged (older run): no binomial interval"


CHECKPOINT_LABEL = "binomial over problems, this checkpoint"


def _checkpoint_bars(
    xs: np.ndarray, ys: np.ndarray, checkpoint: pd.DataFrame | None, x: str, label: str = CHECKPOINT_LABEL
) -> tuple[dict[str, Any] | None, list[str] | None]:
    """Error bars and hover lines for points ``(xs, ys)`` from one curve's rows of a checkpoint-noise frame
    (``<x>, n_problems, lo, hi``; :func:`workbench.compare.panels.checkpoint_noise`); (None, None) without one."""
    if checkpoint is None:
        return None, None
    c = checkpoint.drop_duplicates(x).set_index(x).reindex(xs)
    lo, hi, n = (c[k].to_numpy(dtype=float) for k in ("lo", "hi", "n_problems"))
    bars = {
        "type": "data",
        "symmetric": False,
        "array": np.where(np.isfinite(hi), hi - ys, np.nan),
        "arrayminus": np.where(np.isfinite(lo), ys - lo, np.nan),
        "thickness": 1.2,
        "width": 3,
    }
    hover = [
        f"{label}: [{_fmt(a)}, {_fmt(b)}], n={int(k)} problems" if np.isfinite(a) else NO_COUNT_NOTE
        for a, b, k in zip(lo, hi, n, strict=True)
    ]
    return bars, hover


def checkpoint_legend_trace(label: str, *, logged: bool) -> go.Scatter:
    """A legend-only entry saying what the error bars on eval points are, or that some have none
    (``visible="legendonly"``: a key, not data; the bars themselves are on the eval points)."""
    name = f"bars: {label}" if logged else NO_COUNT_NOTE
    return go.Scatter(
        x=[None],
        y=[None],
        mode="markers",
        name=name,
        legendgroup="checkpoint-noise",
        marker={"color": "#555555", "symbol": "line-ns-open" if logged else "x-thin-open", "size": 10},
        hoverinfo="skip",
        showlegend=True,
        visible="legendonly",
    )


def band_traces(
    bands: pd.DataFrame,
    x: str,
    *,
    name: str,
    color: str,
    dash: str = "solid",
    legendgroup: str | None = None,
    showlegend: bool = True,
    band: bool = True,
    statistic: str = "mean",
    metric: str = "",
    checkpoint: pd.DataFrame | None = None,
    checkpoint_label: str = CHECKPOINT_LABEL,
) -> list[go.Scatter]:
    """One group's aggregate curve with its CI band, from :func:`workbench.compare.curve_bands`
    output (columns ``<x>, n, estimate, lo, hi`` for one group).

    The band is drawn where at least 2 runs have a value (``lo``/``hi`` finite). ``checkpoint``: this
    group's rows of a checkpoint-noise frame (``<x>, n_problems, lo, hi``), drawn as error bars on the
    points (the binomial noise over eval problems) and named in the hover."""
    b = bands.sort_values(x)
    xs = b[x].to_numpy()
    group = legendgroup or name
    traces: list[go.Scatter] = []
    ok = np.isfinite(b["lo"].to_numpy(dtype=float)) & np.isfinite(b["hi"].to_numpy(dtype=float))
    if band and ok.any():
        bx = xs[ok]
        traces.append(
            go.Scatter(
                x=np.concatenate([bx, bx[::-1]]),
                y=np.concatenate([b["hi"].to_numpy(dtype=float)[ok], b["lo"].to_numpy(dtype=float)[ok][::-1]]),
                fill="toself",
                fillcolor=with_alpha(color, 0.18),
                line={"width": 0},
                mode="lines",
                hoverinfo="skip",
                showlegend=False,
                legendgroup=group,
                name=f"{name} CI",
            )
        )
    label = f"{name} · {metric}" if metric else name
    ys = b["estimate"].to_numpy(dtype=float)
    bars, hover = _checkpoint_bars(xs, ys, checkpoint, x, checkpoint_label)
    traces.append(
        go.Scatter(
            x=xs,
            y=ys,
            mode="lines" if bars is None else "lines+markers",
            name=name,
            legendgroup=group,
            showlegend=showlegend,
            line={"color": color, "dash": dash, "width": 2},
            marker={"size": 5},
            error_y=bars,
            text=hover,
            customdata=np.stack(
                [b["n"].to_numpy(dtype=float), b["lo"].to_numpy(dtype=float), b["hi"].to_numpy(dtype=float)], axis=-1
            ),
            hovertemplate=(
                f"<b>{label}</b><br>{x}=%{{x}}<br>{statistic}=%{{y:.4g}}"
                "<br>CI over runs [%{customdata[1]:.4g}, %{customdata[2]:.4g}]"
                "<br>runs=%{customdata[0]}" + ("" if hover is None else "<br>%{text}") + "<extra></extra>"
            ),
        )
    )
    return traces


def run_traces(
    curves: pd.DataFrame,
    x: str,
    *,
    colors: Mapping[str, str],
    color_by: str = "variant",
    labels: Mapping[str, str] | None = None,
    dash: str = "solid",
    shown: set[str] | None = None,
    metric: str = "",
    opacity: float = 0.75,
    checkpoint: pd.DataFrame | None = None,
    checkpoint_label: str = CHECKPOINT_LABEL,
) -> list[go.Scatter]:
    """One line per run from a tidy frame ``run_id, variant, seed, <x>, value``.

    ``color_by="variant"``: runs share their variant's colour and legend entry;
    ``color_by="run"``: each run has its own colour (``colors`` keyed by run id) and entry.
    ``shown`` collects legend groups already shown (pass one set per figure). ``checkpoint``: a
    checkpoint-noise frame (``run_id, <x>, n_problems, lo, hi``), drawn as error bars on each run's points."""
    shown = set() if shown is None else shown
    labels = labels or {}
    traces = []
    for rid, g in curves.groupby("run_id", sort=False):
        g = g.sort_values(x)
        variant = str(g["variant"].iloc[0])
        label = labels.get(rid, f"{variant}/seed={g['seed'].iloc[0]}")
        group = variant if color_by == "variant" else rid
        color = colors.get(group, "#888888")
        xs, ys = g[x].to_numpy(), g["value"].to_numpy(dtype=float)
        own = None if checkpoint is None else checkpoint[checkpoint["run_id"] == rid]
        bars, hover = _checkpoint_bars(xs, ys, own, x, checkpoint_label)
        traces.append(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines+markers" if len(g) < 30 or bars is not None else "lines",
                marker={"size": 4},
                name=variant if color_by == "variant" else label,
                legendgroup=group,
                showlegend=group not in shown,
                opacity=opacity,
                line={"color": color, "dash": dash, "width": 1.5},
                error_y=bars,
                text=hover,
                hovertemplate=(
                    f"<b>{label}</b>{' · ' + metric if metric else ''}<br>{x}=%{{x}}"
                    "<br>value=%{y:.4g}" + ("" if hover is None else "<br>%{text}") + "<extra></extra>"
                ),
            )
        )
        shown.add(group)
    return traces


def marker_traces(events: pd.DataFrame, x: str = "step", *, shown: set[str] | None = None) -> list[go.Scatter]:
    """Health-rule trigger markers from a frame ``<x>, y, severity, rule, label, message``
    (one row per event placed on a curve): one trace per severity."""
    shown = set() if shown is None else shown
    traces = []
    for severity, g in events.groupby("severity", sort=True):
        key = f"health:{severity}"
        traces.append(
            go.Scatter(
                x=g[x].to_numpy(),
                y=g["y"].to_numpy(dtype=float),
                mode="markers",
                name=f"health {severity}",
                legendgroup=key,
                showlegend=key not in shown,
                marker={
                    "symbol": SEVERITY_SYMBOLS.get(severity, "circle"),
                    "size": 11,
                    "color": SEVERITY_COLORS.get(severity, "#C0392B"),
                    "line": {"width": 1, "color": "white"},
                },
                customdata=np.stack([g["label"].astype(str).to_numpy(), g["message"].astype(str).to_numpy()], axis=-1),
                hovertemplate="<b>%{customdata[0]}</b><br>%{customdata[1]}<extra></extra>",
            )
        )
        shown.add(key)
    return traces


# --------------------------------------------------------------------------------------------
# Mismatch record (histogram of the sampler/learner log-ratio)
# --------------------------------------------------------------------------------------------

#: Line of each drawn step of a run: the last recorded step solid, the first dotted (the panel title says so).
MISMATCH_STEP_DASH = {"first": "dot", "last": "solid", "only": "solid"}


def _nats(edge: float) -> str:
    """A bin edge as a tick label: -1, -0.1, -0.01, -1e-3, ..., 1e-6, ..., 1."""
    return f"{edge:g}" if abs(edge) >= 0.01 else f"{edge:.0e}".replace("e-0", "e-")


def log_ratio_ticks(edges: Sequence[float]) -> tuple[list[float], list[str]]:
    """Ticks of a mismatch histogram's x axis, where x is the bin number (bin k spans edges k−1 … k):
    each whole-decade edge (±1, ±0.1, …) labelled at the boundary between its two bins, k + 0.5."""
    vals, text = [], []
    for k, edge in enumerate(edges):
        decade = math.log10(abs(edge)) if edge else None
        if decade is not None and abs(decade - round(decade)) < 1e-9:
            vals.append(k + 0.5)
            text.append(_nats(edge))
    return vals, text


def mismatch_histogram_traces(
    hist: pd.DataFrame,
    *,
    colors: Mapping[str, str],
    color_by: str = "variant",
    labels: Mapping[str, str] | None = None,
    shown: set[str] | None = None,
) -> list[go.Scatter]:
    """One step-shaped line per run and drawn step from :class:`workbench.compare.mismatch_panel.MismatchPanel`
    histograms: x = bin number, y = share of the step's response tokens; the exact count and the bin's bounds
    are in ``customdata`` (count, lo, hi, step, tokens) and the hover. ``color_by="variant"``: runs take their
    arm's colour and legend entry (``colors`` keyed by arm); ``"run"``: their own (keyed by run id)."""
    shown = set() if shown is None else shown
    labels = labels or {}
    traces = []
    order = hist["which"].map({"last": 0, "only": 0, "first": 1})  # a run's legend entry: its solid line
    for (rid, which), g in (
        hist.assign(order=order).sort_values(["order"], kind="stable").groupby(["run_id", "which"], sort=False)
    ):
        g = g.sort_values("bin")
        arm, step = str(g["arm"].iloc[0]), int(g["step"].iloc[0])
        label = labels.get(rid, f"{arm}/seed={g['seed'].iloc[0]}")
        group = arm if color_by == "variant" else rid
        custom = np.stack(
            [
                g["count"].to_numpy(dtype=float),
                g["lo"].to_numpy(dtype=float),
                g["hi"].to_numpy(dtype=float),
                g["step"].to_numpy(dtype=float),
                g["tokens"].to_numpy(dtype=float),
            ],
            axis=-1,
        )
        traces.append(
            go.Scatter(
                x=g["bin"].to_numpy(),
                y=g["share"].to_numpy(dtype=float),
                mode="lines",
                line_shape="hvh",
                line={"color": colors.get(group, "#888888"), "dash": MISMATCH_STEP_DASH[which], "width": 1.5},
                name=arm if color_by == "variant" else label,
                legendgroup=group,
                showlegend=group not in shown,
                customdata=custom,
                meta="mismatch-histogram",
                hovertemplate=(
                    f"<b>{label}</b> · step {step} ({which} recorded)<br>Δ in (%{{customdata[1]:.3g}}, "
                    "%{customdata[2]:.3g}]: %{customdata[0]:.0f} of %{customdata[4]:.0f} tokens "
                    "(%{y:.3%})<extra></extra>"
                ),
            )
        )
        shown.add(group)
    return traces


def curve_figure(
    bands: pd.DataFrame,
    x: str = "step",
    *,
    metric: str = "",
    title: str | None = None,
    colors: Mapping[str, str] | None = None,
    baseline: str | None = None,
    group: str = "variant",
    statistic: str = "mean",
) -> go.Figure:
    """A standalone figure: every group's aggregate curve with its CI band (``curve_bands`` output)."""
    groups = list(pd.unique(bands[group]))
    colors = colors or variant_colors(groups, baseline)
    fig = go.Figure()
    for g in groups:
        for t in band_traces(
            bands[bands[group] == g], x, name=str(g), color=colors[g], statistic=statistic, metric=metric
        ):
            fig.add_trace(t)
    fig.update_xaxes(title_text=x)
    fig.update_yaxes(title_text=metric)
    return base_layout(fig, title=title or metric)


# --------------------------------------------------------------------------------------------
# Summary intervals (rliable-style: point estimate with its CI on a zoomed axis, plus every seed)
# --------------------------------------------------------------------------------------------
# Bars would start at 0 and make 0.79 and 0.81 look the same; an interval plot puts the axis where
# the values are, so the estimates, their CIs and the seeds' spread can be told apart.


INTERVAL_META = "summary-interval"  # marks the estimate-with-CI trace (tests and callers find it by this)
SEEDS_META = "summary-seeds"


def is_interval_trace(trace: Any) -> bool:
    return getattr(trace, "meta", None) == INTERVAL_META


def zoomed_range(*arrays: np.ndarray, pad_fraction: float = 0.08) -> list[float] | None:
    """A y range around every finite value (estimates, CI ends, seeds) with a margin; never widened
    to 0. None when there is no finite value."""
    finite = np.concatenate([np.asarray(a, dtype=float).ravel() for a in arrays]) if arrays else np.array([])
    finite = finite[np.isfinite(finite)]
    if not len(finite):
        return None
    lo, hi = float(finite.min()), float(finite.max())
    span = hi - lo
    pad = span * pad_fraction if span > 0 else max(abs(hi) * 0.05, 1e-3)
    return [lo - pad, hi + pad]


def summary_interval_traces(
    table_rows: pd.DataFrame,
    values: pd.DataFrame | None,
    metric: str,
    *,
    colors: Mapping[str, str],
    baseline: str,
    statistic: str = "mean",
    shown: set[str] | None = None,
) -> list[go.BaseTraceType]:
    """One metric's per-variant (per-arm) estimate as a point with its CI as an error bar
    (``ComparisonTable.df`` rows of that metric, in rank order), and beside it one dot per run
    (``values``: columns ``variant`` and ``metric``, and ``arm`` when the rows are arms). Baseline rows
    (verdict "baseline"; ``baseline`` for rows without verdicts) get a larger, outlined marker."""
    from workbench.compare.panels import interval_bounds, seed_points  # deferred: scipy

    shown = set() if shown is None else shown
    rows = table_rows
    variants = rows["variant"].astype(str).tolist()
    is_base = (
        (rows["verdict"] == "baseline").tolist() if "verdict" in rows.columns else [v == baseline for v in variants]
    )
    est = rows[statistic].to_numpy(dtype=float)
    lo, hi = interval_bounds(rows, statistic)
    err_plus = np.where(np.isfinite(hi), hi - est, np.nan)
    err_minus = np.where(np.isfinite(lo), est - lo, np.nan)
    hover = []
    for r, base, low, high in zip(rows.to_dict("records"), is_base, lo, hi, strict=True):
        ci = f"CI [{_fmt(low)}, {_fmt(high)}]"
        if base:
            hover.append(f"{ci}<br>baseline · {r.get('n_seeds', '?')} seeds")
        else:
            hover.append(
                f"{ci}<br>Δ {_fmt(r.get('delta'))} [{_fmt(r.get('delta_lo'))}, {_fmt(r.get('delta_hi'))}]"
                f"<br>P(improve) {_fmt(r.get('p_improve'))}<br>{r.get('verdict', '')}"
            )
    traces: list[go.BaseTraceType] = [
        go.Scatter(
            x=variants,
            y=est,
            mode="markers",
            meta=INTERVAL_META,
            marker={
                "color": [colors.get(v, "#888888") for v in variants],
                "symbol": "diamond",
                "size": [14 if b else 11 for b in is_base],
                "line": {"color": "#222222", "width": [2 if b else 0 for b in is_base]},
            },
            error_y={
                "type": "data",
                "symmetric": False,
                "array": err_plus,
                "arrayminus": err_minus,
                "thickness": 3,
                "width": 10,
                "color": "#333333",
            },
            customdata=np.array(hover, dtype=object),
            showlegend=False,
            name=metric,
            hovertemplate=f"<b>%{{x}}</b><br>{statistic} %{{y:.4g}}<br>%{{customdata}}<extra>{metric}</extra>",
        )
    ]
    pts = seed_points(values, metric, variants)
    if len(pts):
        # An invisible box carries the points: plotly offsets and jitters a box's points beside the
        # category, so the seeds sit next to the interval instead of on top of it.
        traces.append(
            go.Box(
                x=pts["variant"].to_numpy(),
                y=pts["value"].to_numpy(),
                boxpoints="all",
                jitter=0.5,
                pointpos=-1.5,
                width=0.2,
                fillcolor="rgba(0,0,0,0)",
                line={"width": 0},
                hoveron="points",
                meta=SEEDS_META,
                marker={"color": "#222222", "size": 6, "opacity": 0.7, "symbol": "circle-open"},
                name="runs (seeds)",
                legendgroup="seeds",
                showlegend="seeds" not in shown,
                hovertemplate=f"%{{x}}: %{{y:.4g}}<extra>{metric} (one run)</extra>",
            )
        )
        shown.add("seeds")
    return traces


def summary_range(
    table_rows: pd.DataFrame, values: pd.DataFrame | None, metric: str, statistic: str = "mean"
) -> list[float] | None:
    """The zoomed y range of one metric's interval panel: estimates, CI ends and seeds."""
    from workbench.compare.panels import interval_bounds, seed_points  # deferred: scipy

    lo, hi = interval_bounds(table_rows, statistic)
    pts = seed_points(values, metric, table_rows["variant"].astype(str).tolist())
    return zoomed_range(table_rows[statistic].to_numpy(dtype=float), lo, hi, pts["value"].to_numpy())


summary_bar_traces = summary_interval_traces  # the dashboard renderer's name for it, kept working


def summary_figure(
    table: Any,
    summary: pd.DataFrame | None = None,
    metrics: Sequence[str] | None = None,
    *,
    colors: Mapping[str, str] | None = None,
    statistic: str = "mean",
    cols: int = 2,
    title: str | None = "Summary metrics per variant (diamonds: estimate with 95% CI, on a zoomed axis; circles: runs)",
) -> go.Figure:
    """One interval panel per metric of a :class:`~workbench.compare.ComparisonTable`."""
    metrics = list(metrics or table.metrics)
    cols = max(1, min(cols, len(metrics)))
    rows = math.ceil(len(metrics) / cols)
    colors = colors or variant_colors(pd.unique(table.df["variant"]), table.baseline_arms)
    titles = []
    for m in metrics:
        hib = table.higher_is_better.get(m)
        titles.append(f"{m} ({'↑ better' if hib else '↓ better' if hib is False else 'no direction'})")
    # Long arm names (grid arms: "fp16/correction=tis") are drawn at an angle; each row then leaves them
    # room below its axis, so they do not run into the next row's title. About 7 px per character at
    # the 12 px font; sin 30° = 0.5 of that is the labels' drop, the rest of a row is its 300 px panel.
    longest = max((len(str(v)) for v in pd.unique(table.df["variant"])), default=0)
    angled = longest > 12
    drop_px = int(0.5 * 7 * longest) if angled else 20
    height = max(320, (300 + drop_px) * rows)
    spacing = min(0.45, (drop_px + 60) / height) if rows > 1 else 0.1
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, vertical_spacing=spacing)
    shown: set[str] = set()
    for i, m in enumerate(metrics):
        r, c = divmod(i, cols)
        metric_rows = table.for_metric(m)
        for t in summary_interval_traces(
            metric_rows, summary, m, colors=colors, baseline=table.baseline, statistic=statistic, shown=shown
        ):
            fig.add_trace(t, row=r + 1, col=c + 1)
        y_range = summary_range(metric_rows, summary, m, statistic)
        if y_range is not None:
            fig.update_yaxes(range=y_range, row=r + 1, col=c + 1)
    if angled:
        fig.update_xaxes(tickangle=-30)
    fig = base_layout(fig, title=title, height=height)
    return fig.update_layout(showlegend=False)  # the title says what diamonds and circles are


# --------------------------------------------------------------------------------------------
# Health matrix
# --------------------------------------------------------------------------------------------


def health_heatmap_trace(
    cells: pd.DataFrame, *, rules: Sequence[str] | None = None, run_order: Sequence[str] | None = None
) -> go.Heatmap:
    """Runs × rules heatmap from health cells (columns ``run_id, label, rule, state, step,
    message``): colour = state (:data:`HEALTH_LEGEND`), text = the state and its first-trigger
    step (:func:`health_cell_text`), so no cell is a bare colour."""
    rules = list(rules or pd.unique(cells["rule"]))
    run_order = list(run_order or pd.unique(cells["run_id"]))
    labels = cells.drop_duplicates("run_id").set_index("run_id")["label"].astype(str)
    idx = {(r, u): i for i, (r, u) in enumerate(zip(cells["run_id"], cells["rule"], strict=True))}
    z = np.full((len(run_order), len(rules)), np.nan)
    text = np.full(z.shape, "", dtype=object)
    hover = np.full(z.shape, "", dtype=object)
    # the cells' columns as lists: a row by cells.iloc costs ~100 us, seconds at 3000 runs x rules
    states, steps, messages = (cells[c].tolist() for c in ("state", "step", "message"))
    for i, rid in enumerate(run_order):
        for j, rule in enumerate(rules):
            k = idx.get((rid, rule))
            if k is None:
                continue
            state = str(states[k])
            z[i, j] = HEALTH_STATES.get(state, np.nan)
            step = steps[k]
            text[i, j] = health_cell_text(state, step)
            hover[i, j] = f"{state}" + (f" at step {int(step)}: {messages[k]}" if not pd.isna(step) else "")
    y = [labels.get(r, r) for r in run_order]
    return go.Heatmap(
        z=z / 2.0,
        x=rules,
        y=y,
        text=text,
        texttemplate="%{text}",
        customdata=hover,
        zmin=0.0,
        zmax=1.0,
        colorscale=_HEALTH_SCALE,
        showscale=False,
        xgap=2,
        ygap=2,
        hovertemplate="<b>%{y}</b> · %{x}<br>%{customdata}<extra></extra>",
    )


def health_matrix_figure(
    cells: pd.DataFrame,
    *,
    rules: Sequence[str] | None = None,
    title: str | None = "Health: each rule on each run (ok, warn@step, fail@step: "
    "first trigger; off: rule off; ?: no report)",
) -> go.Figure:
    fig = go.Figure(health_heatmap_trace(cells, rules=rules))
    n_runs = cells["run_id"].nunique() if len(cells) else 1
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(tickangle=-30)
    return base_layout(fig, title=title, height=max(260, 140 + 28 * n_runs))
