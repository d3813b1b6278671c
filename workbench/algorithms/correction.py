"""Sampler/learner mismatch corrections: importance weights ``π_learner / π_sampler`` per token.

The sampler (vLLM, or HF in another precision) and the learner assign slightly different
probabilities to the same sampled tokens, so on-policy RL is silently off-policy. A
correction turns the two log-probabilities into detached weights ``[B,T]`` that
``compute_policy_loss(..., is_weights=...)`` multiplies into the per-token loss.

A registered correction is ``(log_ratio [B,T], mask [B,T], *, cap) -> (weights [B,T], capped [B,T] bool)``
where ``log_ratio = learner_logp - sampler_logp``; ``capped`` marks tokens whose raw weight
exceeded the cap (they were truncated or masked).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from workbench.algorithms._masked import clamped_exp, masked_mean, sequence_mean_log_ratio, where_mask
from workbench.metrics.names import MISMATCH_IS_CLIPPED_FRAC, MISMATCH_IS_REWEIGHTED_FRAC, MISMATCH_IS_WEIGHT_MEAN
from workbench.registry import Activity, Registry

Correction = Callable[..., tuple[Tensor, Tensor]]

IS_CORRECTIONS: Registry[Correction] = Registry(
    "importance-sampling correction", selected_by="algorithm.correction", settings=("algorithm.correction_cap",)
)

IS_METRIC_KEYS = (MISMATCH_IS_WEIGHT_MEAN, MISMATCH_IS_CLIPPED_FRAC, MISMATCH_IS_REWEIGHTED_FRAC)

#: A token counts as reweighted when its applied weight differs from 1 by more than this (0.1%): far
#: above an fp32 sampler's rounding (|Δ| ~ 1e-6 nats, tests/test_mismatch*.py), far below a bf16
#: sampler's typical |Δ| (~1e-2).
REWEIGHT_TOLERANCE = 1e-3

# Turning a correction on acts on every token whose weight differs from 1 (not only the capped ones:
# "TIS acted on 0% of tokens" read the cap alone, #52); changing its cap acts only where the cap binds.
REWEIGHTED = Activity(
    MISMATCH_IS_REWEIGHTED_FRAC, "tokens", params={"correction_cap": Activity(MISMATCH_IS_CLIPPED_FRAC, "tokens")}
)


@IS_CORRECTIONS.register("tis", activity=REWEIGHTED)
def tis(log_ratio: Tensor, mask: Tensor, *, cap: float) -> tuple[Tensor, Tensor]:
    """Truncated importance sampling ``min(π_learner/π_sampler, C)`` per token.

    TIS, Yao et al. 2025 ("Your Efficient RL Framework Secretly Brings You Off-Policy RL
    Training", blog post; the truncated-IS fix it proposes); verl ``rollout_is=token`` with
    ``rollout_is_threshold=C``.
    """
    raw = clamped_exp(log_ratio)  # [B,T]
    return raw.clamp(max=cap), raw > cap


@IS_CORRECTIONS.register("mis", activity=REWEIGHTED)
def mis(log_ratio: Tensor, mask: Tensor, *, cap: float) -> tuple[Tensor, Tensor]:
    """Masked importance sampling: weight ``w`` where ``w <= C``, else 0 (the token is dropped).

    MIS, Liu et al. 2025 ("When Speed Kills Stability: Demystifying RL Collapse from the
    Training-Inference Mismatch", blog post; token-level masked IS): rejecting instead
    of truncating outlier tokens removes their bias instead of damping it.
    """
    raw = clamped_exp(log_ratio)  # [B,T]
    capped = raw > cap  # [B,T]
    return torch.where(capped, torch.zeros_like(raw), raw), capped


@IS_CORRECTIONS.register("seq_tis", activity=REWEIGHTED)
def seq_tis(log_ratio: Tensor, mask: Tensor, *, cap: float) -> tuple[Tensor, Tensor]:
    """Sequence-level weight: the geometric mean of the token ratios, truncated at ``C``, on every token.

    Sequence-level IS of Liu et al. 2025 ("When Speed Kills Stability", blog post),
    length-normalised as GSPO's sequence ratio (Zheng et al. 2025, §4.1) so long responses
    do not explode the weight: ``w_b = min(exp(mean_t log r_bt), C)``.
    """
    raw = clamped_exp(sequence_mean_log_ratio(log_ratio, mask))[:, None].expand_as(log_ratio)  # [B,T]
    return raw.clamp(max=cap), raw > cap


@IS_CORRECTIONS.register("decoupled", activity=REWEIGHTED)
def decoupled(log_ratio: Tensor, mask: Tensor, *, cap: float) -> tuple[Tensor, Tensor]:
    """Decoupled PPO's behaviour weight ``π_prox/π_behav`` per token, 0 where it exceeds ``C``.

    Fu et al. 2025 ("AReaL: A Large-Scale Asynchronous Reinforcement Learning System for Language
    Reasoning", arXiv 2505.24298, the decoupled PPO objective; AReaL ``areal/utils/functional.py``, ``ppo_actor_loss_fn``
    with ``behav_imp_weight_cap``): the clip applies to the ratio against the proximal policy and the
    behaviour weight multiplies the loss. The proximal policy is the learner's own logprobs before the
    update, which is what this loop's PPO ratio is always taken against (``train/update.py``), so the unit
    is the weight; with ``rollout.staleness`` the behaviour policy is the stale sampler's. AReaL masks
    (not truncates) a weight above the cap, so at the same cap this is ``mis``'s arithmetic under
    AReaL's name and reading.
    """
    raw = clamped_exp(log_ratio)  # [B,T] π_prox / π_behav
    capped = raw > cap  # [B,T]
    return torch.where(capped, torch.zeros_like(raw), raw), capped


@IS_CORRECTIONS.register("sequence_mask", activity=REWEIGHTED)
def sequence_mask(log_ratio: Tensor, mask: Tensor, *, cap: float) -> tuple[Tensor, Tensor]:
    """Sequence-level masked IS, TRL's default: ``w_b = Π_t r_bt`` on every token, 0 where it exceeds ``C``.

    TRL (2025) ``GRPOTrainer``, ``vllm_importance_sampling_mode="sequence_mask"`` with
    ``vllm_importance_sampling_clip_max`` 3.0 (``trl/trainer/grpo_trainer.py``,
    ``_generate_and_score_completions``; set ``correction_cap: 3.0`` for TRL's default): the sequence ratio is
    the product of the token ratios (the sum of log-ratios, not ``seq_tis``'s length-normalised mean), and a
    sequence whose ratio is above the cap is dropped from the loss rather than damped (Liu et al. 2025,
    "When Speed Kills Stability", sequence-level MIS).
    """
    seq_log_ratio = (log_ratio * mask).sum(-1)  # [B]
    raw = clamped_exp(seq_log_ratio)[:, None].expand_as(log_ratio)  # [B,T]
    capped = raw > cap  # [B,T]
    return torch.where(capped, torch.zeros_like(raw), raw), capped


def importance_weights(
    correction: str, learner_logp: Tensor, sampler_logp: Tensor, mask: Tensor, *, cap: float = 2.0
) -> tuple[Tensor, dict[str, float]]:
    """Detached IS weights ``[B,T]`` (0 on padding) and their metrics.

    Metrics (python floats, means over response tokens; 0 for an empty mask):
    ``mismatch/is_weight_mean`` (mean returned weight), ``mismatch/is_clipped_frac``
    (fraction of tokens whose raw weight exceeded ``cap``) and ``mismatch/is_reweighted_frac``
    (fraction whose returned weight differs from 1 by more than ``REWEIGHT_TOLERANCE``). Raises ``ValueError`` on an
    unknown correction (naming the valid ones) or a non-positive cap.
    """
    fn = IS_CORRECTIONS.get(correction)
    if learner_logp.dim() != 2 or sampler_logp.shape != learner_logp.shape or mask.shape != learner_logp.shape:
        raise ValueError(
            f"learner_logp, sampler_logp and mask must all be [B,T]; got {tuple(learner_logp.shape)}, "
            f"{tuple(sampler_logp.shape)}, {tuple(mask.shape)}"
        )
    if not cap > 0:
        raise ValueError(f"cap must be positive, got {cap}")
    with torch.no_grad():
        log_ratio = where_mask(learner_logp - sampler_logp, mask)  # [B,T]
        weights, capped = fn(log_ratio, mask, cap=cap)
        weights = where_mask(weights, mask)  # [B,T]
        metrics = {
            MISMATCH_IS_WEIGHT_MEAN: float(masked_mean(weights, mask)),
            MISMATCH_IS_CLIPPED_FRAC: float(masked_mean(capped.to(weights.dtype), mask)),
            MISMATCH_IS_REWEIGHTED_FRAC: float(
                masked_mean(((weights - 1.0).abs() > REWEIGHT_TOLERANCE).to(weights.dtype), mask)
            ),
        }
    return weights, metrics
