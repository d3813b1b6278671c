"""The verdicts of a comparison, in words.

:mod:`workbench.compare.stats` decides with numbers (corrected p-values, intervals,
:func:`~workbench.compare.stats.significant`); this module turns a row's numbers into the text of
its ``verdict`` column: ``better`` / ``worse`` (``higher`` / ``lower`` for a metric without a
direction), ``equivalent (|Δ| < 0.03)``, ``inconclusive with 5 seeds (MDE 0.041)``,
``withheld: 3/6 runs failed``, ``no data``; and the machine-readable ``status`` of a verdict
(:func:`status`, one of :data:`STATUSES`). The policy for runs that did not finish is
:mod:`workbench.compare.outcomes`'.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

from . import stats
from .outcomes import ArmOutcomes

__all__ = [
    "STATUSES",
    "ci_text",
    "control_label",
    "delta_thresholds",
    "effect_interval",
    "effect_text",
    "excluded_text",
    "headline",
    "interval_texts",
    "level_percent",
    "metric_words",
    "number_text",
    "ranked_verdict",
    "round_outward",
    "paired_seeds_phrase",
    "seeds_phrase",
    "status",
    "table_precision",
    "verdict",
    "withheld",
]

#: The ``status`` of a compared row (a baseline row's is ``"baseline"``): what the verdict decided.
STATUSES: tuple[str, ...] = (
    "better",
    "worse",
    "higher",
    "lower",
    "equivalent",
    "not testable",
    "inconclusive",
    "withheld",
    "no data",
)


def level_percent(confidence: float) -> str:
    """A confidence level as a percentage with the digits its complement needs, never rounded up to
    100: 0.95 -> ``95%``, 0.9843 -> ``98.4%``, 0.9995 -> ``99.95%``, 0.99931 -> ``99.93%`` (α's first
    significant digit below 1%, one decimal above it when α is not whole). A sequential
    design's last look tests at a small α, where ``.0%`` printed "100% CI"."""
    if not 0 < confidence < 1:
        return f"{confidence:.0%}"
    alpha = 100 * (1 - confidence)  # in percent
    if alpha >= 1:
        digits = 0 if abs(alpha - round(alpha)) < 1e-9 else 1
    else:
        digits = math.ceil(-math.log10(alpha) - 1e-9)  # to α's first significant digit: 0.0687 -> 2, 0.5 -> 1
    return f"{100 * confidence:.{digits}f}%"


# --------------------------------------------------------------------------------------------
# Interval bounds rounded outward: the one rounding of every printed interval (headline and tables)
# --------------------------------------------------------------------------------------------

#: How a number is shown: ``(significant, digits)``, significant digits or decimals.
Precision = tuple[bool, int]


def _decimal(x: float, scale: int = 0) -> Decimal:
    """``x`` from its shortest decimal form (``0.13`` is 0.13, not the binary 0.13000000000000000444),
    times ``10**scale`` exactly (``0.102`` in points is 10.2, not 10.200000000000001)."""
    return Decimal(repr(float(x))).scaleb(scale)


def round_outward(x: float, precision: Precision, *, up: bool, scale: int = 0) -> float:
    """``x * 10**scale`` rounded at ``precision`` towards +inf (``up``) or -inf, computed in decimal
    (:func:`_decimal`), so no binary residue moves a bound by a digit. An interval's lower bound
    rounds down and its upper bound up: the printed interval contains the computed one, so it never
    claims more than the test did."""
    if not math.isfinite(x) or x == 0.0:
        return x
    return float(_round_decimal(_decimal(x, scale), precision, up=up))


def _round_decimal(d: Decimal, precision: Precision, *, up: bool) -> Decimal:
    significant, digits = precision
    exponent = d.adjusted() - (digits - 1) if significant else -digits
    return d.quantize(Decimal(1).scaleb(exponent), rounding=ROUND_CEILING if up else ROUND_FLOOR)


