"""Hypothesis property tests of the algorithm units."""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.algorithms.strategies import (
    batch_sizes,
    clip_range,
    clips,
    lengths,
    random_logps,
    random_mask,
    seeds,
    with_garbage,
)
from tests.tolerance import EPS64, order_tolerance
from workbench.algorithms import (
    ADVANTAGE_ESTIMATORS,
    AGG_MODES,
    IS_CORRECTIONS,
    KL_ESTIMATORS,
    POLICY_LOSSES,
    aggregate_loss,
    compute_advantages,
    compute_policy_loss,
    importance_weights,
    kl_penalty,
)

FAST = settings(max_examples=40, deadline=None)
ESTIMATORS = ADVANTAGE_ESTIMATORS.names()
EPSILON = 1e-6  # compute_advantages' default guard on a std


def smallest_std(rewards: torch.Tensor, group_ids: torch.Tensor) -> float:
    """The smallest std any estimator divides by here (float64): a group's (singletons: 1) or the
    batch's, plus the guard. Rounding errors in a mean are amplified by 1/std after normalising."""
    r = rewards.double()
    stds = [float(r[group_ids == g].std()) if int((group_ids == g).sum()) > 1 else 1.0 for g in torch.unique(group_ids)]
    centred = r - torch.stack([r[group_ids == g].mean() for g in group_ids])
    if r.numel() > 1:
        stds += [float(r.std()), float(centred.std())]
    return min(stds) + EPSILON


def grouped_rewards(gen: torch.Generator, n_groups: int, group_size: int, binary: bool):
    rewards = (
        torch.randint(0, 2, (n_groups * group_size,), generator=gen).float()
        if binary
        else torch.randn(n_groups * group_size, generator=gen)
    )
    group_ids = torch.arange(n_groups).repeat_interleave(group_size)
    perm = torch.randperm(rewards.numel(), generator=gen)  # groups need not be contiguous
    return rewards[perm], group_ids[perm]


# --- advantages -------------------------------------------------------------------------------


@FAST
@example(estimator="grpo", n_groups=1, group_size=6, value=4.7, seed=0, binary=False)  # mean(4.7 x 6) != 4.7 in fp32
@given(
    estimator=st.sampled_from(ESTIMATORS),
    n_groups=st.integers(1, 4),
    group_size=st.integers(2, 6),
    value=st.floats(-5, 5),
    seed=seeds,
    binary=st.booleans(),
)
def test_group_with_equal_rewards_has_zero_advantage(estimator, n_groups, group_size, value, seed, binary):
    gen = torch.Generator().manual_seed(seed)
    rewards, group_ids = grouped_rewards(gen, n_groups, group_size, binary)
    rewards = torch.where(group_ids == 0, torch.tensor(value), rewards)  # group 0: all rewards equal
    adv = compute_advantages(estimator, rewards, group_ids)
    # Exactly 0 (no ulp noise blown up by a ~0 std); batch whitening subtracts the batch mean
    # of the other groups' centred rewards, which is 0 only up to rounding: ≤ 2n·eps32·max|r| (sum of the
    # centred values, then the mean), times the whitening factor 1/sqrt(var_B + 1e-8).
    atol = 0.0
    if estimator == "reinforce_plus_plus_baseline":
        centred = rewards.double() - torch.stack([rewards.double()[group_ids == g].mean() for g in group_ids])
        whiten = 1.0 / (float(centred.var()) + 1e-8) ** 0.5 if rewards.numel() > 1 else 0.0
        atol = order_tolerance(2 * rewards.numel(), float(rewards.abs().max())) * whiten
    torch.testing.assert_close(adv[group_ids == 0], torch.zeros(group_size), atol=atol, rtol=0)


