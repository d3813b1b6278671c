"""Hand-computed values for every registered unit (small tensors; the arithmetic is in the comments)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.algorithms.strategies import clip_range
from tests.tolerance import order_tolerance
from workbench.algorithms import (
    aggregate_loss,
    compute_advantages,
    compute_policy_loss,
    entropy_from_logits,
    importance_weights,
    kl_penalty,
)

# Error analysis (tests/tolerance.py): each expected value is ≤ 10 float32 operations from the inputs,
# and hand values are quoted to 6 decimals (≤ 5e-7 off). For values ≤ 2 that is ≤ 5e-7 + 10·eps32·2
# ≈ 2.9e-6 absolute (atol 1e-5 allows it); for the large exact ones (k2 = 450) 10·eps32 ≈ 1.2e-6
# relative (rtol 1e-5 allows it).
TOL = {"rtol": 1e-5, "atol": 1e-5}
HAND_6_DECIMALS = 5e-7


def hand_tol(magnitude: float, operations: int = 10) -> float:
    """A 6-decimal hand value of size ≤ ``magnitude`` after ≤ ``operations`` float32 operations."""
    return HAND_6_DECIMALS + order_tolerance(operations, magnitude)


LN = math.log


def close(actual: torch.Tensor, expected: list | float) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), **TOL)


# ---------------------------------------------------------------------------------------------
# Advantage estimators.
# rewards r = [1, 0, 1, 0 | 2, 4 | 5], groups 0,0,0,0 | 1,1 | 2 (group 2 has a single completion)
#   group 0: mean 0.5, deviations ±0.5, Bessel var = 4·0.25/3 = 1/3, std = 0.577350
#   group 1: mean 3,   deviations ∓1,   Bessel var = 2/1 = 2,      std = 1.414214
#   group 2: one completion -> mean 0, std 1 (verl's convention)
REWARDS = torch.tensor([1.0, 0.0, 1.0, 0.0, 2.0, 4.0, 5.0])
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1, 2])


def test_grpo_hand_values():
    # ±0.5 / 0.577350 = ±0.866025 ; ∓1 / 1.414214 = ∓0.707107 ; 5 / (1 + 1e-6) ≈ 5
    close(
        compute_advantages("grpo", REWARDS, GROUPS),
        [0.866025, -0.866025, 0.866025, -0.866025, -0.707107, 0.707107, 5.0],
    )


def test_grpo_epsilon_is_added_to_std():
    # group [0, 2]: mean 1, std sqrt(2); eps = 1 -> ±1 / (1.414214 + 1) = ±0.414214
    close(
        compute_advantages("grpo", torch.tensor([0.0, 2.0]), torch.tensor([7, 7]), epsilon=1.0), [-0.414214, 0.414214]
    )


def test_dr_grpo_hand_values():
    # r - group mean; the single completion keeps its reward (mean 0)
    close(compute_advantages("dr_grpo", REWARDS, GROUPS), [0.5, -0.5, 0.5, -0.5, -1.0, 1.0, 5.0])


def test_rloo_hand_values():
    # n/(n-1)·(r - mean): group 0: 4/3·±0.5 = ±0.666667 (1 - mean(0,1,0) = 2/3 ✓);
    # group 1: 2·∓1 = ∓2 (2 - 4 = -2 ✓); a group of one has no baseline: 5
    close(compute_advantages("rloo", REWARDS, GROUPS), [2 / 3, -2 / 3, 2 / 3, -2 / 3, -2.0, 2.0, 5.0])


def test_grpo_passk_hand_values():
    # Only each group's best completion moves, by (r_max − r_second) / (std + eps):
    # group 0 [1, 0, 1, 0]: the best is tied (1 = 1), so nothing moves; group 1 [2, 4]: 4 − 2 = 2,
    # over std 1.414214 → 1.414214 on the 4; group 2 (one completion): no rival, 5 / (1 + 1e-6) ≈ 5
    close(compute_advantages("grpo_passk", REWARDS, GROUPS), [0, 0, 0, 0, 0, 1.414214, 5.0])
    # without the std: the raw gap; a unique 1 among 0s (1 of 4 correct) gets 1 − 0 = 1, the rest 0
    close(compute_advantages("grpo_passk", REWARDS, GROUPS, norm_by_std=False), [0, 0, 0, 0, 0, 2.0, 5.0])
    close(
        compute_advantages("grpo_passk", torch.tensor([0.0, 1.0, 0.0, 0.0]), torch.zeros(4), norm_by_std=False),
        [0, 1.0, 0, 0],
    )
    # [0.5, 0.2, 0.9]: gap 0.9 − 0.5 = 0.4; Bessel std of the group = sqrt(0.123333) = 0.351188 → 1.138990
    close(compute_advantages("grpo_passk", torch.tensor([0.5, 0.2, 0.9]), torch.zeros(3)), [0, 0, 1.138990])


def test_reinforce_plus_plus_baseline_hand_values():
    # r = [1, 0, 3], groups [0, 0, 1]: centred x = [0.5, -0.5, 3] (the singleton keeps 3)
    # batch mean 1, deviations [-0.5, -1.5, 2], Bessel var = (0.25 + 2.25 + 4)/2 = 3.25, std 1.802776
    # A = dev / sqrt(3.25 + 1e-8) = [-0.277350, -0.832050, 1.109400]
    adv = compute_advantages("reinforce_plus_plus_baseline", torch.tensor([1.0, 0.0, 3.0]), torch.tensor([0, 0, 1]))
    close(adv, [-0.277350, -0.832050, 1.109400])


def test_reinforce_plus_plus_baseline_with_mask_whitens_over_tokens():
    # r = [1, 0, 3], groups [0, 0, 1], response lengths [1, 3, 2] (6 tokens): x = [0.5, -0.5, 3]
    # token-weighted mean (0.5·1 - 0.5·3 + 3·2)/6 = 5/6; deviations [-1/3, -4/3, 13/6]
    # Bessel var over tokens (1·1/9 + 3·16/9 + 2·169/36)/5 = (534/36)/5 = 2.966667, std 1.722401
    # A = dev / sqrt(2.966667 + 1e-8) = [-0.193530, -0.774119, 1.257944] (verl's masked_whiten)
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = compute_advantages(
        "reinforce_plus_plus_baseline", torch.tensor([1.0, 0.0, 3.0]), torch.tensor([0, 0, 1]), mask=mask
    )
    close(adv, [-0.193530, -0.774119, 1.257944])
    # one token per response: the same as without a mask (per completion)
    ones = compute_advantages(
        "reinforce_plus_plus_baseline", torch.tensor([1.0, 0.0, 3.0]), torch.tensor([0, 0, 1]), mask=torch.ones(3, 1)
    )
    close(ones, [-0.277350, -0.832050, 1.109400])


def test_lite_ppo_hand_values():
    # r = [1, 0, 3], groups [0, 0, 1]: centred x = [0.5, -0.5, 3]
    # batch std of r: mean 4/3, squared deviations (1 + 16 + 25)/9, Bessel var = 42/18 = 2.333333, std 1.527525
    # A = x / 1.527525 = [0.327327, -0.327327, 1.963961]
    adv = compute_advantages("lite_ppo", torch.tensor([1.0, 0.0, 3.0]), torch.tensor([0, 0, 1]))
    close(adv, [0.327327, -0.327327, 1.963961])


# ---------------------------------------------------------------------------------------------
# Aggregation modes. Row 0 has 2 response tokens (1, 2), row 1 one token (4), row 2 none;
# padding holds garbage (100, 6, 7, 8, 9) that must not matter.
LOSS_MAT = torch.tensor([[1.0, 2.0, 100.0], [4.0, 6.0, -50.0], [7.0, 8.0, 9.0]])
AGG_MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 7 / 3),  # (1 + 2 + 4) / 3 tokens
        ("token-sum", 7.0),  # 1 + 2 + 4
        ("seq-mean-token-mean", 2.75),  # ((1 + 2)/2 + 4/1) / 2 non-empty sequences
        ("seq-mean-token-sum", 3.5),  # (3 + 4) / 2
        ("seq-mean-token-sum-norm", 3.5 / 3),  # (3 + 4) / 2 / T, T = 3
    ],
)
def test_aggregation_hand_values(mode, expected):
    close(aggregate_loss(LOSS_MAT, AGG_MASK, mode), expected)


def test_seq_mean_token_sum_norm_uses_norm_constant():
    close(aggregate_loss(LOSS_MAT, AGG_MASK, "seq-mean-token-sum-norm", norm_constant=7.0), 0.5)  # 3.5 / 7


def test_empty_mask_aggregates_to_zero():
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
        close(aggregate_loss(LOSS_MAT, torch.zeros_like(AGG_MASK), mode), 0.0)


# ---------------------------------------------------------------------------------------------
# Policy losses. Both rows sampled tokens with old probs (0.2, 0.4) that now have (0.3, 0.2):
# ratios r = (1.5, 0.5) in each row. Advantages A = (+1, -0.5). Clip 0.2 / 0.2 unless said.
OLD = torch.log(torch.tensor([[0.2, 0.4], [0.2, 0.4]]))
NEW = torch.log(torch.tensor([[0.3, 0.2], [0.3, 0.2]]))
ADV = torch.tensor([1.0, -0.5])
FULL = torch.ones(2, 2)


def policy(loss, **kw):
    logp = NEW.clone().requires_grad_(True)
    value, metrics = compute_policy_loss(loss, logp, OLD, ADV, FULL, **clip_range(loss) | kw)
    return value, metrics, logp


def test_ppo_clip_hand_values():
    # row 0 (A=+1):   r=1.5: max(-1.5, -1.2) = -1.2 (clipped high); r=0.5: max(-0.5, -0.8) = -0.5
    # row 1 (A=-0.5): r=1.5: max(0.75, 0.6) = 0.75;                 r=0.5: max(0.25, 0.4) = 0.4 (clipped low)
    # token-mean: (-1.2 - 0.5 + 0.75 + 0.4) / 4 = -0.1375
    value, m, logp = policy("ppo_clip")
    close(value, -0.1375)
    assert m["clip/frac_high"] == pytest.approx(0.25) and m["clip/frac_low"] == pytest.approx(0.25)
    assert m["clip/frac"] == pytest.approx(0.5)
    assert m["policy/ratio_mean"] == pytest.approx(1.0) and m["policy/ratio_max"] == pytest.approx(1.5)
    # approx_kl = mean(old - new) = -(2·ln 1.5 + 2·ln 0.5)/4 = -½ ln 0.75 = 0.143841
    assert m["policy/approx_kl"] == pytest.approx(0.143841, abs=hand_tol(0.5))
    # d/dlogp of the unclipped terms is -A·r/4: row 0 token 1: -0.5/4; row 1 token 0: 0.5·1.5/4
    value.backward()
    close(logp.grad, [[0.0, -0.125], [0.1875, 0.0]])


def test_ppo_clip_higher():
    # DAPO clip-higher, clip_high = 0.6: row 0 r=1.5 < 1.6 is no longer clipped: -1.5
    # (-1.5 - 0.5 + 0.75 + 0.4) / 4 = -0.2125
    value, m, _ = policy("ppo_clip", clip_high=0.6)
    close(value, -0.2125)
    assert m["clip/frac_high"] == 0.0 and m["clip/frac_low"] == pytest.approx(0.25)


def test_ppo_dual_clip():
    # dual clip c = 1.4 caps negative-advantage losses at -A·c = 0.7: row 1 r=1.5: min(0.75, 0.7) = 0.7
    # (-1.2 - 0.5 + 0.7 + 0.4) / 4 = -0.15 ; DESIGN's clip fractions do not count the dual-clip event
    value, m, logp = policy("ppo_clip", dual_clip=1.4)
    close(value, -0.15)
    assert m["clip/frac"] == pytest.approx(0.5)
    value.backward()
    assert logp.grad[1, 0] == 0.0  # the dual-clipped token has no gradient


def test_ppo_clip_seq_mean_token_sum_norm():
    # per-row sums: row 0: -1.7, row 1: 1.15 -> mean -0.275 -> / norm_constant 10 = -0.0275
    value, _, _ = policy("ppo_clip", agg_mode="seq-mean-token-sum-norm", norm_constant=10.0)
    close(value, -0.0275)


def test_gspo_hand_values():
    # sequence ratio s = exp(mean(ln 1.5, ln 0.5)) = sqrt(0.75) = 0.866025 for both rows.
    # clip_low = 0.1 -> bounds [0.9, 1.1]: row 0 (A=+1): max(-0.866025, -0.9) = -0.866025 (not clipped);
    # row 1 (A=-0.5): max(0.433013, 0.45) = 0.45 (clipped low, both tokens)
    # token-mean: (2·-0.866025 + 2·0.45) / 4 = -0.208013
    value, m, logp = policy("gspo", clip_low=0.1)
    close(value, -0.208013)
    assert m["clip/frac_low"] == pytest.approx(0.5) and m["clip/frac_high"] == 0.0
    assert m["policy/ratio_mean"] == pytest.approx(0.866025, abs=hand_tol(1.0))
    # token gradient = -A·s/4 per unclipped token (the sg trick): row 0: -0.866025/4; row 1 clipped: 0
    value.backward()
    close(logp.grad, [[-0.216506, -0.216506], [0.0, 0.0]])


def test_gmpo_hand_values():
    # token log-ratios (ln 1.5, ln 0.5) = (0.405465, -0.693147), clip in log space to [-0.2, 0.2], sign-aware:
    # row 0 (A=+1) clips above: (0.2, -0.693147) -> mean -0.246574 -> exp 0.781474 -> loss -0.781474
    # row 1 (A=-0.5) clips below: (0.405465, -0.2) -> mean 0.102733 -> exp 1.108195 -> loss 0.554097
    # mean over the 2 sequences: -0.113688 (agg_mode does not apply)
    for mode in ("token-mean", "seq-mean-token-sum"):
        value, m, _ = policy("gmpo", agg_mode=mode)
        close(value, -0.113688)
    # the clip acts per token: row 0's first token (A>0, 0.405 > 0.2) and row 1's second token
    # (A<0, -0.693 < -0.2) lose their gradient -> 1 of 4 tokens on each side; the geometric-mean
    # ratio 0.866025 (inside [exp(-0.2), exp(0.2)]) is what the ratio metrics read
    assert m["clip/frac_high"] == 0.25 and m["clip/frac_low"] == 0.25 and m["clip/frac"] == 0.5
    assert m["policy/ratio_max"] == pytest.approx(0.866025, abs=hand_tol(1.0))


def test_cispo_hand_values():
    # -sg(clip(r, 0.8, 1.2))·A·logp: row 0: -1.2·ln 0.3 = 1.444767, -0.8·ln 0.2 = 1.287550
    # row 1: +0.5·1.2·ln 0.3 = -0.722384, +0.5·0.8·ln 0.2 = -0.643775 ; token-mean 0.341540
    value, m, logp = policy("cispo")
    close(value, 0.341540)
    # gradient flows through every token: -w·A/4 = [[-0.3, -0.2], [0.15, 0.1]]
    value.backward()
    close(logp.grad, [[-0.3, -0.2], [0.15, 0.1]])
    # CISPO truncates weights (docs/metrics.md, clip/frac): every ratio (1.5, 0.5) is outside [0.8, 1.2], whatever A
    assert m["clip/frac"] == 1.0 and m["clip/frac_low"] == 0.5 and m["clip/frac_high"] == 0.5


def test_reinforce_hand_values():
    # -A·logp: row 0: 1.203973 + 1.609438 ; row 1: 0.5·(ln 0.3 + ln 0.2) = -1.406705 ; token-mean 0.351676
    value, m, _ = policy("reinforce")
    close(value, 0.351676)
    assert m["clip/frac"] == 0.0
    # with is_weights [[2, 1], [1, 0]]: (2·1.203973 + 1.609438 + 0.5·ln 0.3) / 4 = 0.853849
    value, _, logp = policy("reinforce", is_weights=torch.tensor([[2.0, 1.0], [1.0, 0.0]]))
    close(value, 0.853849)


# ---------------------------------------------------------------------------------------------
# Importance-sampling corrections, cap 2. learner/sampler ratios: row 0 (3, 0.5), row 1 (4, 4).
LEARNER = torch.log(torch.tensor([[0.6, 0.1], [0.8, 0.4]]))
SAMPLER = torch.log(torch.tensor([[0.2, 0.2], [0.2, 0.1]]))


def test_tis_hand_values():
    # min(w, 2) = [[2, 0.5], [2, 2]]; mean 6.5/4 = 1.625; 3 of 4 tokens exceeded the cap; all 4 reweighted
    w, m = importance_weights("tis", LEARNER, SAMPLER, FULL, cap=2.0)
    close(w, [[2.0, 0.5], [2.0, 2.0]])
    assert m == pytest.approx(
        {"mismatch/is_weight_mean": 1.625, "mismatch/is_clipped_frac": 0.75, "mismatch/is_reweighted_frac": 1.0}
    )


def test_mis_hand_values():
    # tokens with w > 2 are masked: [[0, 0.5], [0, 0]]; mean 0.125; every weight differs from 1
    w, m = importance_weights("mis", LEARNER, SAMPLER, FULL, cap=2.0)
    close(w, [[0.0, 0.5], [0.0, 0.0]])
    assert m == pytest.approx(
        {"mismatch/is_weight_mean": 0.125, "mismatch/is_clipped_frac": 0.75, "mismatch/is_reweighted_frac": 1.0}
    )


def test_seq_tis_hand_values():
    # row 0: geometric mean sqrt(3·0.5) = 1.224745 (< 2); row 1: sqrt(4·4) = 4 -> 2
    # mean (2·1.224745 + 2·2)/4 = 1.612372; the 2 tokens of row 1 count as capped
    w, m = importance_weights("seq_tis", LEARNER, SAMPLER, FULL, cap=2.0)
    close(w, [[1.224745, 1.224745], [2.0, 2.0]])
    assert m == pytest.approx(
        {"mismatch/is_weight_mean": 1.612372, "mismatch/is_clipped_frac": 0.5, "mismatch/is_reweighted_frac": 1.0},
        abs=hand_tol(2.0),
    )


def test_corrections_zero_padding_weights():
    mask = torch.tensor([[1, 0], [1, 1]])
    w, m = importance_weights("tis", LEARNER, SAMPLER, mask, cap=2.0)
    close(w, [[2.0, 0.0], [2.0, 2.0]])  # padding weight 0
    assert m["mismatch/is_weight_mean"] == pytest.approx(2.0)


# ---------------------------------------------------------------------------------------------
# KL estimators, Δ = logp - ref_logp = (ln 2, -ln 2, 0, -30, 30).
KL_LOGP = torch.tensor([LN(2.0), -LN(2.0), 0.0, -30.0, 30.0])
KL_REF = torch.zeros(5)


def test_k1():
    close(kl_penalty(KL_LOGP, KL_REF, "k1"), [0.693147, -0.693147, 0.0, -30.0, 30.0])


def test_k2():
    # ½Δ² = ½(ln 2)² = 0.240227
    close(kl_penalty(KL_LOGP, KL_REF, "k2"), [0.240227, 0.240227, 0.0, 450.0, 450.0])


@pytest.mark.parametrize("name", ["k3", "low_var_kl"])
def test_k3(name):
    # exp(-Δ) + Δ - 1: Δ=ln 2: 0.5 + 0.693147 - 1 = 0.193147; Δ=-ln 2: 2 - 0.693147 - 1 = 0.306853
    # Δ=-30: -Δ clamped to 20 -> e^20 - 21, clamped to 10; Δ=30: -Δ -> -20 -> e^-20 + 19 -> 10
    close(kl_penalty(KL_LOGP, KL_REF, name), [0.193147, 0.306853, 0.0, 10.0, 10.0])


# ---------------------------------------------------------------------------------------------
def test_entropy_hand_values():
    # uniform over 4: ln 4 = 1.386294; probs (0.25, 0.75, 0, ...): -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.562335
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [LN(0.25), LN(0.75), -1e4, -1e4]]])
    close(entropy_from_logits(logits), [[1.386294, 0.562335]])