def _side(x: Decimal, threshold: Decimal) -> int:
    return (x > threshold) - (x < threshold)


def number_text(x: float, precision: Precision, *, signed: bool = False, grouped: bool = False) -> str:
    """``x`` (already rounded at ``precision``) as text: ``%g`` at the significant digits, else
    ``%f`` at the decimals (``grouped``: with thousands separators)."""
    if not math.isfinite(x):
        return "∞" if x > 0 else "-∞" if x < 0 else "—"
    significant, digits = precision
    spec = (
        ("+" if signed else "")
        + ("," if grouped and not significant else "")
        + f".{digits}{'g' if significant else 'f'}"
    )
    return format(x, spec)


def interval_texts(
    lo: float,
    hi: float,
    precision_of: Callable[[float], Precision],
    *,
    thresholds: Iterable[float] = (),
    signed: bool = False,
    grouped: bool = False,
    scale: int = 0,
) -> tuple[str, str]:
    """The bounds of ``[lo, hi]`` (times ``10**scale``: 2 for percentage points) as text, rounded
    outward (:func:`round_outward`) at the precision ``precision_of`` gives each (of the unscaled
    value), with one more digit at a time (up to 6) while a rounded bound would reach or cross a
    ``threshold`` (0, ±SESOI, unscaled) that the computed bound does not: an excluded 0.13 never
    prints as 0.1 when 0.1 would sit on a threshold or beyond it."""

    def text(x: float, precision: Precision, up: bool) -> tuple[str, Decimal | None]:
        if not math.isfinite(x):
            return number_text(x, precision), None
        rounded = _round_decimal(_decimal(x, scale), precision, up=up) if x != 0.0 else Decimal(0)
        return number_text(float(rounded), precision, signed=signed, grouped=grouped), rounded

    marks = [_decimal(t, scale) for t in thresholds if math.isfinite(t)]

    def bound(x: float, up: bool) -> str:
        significant, digits = precision_of(x)
        shown = ""
        for extra in range(7):  # each bound gets the digits it needs, no more
            shown, rounded = text(x, (significant, digits + extra), up)
            if rounded is None or all(_side(rounded, t) == _side(_decimal(x, scale), t) for t in marks):
                break
        return shown

    return bound(lo, False), bound(hi, True)


def table_precision(x: float) -> Precision:
    """The tables' precision: 4 significant digits, whole numbers from 10,000."""
    return (False, 0) if abs(x) >= 10_000 else (True, 4)


def ci_text(est: float, lo: float, hi: float, *, thresholds: Iterable[float] = ()) -> str:
    """``est [lo, hi]`` as every table prints an interval: the estimate to 4 significant digits, the
    bounds rounded outward (:func:`interval_texts`); the estimate alone when there is no interval."""

    def one(v: float) -> str:
        if not math.isfinite(v):
            return "—" if math.isnan(v) else "∞" if v > 0 else "-∞"
        return f"{v:,.0f}" if abs(v) >= 10_000 else f"{v:.4g}"

    est, lo, hi = (float(v) for v in (est, lo, hi))
    if math.isnan(lo):
        return one(est)
    if math.isfinite(lo) and math.isfinite(hi) and abs(est) < 1e-9 * (hi - lo):
        # the rounding residue of an exact 0 (paired differences that cancel leave ~n * eps * |x|,
        # e.g. 5.551e-18) would read as an effect; at 1e-9 of the interval's width no digit shown is one
        est = 0.0
    lo_t, hi_t = interval_texts(lo, hi, table_precision, thresholds=thresholds, grouped=True)
    return f"{one(est)} [{lo_t}, {hi_t}]"


def delta_thresholds(sesoi: float) -> tuple[float, ...]:
    """The values a difference's printed bounds must not be rounded onto or across: 0 and ±SESOI."""
    return (0.0, -sesoi, sesoi) if math.isfinite(sesoi) else (0.0,)


