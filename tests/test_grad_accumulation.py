"""Gradient accumulation (``learner.micro_batch_size``): the accumulated gradient is the minibatch's.

``policy_update`` splits a minibatch into micro-batches and weights each micro-batch loss by its
share of the minibatch loss (``micro_shares``). These tests check the shares by hand, then that
the weighted micro-batch gradients sum to the full-minibatch gradient for every registered
aggregation mode × policy loss (with IS weights and a KL term), then the whole update on the torch
learner: same gradient, same metrics, same weights as without accumulation.
"""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.algorithms.strategies import random_logps, random_mask
from tests.learner_helpers import GradRecordingLearner, micro_policy_batch
from tests.tolerance import EPS64, order_tolerance, reduction_depth
from workbench.algorithms import AGG_MODES, POLICY_LOSSES, aggregate_loss, compute_policy_loss, kl_penalty
from workbench.batch import TrainBatch
from workbench.config import AlgorithmConfig, LearnerConfig
from workbench.train.update import micro_shares, policy_update

# Row lengths 3, 1, 0, 2 of T=4; micro-batches of 2 rows: {3, 1} and {0, 2}.
HAND_MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0]], dtype=torch.float32)


def algo(agg_mode: str, loss: str = "ppo_clip", **extra) -> AlgorithmConfig:
    clips = {} if loss == "reinforce" else {"clip_low": 0.2, "clip_high": 0.28}
    return AlgorithmConfig(preset="grpo", loss=loss, agg_mode=agg_mode, **clips, **extra)


@pytest.mark.parametrize(
    ("agg_mode", "loss", "expected"),
    [
        ("token-mean", "ppo_clip", [4 / 6, 2 / 6]),  # tokens: 4 of 6, 2 of 6
        ("token-sum", "ppo_clip", [1.0, 1.0]),  # a plain sum needs no weights
        ("seq-mean-token-mean", "ppo_clip", [2 / 3, 1 / 3]),  # non-empty sequences: 2 of 3, 1 of 3
        ("seq-mean-token-sum", "ppo_clip", [2 / 3, 1 / 3]),
        ("seq-mean-token-sum-norm", "ppo_clip", [2 / 3, 1 / 3]),  # the constant cancels
        ("seq-mean-token-mean", "gmpo", [2 / 4, 2 / 4]),  # gmpo: mean over all 4 sequences, empty ones too
    ],
)
def test_micro_shares_by_hand(agg_mode, loss, expected):
    """Each micro-batch's weight is its normaliser over the minibatch's (KL uses agg_mode, even for gmpo)."""
    shares = micro_shares(algo(agg_mode, loss), HAND_MASK, [2, 2])
    assert [s[0] for s in shares] == pytest.approx(expected, abs=1e-12)
    kl_expected = {"token-mean": [4 / 6, 2 / 6], "token-sum": [1.0, 1.0]}.get(agg_mode, [2 / 3, 1 / 3])
    assert [s[1] for s in shares] == pytest.approx(kl_expected, abs=1e-12)


def test_micro_batch_without_loss_tokens_gets_weight_zero():
    shares = micro_shares(algo("token-mean"), HAND_MASK, [2, 1, 1])  # the middle one is the empty row
    assert [s[0] for s in shares] == pytest.approx([4 / 6, 0.0, 2 / 6], abs=1e-12)


def minibatch_loss(a: AlgorithmConfig, logp, old, adv, mask, isw, ref, kl_coef):
    policy, _ = compute_policy_loss(
        a.loss,
        logp,
        old,
        adv,
        mask,
        agg_mode=a.agg_mode,
        norm_constant=a.norm_constant,
        is_weights=isw,
        **a.loss_kwargs(),
    )
    kl = aggregate_loss(kl_penalty(logp, ref, "k3"), mask, a.agg_mode, norm_constant=a.norm_constant)
    return policy, kl_coef * kl


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    batch=st.integers(2, 7),
    length=st.integers(1, 6),
    micro=st.integers(1, 6),
    agg_mode=st.sampled_from(AGG_MODES.names()),
    loss=st.sampled_from(POLICY_LOSSES.names()),
)
def test_weighted_micro_gradients_sum_to_the_minibatch_gradient(seed, batch, length, micro, agg_mode, loss):
    """Property, every agg mode × loss: Σ_k w_k ∇loss_k = ∇loss(minibatch), to float64 rounding."""
    gen = torch.Generator().manual_seed(seed)
    mask = random_mask(gen, batch, length, allow_empty_rows=True)
    new, old = (t.double() for t in random_logps(gen, batch, length, spread=0.4))
    ref = old - 0.1 * torch.rand(batch, length, generator=gen, dtype=torch.float64)
    adv = torch.randn(batch, generator=gen, dtype=torch.float64)
    isw = 0.5 + torch.rand(batch, length, generator=gen, dtype=torch.float64)
    a = algo(agg_mode, loss)
    if loss == "gmpo" and a.norm_constant is not None:
        return
    whole = new.clone().requires_grad_(True)
    pol, kl = minibatch_loss(a, whole, old, adv, mask, isw, ref, kl_coef=0.3)
    (pol + kl).backward()

    parts = torch.arange(batch).split(micro)
    shares = micro_shares(a, mask, [len(p) for p in parts])
    accumulated = torch.zeros_like(new)
    total = 0.0
    for (w_pol, w_kl), rows in zip(shares, parts, strict=True):
        piece = new[rows].clone().requires_grad_(True)
        p_pol, p_kl = minibatch_loss(a, piece, old[rows], adv[rows], mask[rows], isw[rows], ref[rows], kl_coef=0.3)
        loss_k = w_pol * p_pol + w_kl * p_kl
        loss_k.backward()
        accumulated[rows] = piece.grad
        total += float(loss_k.detach())
    # float64. Each gradient element and the loss are sums of at most batch·length ≤ 42 per-token terms,
    # each the end of ≤ 10 rounded operations, of size ≤ |adv|·isw·ratio + kl_coef·(k3 and its slope),
    # bounded from the drawn values below: (42 + 10)·eps64·magnitude, ≈ 1e-13 at magnitude 10.
    magnitude = float(adv.abs().max()) * float(isw.max()) * float((new - old).abs().max().exp()) + 0.3 * float(
        (ref - new).abs().max().exp()
    )
    tol = order_tolerance(batch * length + 10, magnitude, EPS64)
    assert torch.allclose(accumulated, whole.grad, atol=tol, rtol=0)
    assert total == pytest.approx(float((pol + kl).detach()), abs=tol)


