"""compare_variants on synthetic studies: clear winner, identical variants, direction, 1 seed,
NaN, reproducibility, serialisation, and simulation checks of error rate, coverage and power."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest

from workbench.compare import COLUMNS, CompareSettings, ComparisonTable, compare_variants, t_test_power


def study(
    means: dict[str, float],
    *,
    sd: float = 0.02,
    n: int = 5,
    seed: int = 0,
    matched: bool = True,
    seed_sd: float = 0.0,
    metric: str = "acc",
) -> pd.DataFrame:
    """One row per run; ``seed_sd`` adds a per-seed effect shared by all variants (what pairing removes)."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(0.0, seed_sd, n)
    rows = []
    for v, mu in means.items():
        for s in range(n):
            rows.append(
                {"variant": v, "seed": s if matched else f"{v}-{s}", metric: mu + shared[s] + rng.normal(0.0, sd)}
            )
    return pd.DataFrame(rows)


def row(table: ComparisonTable, variant: str, metric: str = "acc") -> pd.Series:
    rows = table.for_metric(metric)
    return rows[rows["variant"] == variant].iloc[0]


def test_clear_winner_is_better():
    t = compare_variants(
        study({"grpo": 0.5, "dapo": 0.8}), "grpo", ["acc"], CompareSettings(higher_is_better={"acc": True})
    )
    r = row(t, "dapo")
    assert r["verdict"] == "better"
    assert r["delta"] == pytest.approx(0.3, abs=0.03)
    # paired sd ~ 0.02 * sqrt(2), se ~ 0.0126, t(0.975, 4) = 2.78: half-width ~ 0.035
    assert 0.2 < r["delta_lo"] < 0.3 < r["delta_hi"] < 0.4
    # paired: 5 of 5 seeds improve; the exact binomial interval is [0.025^(1/5), 1] = [0.478, 1], not [1, 1]
    assert r["p_improve"] == 1.0 and r["p_improve_lo"] == pytest.approx(0.025**0.2, abs=1e-9)
    assert r["paired"] and r["test"] == "paired t"
    assert r["p_adjusted"] < 1e-4
    assert t.ranking("acc") == ["dapo", "grpo"]
    assert t.winners("acc") == ["dapo"]
    assert r["status"] == "better"
    assert list(t.df.columns) == list(COLUMNS)
    b = row(t, "grpo")
    assert b["verdict"] == "baseline" and math.isnan(b["delta"]) and math.isnan(b["p_value"])


def test_identical_variants_are_not_distinguishable():
    t = compare_variants(
        study({"grpo": 0.5, "dr_grpo": 0.5}, sd=0.05, seed=3),
        "grpo",
        ["acc"],
        CompareSettings(higher_is_better={"acc": True}),
    )
    r = row(t, "dr_grpo")
    assert r["verdict"] == f"inconclusive with 5 seeds (MDE {r['mde']:.3g})" and r["status"] == "inconclusive"
    assert r["delta_lo"] < 0 < r["delta_hi"]
    assert r["p_improve_lo"] < 0.5 < r["p_improve_hi"]
    assert t.winners("acc") == []


def test_direction_lower_is_better():
    df = study({"grpo": 1.5, "dr_grpo": 1.1}, sd=0.05, metric="ratio")
    down = compare_variants(df, "grpo", ["ratio"], CompareSettings(higher_is_better={"ratio": False}))
    r = row(down, "dr_grpo", "ratio")
    assert r["verdict"] == "better" and r["delta"] < 0 and r["p_improve"] == 1.0
    assert down.ranking("ratio") == ["dr_grpo", "grpo"]
    up = compare_variants(df, "grpo", ["ratio"], CompareSettings(higher_is_better={"ratio": True}))
    r = row(up, "dr_grpo", "ratio")
    assert r["verdict"] == "worse" and r["p_improve"] == 0.0
    assert up.ranking("ratio") == ["grpo", "dr_grpo"]
    # no direction: says higher/lower, no rank
    none = compare_variants(df, "grpo", ["ratio"], CompareSettings(higher_is_better={"ratio": None}))
    assert row(none, "dr_grpo", "ratio")["verdict"] == "lower"
    assert none.df["rank"].isna().all()


