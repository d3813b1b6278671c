"""Loss aggregation: a per-token loss matrix ``[B,T]`` and a response mask -> a scalar.

The choice decides how much each token and each sequence weighs in the gradient, which is
what Dr. GRPO and DAPO argue about. Every mode is registered in ``AGG_MODES`` under verl's
``loss_agg_mode`` name and gives verl 0.9.1's ``agg_loss`` number (single data-parallel rank).
Sequence means count only sequences with at least one response token (as verl does).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from torch import Tensor

from workbench.algorithms._masked import as_bool, masked_sum, token_count
from workbench.registry import Activity, Registry

Aggregator = Callable[..., Tensor]

AGG_MODES: Registry[Aggregator] = Registry(
    "loss aggregation mode", activity=Activity.always("weighs every token's loss")
)


def _seq_mean(seq_values: Tensor, mask: Tensor) -> Tensor:
    """Mean of per-sequence values ``[B]`` over sequences with at least one response token."""
    nonempty = as_bool(mask).any(dim=-1)  # [B]
    return masked_sum(seq_values, nonempty) / token_count(nonempty).to(seq_values.dtype)


@AGG_MODES.register("token-mean")
def token_mean(loss_mat: Tensor, mask: Tensor) -> Tensor:
    """Every response token in the batch weighs the same: ``Σ_bt l / Σ_bt m``.

    DAPO, Yu et al. 2025, §3.3 "Token-Level Policy Gradient Loss" (also Lite PPO's choice).
    """
    return masked_sum(loss_mat, mask) / token_count(mask).to(loss_mat.dtype)


@AGG_MODES.register("token-sum")
def token_sum(loss_mat: Tensor, mask: Tensor) -> Tensor:
    """Plain sum over response tokens ``Σ_bt l``; the gradient scale grows with the batch's token count.

    verl's ``loss_agg_mode=token-sum`` (HybridFlow, Sheng et al. 2024); the DAPO token-level
    objective (Yu et al. 2025, §3.3) without its normalising constant.
    """
    return masked_sum(loss_mat, mask)


@AGG_MODES.register("seq-mean-token-mean")
def seq_mean_token_mean(loss_mat: Tensor, mask: Tensor) -> Tensor:
    """Mean over sequences of each sequence's token mean (the original GRPO objective).

    GRPO, Shao et al. 2024 (DeepSeekMath), §4.1.1 (Eq. 3): ``1/G Σ_i 1/|o_i| Σ_t``. Longer
    responses get a smaller per-token weight: the length bias Dr. GRPO §3.1 points out.
    """
    per_seq = masked_sum(loss_mat, mask, dim=-1) / token_count(mask, dim=-1).to(loss_mat.dtype)  # [B]
    return _seq_mean(per_seq, mask)


@AGG_MODES.register("seq-mean-token-sum")
def seq_mean_token_sum(loss_mat: Tensor, mask: Tensor) -> Tensor:
    """Mean over sequences of each sequence's token sum: ``1/B Σ_b Σ_t l``.

    Dr. GRPO, Liu et al. 2025, §3.1 (no per-response length normalisation).
    """
    return _seq_mean(masked_sum(loss_mat, mask, dim=-1), mask)  # [B] -> []


@AGG_MODES.register("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(loss_mat: Tensor, mask: Tensor, *, norm_constant: float | None = None) -> Tensor:
    """``seq-mean-token-sum`` divided by a constant length (default: the padded length ``T``).

    Dr. GRPO, Liu et al. 2025, §3.1: a constant (e.g. the generation budget) replaces
    ``|o_i|`` so the gradient scale does not depend on response length. verl's
    ``loss_scale_factor=None`` likewise divides by ``loss_mask.shape[-1]``.
    """
    horizon = loss_mat.shape[-1] if norm_constant is None else norm_constant
    if horizon <= 0:
        raise ValueError(f"norm_constant must be positive, got {horizon}")
    return seq_mean_token_sum(loss_mat, mask) / horizon


def _accepts_norm_constant(fn: Aggregator) -> bool:
    return "norm_constant" in inspect.signature(fn).parameters


def run_norm_constant(mode: str, generation_budget: int) -> float | None:
    """The constant a *run* divides by in a mode that takes ``norm_constant``; None for other modes.

    The API's fallback (verl's) is the batch's padded length, which changes from step to step;
    a run divides by its generation budget (``sampler.max_new_tokens``) instead, the constant
    Dr. GRPO §3.1 (Liu et al. 2025) calls for and TRL's ``loss_type="dr_grpo"`` uses.
    """
    return float(generation_budget) if _accepts_norm_constant(AGG_MODES.get(mode)) else None


def aggregate_loss(loss_mat: Tensor, mask: Tensor, mode: str, *, norm_constant: float | None = None) -> Tensor:
    """Reduce a per-token loss ``[B,T]`` over response tokens (``mask``) to a scalar.

    Padding positions may hold any finite value; they never reach the result. An empty
    mask gives 0. ``norm_constant`` is only meaningful for modes that take it
    (``seq-mean-token-sum-norm``); passing it to another mode raises ``ValueError``, as does
    an unknown ``mode`` (naming the valid ones).
    """
    fn = AGG_MODES.get(mode)
    if loss_mat.shape != mask.shape or loss_mat.dim() != 2:
        raise ValueError(f"loss_mat and mask must both be [B,T]; got {tuple(loss_mat.shape)}, {tuple(mask.shape)}")
    if _accepts_norm_constant(fn):
        return fn(loss_mat, mask, norm_constant=norm_constant)
    if norm_constant is not None:
        raise ValueError(f"norm_constant applies to seq-mean-token-sum-norm, not to aggregation mode {mode!r}")
    return fn(loss_mat, mask)
