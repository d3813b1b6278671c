"""Outcome advantage estimators: one scalar reward per completion -> one advantage per completion.

Every estimator is a pure function ``(rewards [B], group_ids [B], ...) -> advantages [B]``
registered in ``ADVANTAGE_ESTIMATORS``; completions sharing a ``group_id`` answer the same
prompt. The losses broadcast the advantage to the completion's tokens.

Conventions (fixed for verl 0.9.1 parity, see DESIGN.md): group statistics use the Bessel
std (``torch.std``); a group with a single completion counts as mean 0 and std 1.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from workbench.registry import Registry

AdvantageEstimator = Callable[..., Tensor]

ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")

# verl's masked_whiten floors the variance with this constant (not with ``epsilon``).
WHITEN_VAR_FLOOR = 1e-8


class GroupStats(NamedTuple):
    """Per-completion view of its group's statistics (all ``[B]``)."""

    mean: Tensor  # [B] group mean (0 for a group of one)
    std: Tensor  # [B] group Bessel std (1 for a group of one)
    size: Tensor  # [B] number of completions in the group


def group_stats(rewards: Tensor, group_ids: Tensor) -> GroupStats:
    """Group mean, Bessel std and size, gathered back to each completion."""
    _, inverse = torch.unique(group_ids, return_inverse=True)  # [B] dense group index
    n_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    size = torch.bincount(inverse, minlength=n_groups).to(rewards.dtype)  # [G]
    total = torch.zeros(n_groups, dtype=rewards.dtype, device=rewards.device)
    # Mean as group minimum + mean excess: exact for a group of equal rewards, so its
    # deviations are exactly 0 (a plain float mean can be off by an ulp, which the
    # division by a ~0 std would blow up into a sizeable advantage).
    low = total.scatter_reduce(0, inverse, rewards, reduce="amin", include_self=False)  # [G]
    mean = low + total.index_add(0, inverse, rewards - low[inverse]) / size  # [G]
    sq_dev = (rewards - mean[inverse]) ** 2  # [B]
    var = total.index_add(0, inverse, sq_dev) / (size - 1).clamp(min=1)  # [G] Bessel
    single = size == 1  # [G]
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(var), var.sqrt())
    return GroupStats(mean=mean[inverse], std=std[inverse], size=size[inverse])


def _batch_std(values: Tensor) -> Tensor:
    """Bessel std over the whole batch; 1 for a batch of one (mirrors the group-of-one rule)."""
    if values.numel() < 2:
        return values.new_ones(())
    return values.std()


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo(rewards: Tensor, group_ids: Tensor, *, epsilon: float) -> Tensor:
    """Group-normalised advantage ``(r - mean_g) / (std_g + eps)``.

    GRPO, Shao et al. 2024 (DeepSeekMath), §4.1.2 "Outcome supervision RL with GRPO".
    verl ``adv_estimator=grpo``.
    """
    stats = group_stats(rewards, group_ids)
    return (rewards - stats.mean) / (stats.std + epsilon)  # [B]


@ADVANTAGE_ESTIMATORS.register("dr_grpo")
def dr_grpo(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Group-mean baseline without std scaling ``r - mean_g`` (removes the question-difficulty bias).

    Dr. GRPO, Liu et al. 2025 ("Understanding R1-Zero-Like Training"), §3.1.
    verl ``adv_estimator=grpo`` with ``norm_adv_by_std_in_grpo=False``.
    """
    return rewards - group_stats(rewards, group_ids).mean  # [B]


@ADVANTAGE_ESTIMATORS.register("rloo")
def rloo(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Leave-one-out baseline: ``r_i - mean_{j != i} r_j = n/(n-1) * (r_i - mean_g)``.

    RLOO, Ahmadian et al. 2024 ("Back to Basics: Revisiting REINFORCE Style Optimization",
    arXiv:2402.14740), the leave-one-out baseline of Kool et al. 2019. A group of one has
    no other sample: baseline 0, advantage ``r`` (as verl ``adv_estimator=rloo``).
    """
    stats = group_stats(rewards, group_ids)
    scale = torch.where(stats.size > 1, stats.size / (stats.size - 1).clamp(min=1), torch.ones_like(stats.size))
    return scale * (rewards - stats.mean)  # [B]


@ADVANTAGE_ESTIMATORS.register("reinforce_plus_plus_baseline")
def reinforce_plus_plus_baseline(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Group-mean baseline, then whitening over the whole batch.

    ``x = r - mean_g``; ``A = (x - mean_B(x)) / sqrt(var_B(x) + 1e-8)`` with the Bessel
    variance over the batch's completions. REINFORCE++ w/ baseline, Hu et al. 2025
    (arXiv:2501.03262): group-mean subtraction followed by global advantage normalization.

    verl's ``adv_estimator=reinforce_plus_plus_baseline`` whitens the same way (variance
    floor 1e-8, not ``epsilon``) but over response *tokens*, so longer responses weigh more;
    an API of per-completion advantages weighs each completion once. The two agree when
    every response has one token. A batch of one gives 0.
    """
    centered = rewards - group_stats(rewards, group_ids).mean  # [B]
    if centered.numel() < 2:
        return torch.zeros_like(centered)
    return (centered - centered.mean()) * torch.rsqrt(centered.var() + WHITEN_VAR_FLOOR)  # [B]


@ADVANTAGE_ESTIMATORS.register("lite_ppo")
def lite_ppo(rewards: Tensor, group_ids: Tensor, *, epsilon: float) -> Tensor:
    """Group-level mean, batch-level std: ``(r - mean_g) / (std_B(r) + eps)``.

    Lite PPO, Liu et al. 2025 ("Tricks or Traps? A Deep Dive into RL for LLM Reasoning",
    arXiv:2508.08221), advantage normalization with group-level mean and batch-level std;
    ``std_B`` is the Bessel std of the batch's rewards (1 for a batch of one).
    """
    centered = rewards - group_stats(rewards, group_ids).mean  # [B]
    return centered / (_batch_std(rewards) + epsilon)  # [B]


def compute_advantages(estimator: str, rewards: Tensor, group_ids: Tensor, *, epsilon: float = 1e-6) -> Tensor:
    """Per-completion advantages ``[B]`` from scalar rewards ``[B]`` and prompt group ids ``[B]``.

    ``epsilon`` guards the division by a std; it is passed to the estimators that divide by
    one (``grpo``, ``lite_ppo``). The result carries no gradient.
    Raises ``ValueError`` naming the valid estimators on an unknown name.
    """
    fn = ADVANTAGE_ESTIMATORS.get(estimator)
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_ids must both be [B]; got {tuple(rewards.shape)} and {tuple(group_ids.shape)}"
        )
    rewards = rewards.detach().to(torch.promote_types(rewards.dtype, torch.float32))
    kwargs = {"epsilon": epsilon} if "epsilon" in inspect.signature(fn).parameters else {}
    return fn(rewards, group_ids, **kwargs)
