"""The slope test behind "rising": equal to scipy's regression, and its error rate is alpha."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from workbench.health.trend import WindowTrend, one_sided_p, t_critical

finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(finite, min_size=3, max_size=20))
def test_slope_and_fit_match_scipy_linregress(values):
    trend = WindowTrend(len(values), alpha=0.05)
    results = [trend.add(v) for v in values]
    assert all(r is None for r in results[:-1])
    test = results[-1]
    xs = list(range(len(values)))
    if max(values) == min(values):  # a flat window: slope exactly 0, not rising
        assert test.slope == 0.0 and test.t == 0.0 and not test.rising
        return
    fit = stats.linregress(xs, values)
    # Both are O(w) sums of terms <= 1e3·w in magnitude; w <= 20 terms, each rounded once,
    # and a division: |error| <= ~3·w·eps64·1e3·w ~ 3e-10; 1e-8 leaves room for the centring.
    scale = max(1.0, max(abs(v) for v in values))
    assert test.slope == pytest.approx(fit.slope, abs=1e-8 * scale)
    assert test.fitted_end == pytest.approx(fit.intercept + fit.slope * xs[-1], abs=1e-8 * scale)
    if fit.stderr > 1e-9 * scale:  # otherwise both are dominated by rounding of a near-perfect line
        t = fit.slope / fit.stderr
        assert test.t == pytest.approx(t, rel=1e-6, abs=1e-6)
        # scipy's two-sided p halves to the one-sided p for a positive slope
        if t > 0:
            assert one_sided_p(test.t, test.df) == pytest.approx(fit.pvalue / 2, rel=1e-6, abs=1e-12)


def test_perfect_lines_and_flat_windows():
    rising, flat = WindowTrend(5, 0.01), WindowTrend(5, 0.01)
    for i in range(5):
        up = rising.add(2.0 + 0.5 * i)
        level = flat.add(0.1)
    assert up.rising and up.slope == pytest.approx(0.5) and up.fitted_end == pytest.approx(4.0)
    assert not level.rising and level.slope == 0.0


@pytest.mark.parametrize(("window", "alpha"), [(12, 0.002), (5, 0.05), (12, 0.05)])
def test_false_rising_rate_on_flat_noise_is_alpha(window, alpha):
    # 20 000 independent windows of iid Gaussian noise: the fraction judged "rising" estimates
    # the test's size; its Monte-Carlo standard error is sqrt(alpha(1-alpha)/n) (0.0003 at
    # alpha 0.002, 0.0015 at 0.05), and 4 standard errors bound the check.
    n, rng = 20_000, random.Random(window * 1000 + int(alpha * 1e4))
    hits = 0
    for _ in range(n):
        trend = WindowTrend(window, alpha)
        for _ in range(window):
            test = trend.add(rng.gauss(1.6, 0.05))
        hits += test.rising
    se = math.sqrt(alpha * (1 - alpha) / n)
    assert abs(hits / n - alpha) <= 4 * se


def test_power_on_a_planted_slope():
    # slope 0.03/obs, noise sd 0.05, window 12: the slope's sd is 0.05/sqrt(143) = 0.0042, so
    # t ~ 7.2 >> 3.72 (one-sided 0.002, df 10): power is essentially 1 (normal approximation
    # P(T' > 3.72) with noncentrality 7.2 > 0.99).
    rng = random.Random(3)
    found = 0
    for _ in range(500):
        trend = WindowTrend(12, 0.002)
        for i in range(12):
            test = trend.add(1.6 + 0.03 * i + rng.gauss(0, 0.05))
        found += test.rising
    assert found / 500 >= 0.97


def test_extreme_magnitudes_neither_overflow_nor_fire_wrongly():
    # ratios of ~1e158 next to ~1 (a correct length of 5e-161): squares would overflow
    trend = WindowTrend(3, 0.05)
    for v in (9.5e158, 1.0, 1.0):
        test = trend.add(v)
    assert test is not None and test.slope < 0 and not test.rising
    huge = WindowTrend(3, 0.05)
    for v in (-1.7e308, 1.7e308, 1.7e308):  # spread beyond the float range: cannot be fitted
        test = huge.add(v)
    assert test is None


def test_critical_value_is_scipy_t():
    assert t_critical(0.002, 10) == pytest.approx(stats.t.ppf(0.998, 10))
    with pytest.raises(ValueError, match="at least 3"):
        WindowTrend(2, 0.05)
