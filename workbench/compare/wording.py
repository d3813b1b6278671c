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

from . import stats
from .outcomes import ArmOutcomes

__all__ = ["STATUSES", "control_label", "effect_text", "headline", "level_percent", "metric_words", "ranked_verdict", "seeds_phrase",
           "status", "verdict", "withheld"]

#: The ``status`` of a compared row (a baseline row's is ``"baseline"``): what the verdict decided.
STATUSES: tuple[str, ...] = ("better", "worse", "higher", "lower", "equivalent", "not testable", "inconclusive",
                             "withheld", "no data")


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


def seeds_phrase(n_x: int, n_y: int) -> str:
    """``"5 seeds"``, ``"1 seed"``, ``"3 vs 5 seeds"``."""
    if n_x == n_y:
        return f"{n_x} seed" + ("" if n_x == 1 else "s")
    return f"{n_x} vs {n_y} seeds"


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
) -> str:
    """``"better"``/``"worse"`` (or ``"higher"``/``"lower"`` for a metric without a direction) only
    when the difference is :func:`~workbench.compare.stats.significant` (corrected p-value below
    ``alpha`` **and** corrected CI ``[lo, hi]`` excluding 0; ``"better (but |Δ| < 0.03)"`` when it
    is also ``equivalent`` within the SESOI: real but smaller than what matters); else
    ``"equivalent (|Δ| < 0.03)"`` when the equivalence test (TOST at the SESOI) rejected; else
    ``"inconclusive with N seeds (MDE x)"``, ``x`` the minimum detectable effect at those seeds
    (never a post-hoc seed count); ``"no data"`` if a side has no finite values."""
    if n_x == 0 or n_y == 0:
        return "no data"
    bound = f"|Δ| < {sesoi:g}"
    if not stats.significant(lo, hi, p_adjusted, alpha=alpha):
        if equivalent:
            return f"equivalent ({bound})"
        detectable = f" (MDE {_fmt_effect(mde)})" if math.isfinite(mde) else ""
        return f"inconclusive with {seeds_phrase(n_x, n_y)}{detectable}"
    up = delta > 0.0
    if higher_is_better is None:
        word = "higher" if up else "lower"
    else:
        word = "better" if up == higher_is_better else "worse"
    return f"{word} (but {bound})" if equivalent else word


def ranked_verdict(arm: ArmOutcomes, base: ArmOutcomes, *, higher_is_better: bool | None, p_adjusted: float,
                   p_improve: float, t_lo: float, t_hi: float, alpha: float) -> str:
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
    return f"inconclusive with {seeds_phrase(n_x, n_y)} ({why})"


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


def control_label(name: str, control: str | None) -> str:
    """An arm's name as the tables and headlines show it: ``random (control: random reward)`` for an arm
    trained on a reward control (``reward.control: random``), else the name unchanged."""
    return name if not control else f"{name} (control: {control.replace('_', '-')} reward)"


def headline(*, variant: str, baseline: str, metric: str, status_word: str, verdict_text: str, delta: float,
             lo: float, hi: float, level: float, n_x: int, n_y: int, mde: float, sesoi: float,
             points: bool, ranked: bool = False, variant_control: str | None = None,
             baseline_control: str | None = None) -> str:
    """One comparison in one plain sentence, e.g. ``"dapo vs grpo: +4.5 points final eval accuracy
    (95% CI -1.2 to +10.2), not distinguishable with 3 seeds"``. ``level``: the confidence of the
    interval ``[lo, hi]`` shown (the table's simultaneous level: 97.5% with 2 comparisons), NaN
    when there is none; ``ranked``: the rank test decided (some runs failed, stopped or were
    censored: Δ is of the finished runs); ``points``: the metric lies in [0, 1] and its
    differences read as percentage points. ``variant_control`` / ``baseline_control``: the reward control an
    arm trained on (``reward.control``), if any: the sentence then opens ``control comparison:`` and names the
    control, since the difference measures a control arm, not a treatment's effect."""
    unit = " points" if points else ""
    who = f"{control_label(variant, variant_control)} vs {control_label(baseline, baseline_control)}"
    if variant_control or baseline_control:
        who = f"control comparison: {who}"
    if status_word == "no data":
        return f"{who}: {metric_words(metric)}: {verdict_text} (nothing to compare)"
    effect = f"{effect_text(delta, points=points)}{unit} {metric_words(metric)}"
    if math.isfinite(lo) and math.isfinite(hi) and math.isfinite(level):
        effect += f" ({level_percent(level)} CI {effect_text(lo, points=points)} to {effect_text(hi, points=points)})"
    elif ranked:
        effect += " (of the finished runs; the rank test decides)"
    elif math.isfinite(delta):
        effect += " (no interval)"  # e.g. runs that do not vary: the row's note says why
    seeds = f"with {seeds_phrase(n_x, n_y)}"
    if status_word in ("better", "worse", "higher", "lower"):
        said = f"{variant} is {status_word} {seeds}"
        if "(but" in verdict_text:  # significant, yet inside the smallest effect that matters
            bound = effect_text(sesoi, points=points, signed=False)
            said += f", but by less than the smallest effect of interest ({bound}{unit})"
    elif status_word == "equivalent":
        said = (f"equivalent {seeds}: the difference is within ±{effect_text(sesoi, points=points, signed=False)}"
                f"{unit}, the smallest effect of interest")
    elif status_word == "inconclusive":
        said = f"not distinguishable {seeds}"
        if math.isfinite(mde):
            said += f" (they would likely detect only ±{effect_text(mde, points=points, signed=False)}{unit} or more)"
    elif status_word == "not testable":
        said = verdict_text.split(" [the test alone")[0]  # "not testable: clip_high acted on ... (min 1%)"
        if "; |Δ| > " in said and math.isfinite(lo) and math.isfinite(hi):  # the bound in this sentence's unit
            bound = effect_text(max(abs(lo), abs(hi)), points=points, signed=False)
            said = f"{said.split('; |Δ| > ')[0]}; |Δ| > {bound}{unit} excluded"
    elif status_word == "withheld":
        said = f"verdict {verdict_text}"
    else:
        said = verdict_text
    return f"{who}: {effect}, {said}"
