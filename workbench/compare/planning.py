"""Seeds planned before a study: how many seeds per arm give 80% power to detect the study's
smallest effect of interest (``compare.sesoi``) at the level Holm tests its first comparison.

Pure: the CLI (``workbench plan``) gathers the study's arms, its ``compare:`` settings and, when
no noise SD is declared, the SD measured on finished baseline runs in the store.

Why these choices:

* **Level**: ``alpha / m``, ``m`` = the comparisons of the metric's Holm family as ``compare`` forms it
  (#52): every primary metric's comparisons together (each non-baseline arm against the baseline at its
  grid point, times the primary metrics), a secondary metric's own. Holm tests its first (smallest p)
  comparison at ``alpha / m`` and the others at least at that level, so the plan holds for every comparison.
* **SD of a paired difference**: ``sqrt(2)`` times the SD of a run across seeds (``noise_sd``), as
  if the two arms' runs at one seed were independent. Runs that share a seed are usually
  positively correlated, which only makes the paired SD smaller: the plan errs on the safe side.
* **Power**: the exact power of the paired t-test (:func:`workbench.compare.stats.planned_seeds`).
* **A sequential design's level** (``compare.sequential``): its last look tests at that look's α
  (O'Brien-Fleming: below 0.05), not at 0.05; planning at 0.05 overstated the power (0.80 planned,
  0.73 had at those seeds, #52). The plan uses the last look's α over ``m``.
* **The cap**: the most seeds per arm the study will run (its last look, else its ``seeds:``). When the
  plan needs more, the power at the cap is stated (for a difference, and the TOST's for equivalence:
  :func:`workbench.compare.stats.tost_power`, at a true difference of 0): a study capped below plan
  reads what it can decide.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from . import stats

__all__ = ["SeedPlan", "comparisons_per_metric", "plan_seeds"]


@dataclass(frozen=True)
class SeedPlan:
    """The planned seeds of one metric (``seeds`` is ``None`` with ``why`` when none can be planned)."""

    metric: str
    sesoi: float | None
    noise_sd: float | None
    sd_source: str
    comparisons: int
    alpha: float
    power: float
    seeds: int | None
    seeds_in_study: int
    why: str = ""
    level_source: str = "alpha / m"  # or "last look's alpha / m" (a sequential design)
    cap: int | None = None  # the most seeds per arm the study runs
    power_at_cap: float | None = None  # the paired t-test's power at the cap (when the cap is below plan)
    tost_power_at_cap: float | None = None  # the TOST's at a true difference of 0, ± the SESOI

    def as_dict(self) -> dict:
        return asdict(self)


def comparisons_per_metric(arms: Iterable[tuple[str, str]], baseline: str) -> int:
    """How many comparisons ``compare`` makes per metric for arms ``(variant, arm label)``: an
    arm label is its run label without ``/seed=N``. ``baseline`` names a variant (each other
    variant's arm is compared with the baseline's arm at its own grid point, if there is one) or
    one arm (every other arm is compared with it)."""
    arms = list(dict.fromkeys(arms))
    labels = {label for _, label in arms}
    if baseline in labels and baseline not in {v for v, _ in arms}:
        return len(labels) - 1
    points = {label.removeprefix(variant) for variant, label in arms if variant == baseline}
    return sum(1 for variant, label in arms if variant != baseline and label.removeprefix(variant) in points)


def plan_seeds(
    metrics: Iterable[str],
    sesoi: Mapping[str, float],
    noise_sd: Mapping[str, tuple[float, str]],
    *,
    comparisons: int,
    seeds_in_study: int,
    alpha: float = 0.05,
    power: float = 0.8,
    last_look_alpha: float | None = None,
    cap: int | None = None,
) -> list[SeedPlan]:
    """One :class:`SeedPlan` per metric. ``noise_sd`` maps a metric to ``(SD of a run across seeds,
    where it came from)``. Without a SESOI or an SD nothing is planned and ``why`` says what is
    missing: no number is invented. ``last_look_alpha``: a sequential design's last look's α (the
    plan's level then); ``cap``: the most seeds per arm the study runs (the power there is stated
    when the plan needs more)."""
    level = (alpha if last_look_alpha is None else last_look_alpha) / max(1, comparisons)
    source = "alpha / m" if last_look_alpha is None else "last look's alpha / m"
    out = []
    for metric in metrics:
        e = sesoi.get(metric)
        sd, sd_source = noise_sd.get(metric, (None, ""))
        common = {
            "metric": metric,
            "sesoi": e,
            "noise_sd": sd,
            "sd_source": sd_source,
            "comparisons": comparisons,
            "alpha": level,
            "power": power,
            "seeds_in_study": seeds_in_study,
            "level_source": source,
            "cap": cap,
        }
        if comparisons == 0:
            out.append(SeedPlan(seeds=None, why="no comparison: no arm besides the baseline", **common))
        elif e is None:
            out.append(
                SeedPlan(
                    seeds=None,
                    why=f"no compare.sesoi for {metric}: declare the smallest effect of interest to plan seeds",
                    **common,
                )
            )
        elif sd is None or not math.isfinite(sd):
            out.append(
                SeedPlan(
                    seeds=None,
                    why=f"no compare.noise_sd for {metric} and no finished baseline runs in the store to measure it",
                    **common,
                )
            )
        else:
            n = stats.planned_seeds(e, math.sqrt(2.0) * sd, alpha=level, power=power)
            at_cap: dict[str, float | None] = {}
            if cap is not None and cap < n and cap >= 2:
                at_cap["power_at_cap"] = float(
                    stats.t_test_power(cap, e, math.sqrt(2.0) * sd, paired=True, alpha=level)
                )
                at_cap["tost_power_at_cap"] = stats.tost_power(cap, e, math.sqrt(2.0) * sd, alpha=level)
            out.append(SeedPlan(seeds=n, **common, **at_cap))
    return out