@FAST
@given(n_groups=st.integers(1, 4), group_size=st.integers(2, 6), seed=seeds, binary=st.booleans())
def test_grpo_advantages_have_zero_group_mean(n_groups, group_size, seed, binary):
    gen = torch.Generator().manual_seed(seed)
    rewards, group_ids = grouped_rewards(gen, n_groups, group_size, binary)
    rewards = rewards.double()  # float64 in, float64 out: near-equal rewards stay well conditioned
    adv = compute_advantages("grpo", rewards, group_ids)
    assert adv.dtype == torch.float64
    for g in range(n_groups):
        # float64: the group mean (≤ 2·group_size operations) of values ≤ max|adv|
        assert abs(float(adv[group_ids == g].mean())) <= order_tolerance(2 * group_size, float(adv.abs().max()), EPS64)
        if rewards[group_ids == g].std() > 0.1:  # non-degenerate group: unit Bessel std up to the guard
            # std(adv) = s/(s + eps) ≥ 1 - eps/s ≥ 1 - eps/0.1, plus float64 rounding (negligible, 1e-14)
            assert float(adv[group_ids == g].std()) == pytest.approx(1.0, abs=EPSILON / 0.1 + 1e-12)


@FAST
@given(estimator=st.sampled_from(ESTIMATORS), n_groups=st.integers(1, 4), group_size=st.integers(1, 5), seed=seeds)
def test_advantages_do_not_depend_on_order_or_labels(estimator, n_groups, group_size, seed):
    gen = torch.Generator().manual_seed(seed)
    rewards, group_ids = grouped_rewards(gen, n_groups, group_size, binary=False)
    adv = compute_advantages(estimator, rewards, group_ids)
    perm = torch.randperm(rewards.numel(), generator=gen)
    relabelled = group_ids * 7 + 100  # different ids, same partition
    adv_perm = compute_advantages(estimator, rewards[perm], relabelled[perm])
    # float32, another summation order: the means and variances (≤ 4n operations on values ≤ max|r|)
    # move by ≤ 4n·eps32·max|r|, and normalising divides that by the smallest std involved.
    tol = order_tolerance(4 * rewards.numel(), float(rewards.abs().max())) / smallest_std(rewards, group_ids)
    torch.testing.assert_close(adv_perm, adv[perm], atol=tol, rtol=order_tolerance(4 * rewards.numel(), 1.0))


# --- padding invariance ------------------------------------------------------------------------


@FAST
@given(mode=st.sampled_from(AGG_MODES.names()), batch=batch_sizes, length=lengths, seed=seeds)
def test_aggregation_ignores_padding(mode, batch, length, seed):
    gen = torch.Generator().manual_seed(seed)
    mask = random_mask(gen, batch, length, allow_empty_rows=True)
    loss_mat = torch.randn(batch, length, generator=gen)
    assert torch.equal(
        aggregate_loss(loss_mat, mask, mode), aggregate_loss(with_garbage(loss_mat, mask, gen), mask, mode)
    )


@FAST
@given(
    loss=st.sampled_from(POLICY_LOSSES.names()),
    mode=st.sampled_from(AGG_MODES.names()),
    batch=batch_sizes,
    length=lengths,
    seed=seeds,
    weighted=st.booleans(),
)
def test_policy_loss_ignores_padding(loss, mode, batch, length, seed, weighted):
    gen = torch.Generator().manual_seed(seed)
    mask = random_mask(gen, batch, length)
    logp, old = random_logps(gen, batch, length)
    adv = torch.randn(batch, generator=gen)
    weights = torch.rand(batch, length, generator=gen) * 2 if weighted else None

    def run(lp, ol, w):
        lp = lp.clone().requires_grad_(True)
        value, metrics = compute_policy_loss(loss, lp, ol, adv, mask, agg_mode=mode, is_weights=w, **clip_range(loss))
        value.backward()
        return value, metrics, torch.where(mask.bool(), lp.grad, 0.0)

    clean = run(logp, old, weights)
    dirty = run(
        with_garbage(logp, mask, gen),
        with_garbage(old, mask, gen),
        None if weights is None else with_garbage(weights, mask, gen),
    )
    assert torch.equal(clean[0], dirty[0])
    assert clean[1] == dirty[1]
    assert torch.equal(clean[2], dirty[2])


