"""Batch-level units: which groups and tokens enter the loss.

``BATCH_FILTERS`` decide per group whether it is kept (DAPO dynamic sampling); the loop
oversamples and refills until the batch is full. ``TOKEN_FILTERS`` edit the loss mask.
"""

from __future__ import annotations

import torch
from torch import Tensor

from workbench.registry import Registry

BATCH_FILTERS: Registry = Registry("batch filter")
TOKEN_FILTERS: Registry = Registry("token filter")


@BATCH_FILTERS.register("zero_std")
def keep_nonzero_std(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """DAPO (Yu et al. 2025) §3.2 dynamic sampling: drop groups whose rewards are all equal.

    Such groups have zero advantage under any group baseline, so they only dilute the batch.
    Returns a ``[B]`` bool mask, constant within each group.
    """
    keep = torch.zeros_like(rewards, dtype=torch.bool)  # [B]
    for g in group_ids.unique():
        members = group_ids == g
        keep[members] = bool((rewards[members] != rewards[members][0]).any())
    return keep


@TOKEN_FILTERS.register("overlong")
def mask_truncated(mask: Tensor, truncated: Tensor) -> Tensor:
    """DAPO (Yu et al. 2025) §3.4 overlong filtering: truncated responses get no gradient.

    A response cut off at ``max_new_tokens`` is not wrong, only unfinished; punishing it
    teaches the model to be short rather than right.
    """
    return mask * (~truncated).to(mask.dtype).unsqueeze(-1)  # [B, T]
