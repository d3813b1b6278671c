"""Issue #28: equivalence (TOST) at a smallest effect of interest, the minimum detectable effect
instead of a post-hoc seed count, simultaneous Δ intervals, paired P(improvement).

Findings 2, 3 and 5 of the issue are reproduced first (what the old code did), then the new
behaviour is measured. Simulations are seeded and vectorised over studies; each prints its figure
(run with ``-s`` to see them).
"""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.power import TTestIndPower, TTestPower
from statsmodels.stats.weightstats import ttost_ind, ttost_paired

from workbench.compare import CompareSettings, compare_variants, stats
from workbench.compare.stats import (
    _detectable_effect_size,
    adjust_pvalues,
    mean_difference,
    minimum_detectable_effect,
    paired_improvement_ci,
    planned_seeds,
    probability_of_improvement_ci,
    simultaneous_levels,
    t_interval,
    tost_p,
    tost_pvalues,
)

ALPHA = 0.05


def _paired_t_parts(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Per study (rows of ``d``, one paired difference per seed): mean, SE, df of the paired t."""
    n = d.shape[-1]
    return d.mean(axis=-1), d.std(axis=-1, ddof=1) / math.sqrt(n), n - 1


# ---- finding 2: post-hoc "seeds needed" is noise; the MDE depends on the design only --------------


def test_finding2_post_hoc_seed_count_is_noise_the_mde_is_not():
    """True effect 0.5 SD of the paired differences: 34 seeds give 80% power (planned). Plugging
    each 5-seed study's *observed* effect and SD into the same formula (what seeds_needed did)
    scatters over orders of magnitude; the MDE at 5 paired seeds is 1.68 SD whatever was observed."""
    assert planned_seeds(0.5, 1.0) == 34
    rng = np.random.default_rng(2)
    d = rng.normal(0.5, 1.0, size=(4000, 5))
    observed = np.abs(d.mean(axis=1)) / d.std(axis=1, ddof=1)
    z = sps.norm.ppf(1 - ALPHA / 2) + sps.norm.ppf(0.8)
    post_hoc = np.maximum(2, np.ceil((z / observed) ** 2))  # normal approximation of the post-hoc formula
    p5, p95 = np.percentile(post_hoc, [5, 95])
    print(f"\npost-hoc seeds at 5 seeds for a true 34: 5th-95th percentile {p5:.0f} to {p95:.0f}")
    assert p5 <= 10 and p95 >= 1000
    mde = minimum_detectable_effect(mean_difference(d[0], np.zeros(5), x_seeds=range(5), y_seeds=range(5)))
    sd0 = d[0].std(ddof=1)
    print(f"MDE at 5 paired seeds: {mde / sd0:.3f} SD of the differences")
    # statsmodels' power at the MDE is 0.8 to the root finder's tolerance (brentq: ~4 eps relative in the effect;
    # power's slope there is ~0.5 per SD, so 1e-12 leaves room for nct's own ~1e-14 error)
    # abs 1e-12: brentq solves to xtol ~1e-14 on an effect ~1.7, and power's slope there is < 1 per unit
    assert TTestPower().power(mde / sd0, nobs=5, alpha=ALPHA) == pytest.approx(0.8, abs=1e-12)
    # statsmodels' solve_power stops at its own brentq tolerance: the two agree to 1e-6 relative, not more
    assert mde / sd0 == pytest.approx(TTestPower().solve_power(nobs=5, alpha=ALPHA, power=0.8), rel=1e-6)
    assert mde / sd0 == pytest.approx(1.68, abs=0.005)


def test_mde_uses_the_level_the_comparison_was_tested_at():
    """With 4 comparisons Holm's first step tests at alpha/4: the MDE there is larger than at alpha."""
    x, y = np.array([0.1, 0.4, 0.2, 0.5, 0.3]), np.array([0.2, 0.1, 0.3, 0.2, 0.1])
    diff = mean_difference(x, y, x_seeds=range(5), y_seeds=range(5))
    at_alpha = minimum_detectable_effect(diff, alpha=ALPHA)
    at_quarter = minimum_detectable_effect(diff, alpha=ALPHA / 4)
    assert at_quarter > at_alpha > 0
    welch = mean_difference(x, y)  # no seeds: Welch; two-sample power (TTestIndPower) with the pooled SD
    assert minimum_detectable_effect(welch) > 0


@pytest.mark.parametrize(
    ("n_x", "n_y", "paired", "alpha"),
    [
        (75, 75, True, 0.025000000000000022),  # statsmodels' solve_power: fsolve fallback, array([-0.36217277])
        (2, 2, True, 0.01),  # solve_power: 10.0, where the power is 0.18
        (5, 5, False, 0.05),
        (10, 7, False, 0.0125),
        (750, 750, True, 0.05 / 3),
    ],
)
def test_detectable_effect_has_the_asked_power_where_solve_power_fails(n_x, n_y, paired, alpha):
    """The MDE's standardised effect is a positive float at which statsmodels' power function gives
    80% (1e-9: brentq solves to ~4 eps in the effect; the power's slope is below 10 per SD here)."""
    d = _detectable_effect_size(n_x, n_y, paired, alpha, 0.8)
    assert isinstance(d, float) and d > 0
    got = (
        TTestPower().power(d, nobs=n_x, alpha=alpha)
        if paired
        else TTestIndPower().power(d, nobs1=n_x, ratio=n_y / n_x, alpha=alpha)
    )
    assert got == pytest.approx(0.8, abs=1e-9)


# ---- finding 3: no equivalence test; TOST at the SESOI ---------------------------------------------


def test_tost_matches_statsmodels():
    """Same p-values as statsmodels' ttost_paired and ttost_ind(usevar='unequal') (Welch), to
    1e-12: both evaluate the same t cdf on the same statistic (a few operations on O(1) numbers)."""
    x = np.array([0.61, 0.58, 0.63, 0.60, 0.59, 0.62])
    y = np.array([0.60, 0.59, 0.61, 0.61, 0.58, 0.60])
    paired = mean_difference(x, y, x_seeds=range(6), y_seeds=range(6))
    # abs 1e-12: the same t statistic from 5-10 values (~50 ops x eps ~ 1e-14 relative) through the same
    # scipy t cdf (density < 0.5), so p-values agree to ~1e-14
    assert tost_p(paired, 0.03) == pytest.approx(ttost_paired(x, y, -0.03, 0.03)[0], abs=1e-12)
    welch = mean_difference(x, y[:5])
    assert tost_p(welch, 0.03) == pytest.approx(ttost_ind(x, y[:5], -0.03, 0.03, usevar="unequal")[0], abs=1e-12)
    assert math.isnan(tost_p(paired, math.nan))


def test_finding3_tost_at_the_sesoi_bound_rarely_claims_equivalence():
    """True |Δ| exactly at the SESOI (the least favourable null): "equivalent" <= 5% (paired t,
    5 and 10 seeds; 20000 studies each: s.e. 0.15 points)."""
    rng = np.random.default_rng(3)
    for n in (5, 10):
        for true in (1.0, -1.0):
            d = rng.normal(true, 1.0, size=(20_000, n))
            p = tost_pvalues(*_paired_t_parts(d), sesoi=1.0)
            rate = float((p < ALPHA).mean())
            print(f"\nTOST at the bound, {n} seeds, Δ = {true:+}: false 'equivalent' {rate:.2%}")
            assert rate <= 0.05 + 0.003  # nominal 5%, + 2 s.e.


def _tost_power_at_zero(n: int, sesoi_sd: float) -> float:
    """Exact power of the paired TOST at true Δ = 0: P(|mean| + t_{1-α,n-1} s/√n < e), integrated
    over the sample SD s (s² ~ σ² χ²_{n-1}/(n-1)); σ = 1."""
    from scipy import integrate

    q = sps.t.ppf(1 - ALPHA, n - 1)

    def integrand(s: float) -> float:
        b = (sesoi_sd - q * s / math.sqrt(n)) * math.sqrt(n)
        return max(0.0, 2 * sps.norm.cdf(b) - 1) * sps.chi2.pdf(s * s * (n - 1), n - 1) * 2 * s * (n - 1)

    return integrate.quad(integrand, 0, 10)[0]


def test_aa_with_10_seeds_and_sesoi_one_sd_is_called_equivalent():
    """A/A, 10 paired seeds, SESOI = 1 SD of the differences (the SD the test uses). The issue asks
    for "equivalent" in >= 80%; the exact power of a level-5% TOST there is 79.5% (11 seeds: 85.0%).
    TOST is the standard test (statsmodels' ttost_paired); an oracle knowing σ would reach 87.1%,
    and the unbiased tests that improve on TOST (Brown, Hwang & Munk 1997) are in neither scipy nor
    statsmodels. So 80% is not met at 10 seeds: we check that the table's TOST reaches its exact
    power (20000 studies: s.e. 0.29 points)."""
    exact = _tost_power_at_zero(10, 1.0)
    assert exact == pytest.approx(0.7952, abs=1e-4) and _tost_power_at_zero(11, 1.0) > 0.84
    rng = np.random.default_rng(4)
    d = rng.normal(0.0, 1.0, size=(20_000, 10))
    rate = float((tost_pvalues(*_paired_t_parts(d), sesoi=1.0) < ALPHA).mean())
    print(f"\nA/A, 10 seeds, SESOI 1 SD: 'equivalent' in {rate:.1%} (exact power {exact:.1%})")
    assert abs(rate - exact) <= 0.006  # 2 s.e.


def test_equivalent_verdict_in_the_table():
    """End to end: 10 paired seeds with a tiny difference, SESOI 0.03: "equivalent (|Δ| < 0.03)"."""
    rng = np.random.default_rng(5)
    noise = rng.normal(0, 0.004, 10)
    rows = [
        {
            "variant": v,
            "seed": s,
            "acc": 0.6 + (0.001 if v == "b" else 0.0) + noise[s] * (v == "b") + rng.normal(0, 0.004),
        }
        for v in ("a", "b")
        for s in range(10)
    ]
    t = compare_variants(
        pd.DataFrame(rows),
        "a",
        ["acc"],
        CompareSettings(higher_is_better={"acc": True}, sesoi={"acc": 0.03}, n_resamples=0),
    )
    r = t.df[t.df["variant"] == "b"].iloc[0]
    assert r["verdict"] == "equivalent (|Δ| < 0.03)" and r["status"] == "equivalent"
    assert r["p_equivalence"] < ALPHA and r["sesoi"] == 0.03
    without = compare_variants(
        pd.DataFrame(rows), "a", ["acc"], CompareSettings(higher_is_better={"acc": True}, n_resamples=0)
    )
    w = without.df[without.df["variant"] == "b"].iloc[0]
    assert w["verdict"] == f"inconclusive with 10 seeds (MDE {w['mde']:.3g})" and w["status"] == "inconclusive"
    with pytest.raises(ValueError, match="sesoi of 'acc' must be a positive number"):
        compare_variants(
            pd.DataFrame(rows), "a", ["acc"], CompareSettings(higher_is_better={"acc": True}, sesoi={"acc": -1})
        )


# ---- finding 5: Holm intervals are not simultaneous; the shown ones are ----------------------------

EFFECTS = np.array([2.0, 2.0, 2.0, 0.0])  # 4 variants vs a baseline (5 arms), in SD of a run


def test_finding5_holm_intervals_undercover_simultaneous_ones_do_not():
    """5 arms (4 variants and the baseline), 5 paired seeds, three real effects and one null:
    Holm's step-level intervals (what compare shows again since #52, each at the level printed beside it,
    so that none contradicts its verdict) cover all four Δ together in ~93.6%; Bonferroni intervals (each
    at 1 - alpha/4) in >= 95%. 6000 studies: s.e.
    0.3 points."""
    rng = np.random.default_rng(6)
    n_studies, n = 6000, 5
    base = rng.normal(0, 1, size=(n_studies, 1, n))
    arms = rng.normal(EFFECTS[None, :, None], 1, size=(n_studies, 4, n))
    d = arms - base  # [studies, 4, seeds]
    p = sps.ttest_1samp(d, 0.0, axis=-1).pvalue
    holm_levels = np.array([1 - ALPHA / adjust_pvalues(row, "holm")[1] for row in p])  # [studies, 4]
    holm_cover = np.ones(n_studies, dtype=bool)
    for j in range(4):
        for level in np.unique(holm_levels[:, j]):
            rows = holm_levels[:, j] == level
            _, lo, hi = t_interval(d[rows, j], confidence=level)
            holm_cover[rows] &= (lo <= EFFECTS[j]) & (EFFECTS[j] <= hi)
    _, lo, hi = t_interval(d, confidence=simultaneous_levels(4, ALPHA))
    simultaneous = ((lo <= EFFECTS[None, :]) & (EFFECTS[None, :] <= hi)).all(axis=1)
    print(
        f"\nsimultaneous coverage, 5 arms x 5 seeds: Holm step intervals {holm_cover.mean():.1%}, "
        f"Bonferroni intervals {simultaneous.mean():.1%}"
    )
    assert holm_cover.mean() < 0.945
    assert simultaneous.mean() >= 0.95 - 0.006  # nominal >= 95%, - 2 s.e.


def test_table_shows_the_interval_its_test_used():
    """#52, one interval per word: the table's Δ interval of each of 4 comparisons is the paired t interval at
    the level Holm tested it at (printed per row): the k-th smallest p-value at 1 - alpha/(4 - k + 1) while Holm
    rejects, the level of Holm's stop after. Not simultaneous (the test above: ~93.6% together), but never
    beside a word it contradicts, as the Bonferroni interval was beside a Holm "better"."""
    rng = np.random.default_rng(7)
    rows = [
        {"variant": v, "seed": s, "acc": mu + rng.normal(0, 0.05)}
        for v, mu in (("base", 0.5), ("a", 0.6), ("b", 0.6), ("c", 0.6), ("d", 0.5))
        for s in range(5)
    ]
    df = pd.DataFrame(rows)
    t = compare_variants(df, "base", ["acc"], CompareSettings(higher_is_better={"acc": True}, n_resamples=0))
    rows_by = t.df.set_index("variant")
    order = rows_by.loc[list("abcd"), "p_value"].sort_values().index.tolist()
    divisor, levels = 4, {}
    for v in order:  # Holm by hand: the divisor falls while it rejects, and stays at its stop
        levels[v] = 1 - ALPHA / divisor
        if rows_by.loc[v, "p_value"] < ALPHA / divisor:
            divisor -= 1
    assert order[-1] == "d" and levels["d"] == pytest.approx(1 - ALPHA / 1)  # a, b, c rejected; d tested at 0.05
    for v in "abcd":
        r = t.df[t.df["variant"] == v].iloc[0]
        d = df[df.variant == v]["acc"].to_numpy() - df[df.variant == "base"]["acc"].to_numpy()
        _, lo, hi = t_interval(d, confidence=levels[v])
        # abs 1e-12: the same mean +- quantile x SE from <= 10 values of size ~1 (~1e-14 rounding)
        assert (r["delta_lo"], r["delta_hi"]) == pytest.approx((lo, hi), abs=1e-12)
        assert r["delta_level"] == pytest.approx(levels[v])
        assert r["delta_ci"] == "Holm step-down"
        assert (lo > 0) == (r["status"] == "better")  # the interval excludes 0 exactly when Holm rejects


# ---- finding 5: P(improvement) ignored the pairing and degenerated to [1, 1] ------------------------


def test_finding5_unpaired_bootstrap_degenerates_paired_interval_does_not():
    x, y = np.array([0.61, 0.62, 0.63, 0.64, 0.65]), np.array([0.51, 0.52, 0.53, 0.54, 0.55])
    old = probability_of_improvement_ci(x, y, rng=0)
    assert (old.lo, old.hi) == (1.0, 1.0)  # every resample separates the groups
    new = paired_improvement_ci(x, y)
    # abs 1e-12: scipy's beta quantile for Clopper-Pearson at n = 5 is exact to ~1e-15 here
    assert new.value == 1.0 and new.lo == pytest.approx(0.025**0.2, abs=1e-12) and new.hi == 1.0


def test_paired_improvement_covers_at_5_seeds():
    """P(D > 0) for D ~ N(δ, 1) at the same seed, 5 seeds: the exact Clopper-Pearson interval covers
    Φ(δ) in >= 95% (it is exact-conservative; 4000 studies per δ: s.e. 0.35 points)."""
    rng = np.random.default_rng(8)
    for delta in (0.0, 0.5, 1.0, 2.0):
        truth = sps.norm.cdf(delta)
        d = rng.normal(delta, 1.0, size=(4000, 5))
        wins = (d > 0).sum(axis=1)
        # the interval depends only on the win count: one call per count (what the report calls)
        bounds = {k: paired_improvement_ci(np.r_[np.ones(k), -np.ones(5 - k)], np.zeros(5)) for k in range(6)}
        covered = np.array([bounds[k].lo <= truth <= bounds[k].hi for k in wins])
        print(f"\npaired P(improve) at 5 seeds, true {truth:.3f}: coverage {covered.mean():.1%}")
        assert covered.mean() >= 0.95 - 0.007


def test_paired_improvement_in_the_table_is_by_seed():
    rows = [
        {"variant": v, "seed": s, "acc": a}
        for v, vals in (("base", [0.5, 0.6, 0.7, 0.8, 0.9]), ("v", [0.55, 0.65, 0.75, 0.85, 0.85]))
        for s, a in enumerate(vals)
    ]
    t = compare_variants(
        pd.DataFrame(rows), "base", ["acc"], CompareSettings(higher_is_better={"acc": True}, n_resamples=0)
    )
    r = t.df[t.df["variant"] == "v"].iloc[0]
    assert r["p_improve"] == pytest.approx(4 / 5)  # 4 of 5 seeds improve at the same seed
    # unpaired, over all 25 run pairs, it is 14/25: the seeds' common level hides the pairing
    x, y = [r["acc"] for r in rows[5:]], [r["acc"] for r in rows[:5]]
    assert stats.probability_of_improvement(x, y) == pytest.approx(14 / 25)


# ---- no post-hoc seed count in any output ---------------------------------------------------------


def test_no_post_hoc_seed_count_in_any_output_format():
    from rich.console import Console

    from workbench.cli.report import comparison_table_html, print_table

    rng = np.random.default_rng(9)
    rows = [
        {"variant": v, "seed": s, "acc": mu + rng.normal(0, 0.05)}
        for v, mu in (("base", 0.5), ("a", 0.52), ("b", 0.5))
        for s in range(5)
    ]
    t = compare_variants(pd.DataFrame(rows), "base", ["acc"], CompareSettings(higher_is_better={"acc": True}))
    assert (t.df["status"] == "inconclusive").sum() == 2
    buf = io.StringIO()
    print_table(t, Console(file=buf, width=300, force_terminal=True))
    plain = io.StringIO()
    print_table(t, Console(file=plain, width=300, force_terminal=False))
    outputs = {
        "md": t.to_markdown(),
        "csv": t.to_csv(),
        "json": t.to_json(),
        "table": buf.getvalue(),
        "tsv": plain.getvalue(),
        "html": comparison_table_html(t),
    }
    for name, text in outputs.items():
        low = text.lower()
        assert "needed" not in low and "seeds_needed" not in low, name
        assert "inconclusive with 5 seeds (mde" in low, name
        assert "status" in low, name
