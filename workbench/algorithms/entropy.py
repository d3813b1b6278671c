"""Next-token entropy of the learner's distribution (the ``entropy/mean`` metric, entropy bonuses)."""

from __future__ import annotations

import torch
from torch import Tensor


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Shannon entropy ``H = logsumexp(z) - Σ_v softmax(z)_v · z_v`` per position: ``[B,T,V] -> [B,T]``.

    The identity avoids ``0 · log 0`` and is stable for large logits (verl computes the same).
    Half-precision logits are evaluated in float32; the result is float32 then.
    """
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    probs = torch.softmax(logits, dim=-1)  # [B,T,V]
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)  # [B,T]