def test_direction_defaults_to_registered_summary():
    df = study({"grpo": 100.0, "dapo": 50.0}, sd=1.0, metric="tokens_per_correct")
    t = compare_variants(df, "grpo", ["tokens_per_correct"])
    assert t.higher_is_better == {"tokens_per_correct": False}
    assert row(t, "dapo", "tokens_per_correct")["verdict"] == "better"


def test_one_seed_is_explicit():
    df = study({"grpo": 0.5, "dapo": 0.8})
    df = df[(df.variant == "grpo") | (df.seed == 0)]
    r = row(compare_variants(df, "grpo", ["acc"], CompareSettings(higher_is_better={"acc": True})), "dapo")
    assert r["n_seeds"] == 1
    assert r["verdict"] == "inconclusive with 1 vs 5 seeds" and r["status"] == "inconclusive"
    for c in ["mean_lo", "mean_hi", "iqm_lo", "delta_lo", "delta_hi", "p_improve_lo", "p_value", "p_adjusted"]:
        assert math.isnan(r[c]), c
    assert "1 seed" in r["note"]
    both = compare_variants(df[df.seed == 0], "grpo", ["acc"], CompareSettings(higher_is_better={"acc": True}))
    assert row(both, "dapo")["verdict"] == "inconclusive with 1 seed"


def test_nans_are_counted_and_withhold_a_verdict_they_could_change():
    df = study({"grpo": 0.5, "dapo": 0.8})
    df.loc[(df.variant == "dapo") & (df.seed < 2), "acc"] = math.nan
    r = row(compare_variants(df, "grpo", ["acc"], CompareSettings(higher_is_better={"acc": True})), "dapo")
    assert r["n_seeds"] == 3 and r["n_nan"] == 2 and r["n_missing"] == 2 and r["n_runs"] == 5
    assert "no value in 2/5 runs" in r["note"]
    assert not r["paired"]  # seed sets differ after dropping: Welch on the runs with a value
    # the t-test on the 3 runs with a value rejects, but 2 runs logged nothing: no winner from them
    assert r["delta_lo"] > 0
    assert r["verdict"] == "withheld: no value in 2/5 runs"
    allnan = df.copy()
    allnan.loc[allnan.variant == "dapo", "acc"] = math.nan
    assert (
        row(compare_variants(allnan, "grpo", ["acc"], CompareSettings(higher_is_better={"acc": True})), "dapo")[
            "verdict"
        ]
        == "no data"
    )


def test_identical_constant_values():
    df = pd.DataFrame({"variant": ["a"] * 3 + ["b"] * 3, "seed": [0, 1, 2] * 2, "acc": [0.5] * 6})
    r = row(compare_variants(df, "a", ["acc"], CompareSettings(higher_is_better={"acc": True})), "b")
    assert r["delta"] == 0 and r["p_value"] == 1.0
    assert (r["mean_lo"], r["mean_hi"]) == (0.5, 0.5)
    # zero variance: the inverted permutation test; 3 matched seeds can give p >= 2/2^3 = 0.25 only,
    # so no shift can be excluded: the whole line (a zero-width interval would exclude 0.01)
    assert (r["delta_lo"], r["delta_hi"]) == (-math.inf, math.inf)
    assert r["verdict"] == "inconclusive with 3 seeds"  # zero SD: a permutation test, no t power, no MDE


