"""The verdicts of a comparison, in words.

:mod:`workbench.compare.stats` decides with numbers (corrected p-values, intervals,
:func:`~workbench.compare.stats.significant`); this module turns a row's numbers into the text of
its ``verdict`` column: ``better`` / ``worse`` (``higher`` / ``lower`` for a metric without a
direction), ``not distinguishable with 5 seeds``, ``withheld: 3/6 runs failed``, ``no data``.
The policy for runs that did not finish is :mod:`workbench.compare.outcomes`'.
"""

from __future__ import annotations

import math

from . import stats
from .outcomes import ArmOutcomes

__all__ = ["ranked_verdict", "seeds_phrase", "verdict", "withheld"]


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
) -> str:
    """``"better"``/``"worse"`` (or ``"higher"``/``"lower"`` for a metric without a direction) only
    when the difference is :func:`~workbench.compare.stats.significant` (corrected p-value below
    ``alpha`` **and** corrected CI ``[lo, hi]`` excluding 0); else ``"not distinguishable with N
    seeds"``; ``"no data"`` if a side has no finite values."""
    if n_x == 0 or n_y == 0:
        return "no data"
    if not stats.significant(lo, hi, p_adjusted, alpha=alpha):
        return f"not distinguishable with {seeds_phrase(n_x, n_y)}"
    up = delta > 0.0
    if higher_is_better is None:
        return "higher" if up else "lower"
    return "better" if up == higher_is_better else "worse"


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
    return f"not distinguishable with {seeds_phrase(n_x, n_y)} ({why})"