def status(verdict_text: str) -> str:
    """The status of a verdict text: the status it starts with (``"better (but |Δ| < 0.03)"`` is
    ``better``); ``"baseline"`` for a baseline row; ``"no data"`` for an arm without a baseline at
    its grid point (nothing to compare with); ``""`` for an empty text (not decided yet)."""
    text = str(verdict_text)
    if text == "baseline":
        return "baseline"
    if text.startswith("no baseline"):
        return "no data"
    for s in sorted(STATUSES, key=len, reverse=True):
        if text.startswith(s):
            return s
    return ""


def _fmt_effect(x: float) -> str:
    return f"{x:.3g}"


def seeds_phrase(n_x: int, n_y: int, unit: str = "seed") -> str:
    """``"5 seeds"``, ``"1 seed"``, ``"3 vs 5 seeds"``; ``unit="checkpoint"``: ``"3 checkpoints"``."""
    if n_x == n_y:
        return f"{n_x} {unit}" + ("" if n_x == 1 else "s")
    return f"{n_x} vs {n_y} {unit}s"


def paired_seeds_phrase(n_pairs: int, n_x: int, n_y: int, unit: str = "seed", aside: Sequence[str] = ()) -> str:
    """What a test paired on two arms' common seeds used, ``"3 paired seeds"``, with the runs it had no
    partner for in parentheses, ``"(the baseline has 6)"`` (``n_x`` runs of the arm, ``n_y`` of the
    baseline), then any ``aside``: "3 vs 6 seeds" would count runs per arm, not the pairs tested."""
    left_out = []
    if n_x != n_pairs:
        left_out.append(f"the arm has {n_x}")
    if n_y != n_pairs:
        left_out.append(f"the baseline{' has' if n_x == n_pairs else ''} {n_y}")
    asides = [", ".join(left_out)] if left_out else []
    asides += [a for a in aside if a]
    said = f"{n_pairs} paired {unit}" + ("" if n_pairs == 1 else "s")
    return said + (f" ({'; '.join(asides)})" if asides else "")


def withheld(reason: str) -> str:
    """The verdict text of a withheld verdict."""
    return f"withheld: {reason}"


def verdict(
    delta: float,
    lo: float,
    hi: float,
    p_adjusted: float,
    *,
    alpha: float = 0.05,
    higher_is_better: bool | None = True,
    n_x: int,
    n_y: int,
    mde: float = math.nan,
    sesoi: float = math.nan,
    equivalent: bool = False,
    unit: str = "seed",
    n_pairs: int | None = None,
) -> str:
    """``"better"``/``"worse"`` (or ``"higher"``/``"lower"`` for a metric without a direction) only
    when the difference is :func:`~workbench.compare.stats.significant` (corrected p-value below
    ``alpha`` **and** corrected CI ``[lo, hi]`` excluding 0; ``"better (but |Δ| < 0.03)"`` when it
    is also ``equivalent`` within the SESOI: real but smaller than what matters); else
    ``"equivalent (|Δ| < 0.03)"`` when the equivalence test (TOST at the SESOI) rejected; else
    ``"inconclusive with N seeds (MDE x)"``, ``x`` the minimum detectable effect at those seeds
    (never a post-hoc seed count); ``"no data"`` if a side has no finite values. ``n_pairs``: the test
    paired the arms on their ``n_pairs`` common seeds, said as ``"inconclusive with 3 paired seeds (the
    baseline has 6; MDE x)"`` (:func:`paired_seeds_phrase`)."""
    if n_x == 0 or n_y == 0:
        return "no data"
    bound = f"|Δ| < {sesoi:g}"
    if not stats.significant(lo, hi, p_adjusted, alpha=alpha):
        if equivalent:
            return f"equivalent ({bound})"
        if n_pairs is not None:  # paired on the common seeds: the pairs the test had, the runs left out beside
            mde_text = f"MDE {_fmt_effect(mde)}" if math.isfinite(mde) else ""
            return f"inconclusive with {paired_seeds_phrase(n_pairs, n_x, n_y, unit, aside=[mde_text])}"
        detectable = f" (MDE {_fmt_effect(mde)})" if math.isfinite(mde) else ""
        return f"inconclusive with {seeds_phrase(n_x, n_y, unit)}{detectable}"
    up = delta > 0.0
    if higher_is_better is None:
        word = "higher" if up else "lower"
    else:
        word = "better" if up == higher_is_better else "worse"
    return f"{word} (but {bound})" if equivalent else word