def test_holm_correction_across_variants():
    df = study({"base": 0.5, "v1": 0.52, "v2": 0.5, "v3": 0.9}, sd=0.02, seed=1, matched=False)
    t = compare_variants(df, "base", ["acc"], CompareSettings(higher_is_better={"acc": True}))
    rows = t.for_metric("acc").set_index("variant").drop("base")
    p = rows["p_value"].sort_values()
    m = len(p)
    expected = np.maximum.accumulate(np.minimum(1, p.to_numpy() * (m - np.arange(m))))
    assert rows.loc[p.index, "p_adjusted"].to_numpy() == pytest.approx(expected)
    # each shown CI is at the level Holm tested it at: v3 (smallest p) at 1 - alpha/3; the second is not
    # rejected at alpha/2, so Holm stops there: it and the third at 1 - alpha/2
    assert rows.loc[p.index[0], "p_value"] < 0.05 / 3
    assert rows.loc[p.index[1], "p_value"] > 0.05 / 2
    assert rows.loc[p.index, "delta_level"].to_numpy() == pytest.approx([1 - 0.05 / 3, 1 - 0.05 / 2, 1 - 0.05 / 2])
    none = compare_variants(df, "base", ["acc"], CompareSettings(higher_is_better={"acc": True}, correction="none"))
    assert (none.df["p_adjusted"].dropna() == none.df["p_value"].dropna()).all()
    # family "all" corrects across metrics too
    df["acc2"] = df["acc"]
    fam = compare_variants(
        df, "base", ["acc", "acc2"], CompareSettings(higher_is_better={"acc": True, "acc2": True}, family="all")
    )
    assert fam.df["delta_level"].max() == pytest.approx(1 - 0.05 / 6)  # the first of 6 steps


def test_primary_metrics_form_one_study_wide_holm_family():
    """#52: 2 primary metrics x 2 comparisons are one Holm family of 4. Paired differences at 3 seeds
    (t = mean / (sd / sqrt 3), df 2): acc v1 [.10, .11, .12] t = 19.05, p = 0.00274; len v1 [1, 1.3, 1.6]
    t = 7.506, p = 0.0173; acc v2 [0, .05, .10] t = 1.732, p = 0.225; len v2 [-1, 0, 1.2] p = 0.88.
    Holm over 4: 4 x 0.00274 = 0.0110 rejects; 3 x 0.0173 = 0.0519 does not, and Holm stops there.
    Per metric (the old family) len v1 was 2 x 0.0173 = 0.0346: "worse". Study-wide it is inconclusive."""
    from scipy import stats as sps

    base_acc, base_len = np.array([0.5, 0.6, 0.4]), np.array([20.0, 22.0, 21.0])
    diffs = {
        ("v1", "acc"): [0.10, 0.11, 0.12],
        ("v1", "len"): [1.0, 1.3, 1.6],
        ("v2", "acc"): [0.0, 0.05, 0.10],
        ("v2", "len"): [-1.0, 0.0, 1.2],
    }
    rows = [{"variant": "base", "seed": s, "acc": base_acc[s], "len": base_len[s]} for s in range(3)]
    rows += [
        {"variant": v, "seed": s, "acc": base_acc[s] + diffs[v, "acc"][s], "len": base_len[s] + diffs[v, "len"][s]}
        for v in ("v1", "v2")
        for s in range(3)
    ]
    settings = CompareSettings(higher_is_better={"acc": True, "len": False}, n_resamples=0)
    t = compare_variants(pd.DataFrame(rows), "base", ["acc", "len"], settings)
    got = t.df.set_index(["metric", "variant"])
    p = {k: float(sps.ttest_1samp(d, 0.0).pvalue) for k, d in diffs.items()}
    # rel 3e-3: the hand values above are rounded to 3 significant digits
    assert [p["v1", "acc"], p["v1", "len"], p["v2", "acc"]] == pytest.approx([0.00274, 0.0173, 0.225], rel=3e-3)
    expected = {
        ("acc", "v1"): 4 * p["v1", "acc"],
        ("len", "v1"): 3 * p["v1", "len"],
        ("acc", "v2"): max(3 * p["v1", "len"], 2 * p["v2", "acc"]),
        ("len", "v2"): min(1.0, max(2 * p["v2", "acc"], p["v2", "len"])),
    }
    for (metric, variant), adj in expected.items():
        # rel 1e-12: the same p-value times a small integer (a few ulps)
        assert got.loc[(metric, variant), "p_adjusted"] == pytest.approx(adj, rel=1e-12)
    assert got.loc[("acc", "v1"), "status"] == "better"
    assert got.loc[("len", "v1"), "status"] == "inconclusive"  # worse under per-metric Holm
    assert got.loc[("acc", "v1"), "delta_level"] == pytest.approx(1 - 0.05 / 4)
    assert got.loc[("len", "v1"), "delta_level"] == pytest.approx(1 - 0.05 / 3)  # Holm stops at step 2 of 4
    assert t.settings["family"] == "primary" and "study-wide" in t.to_markdown()
    per_metric = compare_variants(
        pd.DataFrame(rows), "base", ["acc", "len"], dataclasses.replace(settings, family="metric")
    ).df.set_index(["metric", "variant"])
    assert per_metric.loc[("len", "v1"), "status"] == "worse"  # 2 x 0.0173 = 0.0346 < 0.05
    # declared secondary, len is its own family (2 comparisons) and labelled exploratory
    sec = compare_variants(pd.DataFrame(rows), "base", ["acc", "len"], dataclasses.replace(settings, secondary=["len"]))
    got = sec.df.set_index(["metric", "variant"])
    assert got.loc[("len", "v1"), "p_adjusted"] == pytest.approx(2 * p["v1", "len"], rel=1e-12)
    assert got.loc[("acc", "v1"), "p_adjusted"] == pytest.approx(2 * p["v1", "acc"], rel=1e-12)
    assert all(h.startswith("(secondary, exploratory) ") == (" len " in h) for h in sec.headlines())
    assert "### len (secondary, exploratory;" in sec.to_markdown()


