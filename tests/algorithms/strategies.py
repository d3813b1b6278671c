"""Hypothesis strategies and random inputs shared by the algorithm tests."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from workbench.algorithms import POLICY_LOSSES
from workbench.algorithms.params import keyword_params

# Small shapes keep every test fast; the code paths do not depend on size.
batch_sizes = st.integers(min_value=1, max_value=6)
lengths = st.integers(min_value=1, max_value=7)
seeds = st.integers(min_value=0, max_value=2**31 - 1)
clips = st.floats(min_value=0.05, max_value=0.5)


def clip_range(loss: str, low: float = 0.2, high: float = 0.2) -> dict[str, float]:
    """The clip bounds ``{clip_low: low, clip_high: high}`` if the loss takes them (``reinforce``, ``sapo``: none),
    for tests that call every registered loss alike."""
    takes = keyword_params(POLICY_LOSSES.get(loss))
    return {key: value for key, value in (("clip_low", low), ("clip_high", high)) if key in takes}


def random_mask(gen: torch.Generator, batch: int, length: int, *, allow_empty_rows: bool = False) -> torch.Tensor:
    """Right-padded response mask ``[B,T]`` (float), each row 1..T tokens (0..T if allowed)."""
    low = 0 if allow_empty_rows else 1
    lens = torch.randint(low, length + 1, (batch,), generator=gen)  # [B]
    return (torch.arange(length)[None, :] < lens[:, None]).float()  # [B,T]


def random_logps(gen: torch.Generator, batch: int, length: int, spread: float = 0.3):
    """(logp, old_logp) ``[B,T]``: log-probs below 0 whose log-ratio has std ``spread``."""
    old = -torch.rand(batch, length, generator=gen) * 3.0 - 0.05  # [B,T] in (-3.05, -0.05)
    new = old + spread * torch.randn(batch, length, generator=gen)  # [B,T]
    return new, old


def with_garbage(values: torch.Tensor, mask: torch.Tensor, gen: torch.Generator, scale: float = 50.0) -> torch.Tensor:
    """``values`` with padding positions overwritten by large arbitrary finite numbers."""
    junk = scale * torch.randn(values.shape, generator=gen, dtype=values.dtype)
    return torch.where(mask.bool(), values, junk)