def ranked_verdict(
    arm: ArmOutcomes,
    base: ArmOutcomes,
    *,
    higher_is_better: bool | None,
    p_adjusted: float,
    p_improve: float,
    t_lo: float,
    t_hi: float,
    alpha: float,
    unit: str = "seed",
) -> str:
    """Verdict of a comparison where some runs did not finish or never reached a value
    (:mod:`workbench.compare.outcomes`, points 3-5): the rank test's ``p_adjusted`` decides, in
    the direction of ``p_improve``; a claim of the t interval ``[t_lo, t_hi]`` of the finished runs
    that the rank test does not support is withheld, with the reason."""
    why = "; ".join(x for x in (arm.reason(), f"baseline: {base.reason()}" if base.reason() else "") if x)
    if arm.counts["finished"] == 0 or base.counts["finished"] == 0:
        gone = arm if arm.counts["finished"] == 0 else base
        return withheld(gone.reason() if gone is arm else f"baseline: {gone.reason()}")
    if higher_is_better is None:
        return withheld(f"{why} (no direction to rank them)")
    n_x, n_y = arm.n_runs - arm.counts["missing"], base.n_runs - base.counts["missing"]
    rejected = math.isfinite(p_adjusted) and p_adjusted < alpha
    t_claims = math.isfinite(t_lo) and (t_lo > 0.0 or t_hi < 0.0)
    if rejected and not (arm.counts["missing"] or base.counts["missing"]):
        return "better" if p_improve > 0.5 else "worse"
    if rejected or t_claims:
        return withheld(why)
    return f"inconclusive with {seeds_phrase(n_x, n_y, unit)} ({why})"


# --------------------------------------------------------------------------------------------
# The headline: one plain sentence per comparison, the first line of every compare output
# --------------------------------------------------------------------------------------------


def metric_words(metric: str) -> str:
    """A summary's name as words: ``final_eval_accuracy`` -> ``final eval accuracy``,
    ``final:length/mean`` -> ``final length/mean``."""
    return metric.replace("final:", "final ").replace("_", " ")


def effect_text(x: float, *, points: bool, signed: bool = True) -> str:
    """A difference in the metric's units: ``+4.5 points`` of a [0, 1] metric (percentage points),
    else 3 significant digits (``-12.3``)."""
    if not math.isfinite(x):
        return "∞" if x > 0 else "-∞" if x < 0 else "—"
    sign = "+" if signed else ""
    if points:
        v = 100.0 * x
        return f"{v:{sign}.1f}" if abs(v) >= 0.1 or v == 0.0 else f"{v:{sign}.2g}"
    return f"{x:{sign}.3g}"


def effect_precision(x: float, *, points: bool) -> Precision:
    """:func:`effect_text`'s precision of ``x`` (in the metric's units): percentage points to 1
    decimal (2 significant digits below 0.1 points), else 3 significant digits."""
    if points:
        v = 100.0 * x
        return (False, 1) if abs(v) >= 0.1 or v == 0.0 else (True, 2)
    return (True, 3)