def test_reproducible_with_fixed_seed_and_order_independent():
    df = study({"grpo": 0.5, "dapo": 0.6, "gspo": 0.55}, sd=0.05, n=8, matched=False)  # unpaired: bootstrap
    a = compare_variants(df, "grpo", ["acc"], CompareSettings(higher_is_better={"acc": True}, rng=11))
    b = compare_variants(df, "grpo", ["acc"], CompareSettings(higher_is_better={"acc": True}, rng=11))
    pd.testing.assert_frame_equal(a.df, b.df)
    c = compare_variants(df, "grpo", ["acc"], CompareSettings(higher_is_better={"acc": True}, rng=12))
    # unpaired P(improve) is Newcombe's closed-form interval since #52: no resamples, no rng
    pd.testing.assert_series_equal(a.df["p_improve_lo"], c.df["p_improve_lo"])
    pd.testing.assert_series_equal(a.df["mean_lo"], c.df["mean_lo"])
    pd.testing.assert_series_equal(a.df["iqm_lo"], c.df["iqm_lo"])
    # a cell's bootstrap does not depend on which other variants are in the table
    sub = compare_variants(
        df[df.variant != "gspo"], "grpo", ["acc"], CompareSettings(higher_is_better={"acc": True}, rng=11)
    )
    for col in ["mean_lo", "mean_hi", "iqm_lo", "p_improve_lo", "p_improve_hi"]:
        assert row(sub, "dapo")[col] == row(a, "dapo")[col]


