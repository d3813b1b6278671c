"""The invariants issue #3 names, one hypothesis property each."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.algorithms.strategies import clip_range
from tests.tolerance import EPS32, order_tolerance
from workbench.algorithms import (
    ADVANTAGE_ESTIMATORS,
    IS_CORRECTIONS,
    POLICY_LOSSES,
    aggregate_loss,
    compute_advantages,
    compute_policy_loss,
    importance_weights,
)
from workbench.metrics.mismatch import mismatch_metrics

FAST = settings(max_examples=40, deadline=None)
seeds = st.integers(0, 2**31 - 1)


def rand(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def ragged_mask(seed: int, batch: int, length: int) -> torch.Tensor:
    lengths = torch.randint(1, length + 1, (batch,), generator=torch.Generator().manual_seed(seed))
    return (torch.arange(length) < lengths[:, None]).float()


@FAST
@given(
    estimator=st.sampled_from(["grpo", "dr_grpo", "rloo"]),
    n_groups=st.integers(1, 4),
    group_size=st.integers(2, 8),
    seed=seeds,
)
def test_group_baseline_advantages_sum_to_zero_per_group(estimator, n_groups, group_size, seed):
    rewards = rand(seed, n_groups * group_size)
    group_ids = torch.arange(n_groups).repeat_interleave(group_size)
    adv = compute_advantages(estimator, rewards, group_ids)
    sums = torch.zeros(n_groups).index_add_(0, group_ids, adv)
    # float32: the group mean is off by ≤ 2·group_size·eps32·max|r|; the group_size deviations each
    # carry it, scaled by the estimator (grpo: 1/(group std + 1e-6); rloo: n/(n-1) ≤ 2); then the sum
    # itself rounds: ≤ group_size·eps32·max|adv|
    r = rewards.double().view(n_groups, group_size)
    scale = {"grpo": 1.0 / (float(r.std(dim=1).min()) + 1e-6), "rloo": 2.0}.get(estimator, 1.0)
    tol = group_size * order_tolerance(2 * group_size, float(rewards.abs().max())) * scale + order_tolerance(
        group_size, float(adv.abs().max())
    )
    assert torch.allclose(sums, torch.zeros(n_groups), atol=tol, rtol=0)


@FAST
@given(batch=st.integers(1, 6), length=st.integers(1, 12), seed=seeds)
def test_token_mean_weighs_every_token_equally_whatever_the_lengths(batch, length, seed):
    """Moving one unit of loss between any two response tokens leaves token-mean unchanged."""
    mask = ragged_mask(seed, batch, length)
    loss = rand(seed + 1, batch, length)
    on = mask.nonzero()
    i, j = on[0], on[-1]
    moved = loss.clone()
    moved[i[0], i[1]] += 1.0
    moved[j[0], j[1]] -= 1.0
    # moving the unit rounds each of the two touched tokens at magnitude 1 + |value| (x + 1 - 1 != x in
    # float32), then float32 means of ≤ batch·length values in two orders: (batch·length + 2)·eps32·(1 + max|value|)
    tol = order_tolerance(batch * length + 2, 1.0 + float(moved.abs().max()))
    assert torch.allclose(
        aggregate_loss(loss, mask, "token-mean"), aggregate_loss(moved, mask, "token-mean"), atol=tol, rtol=0
    )
    assert torch.allclose(aggregate_loss(loss, mask, "token-mean"), (loss * mask).sum() / mask.sum(), atol=tol, rtol=0)


@FAST
@given(batch=st.integers(1, 6), length=st.integers(1, 10), seed=seeds)
def test_cispo_keeps_gradient_on_clipped_tokens_where_ppo_clip_has_none(batch, length, seed):
    mask = torch.ones(batch, length)
    old = -rand(seed, batch, length).abs()
    adv = torch.ones(batch)  # A > 0, so ratios above 1 + ε_high are clipped
    logp = (old + 1.0).detach().requires_grad_(True)  # ratio e ≈ 2.7: clipped for ε_high = 0.28
    for loss, expect_zero in [("ppo_clip", True), ("cispo", False)]:
        value, _ = compute_policy_loss(loss, logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
        (grad,) = torch.autograd.grad(value, logp)
        assert bool((grad == 0).all()) == expect_zero, loss


@FAST
@given(
    correction=st.sampled_from(["tis", "seq_tis"]),
    cap=st.floats(1.0, 5.0),
    batch=st.integers(1, 6),
    length=st.integers(1, 10),
    seed=seeds,
)
def test_truncated_weights_never_exceed_the_cap(correction, cap, batch, length, seed):
    mask = ragged_mask(seed, batch, length)
    weights, _ = importance_weights(
        correction, 3 * rand(seed, batch, length), 3 * rand(seed + 1, batch, length), mask, cap=cap
    )
    assert (weights[mask.bool()] <= cap * (1 + EPS32)).all()  # clamped to float32(cap): one rounding of cap


@FAST
@given(
    correction=st.sampled_from(IS_CORRECTIONS.names()), batch=st.integers(1, 6), length=st.integers(1, 10), seed=seeds
)
def test_identical_sampler_and_learner_give_zero_mismatch_and_unit_weights(correction, batch, length, seed):
    mask = ragged_mask(seed, batch, length)
    logp = -rand(seed, batch, length).abs()
    weights, _ = importance_weights(correction, logp, logp.clone(), mask, cap=2.0)
    assert torch.allclose(weights[mask.bool()], torch.ones(int(mask.sum())))
    m = mismatch_metrics(logp, logp.clone(), mask)
    assert m["mismatch/prob_abs_diff_max"] == 0 and m["mismatch/kl"] == 0


@FAST
@given(loss=st.sampled_from(POLICY_LOSSES.names()), estimator=st.sampled_from(ADVANTAGE_ESTIMATORS.names()), seed=seeds)
def test_extreme_log_ratios_stay_finite(loss, estimator, seed):
    mask = torch.ones(3, 5)
    old = -rand(seed, 3, 5).abs()
    logp = (old + 200 * rand(seed + 1, 3, 5)).requires_grad_(True)  # ratios far beyond exp(±20)
    adv = compute_advantages(estimator, torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0, 0, 1]))
    value, metrics = compute_policy_loss(loss, logp, old, adv, mask, **clip_range(loss))
    (grad,) = torch.autograd.grad(value, logp)
    assert torch.isfinite(value) and torch.isfinite(grad).all()
    assert all(v == v for v in metrics.values())
