"""Arms: the units a study compares, one per (variant, grid point).

A study declares variants x a grid x seeds (``workbench.study``). Runs that differ only by their
seed are replicates of one **arm**; runs at different grid points are not, so pooling them as if
they were seeds would be wrong. An arm is named by the run label without its seed:
``dr_grpo/lr=3e-05`` for the runs ``dr_grpo/lr=3e-05/seed=0``, ``.../seed=1``, ...; in a study
without a grid the arm is just the variant (``grpo``), so grid-less comparisons are unchanged.

The baseline is named by a variant (``compare.baseline``, ``--baseline``): each arm is then compared
with the baseline variant's arm at the **same grid point** (``dr_grpo/lr=3e-05`` against
``grpo/lr=3e-05``), paired by seed there; an arm whose grid point has no baseline run has no
baseline (its verdict says so). A baseline naming one arm (``grpo/lr=1e-04``) compares every other
arm with that arm.

The reader (:mod:`workbench.results.reader`) puts each run's arm in the ``arm`` column of the
runs frame; frames without one (hand-built, older code) fall back to the variant.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

__all__ = [
    "ARM_COLUMN",
    "CONTROL_PARAM",
    "NO_BASELINE",
    "arm_column",
    "control_arms",
    "arm_variants",
    "grid_point",
    "match_baselines",
    "runs_by_arm",
]

#: Column of the runs (and summary) frame holding each run's arm.
ARM_COLUMN = "arm"
#: Verdict of an arm whose grid point has no run of the baseline variant.
NO_BASELINE = "no baseline at this grid point"
#: The run param naming a spurious-reward control (``reward.control``, workbench.reward.controls): its runs are
#: a control arm, and a comparison of or against one measures the control, not a treatment.
CONTROL_PARAM = "reward.control"


def control_arms(runs: pd.DataFrame) -> dict[str, str]:
    """``{arm or variant: control name}`` for the arms whose runs trained on a reward control (every run of the
    arm names the same one; a variant is listed when all its runs do). Runs without the param (imported runs,
    runs from before controls existed) are no control."""
    if CONTROL_PARAM not in runs.columns or runs.empty:
        return {}
    control = runs[CONTROL_PARAM].astype(object).where(runs[CONTROL_PARAM].notna(), None)
    out: dict[str, str] = {}
    for key in (arm_column(runs), runs["variant"].astype(str)):
        for name, names in control.groupby(key.to_numpy(), sort=False):
            values = set(names)
            if len(values) == 1 and (value := values.pop()) not in (None, "", "None"):
                out[str(name)] = str(value)
    return out


def grid_point(arm: str, variant: str) -> str:
    """The grid point in an arm's name: what follows ``<variant>/`` (``""`` without a grid)."""
    arm, variant = str(arm), str(variant)
    return arm[len(variant) + 1 :] if arm.startswith(variant + "/") else ""


def arm_column(frame: pd.DataFrame, variant_col: str = "variant", arm_col: str = ARM_COLUMN) -> pd.Series:
    """Each row's arm: the ``arm`` column where present and set, else the variant."""
    variants = frame[variant_col].astype(str)
    if arm_col not in frame.columns:
        return variants
    arms = frame[arm_col]
    return arms.where(arms.notna() & (arms.astype(str) != ""), variants).astype(str)


def match_baselines(arm_variants: Mapping[str, str], baseline: str) -> dict[str, str | None]:
    """``arm -> the arm it is compared with``: itself for a baseline arm, ``None`` for an arm whose
    grid point has no baseline arm.

    ``arm_variants`` maps each arm to its variant (insertion order kept). ``baseline`` is a variant
    (matched per grid point) or, failing that, one arm (every arm is compared with it). Raises
    ``ValueError`` when it is neither.
    """
    variants = list(dict.fromkeys(arm_variants.values()))
    if baseline in variants:
        at = {grid_point(a, v): a for a, v in arm_variants.items() if v == baseline}
        return {a: (a if v == baseline else at.get(grid_point(a, v))) for a, v in arm_variants.items()}
    if baseline in arm_variants:
        return {a: baseline for a in arm_variants}
    has_grid = any(a != v for a, v in arm_variants.items())
    raise ValueError(
        f"baseline {baseline!r} not among the variants {variants}"
        + (f" or arms {list(arm_variants)}" if has_grid else "")
    )


def arm_variants(frame: pd.DataFrame, variant_col: str = "variant", arm_col: str = ARM_COLUMN) -> dict[str, str]:
    """``arm -> variant`` in order of first appearance; an arm spanning two variants is an error."""
    arms = arm_column(frame, variant_col, arm_col)
    pairs = pd.DataFrame({"arm": arms.to_numpy(), "variant": frame[variant_col].astype(str).to_numpy()})
    pairs = pairs.drop_duplicates()
    twice = pairs["arm"][pairs["arm"].duplicated()].tolist()
    if twice:
        raise ValueError(
            f"arm {twice[0]!r} has runs of several variants ({sorted(pairs.loc[pairs['arm'] == twice[0], 'variant'])})"
        )
    return dict(zip(pairs["arm"], pairs["variant"], strict=True))


def runs_by_arm(frame: pd.DataFrame, runs: pd.DataFrame, *, column: str = "variant") -> pd.DataFrame:
    """``frame`` (rows with a ``run_id``) with ``column`` replaced by each run's arm from ``runs``:
    for code that groups by ``variant`` (curves, bands, labels) to group by arm instead. Returned
    unchanged when ``runs`` has no arms beyond its variants."""
    if ARM_COLUMN not in runs.columns or frame.empty:
        return frame
    arms = arm_column(runs)
    if (arms == runs["variant"].astype(str)).all():
        return frame
    of = pd.Series(arms.to_numpy(), index=runs["run_id"].to_numpy())
    mapped = frame["run_id"].map(of)
    return frame.assign(**{column: mapped.where(mapped.notna(), frame[column]).astype(str)})