def test_serialisation_round_trip(tmp_path):
    df = study({"grpo": 0.5, "dapo": 0.8, "solo": 0.6})
    df = df[(df.variant != "solo") | (df.seed == 0)]
    t = compare_variants(df, "grpo", ["acc"], CompareSettings(higher_is_better={"acc": True}))
    doc = json.loads(t.to_json())
    assert doc["baseline"] == "grpo" and doc["correction"] == "holm" and doc["alpha"] == pytest.approx(0.05)
    assert len(doc["rows"]) == 3
    back = ComparisonTable.from_dict(doc)
    pd.testing.assert_frame_equal(back.df, t.df, check_dtype=False)
    t.to_json(tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text()) == doc
    csv = pd.read_csv(pd.io.common.StringIO(t.to_csv()))
    assert list(csv.columns) == list(COLUMNS) and len(csv) == 3
    md = t.to_markdown()
    assert "### acc (higher is better; baseline: grpo)" in md
    assert "| 1 | dapo | 5 |" in md and "better" in md
    assert "inconclusive with 1 vs 5 seeds" in md and "solo: 1 seed: no CI" in md


def test_input_errors():
    df = study({"grpo": 0.5, "dapo": 0.8})
    with pytest.raises(ValueError, match="baseline 'gpro' not among"):
        compare_variants(df, "gpro", ["acc"])
    with pytest.raises(ValueError, match="missing columns"):
        compare_variants(df, "grpo", ["accuracy"])
    with pytest.raises(ValueError, match="did you mean 'holm'"):
        compare_variants(df, "grpo", ["acc"], CompareSettings(correction="holmes"))


# ---- simulations (fixed seeds; verdicts do not depend on the bootstrap, so few resamples) ----


def _sim(means, n_studies, *, sd, n, matched, seed_sd=0.0, start=0):
    for i in range(n_studies):
        df = study(means, sd=sd, n=n, seed=start + i, matched=matched, seed_sd=seed_sd)
        yield compare_variants(
            df, "base", ["acc"], CompareSettings(higher_is_better={"acc": True}, n_resamples=10, rng=i)
        )


@pytest.mark.slow
def test_identical_variants_false_positive_rate():
    """3 variants identical to the baseline: Holm keeps the family-wise error rate <= 5%."""
    n_studies = 250
    any_claim = 0
    for t in _sim({"base": 0.5, "a": 0.5, "b": 0.5, "c": 0.5}, n_studies, sd=0.1, n=5, matched=False):
        any_claim += t.df["verdict"].isin(["better", "worse"]).any()
    # at most 5% expected (1000 such studies gave 3.7%); P(Binomial(250, 0.05) >= 23) < 0.5%
    assert any_claim / n_studies < 0.09


def test_planted_effect_ci_coverage_and_power():
    """Effect 0.1 with sd 0.05 per run, 5 matched seeds (shared seed effect): the corrected CI
    (one variant: 95%) covers the true effect ~95% of the time, and the effect is detected at
    the rate the power calculation predicts."""
    n_studies = 300
    covered = detected = 0
    for t in _sim({"base": 0.5, "v": 0.55}, n_studies, sd=0.05, n=5, matched=True, seed_sd=0.2, start=1000):
        r = t.df[t.df.variant == "v"].iloc[0]
        covered += r["delta_lo"] <= 0.05 <= r["delta_hi"]
        detected += r["verdict"] == "better"
    # binomial sd of the coverage at 300 studies: 1.3%
    assert 0.91 <= covered / n_studies <= 0.99
    expected = t_test_power(5, 0.05, 0.05 * math.sqrt(2), paired=True)  # sd of a paired difference
    assert detected / n_studies == pytest.approx(expected, abs=0.08)


def test_stratified_compare_resamples_within_strata():
    # two tasks with very different scales: stratified CIs of the mean are much narrower
    rows = []
    rng = np.random.default_rng(5)
    for v in ["base", "v"]:
        for task, level in [("easy", 0.9), ("hard", 0.1)]:
            for s in range(4):
                rows.append({"variant": v, "seed": s, "task": task, "acc": level + rng.normal(0, 0.01)})
    df = pd.DataFrame(rows)
    strat = row(
        compare_variants(df, "base", ["acc"], CompareSettings(higher_is_better={"acc": True}, strata="task")), "v"
    )
    plain = row(compare_variants(df, "base", ["acc"], CompareSettings(higher_is_better={"acc": True})), "v")
    assert strat["iqm"] == plain["iqm"]
    # the IQM's BCa bootstrap resamples within strata (the mean's t interval has no strata)
    assert strat["iqm_hi"] - strat["iqm_lo"] < 0.25 * (plain["iqm_hi"] - plain["iqm_lo"])
    assert not strat["paired"]  # each seed appears twice (once per task): pairing is ambiguous


