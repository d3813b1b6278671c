"""SAPO (Gao et al. 2025): the soft gate's values and gradients by hand (NumPy, float64), its
temperatures as loss parameters, and what its clip metrics mean (it clips nothing)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from tests.tolerance import EPS64, order_tolerance
from workbench.algorithms import compute_policy_loss
from workbench.algorithms.presets import PRESETS
from workbench.config import AlgorithmConfig

# Ratios 1.5 and 0.5 on both rows; row 0 has A = +1 (τ_pos), row 1 A = -0.5 (τ_neg).
RATIOS = np.array([[1.5, 0.5], [1.5, 0.5]])
ADV = np.array([1.0, -0.5])
OLD = np.log(np.array([[0.2, 0.4], [0.3, 0.6]]))
NEW = OLD + np.log(RATIOS)
# Float64 error analysis: each value below is <= 12 rounded operations deep (log, exp, subtract, scale,
# sigmoid, 4/τ, product with A, then a mean of <= 4 terms), on magnitudes <= 4/τ·|A|·r <= 6; the NumPy
# reference and torch may round in different orders, so allow the bound twice: 2·12·eps64·6 ≈ 3.2e-14.
TOL = 2 * order_tolerance(12, 6.0, EPS64)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def by_hand(tau_pos: float, tau_neg: float) -> tuple[float, np.ndarray]:
    """seq-mean-token-mean of -A·σ(τ(r-1))·4/τ and its gradient with respect to logp (all tokens count)."""
    tau = np.where(ADV > 0, tau_pos, tau_neg)[:, None]  # [B,1]
    s = sigmoid(tau * (RATIOS - 1.0))  # [B,T]
    loss = -ADV[:, None] * s * 4.0 / tau  # [B,T]
    # d/dlogp of -A·f(r): f'(r) = 4·σ(1-σ) (the 4/τ cancels the τ of the chain rule), dr/dlogp = r;
    # each of the B·T = 4 tokens weighs 1/T within its row and 1/B across rows.
    grad = -ADV[:, None] * 4.0 * s * (1.0 - s) * RATIOS / 4.0  # [B,T]
    return float(loss.mean(axis=1).mean()), grad


def sapo_loss(agg_mode: str = "seq-mean-token-mean", **params):
    logp = torch.tensor(NEW).requires_grad_(True)
    value, metrics = compute_policy_loss(
        "sapo", logp, torch.tensor(OLD), torch.tensor(ADV), torch.ones(2, 2), agg_mode=agg_mode, **params
    )
    value.backward()
    return float(value.detach()), logp.grad.numpy(), metrics


def test_sapo_values_and_gradients_by_hand():
    # Worked for the defaults τ_pos = 1, τ_neg = 1.05:
    #   row 0 (A=+1):    σ(0.5) = 0.622459 -> loss -2.489837;  σ(-0.5) = 0.377541 -> -1.510163
    #   row 1 (A=-0.5):  σ(0.525) = 0.628314 -> +1.196789;     σ(-0.525) = 0.371686 -> +0.707973
    #   seq-mean-token-mean: ((-2.489837 - 1.510163)/2 + (1.196789 + 0.707973)/2) / 2 = -0.523809
    value, grad, _ = sapo_loss()
    expected, expected_grad = by_hand(1.0, 1.05)
    assert abs(expected - (-0.523809)) < 1e-6  # the worked numbers above, to their 6 decimals
    assert abs(value - expected) <= TOL
    np.testing.assert_allclose(grad, expected_grad, rtol=0, atol=TOL)


def test_temperatures_are_loss_params():
    value, grad, _ = sapo_loss(temperature_pos=2.0, temperature_neg=0.5)
    expected, expected_grad = by_hand(2.0, 0.5)
    assert abs(value - expected) <= TOL
    np.testing.assert_allclose(grad, expected_grad, rtol=0, atol=TOL)
    assert abs(value - sapo_loss()[0]) > 0.01  # they changed the loss


def test_on_policy_the_gate_has_ppo_gradient():
    """At r = 1 the gate's slope is 4·σ(0)·(1-σ(0)) = 1 for any τ: the gradient is PPO's -A/N per token."""
    logp = torch.tensor(OLD).requires_grad_(True)
    for tau in (0.5, 1.0, 3.0):
        value, _ = compute_policy_loss(
            "sapo",
            logp,
            torch.tensor(OLD),
            torch.tensor(ADV),
            torch.ones(2, 2),
            agg_mode="token-mean",
            temperature_pos=tau,
            temperature_neg=tau,
        )
        (grad,) = torch.autograd.grad(value, logp)
        expected = np.repeat(-ADV[:, None] / 4.0, 2, axis=1)  # token-mean over 4 tokens
        np.testing.assert_allclose(grad.numpy(), expected, rtol=0, atol=TOL)


def test_clip_metrics_are_zero_and_the_ratio_metrics_read_the_token_ratio():
    """SAPO removes no gradient and truncates no weight: clip/frac* = 0 however far r is from 1."""
    _, _, metrics = sapo_loss()
    assert metrics["clip/frac"] == metrics["clip/frac_low"] == metrics["clip/frac_high"] == 0.0
    assert metrics["policy/ratio_mean"] == pytest.approx(1.0, abs=TOL)  # (1.5 + 0.5 + 1.5 + 0.5) / 4
    assert metrics["policy/ratio_max"] == pytest.approx(1.5, abs=TOL)


def test_sapo_preset_and_its_parameters_in_a_run_config():
    assert PRESETS["sapo"] == {"estimator": "grpo", "loss": "sapo", "agg_mode": "seq-mean-token-mean"}
    algo = AlgorithmConfig(preset="sapo", loss_params={"temperature_neg": 2})
    assert algo.clip_low is None and algo.loss_kwargs() == {"temperature_neg": 2.0}
    with pytest.raises(ValidationError, match="policy loss 'sapo' parameter 'temperature_pos': .*greater than 0"):
        AlgorithmConfig(preset="sapo", loss_params={"temperature_pos": 0})
    with pytest.raises(ValidationError, match="has no parameter 'temperature_ng'; did you mean 'temperature_neg'"):
        AlgorithmConfig(preset="sapo", loss_params={"temperature_ng": 1.0})
    with pytest.raises(ValueError, match="sapo temperatures must be > 0"):
        sapo_loss(temperature_neg=-1.0)
