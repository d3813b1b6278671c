"""The slope test behind "rising" and the running-mean standard error (health/trend.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from workbench.health.trend import (
    WindowTrend,
    ar1_mean_shift_variance_factor,
    ar1_mean_variance_factor,
    ar1_noise,
    ar1_slope_variance_factor,
    mean_shift_se,
    running_mean_se,
    slope_z,
)

from .autocorrelated import ar1

finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False)


@settings(max_examples=100, deadline=None)
@given(values=st.lists(finite, min_size=9, max_size=30))
def test_slope_and_fit_match_scipy_linregress(values):
    history = 6
    trend = WindowTrend(len(values) - history, history, critical=5.0)
    results = [trend.add(v) for v in values]
    assert all(r is None for r in results[:-1])
    test = results[-1]
    window = values[history:]
    if max(values) == min(values):  # flat: slope exactly 0, not rising
        assert test.slope == 0.0 and test.z == 0.0 and not test.rising
        return
    fit = stats.linregress(range(len(window)), window)
    # O(w) sums of terms <= 1e3·w after scaling to [-1, 1] and back: |error| ~ w²·eps·1e3 < 1e-9;
    # 1e-8 × scale leaves room for the centring.
    scale = max(1.0, max(abs(v) for v in values))
    assert test.slope == pytest.approx(fit.slope, abs=1e-8 * scale)
    assert test.fitted_end == pytest.approx(fit.intercept + fit.slope * (len(window) - 1), abs=1e-8 * scale)


def test_ar1_slope_variance_factor_is_the_exact_variance():
    # x'Px/(x'x)² against the explicit matrix product, and against the iid formula at φ = 0.
    w = 16
    x = np.arange(w) - (w - 1) / 2
    for phi in (0.0, 0.3, 0.8):
        P = phi ** np.abs(np.subtract.outer(np.arange(w), np.arange(w)))
        # 2 sums of w² products of magnitude <= 64: relative error ~ w²·eps; 1e-12 is ample.
        assert ar1_slope_variance_factor(phi, w) == pytest.approx(x @ P @ x / (x @ x) ** 2, rel=1e-12)
    assert ar1_slope_variance_factor(0.0, w) == pytest.approx(1 / (x @ x), rel=1e-12)


def test_ar1_slope_variance_matches_simulation():
    # 20 000 AR(1) windows at φ = 0.8: the slopes' variance equals the formula within 4 Monte-Carlo
    # standard errors (the sample variance of n normals has relative sd sqrt(2/n) = 1%).
    rng = np.random.default_rng(5)
    noise = ar1(rng, 20_000, 16, 0.8, 1.0)
    x = np.arange(16) - 7.5
    slopes = noise @ x / (x @ x)
    expected = ar1_slope_variance_factor(0.8, 16)
    assert slopes.var() == pytest.approx(expected, rel=4 * math.sqrt(2 / 20_000))


def test_ar1_noise_recovers_phi_and_variance():
    # 60-observation histories around a line: the bias-corrected estimates are unbiased to within
    # 0.03 in φ and 10% in variance on average (printed), where the raw ones are 0.1 low at φ = 0.8.
    rng = np.random.default_rng(6)
    for phi in (0.0, 0.5, 0.8):
        history = 3.0 + 0.01 * np.arange(60) + ar1(rng, 4000, 60, phi, 0.05)
        variance, fitted = ar1_noise(history)
        print(f"φ {phi}: mean fitted φ {fitted.mean():.3f}, variance ratio {variance.mean() / 0.05**2:.3f}")
        assert abs(fitted.mean() - phi) < 0.05 if phi > 0 else fitted.mean() < 0.1
        assert variance.mean() / 0.05**2 == pytest.approx(1.0, abs=0.12)


def test_ar1_mean_variance_factor_is_the_exact_variance():
    # Σ_{|h|<k}(k−|h|)φ^|h|/k² against 1'P1/k² with the explicit AR(1) correlation matrix.
    k = 5
    for phi in (0.0, 0.3, 0.8):
        P = phi ** np.abs(np.subtract.outer(np.arange(k), np.arange(k)))
        # k² terms of magnitude <= 1: relative error ~ k²·eps; 1e-12 is ample.
        assert ar1_mean_variance_factor(phi, k) == pytest.approx(P.sum() / k**2, rel=1e-12)
    assert ar1_mean_variance_factor(0.0, k) == pytest.approx(1 / k, rel=1e-12)


def test_ar1_mean_shift_variance_factor_is_the_exact_variance():
    # var(mean of m observations − mean of the k right after) = a'Pa with a = (1/m … 1/m, −1/k …),
    # against the explicit AR(1) correlation matrix; at φ = 0 it is 1/m + 1/k.
    k, m = 5, 60
    a = np.concatenate([np.full(m, 1 / m), np.full(k, -1 / k)])
    for phi in (0.0, 0.3, 0.8, 0.95):
        P = phi ** np.abs(np.subtract.outer(np.arange(m + k), np.arange(m + k)))
        # (m+k)² = 4225 products of magnitude <= 1/k²: relative error ~ 4225·eps ~ 1e-12; 1e-10 is ample.
        assert ar1_mean_shift_variance_factor(phi, k, m) == pytest.approx(a @ P @ a, rel=1e-10)
    assert ar1_mean_shift_variance_factor(0.0, k, m) == pytest.approx(1 / m + 1 / k, rel=1e-12)


def test_mean_shift_se_tracks_the_true_se_under_ar1():
    # 150-observation histories at φ = 0.8 (the cap reward_collapse fits to): the median estimated SE
    # of the reference-vs-window difference is within 15% of the true one.
    rng = np.random.default_rng(11)
    phi, n = 0.8, 150
    x = np.empty((4000, n))
    x[:, 0] = rng.standard_normal(4000)
    for t in range(1, n):
        x[:, t] = phi * x[:, t - 1] + rng.standard_normal(4000) * np.sqrt(1 - phi**2)
    true = np.sqrt(ar1_mean_shift_variance_factor(phi, 5, 60))
    ratio = np.median(mean_shift_se(x, 5, 60)) / true
    print(f"mean_shift_se at φ = 0.8 from 150 observations: median / true = {ratio:.3f}")
    assert 0.85 < ratio < 1.15


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.8])
def test_running_mean_se_tracks_the_true_se_under_ar1(phi):
    # 60-observation histories (on a trend, which the line fit removes): the median estimated SE
    # of a 5-mean is within 15% of the true one (printed) at every φ. The MAD-of-lagged-differences
    # estimate it replaced was 0.68x the truth at φ = 0.8 (0.89x at 0.5).
    rng = np.random.default_rng(7)
    history = 0.5 + np.linspace(0, 0.3, 60) + ar1(rng, 4000, 60, phi, 0.1)
    true = 0.1 * math.sqrt(ar1_mean_variance_factor(phi, 5))
    ratio = np.median(running_mean_se(history, 5)) / true
    print(f"φ {phi}: median SE estimate / true SE of a 5-mean: {ratio:.3f}")
    assert ratio == pytest.approx(1.0, abs=0.15)


def test_slope_z_is_scale_free_and_flat_is_zero():
    rng = np.random.default_rng(8)
    values = rng.normal(size=56)
    _, z1, _ = slope_z(values[40:], values[:40])
    _, z2, _ = slope_z(1e-6 * values[40:] + 7, 1e-6 * values[:40] + 7)
    assert z1 == pytest.approx(z2, rel=1e-6)  # 1e-6 absolute noise on a level 7: ~eps·7/1e-6 = 1.6e-9
    trend = WindowTrend(5, 6, 5.0)
    for _ in range(11):
        test = trend.add(0.1)
    assert test.slope == 0.0 and not test.rising


def test_perfect_line_after_a_noiseless_history_is_rising():
    trend = WindowTrend(5, 6, 5.0)
    for i in range(11):
        test = trend.add(2.0 + 0.5 * i)
    assert test.rising and test.slope == pytest.approx(0.5) and test.fitted_end == pytest.approx(7.0)


def test_extreme_magnitudes_neither_overflow_nor_fire_wrongly():
    trend = WindowTrend(3, 6, 5.0)
    for v in (1.0,) * 6 + (9.5e158, 1.0, 1.0):
        test = trend.add(v)
    assert test is not None and test.slope < 0 and not test.rising
    huge = WindowTrend(3, 6, 5.0)
    for v in (1.0,) * 6 + (-1.7e308, 1.7e308, 1.7e308):  # spread beyond the float range
        test = huge.add(v)
    assert test is None


def test_bad_sizes():
    with pytest.raises(ValueError, match="at least 3"):
        WindowTrend(2, 10, 5.0)
    with pytest.raises(ValueError, match="at least 6"):
        WindowTrend(5, 5, 5.0)