def test_per_arm_intervals_are_cut_to_the_summarys_range_and_nothing_else_moves():
    """A k3 KL (>= 0 by construction) of 3 seeds, 1e-6, 1e-6, 1e-4: mean 3.4e-5, sd 5.7e-5, so the
    t interval starts near -1.1e-4. The table cuts it at 0; the verdict and the difference's
    interval do not change (a difference of KLs has any sign)."""
    kl = [1e-6, 1e-6, 1e-4]
    df = pd.DataFrame(
        {
            "variant": ["a"] * 3 + ["b"] * 3,
            "seed": [0, 1, 2, 0, 1, 2],
            "final:mismatch/kl": kl + [5e-5, 6e-5, 7e-5],
            "final:loss/policy": kl + [5e-5, 6e-5, 7e-5],
        }
    )
    # the loss directed as the KL is: only the range differs
    table = compare_variants(
        df,
        "b",
        ["final:mismatch/kl", "final:loss/policy"],
        CompareSettings(n_resamples=0, higher_is_better={"final:loss/policy": False}),
    )
    cut = table.df[(table.df.metric == "final:mismatch/kl") & (table.df.variant == "a")].iloc[0]
    free = table.df[(table.df.metric == "final:loss/policy") & (table.df.variant == "a")].iloc[0]
    t_lo = np.mean(kl) - 4.302652729749464 * np.std(kl, ddof=1) / math.sqrt(3)  # t_{0.975, 2}
    assert free["mean_lo"] == pytest.approx(t_lo, rel=1e-9) and t_lo < 0  # loss: any sign, not cut
    assert cut["mean_lo"] == 0.0 and cut["mean_hi"] == free["mean_hi"]
    for col in ("delta", "delta_lo", "delta_hi", "p_value", "verdict"):
        assert cut[col] == free[col], col


def test_a_difference_that_cancels_to_rounding_residue_prints_as_zero():
    from workbench.compare.table import _fmt_ci

    # DAPO minus no_overlong on final accuracy: paired differences that sum to 0 in decimal leave
    # 5.551e-18 in binary; next to a +-0.09 interval that is residue, not an effect
    assert _fmt_ci(5.551115123125783e-18, -0.09005, 0.09005) == "0 [-0.09005, 0.09005]"
    assert _fmt_ci(1e-4, -0.09005, 0.09005) == "0.0001 [-0.09005, 0.09005]"  # a real, small value stays
    assert _fmt_ci(6.586e-10, 5.597e-10, 7.575e-10) == "6.586e-10 [5.597e-10, 7.575e-10]"  # tiny scale: kept


def test_secondary_metrics_are_marked_in_every_rendering():
    """compare.primary's complement (set by `workbench compare` as settings['secondary']): each of the
    metric's headlines and its table title say "secondary"; the primary metric's do not; it survives JSON."""
    df = study({"grpo": 0.5, "dapo": 0.8}).assign(kl=lambda d: d["acc"] / 10)
    t = compare_variants(df, "grpo", ["acc", "kl"], CompareSettings(higher_is_better={"acc": True, "kl": False}))
    t.settings["secondary"] = ["kl"]
    heads = t.headlines()
    assert [h.startswith("(secondary, exploratory) ") for h in heads] == [False, True]
    md = t.to_markdown()
    assert "### kl (secondary, exploratory; lower is better" in md and "### acc (higher is better" in md
    back = ComparisonTable.from_dict(json.loads(t.to_json()))
    assert back.is_secondary("kl") and not back.is_secondary("acc")