@FAST
@given(correction=st.sampled_from(IS_CORRECTIONS.names()), batch=batch_sizes, length=lengths, seed=seeds)
def test_importance_weights_ignore_padding(correction, batch, length, seed):
    gen = torch.Generator().manual_seed(seed)
    mask = random_mask(gen, batch, length, allow_empty_rows=True)
    learner, sampler = random_logps(gen, batch, length, spread=0.8)
    clean = importance_weights(correction, learner, sampler, mask)
    dirty = importance_weights(correction, with_garbage(learner, mask, gen), with_garbage(sampler, mask, gen), mask)
    assert torch.equal(clean[0], dirty[0]) and clean[1] == dirty[1]
    assert bool((clean[0][mask == 0] == 0).all())
    assert bool((clean[0] <= 2.0).all())  # never above the cap


# --- policy-loss invariants ---------------------------------------------------------------------


@FAST
@given(mode=st.sampled_from(AGG_MODES.names()), batch=batch_sizes, length=lengths, seed=seeds, lo=clips, hi=clips)
def test_ppo_clip_on_policy_is_minus_aggregated_advantage(mode, batch, length, seed, lo, hi):
    gen = torch.Generator().manual_seed(seed)
    mask = random_mask(gen, batch, length)
    logp, _ = random_logps(gen, batch, length)
    adv = torch.randn(batch, generator=gen)
    value, metrics = compute_policy_loss("ppo_clip", logp, logp, adv, mask, clip_low=lo, clip_high=hi, agg_mode=mode)
    # ratio 1 everywhere: the per-token loss is -A, aggregated like any loss matrix
    expected = aggregate_loss(-adv[:, None].expand(batch, length), mask, mode)
    # the same per-token values (ratio exp(0) = 1 exactly), aggregated possibly in another order:
    # ≤ batch·length operands of size ≤ max|A|
    tol = order_tolerance(batch * length, float(adv.abs().max()))
    torch.testing.assert_close(value, expected, atol=tol, rtol=0)
    assert metrics["clip/frac"] == metrics["clip/frac_low"] == metrics["clip/frac_high"] == 0.0
    assert metrics["policy/ratio_mean"] == pytest.approx(1.0) and metrics["policy/approx_kl"] == 0.0


@FAST
@given(batch=batch_sizes, length=lengths, seed=seeds, lo=clips, hi=clips, mode=st.sampled_from(AGG_MODES.names()))
def test_ppo_clip_gradient_is_zero_exactly_where_clipped(batch, length, seed, lo, hi, mode):
    gen = torch.Generator().manual_seed(seed)
    mask = random_mask(gen, batch, length)
    logp, old = random_logps(gen, batch, length, spread=0.4)
    adv = torch.randn(batch, generator=gen)
    logp.requires_grad_(True)
    value, _ = compute_policy_loss("ppo_clip", logp, old, adv, mask, clip_low=lo, clip_high=hi, agg_mode=mode)
    value.backward()
    ratio = torch.exp(logp.detach() - old)
    a = adv[:, None]
    clipped = ((ratio < 1 - lo) & (a < 0)) | ((ratio > 1 + hi) & (a > 0))  # DESIGN's clip events
    response = mask.bool() & (a != 0)
    assert torch.equal(logp.grad[response] == 0, clipped[response])
    assert bool((logp.grad[~mask.bool()] == 0).all())


@FAST
@given(batch=batch_sizes, length=lengths, seed=seeds, lo=clips, hi=clips)
def test_gspo_gradient_is_zero_exactly_where_sequence_is_clipped(batch, length, seed, lo, hi):
    gen = torch.Generator().manual_seed(seed)
    mask = random_mask(gen, batch, length)
    logp, old = random_logps(gen, batch, length, spread=0.4)
    adv = torch.randn(batch, generator=gen)
    logp.requires_grad_(True)
    value, metrics = compute_policy_loss("gspo", logp, old, adv, mask, clip_low=lo, clip_high=hi)
    value.backward()
    seq_ratio = torch.exp(((logp.detach() - old) * mask).sum(-1) / mask.sum(-1))  # [B]
    clipped = ((seq_ratio < 1 - lo) & (adv < 0)) | ((seq_ratio > 1 + hi) & (adv > 0))  # [B]
    grad_zero = (logp.grad * mask == 0).all(dim=-1)  # [B]
    assert torch.equal(grad_zero[adv != 0], clipped[adv != 0])
    frac = float((clipped[:, None] * mask).sum() / mask.sum())
    assert metrics["clip/frac"] == pytest.approx(frac, abs=1e-6)  # count/count: one float32 rounding, ≤ eps32


