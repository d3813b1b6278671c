"""Contract: every registered loss's clip metrics equal what its clipping does to the gradient.

docs/metrics.md: ``clip/frac`` is the fraction of response tokens whose gradient the clipping
removes (``clip/frac_low``: those with A < 0, ``clip/frac_high``: A > 0); a loss that
truncates a weight instead (registered with ``truncates_weight=True``, e.g. CISPO) reports the fraction of tokens
whose weight was truncated (low: below ``1 - clip_low``, high: above ``1 + clip_high``),
whatever the advantage's sign.

The reference is computed by autograd, not by re-deriving each loss's formula: the same
inputs go through the loss twice, once with the configured clip range and once with a range
no ratio reaches, and the per-token gradients with respect to ``logp`` are compared.
"""

from __future__ import annotations

import pytest
import torch

from tests.algorithms.strategies import clip_range, random_logps, random_mask
from workbench.algorithms import POLICY_LOSSES, compute_policy_loss
from workbench.algorithms.losses import truncates_weight

# A clip range no log-ratio in these tests comes near (|log r| < 3 here): "no clipping".
NO_CLIP = 1e6
# The metrics are float32 means of 0/1 indicators over <= 5120 tokens: the integer sums are
# exact (< 2**24), the division rounds once (<= eps32/2 ~ 6e-8 relative) and clip/frac adds
# two such values (one more rounding): 3 roundings x 6e-8 x magnitude <= 1 -> 2e-7; 1e-6 is safe.
FRAC_TOL = 1e-6
# Losses without a clip range (reinforce: no ratio in the gradient; sapo: a soft gate whose slope is never 0).
# Their clip metrics must be 0, and the autograd reference finds no removed gradient either.
CLIPS_NOTHING = {name for name in POLICY_LOSSES.names() if not clip_range(name)}


def _token_grads(
    name: str,
    logp: torch.Tensor,
    old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token gradient of the loss with respect to ``logp`` ``[B,T]``, and the metrics."""
    leaf = logp.clone().requires_grad_(True)
    value, metrics = compute_policy_loss(name, leaf, old, adv, mask, **clip_range(name, clip_low, clip_high))
    (grad,) = torch.autograd.grad(value, leaf)
    return grad, metrics


def _inputs(seed: int, batch: int, length: int, spread: float):
    """Random log-probs with token noise ``spread`` plus a per-sequence drift (so sequence ratios move too)."""
    gen = torch.Generator().manual_seed(seed)
    mask = random_mask(gen, batch, length)
    logp, old = random_logps(gen, batch, length, spread=spread)
    logp = logp + 0.5 * spread * torch.randn(batch, 1, generator=gen)
    adv = torch.randn(batch, generator=gen)
    return logp, old, adv, mask


def _expected_fractions(name, logp, old, adv, mask, clip_low, clip_high) -> dict[str, float]:
    grad, _ = _token_grads(name, logp, old, adv, mask, clip_low, clip_high)
    free, _ = _token_grads(name, logp, old, adv, mask, NO_CLIP, NO_CLIP)
    tokens = mask.bool()
    if truncates_weight(name):
        # the gradient is kept but scaled by the truncated weight: it changes where the weight was cut
        event = tokens & (grad != free)
        ratio = torch.exp(logp - old)
        low, high = event & (ratio < 1.0), event & (ratio > 1.0)
    else:
        event = tokens & (grad == 0) & (free != 0)  # gradient removed by clipping
        side = adv[:, None].expand_as(mask)
        low, high = event & (side < 0), event & (side > 0)
    n = float(tokens.sum())
    return {
        "clip/frac": float(event.sum()) / n,
        "clip/frac_low": float(low.sum()) / n,
        "clip/frac_high": float(high.sum()) / n,
    }


CASES = [
    # the measurement: B=256, T=20, log-ratio sd 0.3, symmetric clip 0.4
    pytest.param(0, 256, 20, 0.3, 0.4, 0.4, id="issue-B256-T20-sd0.3-clip0.4"),
    pytest.param(1, 64, 12, 0.3, 0.2, 0.28, id="clip-higher"),
    pytest.param(2, 64, 12, 0.6, 0.2, 0.2, id="wide"),
]


@pytest.mark.parametrize("name", POLICY_LOSSES.names())
@pytest.mark.parametrize(("seed", "batch", "length", "spread", "clip_low", "clip_high"), CASES)
def test_clip_metrics_equal_what_the_clipping_does(name, seed, batch, length, spread, clip_low, clip_high):
    logp, old, adv, mask = _inputs(seed, batch, length, spread)
    expected = _expected_fractions(name, logp, old, adv, mask, clip_low, clip_high)
    _, metrics = _token_grads(name, logp, old, adv, mask, clip_low, clip_high)
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, abs=FRAC_TOL), key
    if name not in CLIPS_NOTHING:  # every clipping loss is exercised by these inputs
        assert expected["clip/frac_low"] > 0 and expected["clip/frac_high"] > 0


def test_gmpo_counts_token_level_log_space_clipping():
    # The measurement: B=256, T=20 (every token a response token), log-ratio sd 0.3,
    # clip 0.4. A token loses its gradient when its log-ratio passes the clip on its advantage's
    # side: probability P(Z > 0.4/0.3) = 0.0912. The old metric tested the sequence geometric
    # mean (sd 0.3/sqrt(20)) against the same range and reported ~0.3%.
    gen = torch.Generator().manual_seed(0)
    mask = torch.ones(256, 20)
    logp, old = random_logps(gen, 256, 20, spread=0.3)
    adv = torch.randn(256, generator=gen)
    _, metrics = _token_grads("gmpo", logp, old, adv, mask, 0.4, 0.4)
    # 5120 tokens: binomial sd of the fraction sqrt(0.0912 x 0.9088 / 5120) = 0.004; ±4 sd
    assert abs(metrics["clip/frac"] - 0.0912) < 0.016
    expected = _expected_fractions("gmpo", logp, old, adv, mask, 0.4, 0.4)
    assert metrics["clip/frac"] == pytest.approx(expected["clip/frac"], abs=FRAC_TOL)


def test_cispo_counts_truncation_whatever_the_advantage_sign():
    # every advantage positive, every ratio far below 1 - clip_low: no gradient is removed,
    # but every weight is truncated (low side).
    gen = torch.Generator().manual_seed(5)
    mask = random_mask(gen, 8, 6)
    old = -torch.rand(8, 6, generator=gen) - 0.1
    logp = old - 1.0  # ratio e^-1 = 0.37 < 0.8
    _, metrics = compute_policy_loss("cispo", logp, old, torch.ones(8), mask, clip_low=0.2, clip_high=0.28)
    assert metrics["clip/frac"] == 1.0 and metrics["clip/frac_low"] == 1.0 and metrics["clip/frac_high"] == 0.0


def test_the_weight_truncating_losses_are_those_registered_so():
    assert [name for name in POLICY_LOSSES.names() if truncates_weight(name)] == ["cispo"]
