"""Masked reductions and the clamped ratio shared by the algorithm units (private).

Padding positions (``mask == 0``) may hold arbitrary finite values; every helper here
selects with ``torch.where`` instead of multiplying by the mask, so padding never reaches
a result, not even as ``0 * value``.
"""

from __future__ import annotations

import torch
from torch import Tensor

# Log-ratios are clamped to this magnitude before ``exp`` (verl's convention; docs/api.md).
MAX_LOG_RATIO = 20.0


def as_bool(mask: Tensor) -> Tensor:
    """``mask`` (bool, int or float; 1 on response tokens) as a bool tensor of the same shape."""
    return mask if mask.dtype == torch.bool else mask != 0


def where_mask(values: Tensor, mask: Tensor, fill: float = 0.0) -> Tensor:
    """``values`` with every padding position replaced by ``fill``."""
    return torch.where(as_bool(mask), values, torch.full_like(values, fill))


def masked_sum(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``values`` over response tokens (all of them, or along ``dim``)."""
    clean = where_mask(values, mask)
    return clean.sum() if dim is None else clean.sum(dim=dim)


def token_count(mask: Tensor, dim: int | None = None) -> Tensor:
    """Number of response tokens (all, or along ``dim``) as float, at least 1.

    The floor of 1 makes an all-padding row (or batch) reduce to 0 instead of 0/0.
    """
    count = as_bool(mask).sum() if dim is None else as_bool(mask).sum(dim=dim)
    return count.clamp(min=1).to(torch.get_default_dtype())


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``values`` over response tokens, as a tensor (differentiable); 0 where there are none."""
    return masked_sum(values, mask, dim) / token_count(mask, dim).to(values.dtype)


def masked_max(values: Tensor, mask: Tensor) -> Tensor:
    """Largest value over response tokens; 0 when there are none."""
    bmask = as_bool(mask)
    if not bool(bmask.any()):
        return values.new_zeros(())
    return values[bmask].max()


def clamped_exp(log_ratio: Tensor) -> Tensor:
    """``exp`` of a log-ratio clamped to ±``MAX_LOG_RATIO`` (no overflow to inf)."""
    return torch.exp(log_ratio.clamp(min=-MAX_LOG_RATIO, max=MAX_LOG_RATIO))


def sequence_mean_log_ratio(log_ratio: Tensor, mask: Tensor) -> Tensor:
    """Length-normalised sequence log-ratio ``(1/|y_b|) Σ_t log_ratio[b, t]``: ``[B,T] -> [B]``.

    ``exp`` of it is the geometric mean of the token ratios of sequence ``b``.
    """
    return masked_mean(log_ratio, mask, dim=-1)  # [B]