@FAST
@given(loss=st.sampled_from(POLICY_LOSSES.names()), batch=batch_sizes, length=lengths, seed=seeds)
def test_clip_fractions_add_up_and_are_fractions(loss, batch, length, seed):
    gen = torch.Generator().manual_seed(seed)
    mask = random_mask(gen, batch, length)
    logp, old = random_logps(gen, batch, length, spread=0.5)
    _, m = compute_policy_loss(loss, logp, old, torch.randn(batch, generator=gen), mask, **clip_range(loss))
    assert 0.0 <= m["clip/frac_low"] <= 1.0 and 0.0 <= m["clip/frac_high"] <= 1.0
    assert m["clip/frac"] == pytest.approx(m["clip/frac_low"] + m["clip/frac_high"])
    # max ≥ mean exactly; the float32 mean of ≤ B·T ratios (≤ e^2.5 at spread 0.5) may round above it
    assert m["policy/ratio_max"] >= m["policy/ratio_mean"] - order_tolerance(batch * length, m["policy/ratio_max"])


@FAST
@given(loss=st.sampled_from(POLICY_LOSSES.names()), batch=batch_sizes, length=lengths, seed=seeds)
def test_unit_is_weights_change_nothing(loss, batch, length, seed):
    gen = torch.Generator().manual_seed(seed)
    mask = random_mask(gen, batch, length)
    logp, old = random_logps(gen, batch, length)
    adv = torch.randn(batch, generator=gen)
    plain = compute_policy_loss(loss, logp, old, adv, mask, **clip_range(loss))
    weighted = compute_policy_loss(loss, logp, old, adv, mask, is_weights=torch.ones(batch, length), **clip_range(loss))
    torch.testing.assert_close(plain[0], weighted[0])
    assert plain[1] == weighted[1]


@FAST
@given(
    estimator=st.sampled_from(KL_ESTIMATORS.names()),
    batch=batch_sizes,
    length=lengths,
    seed=seeds,
)
def test_kl_is_zero_on_identical_policies(estimator, batch, length, seed):
    gen = torch.Generator().manual_seed(seed)
    logp, _ = random_logps(gen, batch, length)
    assert bool((kl_penalty(logp, logp, estimator) == 0).all())


# --- unknown names ------------------------------------------------------------------------------

B, T = 2, 3
_X = torch.zeros(B, T)
_M = torch.ones(B, T)
CALLS = {
    "advantage estimator": lambda name: compute_advantages(name, torch.zeros(B), torch.zeros(B)),
    "loss aggregation mode": lambda name: aggregate_loss(_X, _M, name),
    "policy loss": lambda name: compute_policy_loss(name, _X, _X, torch.zeros(B), _M),
    "importance-sampling correction": lambda name: importance_weights(name, _X, _X, _M),
    "KL estimator": lambda name: kl_penalty(_X, _X, name),
}
REGISTRIES = {
    "advantage estimator": ADVANTAGE_ESTIMATORS,
    "loss aggregation mode": AGG_MODES,
    "policy loss": POLICY_LOSSES,
    "importance-sampling correction": IS_CORRECTIONS,
    "KL estimator": KL_ESTIMATORS,
}


@pytest.mark.parametrize("kind", sorted(CALLS))
@settings(max_examples=15, deadline=None)
@given(name=st.text(min_size=0, max_size=12))
def test_unknown_names_raise_value_error_listing_choices(kind, name):
    registry = REGISTRIES[kind]
    if name in registry:
        return
    with pytest.raises(ValueError) as info:
        CALLS[kind](name)
    message = str(info.value)
    assert kind in message
    assert all(valid in message for valid in registry.names())


