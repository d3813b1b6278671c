"""Statistics against values worked out by hand (and against scipy where scipy has the method)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from workbench.compare import (
    adjust_pvalues,
    bootstrap_ci,
    iqm,
    mean_difference,
    planned_seeds,
    probability_of_improvement,
    probability_of_improvement_ci,
    significant,
    t_test_power,
    verdict,
)


def test_probability_of_improvement_by_hand():
    # x=3: beats 1 (1), ties 3 (1/2), loses to 4 (0) -> 1.5; x=5 beats all three -> 3; 4.5 / 6
    assert probability_of_improvement([3, 5], [1, 3, 4]) == pytest.approx(0.75)
    # lower is better: the complement (ties still 1/2)
    assert probability_of_improvement([3, 5], [1, 3, 4], higher_is_better=False) == pytest.approx(0.25)
    # x=1 loses twice, x=2 ties twice (2 x 1/2), x=3 wins twice: 3 / 6
    assert probability_of_improvement([1, 2, 3], [2, 2]) == pytest.approx(0.5)
    assert probability_of_improvement([1, 1], [1, 1, 1]) == pytest.approx(0.5)
    # equals Mann-Whitney U / (n m)
    x, y = [0.3, 0.1, 0.5, 0.5, 0.9], [0.5, 0.2, 0.2, 0.4]
    u = sps.mannwhitneyu(x, y).statistic
    assert probability_of_improvement(x, y) == pytest.approx(u / 20)


def test_probability_of_improvement_nan_and_empty():
    assert probability_of_improvement([3, math.nan, 5], [1, 3, 4]) == pytest.approx(0.75)
    assert math.isnan(probability_of_improvement([math.nan], [1.0]))
    est = probability_of_improvement_ci([1.0], [0.0, 2.0], rng=0)
    assert est.value == 0.5 and math.isnan(est.lo) and "1 seed" in est.note


def test_iqm_by_hand():
    # 8 values: drop the 2 lowest and 2 highest -> mean(3, 4, 5, 6)
    assert iqm(np.array([100.0, 1, 7, 3, 5, 2, 6, 4])) == pytest.approx(4.5)
    # 5 values: floor(5/4) = 1 dropped at each end -> mean(2, 3, 10)
    assert iqm(np.array([1.0, 2, 3, 10, 50])) == pytest.approx(5.0)
    # fewer than 4: plain mean
    assert iqm(np.array([1.0, 2, 6])) == pytest.approx(3.0)


def test_paired_difference_by_hand():
    # seeds deliberately in different orders: pairing is by seed, not by position
    x, xs = [0.7, 0.5, 0.6], [2, 0, 1]
    y, ys = [0.4, 0.55, 0.5], [0, 1, 2]
    d = mean_difference(x, y, x_seeds=xs, y_seeds=ys)
    # differences by seed: 0.1, 0.05, 0.2 -> mean 0.35/3 = 7/60; deviations -1/60, -4/60, 5/60
    # -> sd^2 = (1 + 16 + 25) / 3600 / 2 = 7/1200
    assert d.paired and d.method == "paired t"
    assert d.delta == pytest.approx(0.35 / 3)
    assert d.sd == pytest.approx(math.sqrt(7 / 1200))
    assert d.se == pytest.approx(d.sd / math.sqrt(3))
    # t = sqrt(7) with 2 df; the t(2) cdf is 1/2 + t / (2 sqrt(2 + t^2)) -> p = 1 - sqrt(7)/3
    assert d.delta / d.se == pytest.approx(math.sqrt(7))
    assert d.p_value == pytest.approx(1 - math.sqrt(7) / 3)
    lo, hi = d.interval(0.95)
    half = 4.302652729911275 * d.se  # t_{0.975, 2}
    assert (lo, hi) == pytest.approx((d.delta - half, d.delta + half))
    ref = sps.ttest_rel([0.5, 0.6, 0.7], y).confidence_interval(0.95)
    assert (lo, hi) == pytest.approx((ref.low, ref.high))


def test_welch_difference_by_hand():
    d = mean_difference([1.0, 2, 3], [2.0, 3, 5])
    assert not d.paired and d.method == "welch t"
    assert d.delta == pytest.approx(-4 / 3)
    # var 1 and 7/3 -> se^2 = 1/3 + 7/9 = 10/9; Welch df = (10/9)^2 / ((1/3)^2/2 + (7/9)^2/2)
    assert d.se == pytest.approx(math.sqrt(10 / 9))
    assert d.df == pytest.approx((10 / 9) ** 2 / ((1 / 9) / 2 + (49 / 81) / 2))
    ref = sps.ttest_ind([1.0, 2, 3], [2.0, 3, 5], equal_var=False)
    assert d.p_value == pytest.approx(ref.pvalue)
    assert d.interval(0.9) == pytest.approx(tuple(ref.confidence_interval(0.9)))


def test_pairing_rules():
    # same seed sets -> paired; a missing partner -> Welch on all runs; duplicated seeds -> Welch
    assert mean_difference([1, 2, 4], [1, 1, 2], x_seeds=[0, 1, 2], y_seeds=[2, 1, 0]).paired
    assert not mean_difference([1, 2, 4], [1, 1, 2], x_seeds=[0, 1, 3], y_seeds=[0, 1, 2]).paired
    assert not mean_difference([1, 2, 4], [1, 1, 2], x_seeds=[0, 0, 1], y_seeds=[0, 0, 1]).paired
    # a NaN on one side breaks the match in auto mode ...
    assert not mean_difference([1, math.nan, 4], [1, 1, 2], x_seeds=[0, 1, 2], y_seeds=[0, 1, 2]).paired
    # ... while forced pairing uses the common seeds
    forced = mean_difference([1, 2, 4, 9], [1, 1, 2], x_seeds=[0, 1, 2, 3], y_seeds=[0, 1, 2], pairing="paired")
    assert forced.paired and forced.n_x == 3 and forced.delta == pytest.approx(1.0)
    with pytest.raises(ValueError, match="pairing"):
        mean_difference([1, 2], [3, 4], pairing="matched")


def test_degenerate_differences():
    one = mean_difference([0.5], [0.4, 0.6])
    assert math.isnan(one.p_value) and "1 seed" in one.note
    same = mean_difference([0.5] * 4, [0.5] * 4)
    assert same.p_value == 1.0 and same.interval() == (0.0, 0.0)
    # constant groups, different seeds: exact permutation p = 2 / C(10, 5)
    const = mean_difference([0.7] * 5, [0.5] * 5, rng=0)
    assert const.method.startswith("permutation")
    assert const.p_value == pytest.approx(2 / 252)
    assert const.interval() == pytest.approx((0.2, 0.2))
    # constant paired differences: sign flips, p = 2 / 2^5
    pc = mean_difference([0.7] * 5, [0.5] * 5, x_seeds=range(5), y_seeds=range(5), rng=0)
    assert pc.paired and pc.p_value == pytest.approx(2 / 32)


def test_holm_by_hand():
    adj, div = adjust_pvalues([0.01, 0.04, 0.03], "holm")
    # sorted 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> running max 0.06
    assert adj == pytest.approx([0.03, 0.06, 0.06])
    # 0.01 < 0.05/3 rejected; 0.03 > 0.05/2: Holm stops there, so 0.03 and 0.04 keep divisor 2
    # (divisor 1 for 0.04 would give a 95% CI excluding 0 while its verdict is "not rejected")
    assert div == pytest.approx([3, 2, 2])
    _, div = adjust_pvalues([0.01, 0.04, 0.02], "holm")  # 0.02 < 0.025, 0.04 < 0.05: all rejected
    assert div == pytest.approx([3, 1, 2])
    adj, div = adjust_pvalues([0.01, 0.04, 0.03], "bonferroni")
    assert adj == pytest.approx([0.03, 0.12, 0.09]) and div == pytest.approx([3, 3, 3])
    adj, _ = adjust_pvalues([0.01, math.nan, 0.04], "holm")  # NaN does not count in m
    assert adj[0] == pytest.approx(0.02) and math.isnan(adj[1]) and adj[2] == pytest.approx(0.04)
    with pytest.raises(ValueError, match="did you mean 'holm'"):
        adjust_pvalues([0.1], "hom")


def test_planned_seeds_matches_textbook_values():
    # paired t (one-sample t on the differences), alpha 0.05 two-sided, power 0.8 (Cohen 1988;
    # G*Power): d = 0.5 -> 34, d = 1 -> 10; the sign of nothing matters, only sesoi / sd
    assert planned_seeds(0.5, 1.0) == 34
    assert planned_seeds(0.1, 0.1) == 10
    assert t_test_power(17, 1.0, 1.0) == pytest.approx(0.807, abs=1e-3)  # two-sample, 17 per group
    assert planned_seeds(0.2, 0.0) == 2
    with pytest.raises(ValueError, match="sesoi > 0"):
        planned_seeds(0.0, 1.0)


def test_bootstrap_ci_edge_cases():
    one = bootstrap_ci([0.3], rng=0)
    assert one.value == 0.3 and math.isnan(one.lo) and math.isnan(one.hi) and one.note == "1 seed: no CI"
    flat = bootstrap_ci([0.3, 0.3, 0.3], "iqm", rng=0)
    assert (flat.lo, flat.value, flat.hi) == pytest.approx((0.3, 0.3, 0.3))
    nan = bootstrap_ci([0.1, math.nan, 0.3, math.inf], rng=0)
    assert nan.n == 2 and nan.n_dropped == 2 and nan.value == pytest.approx(0.2)
    none = bootstrap_ci([math.nan], rng=0)
    assert none.n == 0 and math.isnan(none.value)


def test_bootstrap_ci_is_reproducible_and_reasonable():
    x = np.random.default_rng(1).normal(0.0, 1.0, 20)
    a = bootstrap_ci(x, "mean", rng=7)
    assert a == bootstrap_ci(x, "mean", rng=7)
    assert a != bootstrap_ci(x, "mean", rng=8)
    # percentile bootstrap of the mean is close to the normal interval mean +- 1.96 sd/sqrt(n)
    se = x.std(ddof=0) / math.sqrt(x.size)
    assert a.lo == pytest.approx(x.mean() - 1.96 * se, abs=0.3 * se)
    assert a.hi == pytest.approx(x.mean() + 1.96 * se, abs=0.3 * se)


def test_stratified_bootstrap():
    # two strata far apart: stratified resampling keeps 3 runs from each, so the mean varies
    # only within strata; an unstratified bootstrap mixes them and is much wider.
    values = [0.0, 0.1, 0.2, 10.0, 10.1, 10.2]
    strata = ["a", "a", "a", "b", "b", "b"]
    s = bootstrap_ci(values, strata=strata, rng=0)
    u = bootstrap_ci(values, rng=0)
    assert s.value == u.value == pytest.approx(5.1)
    assert s.hi - s.lo < 0.2 < u.hi - u.lo
    # singleton strata stay fixed; all singletons: no CI
    assert math.isnan(bootstrap_ci([1.0, 2.0], strata=["a", "b"], rng=0).lo)


def test_significant_needs_both_the_corrected_p_and_an_interval_excluding_0():
    assert significant(0.2, 0.4, 0.001, alpha=0.05)
    assert significant(-0.4, -0.2, 0.049, alpha=0.05)  # excludes 0 from below
    assert not significant(0.2, 0.4, 0.05, alpha=0.05)  # p not below alpha
    assert not significant(-0.01, 0.6, 0.01, alpha=0.05)  # the interval holds 0
    assert not significant(0.0, 0.6, 0.01, alpha=0.05)  # touching 0 is holding it
    assert not significant(math.nan, math.nan, 0.001, alpha=0.05)  # no interval: nothing declared
    assert not significant(0.2, 0.4, math.nan, alpha=0.05)
    assert significant(0.2, math.inf, 0.001, alpha=0.05) is False  # an unbounded interval declares nothing
    assert type(significant(0.2, 0.4, 0.001)) is bool


def test_verdict_rules():
    kw = {"alpha": 0.05, "n_x": 5, "n_y": 5}
    assert verdict(0.3, 0.2, 0.4, 0.001, higher_is_better=True, **kw) == "better"
    assert verdict(0.3, 0.2, 0.4, 0.001, higher_is_better=False, **kw) == "worse"
    assert verdict(-0.3, -0.4, -0.2, 0.001, higher_is_better=False, **kw) == "better"
    assert verdict(0.3, 0.2, 0.4, 0.001, higher_is_better=None, **kw) == "higher"
    # p below alpha but the corrected CI touches 0: no winner
    assert verdict(0.3, -0.01, 0.6, 0.01, higher_is_better=True, **kw) == "inconclusive with 5 seeds"
    assert verdict(0.3, 0.2, 0.4, 0.06, higher_is_better=True, **kw) == "inconclusive with 5 seeds"
    assert verdict(0.3, math.nan, math.nan, math.nan, alpha=0.05, n_x=1, n_y=1) == "inconclusive with 1 seed"
    assert verdict(0.3, math.nan, math.nan, math.nan, alpha=0.05, n_x=3, n_y=5).endswith("3 vs 5 seeds")
    assert verdict(math.nan, math.nan, math.nan, math.nan, alpha=0.05, n_x=0, n_y=5) == "no data"


def test_a_verdict_paired_on_common_seeds_counts_the_pairs_it_tested():
    # an arm stopped at look 1 (seeds 0-2) against a baseline that ran on (seeds 0-5): the paired test had 3
    # pairs, so "3 vs 6 seeds" would misstate it; the runs left without a partner are said beside the pairs
    kw = {"alpha": 0.05, "higher_is_better": True}
    said = verdict(0.01, -0.2, 0.2, 0.5, n_x=3, n_y=6, n_pairs=3, mde=0.279, **kw)
    assert said == "inconclusive with 3 paired seeds (the baseline has 6; MDE 0.279)"
    assert verdict(0.01, -0.2, 0.2, 0.5, n_x=3, n_y=6, n_pairs=3, **kw) == (
        "inconclusive with 3 paired seeds (the baseline has 6)"
    )
    assert verdict(0.01, -0.2, 0.2, 0.5, n_x=4, n_y=6, n_pairs=3, **kw) == (
        "inconclusive with 3 paired seeds (the arm has 4, the baseline 6)"
    )
    assert verdict(0.01, -0.2, 0.2, 0.5, n_x=6, n_y=3, n_pairs=3, **kw) == (
        "inconclusive with 3 paired seeds (the arm has 6)"
    )
    # the same seeds on both sides: nothing left out, nothing to add
    assert verdict(0.01, -0.2, 0.2, 0.5, n_x=3, n_y=3, n_pairs=3, **kw) == "inconclusive with 3 paired seeds"
    # a decided verdict has no seed count to correct
    assert verdict(0.3, 0.2, 0.4, 0.001, n_x=3, n_y=6, n_pairs=3, **kw) == "better"
    # the pairs the test had: forced pairing of 3 vs 6 runs keeps the 3 common seeds
    d = mean_difference(
        [0.5, 0.6, 0.7], [0.5, 0.5, 0.6, 0.9, 0.9, 0.9], x_seeds=[0, 1, 2], y_seeds=range(6), pairing="paired"
    )
    assert (d.n_x, d.n_y, d.paired, d.note) == (3, 3, True, "paired on common seeds only")
    assert d.delta == pytest.approx(0.2 / 3, abs=1e-15)  # (0 + 0.1 + 0.1) / 3: 3 operands of ~0.7, a few eps


@pytest.mark.parametrize(
    ("effect", "alpha", "power"), [(0.05, 0.05, 0.8), (0.37, 0.01, 0.9), (1.3, 0.1, 0.5), (4.0, 0.05, 0.99)]
)
def test_planned_seeds_is_the_smallest_n_reaching_the_power(effect, alpha, power):
    ns = np.arange(2, 20_000)
    brute = ns[np.argmax(t_test_power(ns, effect, 1.0, paired=True, alpha=alpha) >= power)]
    assert planned_seeds(effect, 1.0, alpha=alpha, power=power) == brute


# ---- #52: unpaired P(improve) no longer degenerates to 0 [0, 0] ---------------------------------------


def test_unpaired_improvement_interval_at_separated_runs_by_hand():
    """3 vs 3 runs, every baseline run above every variant run: P(improve) = U / 9 = 0. The percentile
    bootstrap gave 0 [0, 0] (every resample is separated too). Newcombe's method 5 upper bound is the
    theta with theta^2 = z^2 Var(theta), Var = theta (1 - theta) / 9 x [1 + (N - 1)((1 - theta)/(2 - theta) +
    theta/(1 + theta))], N = 3: dividing by theta, theta = z^2 (1 - theta)/9 x [...]. By hand at theta = 0.4990:
    (1 - theta)/(2 - theta) = 0.501/1.501 = 0.33378, theta/(1 + theta) = 0.499/1.499 = 0.33289, [...] = 2.33333,
    z^2 = 1.95996^2 = 3.84146: 3.84146 x 0.501 x 2.33333 / 9 = 0.49896, the same theta to 4 digits."""
    from workbench.compare.stats import mann_whitney_improvement_ci

    worse = mann_whitney_improvement_ci([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert (worse.value, worse.lo) == (0.0, 0.0)
    assert worse.hi == pytest.approx(0.4990, abs=1e-4)  # abs 1e-4: the hand value's 4 digits
    theta = worse.hi
    rhs = sps.norm.ppf(0.975) ** 2 * (1 - theta) / 9 * (1 + 2 * ((1 - theta) / (2 - theta) + theta / (1 + theta)))
    assert theta == pytest.approx(rhs, abs=1e-9)  # abs 1e-9: brentq's xtol 1e-12 through a smooth function
    better = mann_whitney_improvement_ci([4.0, 5.0, 6.0], [1.0, 2.0, 3.0])  # the mirror image
    assert (better.value, better.hi) == (1.0, 1.0) and better.lo == pytest.approx(1 - worse.hi, abs=1e-9)
    lower_is_better = mann_whitney_improvement_ci([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], higher_is_better=False)
    assert (lower_is_better.value, lower_is_better.hi) == (1.0, 1.0)


@pytest.mark.slow
def test_unpaired_improvement_interval_covers_at_5_vs_5():
    """Coverage of P(X > Y) for X ~ N(delta, 1), Y ~ N(0, 1), 5 vs 5 runs: the true value is
    Phi(delta / sqrt 2); 3000 studies per delta (s.e. 0.4 points at 95%). Newcombe (2006) reports
    method 5 close to nominal; the bootstrap it replaces covers far less at the separated extremes."""
    from workbench.compare.stats import mann_whitney_improvement_ci

    rng = np.random.default_rng(52)
    for delta in (0.0, 1.0, 2.5):
        truth = float(sps.norm.cdf(delta / np.sqrt(2)))
        covered = [
            (e.lo <= truth <= e.hi)
            for e in (mann_whitney_improvement_ci(rng.normal(delta, 1, 5), rng.normal(0, 1, 5)) for _ in range(3000))
        ]
        print(f"delta {delta}: coverage {np.mean(covered):.3f}")
        assert np.mean(covered) >= 0.95 - 0.02  # nominal 95%, - 5 s.e. (a score interval is approximate)
