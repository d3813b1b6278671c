"""Seeds planned before a study: how many seeds per arm give 80% power to detect the study's
smallest effect of interest (``compare.sesoi``) at the level Holm tests its first comparison.

Pure: the CLI (``workbench plan``) gathers the study's arms, its ``compare:`` settings and, when
no noise SD is declared, the SD measured on finished baseline runs in the store.

Why these choices:

* **Level**: ``alpha / m``, ``m`` = the comparisons ``compare`` makes per metric (every non-baseline
  arm against the baseline at its grid point). Holm tests its first (smallest p) comparison at
  ``alpha / m`` and the others at least at that level, so the plan holds for every comparison.
* **SD of a paired difference**: ``sqrt(2)`` times the SD of a run across seeds (``noise_sd``), as
  if the two arms' runs at one seed were independent. Runs that share a seed are usually
  positively correlated, which only makes the paired SD smaller: the plan errs on the safe side.
* **Power**: the exact power of the paired t-test (:func:`workbench.compare.stats.planned_seeds`).
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


def plan_seeds(metrics: Iterable[str], sesoi: Mapping[str, float], noise_sd: Mapping[str, tuple[float, str]], *,
               comparisons: int, seeds_in_study: int, alpha: float = 0.05, power: float = 0.8) -> list[SeedPlan]:
    """One :class:`SeedPlan` per metric. ``noise_sd`` maps a metric to ``(SD of a run across seeds,
    where it came from)``. Without a SESOI or an SD nothing is planned and ``why`` says what is
    missing: no number is invented."""
    level = alpha / max(1, comparisons)
    out = []
    for metric in metrics:
        e = sesoi.get(metric)
        sd, source = noise_sd.get(metric, (None, ""))
        common = {"metric": metric, "sesoi": e, "noise_sd": sd, "sd_source": source, "comparisons": comparisons,
                  "alpha": level, "power": power, "seeds_in_study": seeds_in_study}
        if comparisons == 0:
            out.append(SeedPlan(seeds=None, why="no comparison: no arm besides the baseline", **common))
        elif e is None:
            out.append(SeedPlan(seeds=None, why=f"no compare.sesoi for {metric}: declare the smallest effect "
                                                "of interest to plan seeds", **common))
        elif sd is None or not math.isfinite(sd):
            out.append(SeedPlan(seeds=None, why=f"no compare.noise_sd for {metric} and no finished baseline runs "
                                                "in the store to measure it", **common))
        else:
            n = stats.planned_seeds(e, math.sqrt(2.0) * sd, alpha=level, power=power)
            out.append(SeedPlan(seeds=n, **common))
    return out