def test_unknown_name_suggests_the_closest():
    with pytest.raises(ValueError, match="did you mean 'ppo_clip'"):
        compute_policy_loss("ppo_clp", _X, _X, torch.zeros(B), _M)
    with pytest.raises(ValueError, match="did you mean 'token-mean'"):
        compute_policy_loss("ppo_clip", _X, _X, torch.zeros(B), _M, agg_mode="token_mean")


def test_arguments_that_do_not_apply_are_rejected():
    clip = clip_range("ppo_clip")
    with pytest.raises(
        ValueError,
        match=r"policy loss 'gspo' has no parameter 'dual_clip' \(valid: clip_high, "
        r"clip_low\)",
    ):
        compute_policy_loss("gspo", _X, _X, torch.zeros(B), _M, dual_clip=3.0, **clip)
    with pytest.raises(ValueError, match="policy loss 'reinforce' has no parameter 'clip_low'"):
        compute_policy_loss("reinforce", _X, _X, torch.zeros(B), _M, **clip)
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        compute_policy_loss("ppo_clip", _X, _X, torch.zeros(B), _M, dual_clip=0.5, **clip)
    with pytest.raises(ValueError, match="clip_low and clip_high must be >= 0"):
        compute_policy_loss("gmpo", _X, _X, torch.zeros(B), _M, clip_low=-0.1, clip_high=0.2)
    with pytest.raises(
        ValueError,
        match=r"policy loss 'ppo_clip' needs parameter 'clip_high' \(takes: clip_low, "
        r"clip_high, dual_clip\)",
    ):
        compute_policy_loss("ppo_clip", _X, _X, torch.zeros(B), _M, clip_low=0.2)
    with pytest.raises(ValueError, match="norm_constant applies to seq-mean-token-sum-norm"):
        aggregate_loss(_X, _M, "token-mean", norm_constant=4.0)
    with pytest.raises(ValueError, match="norm_constant does not apply"):
        compute_policy_loss("gmpo", _X, _X, torch.zeros(B), _M, norm_constant=4.0, **clip)
    with pytest.raises(ValueError, match="cap must be positive"):
        importance_weights("tis", _X, _X, _M, cap=0.0)
    with pytest.raises(ValueError, match="advantages must be"):
        compute_policy_loss("ppo_clip", _X, _X, torch.zeros(B, T), _M)


@FAST
@given(n_groups=st.integers(1, 4), group_size=st.integers(1, 5), length=lengths, seed=seeds, binary=st.booleans())
def test_masked_whitening_counts_each_completion_once_per_token(n_groups, group_size, length, seed, binary):
    # reinforce_plus_plus_baseline with a mask == plain whitening of the centred rewards repeated
    # once per response token (verl's masked_whiten over a [B,T] tensor), read back per completion.
    gen = torch.Generator().manual_seed(seed)
    rewards, group_ids = grouped_rewards(gen, n_groups, group_size, binary)
    rewards = rewards.double()  # float64 throughout: the two summation orders differ only by rounding
    mask = random_mask(gen, rewards.numel(), length)
    adv = compute_advantages("reinforce_plus_plus_baseline", rewards, group_ids, mask=mask)
    centred = compute_advantages("dr_grpo", rewards, group_ids)  # r - group mean (mean 0 for a group of one)
    repeated = centred.repeat_interleave(mask.sum(-1).long())  # one entry per response token
    if repeated.numel() < 2:
        assert bool((adv == 0).all())
        return
    expected = (centred - repeated.mean()) / torch.sqrt(repeated.var() + 1e-8)
    # Weighted sums over B completions vs plain sums over N <= 20·7 = 140 tokens, float64: each
    # sum is off by <= N·eps64·max|x| = 140 · 1.1e-16 · 10 ~ 2e-13; divided by a std that is
    # either exactly 0 (all centred values 0: both give exactly 0) or >= ~0.01 here (binary
    # rewards in groups of <= 5 over <= 140 tokens; Gaussian rewards spread ~1): <= 2e-11.
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-9)
