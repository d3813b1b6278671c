"""Hypothesis properties of the statistics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.compare import (
    adjust_pvalues,
    bootstrap_ci,
    iqm,
    mean_difference,
    probability_of_improvement,
    probability_of_improvement_ci,
)

# few distinct values so that ties are common
tied = st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]), min_size=1, max_size=8)
reals = st.lists(st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False), min_size=1, max_size=12)
seeded = settings(max_examples=60, deadline=None)


@seeded
@given(tied, tied)
def test_p_improve_is_antisymmetric(a, b):
    assert probability_of_improvement(a, b) + probability_of_improvement(b, a) == pytest.approx(1.0)
    assert probability_of_improvement(a, b, higher_is_better=False) == pytest.approx(probability_of_improvement(b, a))


@seeded
@given(reals)
def test_iqm_between_min_and_max(x):
    v = iqm(np.array(x))
    assert min(x) - 1e-9 <= v <= max(x) + 1e-9


@seeded
@given(reals, st.sampled_from(["mean", "iqm"]), st.integers(0, 2**16))
def test_bootstrap_ci_contains_point_estimate(x, stat, seed):
    est = bootstrap_ci(x, stat, n_resamples=300, rng=seed)
    if est.n < 2:
        assert np.isnan(est.lo)
        return
    tol = 1e-9 * max(1.0, max(abs(v) for v in x))
    assert est.lo - tol <= est.value <= est.hi + tol
    assert min(x) - tol <= est.lo and est.hi <= max(x) + tol


@seeded
@given(tied, tied, st.integers(0, 2**16))
def test_p_improve_ci_contains_estimate_and_is_a_probability(a, b, seed):
    est = probability_of_improvement_ci(a, b, n_resamples=300, rng=seed)
    assert 0.0 <= est.value <= 1.0
    if min(len(a), len(b)) >= 2:
        assert 0.0 <= est.lo <= est.value <= est.hi <= 1.0


@pytest.mark.filterwarnings("ignore:Precision loss occurred:RuntimeWarning")  # nearly equal floats
@seeded
@given(reals, reals, st.floats(0.5, 0.99))
def test_difference_ci_contains_delta(a, b, level):
    d = mean_difference(a, b, rng=0)
    lo, hi = d.interval(level)
    if min(len(a), len(b)) < 2:
        assert np.isnan(lo)
        return
    assert lo <= d.delta <= hi
    assert d.delta == pytest.approx(np.mean(a) - np.mean(b), abs=1e-9 * (1 + max(map(abs, a + b))))
    assert 0.0 <= d.p_value <= 1.0


@seeded
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=10), st.sampled_from(["holm", "bonferroni", "none"]))
def test_adjusted_pvalues_are_valid(p, method):
    adj, div = adjust_pvalues(p, method)
    p = np.array(p)
    assert np.all(adj >= p - 1e-15) and np.all(adj <= 1.0)
    assert np.all(div >= 1) and np.all(div <= p.size)
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(adj[order]) >= -1e-15)  # monotone in the raw p-values


@seeded
@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=10),
    st.sampled_from(["holm", "bonferroni", "none"]),
    st.sampled_from([0.01, 0.05, 0.1]),
)
def test_corrected_level_rejects_exactly_what_the_correction_rejects(p, method, alpha):
    """A CI at 1 - alpha/divisor excludes 0 iff p < alpha/divisor (t duality); that must be the
    correction's own decision, adjusted p < alpha (issue 12, finding 3: Holm's stop)."""
    adj, div = adjust_pvalues(p, method, alpha=alpha)
    p = np.array(p)
    assert np.array_equal(p < alpha / div, adj < alpha)


# ---- #52: no row's printed interval contradicts its verdict ---------------------------------------------


@st.composite
def comparison_inputs(draw):
    """A random study: 1-4 arms and a baseline, 2-6 seeds (paired, or one arm short of a seed), 1-2 metrics
    with random effects, noise, SESOIs and directions, any correction and family."""
    import pandas as pd

    n_arms, n_seeds = draw(st.integers(1, 4)), draw(st.integers(2, 6))
    metrics = ["acc", "len"][: draw(st.integers(1, 2))]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    effects = {(a, m): draw(st.sampled_from([0.0, 0.01, 0.05, 0.3])) for a in range(n_arms) for m in metrics}
    sd = {m: draw(st.sampled_from([0.005, 0.02, 0.1])) for m in metrics}
    short = draw(st.booleans())
    rows = []
    for a in range(-1, n_arms):
        seeds = range(n_seeds - (1 if short and a == 0 and n_seeds > 2 else 0))
        for s in seeds:
            rows.append(
                {
                    "variant": "base" if a < 0 else f"v{a}",
                    "seed": s,
                    **{m: 0.5 + (0 if a < 0 else effects[a, m]) + rng.normal(0, sd[m]) for m in metrics},
                }
            )
    sesoi = {m: draw(st.sampled_from([0.01, 0.05, 0.2])) for m in metrics if draw(st.booleans())}
    higher = {m: draw(st.sampled_from([True, False, None])) for m in metrics}
    settings_ = dict(
        correction=draw(st.sampled_from(["holm", "bonferroni", "none"])),
        family=draw(st.sampled_from(["primary", "metric", "all"])),
        secondary=metrics[1:] if draw(st.booleans()) else [],
        confidence=draw(st.sampled_from([0.95, 0.99, 0.9843])),
    )
    return pd.DataFrame(rows), metrics, sesoi, higher, settings_


@pytest.mark.slow  # over 5 s in the fast tier (2 cores, -n 3, load 8)
@settings(max_examples=60, deadline=None)
@given(comparison_inputs())
def test_no_printed_interval_contradicts_its_verdict(inputs):
    """Over random tables, as printed (markdown: headlines and tables, read back by
    tests/compare/verdict_intervals.py): better/worse excludes 0 on its side, equivalent's TOST interval lies
    inside ±SESOI, inconclusive includes 0, and each headline's interval is its table row's. And a sequential
    design's futility stop on each side, decided on the same rows (look_inputs, at K = 3 looks' one-sided level):
    its verdict states the bound that decided, strictly inside ±SESOI on the excluded side, in the table and in
    the headline (:func:`_futile_pages`)."""
    from tests.compare.verdict_intervals import page_contradictions, table_rows
    from workbench.compare import CompareSettings, compare_variants

    df, metrics, sesoi, higher, extra = inputs
    table = compare_variants(
        df, "base", metrics, CompareSettings(higher_is_better=higher, sesoi=sesoi, n_resamples=0, **extra)
    )
    md = table.to_markdown()
    assert page_contradictions(md) == []
    compared = table.df[(table.df["verdict"] != "baseline") & table.df["delta_lo"].notna()]
    assert len(table_rows(md)) == len(compared)  # every row with an interval was read and checked
    for r in compared.to_dict("records"):  # and the numbers behind the text
        if r["status"] == "equivalent":
            assert r["delta_ci"] == "TOST" and -r["sesoi"] < r["delta_lo"] and r["delta_hi"] < r["sesoi"]
        elif r["status"] in ("better", "worse", "higher", "lower"):
            assert r["delta_lo"] > 0 or r["delta_hi"] < 0
        elif r["status"] == "inconclusive":
            assert r["delta_lo"] <= 0 <= r["delta_hi"]
    for md in _futile_pages(table, df):
        assert page_contradictions(md) == [], md


def _futile_pages(table, df):
    """``table``'s markdown with each row that a futility stop on a side would stop (each side in turn) said as
    the design says it (apply_design_verdicts), asserting on the numbers that each stated bound lies strictly
    inside the SESOI on its side: one page per side that stopped a row."""
    import copy
    import math

    from workbench.analysis.sequential import (
        FUTILITY_BOUNDS,
        FUTILITY_LEVEL,
        DesignVerdict,
        apply_design_verdicts,
        look_inputs,
    )

    summary = df.assign(arm=df["variant"])
    seeds = summary.groupby("arm")["seed"].apply(frozenset)
    confidence = 1 - 0.05 / 3
    pages = []
    for side in ("improvement", "worsening", "difference"):
        verdicts = {}
        for r in table.df.to_dict("records"):
            sesoi = r.get("sesoi")
            if r["verdict"] == "baseline" or r["higher_is_better"] is None or sesoi is None or math.isnan(sesoi):
                continue
            if seeds[r["variant"]] != seeds["base"]:  # the short arm: its table difference is not the paired one
                continue
            *_, futile, bounds = look_inputs(
                r, summary, "base", r["metric"], sesoi=float(sesoi), confidence=confidence, side=side
            )
            if not futile:
                continue
            # the bound that decided lies strictly inside the SESOI on its side: the lower one above -SESOI, the upper
            # one below +SESOI
            lo, hi = bounds
            assert not (math.isnan(lo) and math.isnan(hi))
            assert (math.isnan(lo) or -sesoi < lo) and (math.isnan(hi) or hi < sesoi)
            row = {**r, FUTILITY_BOUNDS: bounds, FUTILITY_LEVEL: confidence}
            verdicts[r["metric"], r["variant"]] = DesignVerdict(
                r["metric"], r["variant"], "futile", 1, 3, row, "futile", float(sesoi), futility=side
            )
        if verdicts:
            said = copy.deepcopy(table)
            assert apply_design_verdicts(said, verdicts) == len(verdicts)
            pages.append(said.to_markdown())
    return pages