# --- the whole update, on the torch learner ---------------------------------------------------------------


@pytest.fixture(scope="module")
def setup():
    model, _, _, rollouts, advantages = micro_policy_batch()
    return model, rollouts, advantages


def update_once(setup, a: AlgorithmConfig, micro: int | None, ref_shift: float | None = None):
    model, rollouts, advantages = setup
    learner = GradRecordingLearner(copy.deepcopy(model), LearnerConfig(lr=1e-2, micro_batch_size=micro))
    ref = None if ref_shift is None else rollouts.sampler_logp - ref_shift
    metrics = policy_update(
        learner, TrainBatch.of(rollouts, advantages, ref_logp=ref), a, 1.0, torch.Generator().manual_seed(0)
    )
    return learner, metrics


@pytest.mark.parametrize("agg_mode", AGG_MODES.names())
@pytest.mark.parametrize("shape", ["single", "minibatches"])
def test_accumulated_update_equals_the_unsplit_update(setup, agg_mode, shape):
    """12 sequences; micro-batches of 5 split every minibatch unevenly. Same gradient and same metrics
    up to float32 summation order: accumulation is an implementation detail of the update. (Weights
    after AdamW's first step are not compared: it moves each weight by ≈ lr·g/(|g|+ε), so a 1e-10
    difference in a 1e-8 gradient element moves it by 1e-4.)"""
    extra = {"minibatches": 2, "correction": "tis", "kl_coef": 0.1} if shape == "minibatches" else {}
    a = algo(agg_mode, **extra)
    ref_shift = 0.05 if shape == "minibatches" else None
    plain, m_plain = update_once(setup, a, None, ref_shift)
    split, m_split = update_once(setup, a, 5, ref_shift)
    # Error analysis (tests/tolerance.py). A weight's gradient is a sum over every token position of the
    # batch (each contributes through attention and the residual stream), and each term is the end of a
    # chain of dot products as long as the model's reduction depth (hidden, MLP width, vocabulary).
    # Splitting into micro-batches changes only the order of these float32 sums, so the two gradients
    # differ by at most (positions + depth)·eps32 of the element's magnitude; the largest element bounds
    # that magnitude (the terms of one weight's gradient share a sign pattern set by the advantages: no
    # large cancellation). Here ≈ (12·~15 + 2·32 + 64 + 26)·1.19e-7 ≈ 4e-5 of the largest element;
    # a wrong micro-batch weight is off by ≥ 1/6 of it.
    model = setup[0]
    operands = setup[1].input_ids.numel() + reduction_depth(model)
    scale = max(float(g.abs().max()) for g in plain.grads)  # token-sum gradients reach ~10
    worst = max(float((g_split - g_plain).abs().max()) for g_plain, g_split in zip(plain.grads, split.grads))
    assert worst <= order_tolerance(operands, scale)
    # The metrics are sums over the same positions (loss, ratios, entropy, KL: values of size ≤ 1 after
    # their normaliser) or, for grad/norm, a norm of gradient elements each within that relative bound:
    # the same relative bound, with an absolute floor for values near 0.
    rel = order_tolerance(operands, 1.0)
    for key in (
        "loss/policy",
        "grad/norm",
        "clip/frac",
        "policy/approx_kl",
        "policy/ratio_mean",
        "policy/ratio_max",
        "entropy/mean",
        "mismatch/kl",
    ):
        assert m_split[key] == pytest.approx(m_plain[key], rel=rel, abs=rel), key
    assert m_split["train/optimizer_steps"] == m_plain["train/optimizer_steps"]
