"""Outcome advantage estimators: one scalar reward per completion -> one advantage per completion.

Every estimator is a pure function ``(rewards [B], group_ids [B], ...) -> advantages [B]``
registered in ``ADVANTAGE_ESTIMATORS``; completions sharing a ``group_id`` answer the same
prompt. The losses broadcast the advantage to the completion's tokens. An estimator that
normalises over tokens takes a keyword ``token_counts`` ``[B]`` (response tokens per
completion, from the optional ``mask`` of ``compute_advantages``); the others ignore the mask.

Conventions (fixed for verl 0.9.1 parity, checked by tests/algorithms/test_verl_parity.py): group statistics use the Bessel
std (``torch.std``); a group with a single completion counts as mean 0 and std 1.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from workbench.algorithms._masked import as_bool
from workbench.algorithms.params import check_unit_params
from workbench.registry import Activity, Registry

AdvantageEstimator = Callable[..., Tensor]

ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry(
    "advantage estimator", activity=Activity.always("sets the advantage of every response")
)

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
def grpo(rewards: Tensor, group_ids: Tensor, *, epsilon: float = 1e-6) -> Tensor:
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


def _weighted_whiten(values: Tensor, weights: Tensor) -> Tensor:
    """``(x - mean_w) / sqrt(var_w + 1e-8)`` with each value counted ``weights`` times.

    The mean and the Bessel variance are those of the multiset in which ``values[b]`` occurs
    ``weights[b]`` times (verl's ``masked_whiten`` over a ``[B,T]`` tensor that repeats each
    value on its response tokens). Fewer than 2 counted items give 0.
    """
    total = weights.sum()
    if float(total) < 2:
        return torch.zeros_like(values)
    mean = (weights * values).sum() / total
    var = (weights * (values - mean) ** 2).sum() / (total - 1)  # Bessel over the counted items
    return (values - mean) * torch.rsqrt(var + WHITEN_VAR_FLOOR)  # [B]


@ADVANTAGE_ESTIMATORS.register("reinforce_plus_plus_baseline")
def reinforce_plus_plus_baseline(rewards: Tensor, group_ids: Tensor, *, token_counts: Tensor | None = None) -> Tensor:
    """Group-mean baseline, then whitening over the whole batch.

    ``x = r - mean_g``; ``A = (x - mean(x)) / sqrt(var(x) + 1e-8)`` with the Bessel variance.
    REINFORCE++ w/ baseline, Hu et al. 2025 (arXiv:2501.03262): group-mean subtraction
    followed by global advantage normalization.

    With ``token_counts`` (from ``compute_advantages(..., mask=)``) the mean and variance are
    over response *tokens*, as verl's ``adv_estimator=reinforce_plus_plus_baseline``
    (``masked_whiten``, variance floor 1e-8, not ``epsilon``): a completion weighs as many
    times as it has tokens. Without it they are over completions (each weighs once); the two
    agree when every response has one token. Fewer than 2 completions (tokens) give 0.
    """
    centered = rewards - group_stats(rewards, group_ids).mean  # [B]
    weights = torch.ones_like(centered) if token_counts is None else token_counts.to(centered.dtype)  # [B]
    return _weighted_whiten(centered, weights)  # [B]


@ADVANTAGE_ESTIMATORS.register("lite_ppo")
def lite_ppo(rewards: Tensor, group_ids: Tensor, *, epsilon: float = 1e-6) -> Tensor:
    """Group-level mean, batch-level std: ``(r - mean_g) / (std_B(r) + eps)``.

    Lite PPO, Liu et al. 2025 ("Tricks or Traps? A Deep Dive into RL for LLM Reasoning",
    arXiv:2508.08221), advantage normalization with group-level mean and batch-level std;
    ``std_B`` is the Bessel std of the batch's rewards (1 for a batch of one).
    """
    centered = rewards - group_stats(rewards, group_ids).mean  # [B]
    return centered / (_batch_std(rewards) + epsilon)  # [B]


@ADVANTAGE_ESTIMATORS.register(
    "grpo_passk",
    activity=Activity.always(
        "sets the advantage of every response: each group's best one gets r_max − r_second, the others 0"
    ),
)
def grpo_passk(rewards: Tensor, group_ids: Tensor, *, epsilon: float = 1e-6, norm_by_std: bool = True) -> Tensor:
    """pass@k objective: only each group's best completion moves, by ``(r_max − r_second_max) / (std_g + eps)``.

    Tang et al. 2025, "Optimizing Language Models for Inference Time Objectives using Reinforcement
    Learning" (arXiv:2503.19595): the leave-one-out gradient of the group's max reward (pass@k with k
    the group size); only the best sample's reward exceeds its leave-one-out max, by r_max − r_second.
    verl ``adv_estimator=grpo_passk`` (``compute_grpo_passk_outcome_advantage``, verl 0.9.1), whose
    ``norm_adv_by_std_in_grpo`` is ``norm_by_std`` here (Bessel std of the group's rewards).

    Ties: when several completions share the group's max, r_max − r_second = 0 and every advantage is 0,
    whichever one counts as best. A group of one has no rival: its second-best counts as 0 and its std as
    1 (the module's group-of-one rule, as ``rloo``'s baseline 0), so its advantage is ``r / (1 + eps)``;
    verl raises instead (it requires ≥ 2 samples per group).
    """
    _, inverse = torch.unique(group_ids, return_inverse=True)  # [B] dense group index
    n_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    blank = torch.zeros(n_groups, dtype=rewards.dtype, device=rewards.device)  # [G]
    best = blank.scatter_reduce(0, inverse, rewards, reduce="amax", include_self=False)  # [G] r_max
    position = torch.arange(rewards.numel(), device=rewards.device)  # [B]
    at_max = torch.where(rewards == best[inverse], position, rewards.numel())  # [B]
    winner = torch.full((n_groups,), rewards.numel(), device=rewards.device).scatter_reduce(
        0, inverse, at_max, reduce="amin"
    )  # [G] first position holding the max
    others = torch.where(position == winner[inverse], -torch.inf, rewards)  # [B] the best one left out
    second = blank.scatter_reduce(0, inverse, others, reduce="amax", include_self=False)  # [G]
    stats = group_stats(rewards, group_ids)
    second = torch.where(torch.isinf(second), blank, second)  # a group of one: no rival, second-best 0
    gap = best - second  # [G] ≥ 0
    if norm_by_std:
        std = blank.scatter_reduce(0, inverse, stats.std, reduce="amax", include_self=False)  # [G] (equal in a group)
        gap = gap / (std + epsilon)
    advantages = torch.zeros_like(rewards)  # [B]
    advantages[winner] = gap
    return advantages  # [B]


# Estimator parameters that ``compute_advantages`` derives itself: never part of ``estimator_params``.
DERIVED_PARAMS = ("token_counts",)


def compute_advantages(
    estimator: str,
    rewards: Tensor,
    group_ids: Tensor,
    *,
    epsilon: float = 1e-6,
    mask: Tensor | None = None,
    **estimator_params: Any,
) -> Tensor:
    """Per-completion advantages ``[B]`` from scalar rewards ``[B]`` and prompt group ids ``[B]``.

    ``epsilon`` guards the division by a std; it is passed to the estimators that divide by
    one (``grpo``, ``lite_ppo``). ``mask`` ``[B,T]`` (1 on response tokens; bool, int or
    float) is the response mask: estimators that normalise over tokens
    (``reinforce_plus_plus_baseline``, as verl) count each completion once per response
    token; the others do not depend on it. ``estimator_params`` are the estimator's other
    keyword-only parameters (a run config's ``algorithm.estimator_params``); the estimator's
    defaults hold for those not given. The result carries no gradient.
    Raises ``ValueError`` naming the valid estimators on an unknown name, and naming the
    estimator and its valid keys on a parameter it does not take.
    """
    fn = ADVANTAGE_ESTIMATORS.get(estimator)
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_ids must both be [B]; got {tuple(rewards.shape)} and {tuple(group_ids.shape)}"
        )
    if mask is not None and (mask.dim() != 2 or mask.shape[0] != rewards.shape[0]):
        raise ValueError(f"mask must be [B,T] with B={rewards.shape[0]}; got {tuple(mask.shape)}")
    rewards = rewards.detach().to(torch.promote_types(rewards.dtype, torch.float32))
    params = inspect.signature(fn).parameters
    kwargs: dict[str, object] = {"epsilon": epsilon} if "epsilon" in params else {}
    kwargs |= check_unit_params(
        "advantage estimator", estimator, fn, estimator_params, exclude=("epsilon", *DERIVED_PARAMS)
    )
    if mask is not None and "token_counts" in params:
        kwargs["token_counts"] = as_bool(mask.detach()).sum(dim=-1)  # [B] response tokens per completion
    return fn(rewards, group_ids, **kwargs)
