"""Canonical metrics computed once per step from the step's tensors (no extra forward passes)."""

from __future__ import annotations

import torch

from workbench.batch import ScoredRollouts
from workbench.metrics.mismatch import repetition_frac
from workbench.metrics.names import (
    ACCURACY_TRAIN,
    BATCH_ALL_CORRECT_FRAC,
    BATCH_ALL_WRONG_FRAC,
    BATCH_REPETITION_FRAC,
    BATCH_ZERO_STD_FRAC,
    LENGTH_CORRECT_MEAN,
    LENGTH_INCORRECT_MEAN,
    LENGTH_MAX,
    LENGTH_MEAN,
    LENGTH_TRUNCATED_FRAC,
    REWARD_MEAN,
    REWARD_STD,
    REWARD_VERIFY_TIMEOUT_FRAC,
)


def masked_mean_float(values: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over response tokens only, as a Python float (a logged metric); 0 for an empty mask.

    ``workbench.algorithms._masked.masked_mean`` is the tensor version the losses differentiate through.
    """
    denom = mask.sum()
    return float((values * mask).sum() / denom) if denom > 0 else 0.0


def _mean_or_nan(values: torch.Tensor) -> float:
    return float(values.mean()) if values.numel() else float("nan")


def rollout_metrics(scored: ScoredRollouts) -> dict[str, float]:
    """Reward, accuracy and response lengths, split correct / incorrect / truncated; the share of verifications
    that timed out (when the batch says which did)."""
    r = scored.rollouts
    lengths = r.lengths  # [B]
    rewards = scored.rewards.float()
    correct = scored.correct.bool()
    metrics = {
        REWARD_MEAN: float(rewards.mean()),
        REWARD_STD: float(rewards.std(unbiased=False)),
        ACCURACY_TRAIN: float(correct.float().mean()),
        LENGTH_MEAN: float(lengths.mean()),
        LENGTH_MAX: float(lengths.max()),
        # NaN when a side is empty (e.g. nothing correct yet): absent, not zero
        LENGTH_CORRECT_MEAN: _mean_or_nan(lengths[correct]),
        LENGTH_INCORRECT_MEAN: _mean_or_nan(lengths[~correct]),
        LENGTH_TRUNCATED_FRAC: float(r.truncated.float().mean()),
        BATCH_ZERO_STD_FRAC: zero_std_fraction(rewards, r.group_ids),
        **solved_group_fractions(correct, r.group_ids),
        BATCH_REPETITION_FRAC: repetition_frac(r.completion_ids, r.mask),
    }
    if scored.timed_out is not None:  # scored incorrect for want of time: why two runs of one run key may differ
        metrics[REWARD_VERIFY_TIMEOUT_FRAC] = float(scored.timed_out.float().mean())
    for name, term in scored.reward_terms.items():
        metrics[f"reward/{name}"] = float(term.float().mean())
        # the responses whose reward the term changed: how much the shaper acted (its declared
        # activity, workbench.reward.shaping.nonzero_metric; read by compare's activity gate)
        metrics[f"reward/{name}/nonzero_frac"] = float((term != 0).float().mean())
    return {k: v for k, v in metrics.items() if v == v}  # drop NaNs: a missing point, not a fake value


def zero_std_fraction(rewards: torch.Tensor, group_ids: torch.Tensor) -> float:
    """Fraction of groups whose rewards are all equal: they give no GRPO gradient."""
    groups = group_ids.unique()
    flat = [bool((rewards[group_ids == g] == rewards[group_ids == g][0]).all()) for g in groups]
    return sum(flat) / len(flat)


def solved_group_fractions(correct: torch.Tensor, group_ids: torch.Tensor) -> dict[str, float]:
    """Fractions of prompts whose group is all right / all wrong: zero variance in correctness, so no
    accuracy signal. Judged on correctness, not the shaped reward (``batch/zero_std_frac``), so a
    curation's effect (too-easy prompts dropped) shows as a smaller ``batch/all_correct_frac``."""
    groups, inverse = group_ids.unique(return_inverse=True)
    hits = torch.zeros(len(groups)).index_add_(0, inverse, correct.float())  # [P] correct per group
    sizes = torch.zeros(len(groups)).index_add_(0, inverse, torch.ones_like(correct, dtype=torch.float))
    return {
        BATCH_ALL_CORRECT_FRAC: float((hits == sizes).float().mean()),
        BATCH_ALL_WRONG_FRAC: float((hits == 0).float().mean()),
    }
