"""Contract suite: every registered unit, whatever its name, honours the public API.

New units registered in ``workbench.algorithms`` are picked up automatically.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.algorithms.strategies import clip_range, random_logps, random_mask
from tests.tolerance import order_tolerance
from workbench import algorithms
from workbench.algorithms import (
    ADVANTAGE_ESTIMATORS,
    AGG_MODES,
    IS_CORRECTIONS,
    KL_ESTIMATORS,
    POLICY_LOSSES,
    aggregate_loss,
    compute_advantages,
    compute_policy_loss,
    entropy_from_logits,
    importance_weights,
    kl_penalty,
)

B, T, V = 6, 5, 11
POLICY_METRIC_KEYS = {
    "clip/frac",
    "clip/frac_low",
    "clip/frac_high",
    "policy/approx_kl",
    "policy/ratio_mean",
    "policy/ratio_max",
}
IS_METRIC_KEYS = {"mismatch/is_weight_mean", "mismatch/is_clipped_frac", "mismatch/is_reweighted_frac"}


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


def test_public_surface_is_exactly_the_documented_one():
    assert set(algorithms.__all__) == {
        "ADVANTAGE_ESTIMATORS",
        "AGG_MODES",
        "IS_CORRECTIONS",
        "KL_ESTIMATORS",
        "POLICY_LOSSES",
        "aggregate_loss",
        "compute_advantages",
        "compute_policy_loss",
        "entropy_from_logits",
        "importance_weights",
        "kl_penalty",
    }


def test_required_names_are_registered():
    assert {"grpo", "dr_grpo", "rloo", "reinforce_plus_plus_baseline", "lite_ppo"} <= set(ADVANTAGE_ESTIMATORS)
    assert {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"} <= set(AGG_MODES)
    assert {"ppo_clip", "gspo", "gmpo", "cispo", "reinforce", "sapo"} <= set(POLICY_LOSSES)
    assert {"tis", "mis", "seq_tis"} <= set(IS_CORRECTIONS)
    assert {"k1", "k2", "k3", "low_var_kl"} <= set(KL_ESTIMATORS)


@pytest.mark.parametrize(
    ("registry", "name"),
    [
        (reg, name)
        for reg in (ADVANTAGE_ESTIMATORS, AGG_MODES, POLICY_LOSSES, IS_CORRECTIONS, KL_ESTIMATORS)
        for name in reg
    ],
)
def test_every_unit_cites_its_source(registry, name):
    doc = registry.get(name).__doc__ or ""
    assert re.search(r"\b(19|20)\d\d\b", doc), f"{registry.kind} {name!r} needs a docstring citing its paper (year)"


@pytest.mark.parametrize("name", ADVANTAGE_ESTIMATORS.names())
@pytest.mark.parametrize("binary", [True, False])
def test_advantage_estimator_contract(name, binary, gen):
    rewards = torch.randint(0, 2, (B,), generator=gen).float() if binary else torch.randn(B, generator=gen)
    group_ids = torch.tensor([3, 3, 3, 8, 8, 5])  # groups of 3, 2 and 1
    before = rewards.clone()
    adv = compute_advantages(name, rewards, group_ids)
    assert torch.equal(rewards, before)  # pure: inputs untouched
    assert adv.shape == (B,) and adv.dtype == torch.float32
    assert bool(torch.isfinite(adv).all()) and not adv.requires_grad
    # integer rewards are accepted too
    assert compute_advantages(name, rewards.long(), group_ids).shape == (B,)
    # a response mask is accepted by every estimator (those that whiten over tokens use it)
    mask = random_mask(gen, B, T)
    masked = compute_advantages(name, rewards, group_ids, mask=mask)
    assert masked.shape == (B,) and bool(torch.isfinite(masked).all()) and not masked.requires_grad
    if name != "reinforce_plus_plus_baseline":  # the others do not weigh completions by length
        torch.testing.assert_close(masked, adv, rtol=0, atol=0)
    with pytest.raises(ValueError, match="mask"):
        compute_advantages(name, rewards, group_ids, mask=torch.ones(B + 1, T))


@pytest.mark.parametrize("name", AGG_MODES.names())
def test_aggregation_contract(name, gen):
    mask = random_mask(gen, B, T, allow_empty_rows=True)
    loss_mat = torch.randn(B, T, generator=gen, requires_grad=True)
    value = aggregate_loss(loss_mat, mask, name)
    assert value.shape == () and bool(torch.isfinite(value))
    value.backward()
    assert bool((loss_mat.grad[mask == 0] == 0).all())
    # bool and int masks mean the same as float ones
    torch.testing.assert_close(aggregate_loss(loss_mat, mask.bool(), name), value)
    torch.testing.assert_close(aggregate_loss(loss_mat, mask.long(), name), value)


@pytest.mark.parametrize("name", POLICY_LOSSES.names())
@pytest.mark.parametrize("agg_mode", AGG_MODES.names())
@pytest.mark.parametrize("weighted", [False, True])
def test_policy_loss_contract(name, agg_mode, weighted, gen):
    mask = random_mask(gen, B, T)
    logp, old = random_logps(gen, B, T, spread=0.5)
    logp.requires_grad_(True)
    weights = torch.rand(B, T, generator=gen, requires_grad=True) if weighted else None
    before = (logp.detach().clone(), old.clone())
    value, metrics = compute_policy_loss(
        name,
        logp,
        old,
        torch.randn(B, generator=gen),
        mask,
        agg_mode=agg_mode,
        is_weights=weights,
        **clip_range(name, 0.2, 0.28),
    )
    assert value.shape == () and bool(torch.isfinite(value))
    assert set(metrics) == POLICY_METRIC_KEYS
    assert all(type(v) is float and v == v for v in metrics.values())
    assert torch.equal(logp.detach(), before[0]) and torch.equal(old, before[1])  # pure: inputs untouched
    value.backward()
    assert logp.grad is not None and bool(torch.isfinite(logp.grad).all())
    assert bool((logp.grad[mask == 0] == 0).all())
    if weighted:
        assert weights.grad is None  # IS weights are detached


def test_dual_clip_contract(gen):
    mask = random_mask(gen, B, T)
    logp, old = random_logps(gen, B, T, spread=1.0)
    value, metrics = compute_policy_loss(
        "ppo_clip", logp, old, torch.randn(B, generator=gen), mask, clip_low=0.2, clip_high=0.2, dual_clip=3.0
    )
    assert bool(torch.isfinite(value)) and set(metrics) == POLICY_METRIC_KEYS


@pytest.mark.parametrize("name", IS_CORRECTIONS.names())
def test_importance_weights_contract(name, gen):
    mask = random_mask(gen, B, T, allow_empty_rows=True)
    learner, sampler = random_logps(gen, B, T, spread=1.0)
    learner.requires_grad_(True)
    weights, metrics = importance_weights(name, learner, sampler, mask, cap=1.5)
    assert weights.shape == (B, T) and not weights.requires_grad
    assert bool(torch.isfinite(weights).all()) and bool((weights >= 0).all()) and bool((weights <= 1.5).all())
    assert set(metrics) == IS_METRIC_KEYS and all(type(v) is float for v in metrics.values())
    # a capped token is reweighted (its weight is the cap 1.5 or 0, both beyond 1 ± the 0.1% tolerance)
    assert 0.0 <= metrics["mismatch/is_clipped_frac"] <= metrics["mismatch/is_reweighted_frac"] <= 1.0


@pytest.mark.parametrize("name", KL_ESTIMATORS.names())
def test_kl_contract(name, gen):
    logp, ref = random_logps(gen, B, T, spread=2.0)
    logp.requires_grad_(True)
    kl = kl_penalty(logp, ref, name)
    assert kl.shape == (B, T) and bool(torch.isfinite(kl).all())
    kl.sum().backward()
    assert bool(torch.isfinite(logp.grad).all())
    if name != "k1":
        assert bool((kl >= 0).all())  # k2 and k3 are non-negative per token


def test_entropy_contract(gen):
    logits = 5 * torch.randn(B, T, V, generator=gen)
    ent = entropy_from_logits(logits)
    assert ent.shape == (B, T)
    # float32: a log-softmax over V logits (|logit| ≤ max) and a V-term sum, computed two ways: each ≤ 2V
    # rounded operations on values of the logits' size (tests/tolerance.py)
    tol = order_tolerance(2 * V, float(logits.abs().max()))
    assert bool((ent >= -tol).all()) and bool((ent <= torch.log(torch.tensor(float(V))) + tol).all())
    reference = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    torch.testing.assert_close(ent, reference, atol=tol, rtol=0)
    assert entropy_from_logits(logits.bfloat16()).dtype == torch.float32