def effect_interval(lo: float, hi: float, *, points: bool, sesoi: float = math.nan) -> tuple[str, str]:
    """The bounds of a difference's interval as a headline prints them (:func:`effect_text`'s
    units and digits), rounded outward, never onto or across 0 or ±SESOI (:func:`interval_texts`)."""
    return interval_texts(
        lo,
        hi,
        lambda v: effect_precision(v, points=points),
        thresholds=delta_thresholds(sesoi),
        signed=True,
        scale=2 if points else 0,
    )


def excluded_text(x: float, *, points: bool) -> str:
    """An effect size that an interval excludes beyond (``|Δ| > x``), rounded up: never tighter than the interval."""
    precision = effect_precision(x, points=points)
    return number_text(round_outward(abs(x), precision, up=True, scale=2 if points else 0), precision)


#: A futility stop's side (``compare.sequential.futility``) in words: the effect it excludes.
FUTILE_SIDE_WORDS = {"improvement": "an improvement", "worsening": "a loss", "difference": "a difference"}


def futile_text(*, side: str, sesoi: float, bounds: Sequence[float | None], level: float, points: bool = False) -> str:
    """A futility stop in words, with the one-sided bound(s) that decided it: ``futile (a loss of 0.03 or more
    excluded: one-sided 98.3% bound -0.0213)``; ``difference``: ``futile (a difference of 0.03 or more either
    way excluded: one-sided 98.3% bounds -0.0201 and +0.0191)``. ``side``: ``compare.sequential.futility``;
    ``bounds``: ``(lower, upper)`` of the difference (arm - baseline, the metric's units) at the one-sided
    ``level``, None or NaN on a side the stop did not ask about (that decision: a lower bound above ``-sesoi``,
    an upper one below ``+sesoi``). ``points``: SESOI and bounds in percentage points, as a headline of a
    [0, 1] metric says its difference. The bounds are rounded outward (a lower one down, an upper one up),
    never onto or across 0 or ±SESOI (:func:`effect_interval`): each printed bound lies on the same side of
    them as the computed one."""
    lo, hi = (math.nan if b is None else float(b) for b in bounds)
    unit = " points" if points else ""
    size = f"{effect_text(sesoi, points=True, signed=False)}{unit}" if points else f"{sesoi:g}"
    either = " either way" if side == "difference" else ""
    said = f"futile ({FUTILE_SIDE_WORDS.get(side, side)} of {size} or more{either} excluded"
    lo_t, hi_t = effect_interval(lo, hi, points=points, sesoi=sesoi)
    shown = [t for t, b in ((lo_t, lo), (hi_t, hi)) if math.isfinite(b)]
    if not shown:
        return said + ")"
    kind = f"one-sided {level_percent(level)} bound" + ("s" if len(shown) > 1 else "")
    return f"{said}: {kind} {' and '.join(shown)}{unit})"


def control_label(name: str, control: str | None) -> str:
    """An arm's name as the tables and headlines show it: ``random (control: random reward)`` for an arm
    trained on a reward control (``reward.control: random``), else the name unchanged."""
    return name if not control else f"{name} (control: {control.replace('_', '-')} reward)"


