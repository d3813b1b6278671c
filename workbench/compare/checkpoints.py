"""The unit of replication: RL seeds of one checkpoint, or independent checkpoints with the seeds nested in them.

Every seed of an arm starts RL from the arm's cold start (the tiny model's SFT, or a priming SFT): without
``replicate: {cold_start: k}`` it is one checkpoint, and an interval over seeds measures the RL noise of that
checkpoint only. With k > 1 cold starts per arm (runs carry ``model.cold_start``, :mod:`workbench.study`), the
treatment is replicated and the checkpoint is the unit: seeds within a checkpoint are subsamples, and testing
over them as if independent ignores the between-checkpoint variance (a seed-level test is anti-conservative,
``tests/compare/test_checkpoint_level.py``).

The two-level analysis here: **average the seeds within each checkpoint, then compare over checkpoints**
(:func:`checkpoint_level`: one row per (arm, checkpoint), the checkpoint's index in the seed column, so that the
comparison pairs cold start i of an arm with cold start i of its baseline when both have the same indices). For
equal seeds per checkpoint this is the exact test of the nested (random-intercept) model's fixed effect: the
checkpoint means are i.i.d. with variance sd_ckpt² + sd_seed²/s. Why not statsmodels' MixedLM:
``docs/reports.md``, "Replication at the level of the treatment".

Runs that did not finish: a checkpoint counts as finished on a metric when all its runs did; otherwise it takes
the outcome of its worst run (failed over stopped over censored over missing: :mod:`workbench.compare.outcomes`
then ranks it worst or withholds), never a mean over the runs that happened to finish.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import arms as _arms

__all__ = ["CHECKPOINT_COLUMN", "ONE_CHECKPOINT", "Replication", "checkpoint_level", "cold_start_segment"]

#: The runs (and summary) column of a run's cold-start index: its ``model.cold_start`` param (absent: 0, the
#: one cold start every run had before replication).
CHECKPOINT_COLUMN = "model.cold_start"
#: What every output says when the checkpoint does not vary.
ONE_CHECKPOINT = "intervals over RL seeds of one checkpoint"


@dataclass(frozen=True)
class Replication:
    """What the comparison's replicates are: ``unit`` ``"seed"`` (of one checkpoint per arm) or ``"checkpoint"``;
    ``checkpoints``: arm -> its number of checkpoints; ``seeds``: arm -> runs per checkpoint (min, max)."""

    unit: str
    checkpoints: dict[str, int] = field(default_factory=dict)
    seeds: dict[str, tuple[int, int]] = field(default_factory=dict)

    def sentence(self) -> str:
        """The line every output carries under its headline."""
        if self.unit == "seed":
            return (
                f"Replication: {ONE_CHECKPOINT}. Every run of an arm starts from the same cold start, so the "
                "intervals measure RL noise, not how the result varies between cold starts (or priming "
                "SFTs); replicate: {cold_start: k} in the study trains k per arm (docs/reports.md)."
            )
        ks = sorted(set(self.checkpoints.values()))
        lo = min(s[0] for s in self.seeds.values())
        hi = max(s[1] for s in self.seeds.values())
        per = f"{lo}" if lo == hi else f"{lo}-{hi}"
        return (
            f"Replication: the checkpoint is the unit. Each arm has {'/'.join(map(str, ks))} independent cold "
            f"starts (checkpoints) with {per} RL seeds each; every interval, test and count (n_seeds) is over "
            "checkpoints, each the mean of its seeds, paired by cold-start index where both arms have the same "
            "ones (docs/reports.md)."
        )


def cold_start_segment(value: object) -> str:
    """``"/cold_start=i"`` for a run of cold start i > 0, else ``""``: run names in tables and legends stay
    unique when the seeds of an arm repeat across its cold starts, and unchanged where there is one."""
    index = pd.to_numeric(pd.Series([value]), errors="coerce").iloc[0]
    return f"/cold_start={int(index)}" if pd.notna(index) and index > 0 else ""


def _worst_status(frame: pd.DataFrame) -> str:
    if "status" not in frame.columns:
        return "FINISHED"
    statuses = frame["status"].fillna("FINISHED").astype(str).str.upper()
    not_done = statuses[statuses != "FINISHED"]
    return str(not_done.iloc[0]) if len(not_done) else "FINISHED"


def _checkpoint_value(values: np.ndarray) -> float:
    """A checkpoint's value on one metric: the mean of its runs' when all are finite; +-inf (censored) when one
    is; NaN (missing) when one has none (a failed or stopped run is the checkpoint's status, not its value)."""
    if np.isinf(values).any():
        return float(values[np.isinf(values)][0])
    if np.isnan(values).any():
        return float("nan")
    return float(values.mean())


def checkpoint_level(
    summary: pd.DataFrame,
    metrics: Sequence[str],
    *,
    variant_col: str,
    arm_col: str | None,
    seed_col: str,
    checkpoint_col: str | None = CHECKPOINT_COLUMN,
    keep: Sequence[str] = (),
) -> tuple[pd.DataFrame, Replication]:
    """``summary`` as the comparison should see it, and its :class:`Replication`.

    When no arm has runs of two checkpoints (``checkpoint_col`` absent, or one value per arm), ``summary`` is
    returned as it is (unit: seed). Otherwise one row per (arm, checkpoint): the variant and arm, the
    checkpoint's index in ``seed_col``, its status (its worst run's), ``stopped_early`` (any of its runs),
    ``health_reasons`` (all of them), ``n_runs_in_checkpoint``, the ``keep`` columns (its first run's), and per metric :func:`_checkpoint_value`
    (unit: checkpoint). Only the runs' values enter each checkpoint's, never a run's absence silently: a
    checkpoint with a failed, stopped, censored or missing run is that, for the comparison's outcome policy."""
    arms = _arms.arm_column(summary, variant_col, arm_col or "")
    if not checkpoint_col or checkpoint_col not in summary.columns or summary.empty:
        return summary, Replication("seed")
    index = pd.to_numeric(summary[checkpoint_col], errors="coerce").fillna(0).astype(int)  # absent: cold start 0
    per_arm = index.groupby(arms.to_numpy()).nunique()
    if (per_arm <= 1).all():
        return summary, Replication("seed")
    rows, checkpoints, seeds = [], {}, {}
    for (arm, ckpt), group in summary.groupby([arms.to_numpy(), index.to_numpy()], sort=False):
        row = {
            variant_col: group[variant_col].iloc[0],
            seed_col: int(ckpt),
            "status": _worst_status(group),
            "n_runs_in_checkpoint": len(group),
        }
        if arm_col:
            row[arm_col] = arm
        if "stopped_early" in group.columns:
            row["stopped_early"] = bool(
                group["stopped_early"].map(lambda v: v is True or str(v).lower() == "true").any()
            )
        for column in keep:  # e.g. the IQM bootstrap's strata: the checkpoint's first run's
            row[column] = group[column].iloc[0]
        if "health_reasons" in group.columns:
            reasons = [str(x) for x in group["health_reasons"].dropna() if str(x)]
            row["health_reasons"] = ",".join(reasons) if reasons else None
        for metric in metrics:
            row[metric] = _checkpoint_value(pd.to_numeric(group[metric], errors="coerce").to_numpy(dtype=float))
        rows.append(row)
        checkpoints[arm] = checkpoints.get(arm, 0) + 1
        lo, hi = seeds.get(arm, (len(group), len(group)))
        seeds[arm] = (min(lo, len(group)), max(hi, len(group)))
    out = pd.DataFrame(rows)
    out.attrs = dict(summary.attrs)
    return out, Replication("checkpoint", checkpoints, seeds)
