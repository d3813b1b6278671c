"""The corrections a stale (off-policy) batch needs: AReaL's decoupled PPO and TRL's sequence-level mask.

Hand-computed weights, AReaL's loss written out from its definition (``areal/utils/functional.py``,
``ppo_actor_loss_fn``: ratio against the proximal policy, clipped; behaviour weight ``exp(prox - behav)``,
0 above ``behav_imp_weight_cap``; sum over loss tokens / their count), and the lint that stays quiet once
the sampler is stale.
"""

from __future__ import annotations

import math

import torch

from tests.test_lint import config, findings
from tests.tolerance import EPS64, order_tolerance
from workbench.algorithms import compute_policy_loss, importance_weights
from workbench.algorithms.correction import IS_CORRECTIONS

LN = math.log


def test_decoupled_keeps_weights_up_to_the_cap_and_drops_the_rest():
    # learner (proximal) - sampler (behaviour) log-ratios: 0.5, 3.0 (above cap 2), 1.5 on padding
    sampler = torch.zeros(1, 3, dtype=torch.float64)
    learner = torch.tensor([[LN(0.5), LN(3.0), LN(1.5)]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    weights, metrics = importance_weights("decoupled", learner, sampler, mask, cap=2.0)
    assert torch.allclose(weights, torch.tensor([[0.5, 0.0, 0.0]], dtype=torch.float64), rtol=0, atol=4 * EPS64)
    assert metrics["mismatch/is_clipped_frac"] == 0.5  # one of two response tokens
    assert math.isclose(metrics["mismatch/is_weight_mean"], 0.25, abs_tol=4 * EPS64)
    assert metrics["mismatch/is_reweighted_frac"] == 1.0  # 0.5 and 0 both differ from 1


def test_sequence_mask_is_the_product_of_token_ratios_masked_above_the_cap():
    # row 0: 1.2 · 1.5 = 1.8 <= 3 on both tokens (padding's 7.0 is not in the product);
    # row 1: 2 · 2 · 1 = 4 > 3: the whole sequence is dropped
    sampler = torch.zeros(2, 3, dtype=torch.float64)
    learner = torch.tensor([[LN(1.2), LN(1.5), LN(7.0)], [LN(2.0), LN(2.0), 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    weights, metrics = importance_weights("sequence_mask", learner, sampler, mask, cap=3.0)
    expected = torch.tensor([[1.8, 1.8, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(weights, expected, rtol=0, atol=8 * EPS64)  # two log-adds and an exp, values <= 2
    assert math.isclose(metrics["mismatch/is_clipped_frac"], 3 / 5)  # row 1's three tokens of five
    # seq_tis (length-normalised, truncated) differs: row 1's geometric mean 4^(1/3) ≈ 1.587 is kept
    seq, _ = importance_weights("seq_tis", learner, sampler, mask, cap=3.0)
    assert math.isclose(float(seq[1, 0]), 4 ** (1 / 3), rel_tol=1e-12)


def areal_decoupled_loss(logp, prox, behav, adv, mask, eps, cap) -> torch.Tensor:
    """AReaL's decoupled actor loss (ppo_actor_loss_fn, no dual clip), written from its definition."""
    ratio = torch.exp(logp - prox)
    per_token = torch.maximum(-adv[:, None] * ratio, -adv[:, None] * ratio.clamp(1 - eps, 1 + eps))
    weight = torch.exp(prox - behav)
    weight = torch.where((weight <= cap) & mask.bool(), weight, torch.zeros_like(weight))
    return (per_token * weight * mask).sum() / mask.sum()


def test_decoupled_ppo_agrees_with_areal_definition():
    gen = torch.Generator().manual_seed(0)
    shape = (6, 9)
    behav = -torch.rand(shape, generator=gen, dtype=torch.float64) * 3  # stale sampler's logprobs
    prox = behav + torch.randn(shape, generator=gen, dtype=torch.float64) * 0.6  # learner before the update
    logp = prox + torch.randn(shape, generator=gen, dtype=torch.float64) * 0.3  # learner during the update
    adv = torch.randn(shape[0], generator=gen, dtype=torch.float64)
    mask = (torch.rand(shape, generator=gen) > 0.2).to(torch.float64)
    weights, metrics = importance_weights("decoupled", prox, behav, mask, cap=2.0)
    assert 0 < metrics["mismatch/is_clipped_frac"] < 1  # the cap binds on some tokens, not all
    ours, clip = compute_policy_loss(
        "ppo_clip", logp, prox, adv, mask, agg_mode="token-mean", is_weights=weights, clip_low=0.2, clip_high=0.2
    )
    assert clip["clip/frac"] > 0
    theirs = areal_decoupled_loss(logp, prox, behav, adv, mask, 0.2, 2.0)
    # a token-mean of 54 terms, each a product of three float64 factors of size <= 2 · |A| <= 2 · 3
    assert abs(float(ours) - float(theirs)) <= order_tolerance(54 + 3, 6.0, EPS64)


def test_both_declare_their_activity_where_registered():
    for name in ("decoupled", "sequence_mask"):
        activity = IS_CORRECTIONS.activity(name)
        assert activity is not None and activity.metric == "mismatch/is_reweighted_frac"
        assert activity.params["correction_cap"].metric == "mismatch/is_clipped_frac"


def test_a_correction_acts_on_a_stale_sampler_so_the_lint_is_quiet():
    inert = config(algorithm={"correction": "decoupled"})
    assert [k for k, _ in findings("correction_without_mismatch", inert)] == ["algorithm.correction=decoupled"]
    stale = config(algorithm={"correction": "decoupled"}, rollout={"staleness": 2, "group_size": 4})
    assert findings("correction_without_mismatch", stale) == []
