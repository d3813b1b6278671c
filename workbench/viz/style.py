"""Colours, line styles and layout defaults shared by every figure, so a variant looks the same
in every panel of every report and dashboard."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

#: Baseline: neutral grey (the reference, not a contender).
BASELINE_COLOR = "#4D4D4D"
#: Several baseline arms (one per grid point of a study with a grid): greys told apart.
BASELINE_GREYS: tuple[str, ...] = (BASELINE_COLOR, "#A0A0A0", "#1A1A1A", "#737373", "#C4C4C4")
#: Other variants, in order: Okabe & Ito's colour-blind-safe palette (without its black, which reads as a
#: baseline grey); yellow last, as it is faint on white. Past 7 variants the colours repeat.
PALETTE: tuple[str, ...] = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#56B4E9",
    "#E69F00",
    "#F0E442",
)
#: Line dash per metric when a panel shows several metrics.
DASHES: tuple[str, ...] = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
DASH_GLYPHS: dict[str, str] = {
    "solid": "——",
    "dash": "– –",
    "dot": "···",
    "dashdot": "–·–",
    "longdash": "— —",
    "longdashdot": "—·—",
}
SEVERITY_COLORS: dict[str, str] = {"warn": "#E69F00", "fail": "#C0392B"}
SEVERITY_SYMBOLS: dict[str, str] = {"warn": "triangle-up", "fail": "x"}
FONT = "Inter, -apple-system, Segoe UI, Helvetica, Arial, sans-serif"
TEMPLATE = "plotly_white"
PLOT_CONFIG = {
    "displaylogo": False,
    "responsive": True,
    "toImageButtonOptions": {"format": "svg"},
}  # PNG export needs kaleido; SVG is client-side


def variant_colors(variants: Iterable[str], baseline: str | Collection[str] | None = None) -> dict[str, str]:
    """``variant -> colour`` (or arm -> colour): the baseline grey, the others from :data:`PALETTE`
    in order. ``baseline`` may be several arms (one per grid point): shades of grey."""
    bases = {baseline} if isinstance(baseline, str) or baseline is None else set(baseline)
    out: dict[str, str] = {}
    i = j = 0
    for v in dict.fromkeys(variants):
        if v in bases:
            out[v] = BASELINE_GREYS[j % len(BASELINE_GREYS)]
            j += 1
        else:
            out[v] = PALETTE[i % len(PALETTE)]
            i += 1
    return out


def with_alpha(color: str, alpha: float) -> str:
    """``#RRGGBB`` (or ``rgb(r, g, b)``) as ``rgba(r, g, b, alpha)`` for bands."""
    if color.startswith("#") and len(color) == 7:
        r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    elif color.startswith("rgb(") and color.endswith(")"):
        r, g, b = (int(float(x)) for x in color[4:-1].split(","))
    else:
        return color
    return f"rgba({r}, {g}, {b}, {alpha})"


def dash_for(index: int) -> str:
    return DASHES[index % len(DASHES)]


def dash_legend(metrics: Sequence[str]) -> str:
    """``"—— reward/mean, – – reward/std"``: which dash is which metric, for panel titles."""
    return ", ".join(f"{DASH_GLYPHS[dash_for(i)]} {m}" for i, m in enumerate(metrics))