def headline(
    *,
    variant: str,
    baseline: str,
    metric: str,
    status_word: str,
    verdict_text: str,
    delta: float,
    lo: float,
    hi: float,
    level: float,
    n_x: int,
    n_y: int,
    mde: float,
    sesoi: float,
    points: bool,
    ranked: bool = False,
    interval: str = "",
    exploratory: bool = False,
    unit: str = "seed",
    variant_control: str | None = None,
    baseline_control: str | None = None,
    look: str = "",
    futility: dict | None = None,
) -> str:
    """One comparison in one plain sentence, e.g. ``"dapo vs grpo: +4.5 points final eval accuracy
    (95% CI -1.2 to +10.2), not distinguishable with 3 seeds"``. ``level``: the confidence of the
    interval ``[lo, hi]`` shown (the table's simultaneous level: 97.5% with 2 comparisons), NaN
    when there is none; ``ranked``: the rank test decided (some runs failed, stopped or were
    censored: Δ is of the finished runs); ``points``: the metric lies in [0, 1] and its
    differences read as percentage points; ``interval``: what the interval is when it is not the
    test's own (``"TOST"``: the equivalence test's ``1 - 2 alpha`` interval); ``exploratory``: a
    secondary metric, outside the study-wide family of primary metrics. The bounds are rounded
    outward (:func:`effect_interval`), as in every table; ``unit``: what ``n_x``/``n_y`` count
    (``"checkpoint"``: the checkpoint is the unit, :mod:`workbench.compare.checkpoints`); ``variant_control`` /
    ``baseline_control``: the reward control an arm trained on (``reward.control``), if any: the sentence then opens
    ``control comparison:`` and names the control, since the difference measures a control arm, not a treatment's
    effect. ``look``: the sequential design's look that took the decision (``"look 2 of 3"``): the seeds are
    then said as that look's, ``"better at look 2 of 3 (6 seeds)"``. ``futility``: a futile decision's
    :func:`futile_text` arguments (less ``points``): its words, which ``verdict_text`` holds in the metric's
    units, are said in this sentence's (a [0, 1] metric's SESOI and bound in points)."""
    replicates = unit
    unit = " points" if points else ""
    who = f"{control_label(variant, variant_control)} vs {control_label(baseline, baseline_control)}"
    if variant_control or baseline_control:
        who = f"control comparison: {who}"
    if status_word == "no data":
        return f"{who}: {metric_words(metric)}: {verdict_text} (nothing to compare)"
    effect = f"{effect_text(delta, points=points)}{unit} {metric_words(metric)}"
    if math.isfinite(lo) and math.isfinite(hi) and math.isfinite(level):
        lo_t, hi_t = effect_interval(lo, hi, points=points, sesoi=sesoi)
        kind = f"{interval} " if interval else ""
        effect += f" ({level_percent(level)} {kind}CI {lo_t} to {hi_t})"
    elif ranked:
        effect += " (of the finished runs; the rank test decides)"
    elif math.isfinite(delta):
        effect += " (no interval)"  # e.g. runs that do not vary: the row's note says why
    seeds = (
        f"at {look} ({seeds_phrase(n_x, n_y, replicates)})" if look else f"with {seeds_phrase(n_x, n_y, replicates)}"
    )
    if status_word in ("better", "worse", "higher", "lower"):
        said = f"{variant} is {status_word} {seeds}"
        if "(but" in verdict_text:  # significant, yet inside the smallest effect that matters
            bound = effect_text(sesoi, points=points, signed=False)
            said += f", but by less than the smallest effect of interest ({bound}{unit})"
    elif status_word == "equivalent":
        said = (
            f"equivalent {seeds}: the difference is within ±{effect_text(sesoi, points=points, signed=False)}"
            f"{unit}, the smallest effect of interest"
        )
    elif status_word == "inconclusive":
        said = f"not distinguishable {seeds}"
        if math.isfinite(mde):
            said += f" (they would likely detect only ±{effect_text(mde, points=points, signed=False)}{unit} or more)"
    elif status_word == "not testable":
        said = verdict_text.split(" [the test alone")[0]  # "not testable: clip_high acted on ... (min 1%)"
        if "; |Δ| > " in said and math.isfinite(lo) and math.isfinite(hi):  # the bound in this sentence's unit
            bound = excluded_text(max(abs(lo), abs(hi)), points=points)
            said = f"{said.split('; |Δ| > ')[0]}; |Δ| > {bound}{unit} excluded"
    elif status_word == "futile" and futility and verdict_text.startswith(futile_text(**futility)):
        said = futile_text(**futility, points=points) + verdict_text.removeprefix(futile_text(**futility))
    elif status_word == "withheld":
        said = f"verdict {verdict_text}"
    else:
        said = verdict_text
    return f"{'(secondary, exploratory) ' if exploratory else ''}{who}: {effect}, {said}"
