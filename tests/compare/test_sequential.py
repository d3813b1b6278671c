"""Group-sequential seeding (workbench/compare/sequential.py): finding 4 of issue #28 reproduced,
then the design's family-wise false "better/worse" rate and power, by seeded simulation through
the decision function `workbench run --until-decided` uses (run with -s to see the figures)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from workbench.analysis.sequential import Plan, decide_metrics
from workbench.compare import CompareSettings, compare_variants
from workbench.compare.sequential import (
    REJECTED,
    Design,
    decide_family,
    design_from_settings,
    futile,
    futility_confidence,
    holm_adjusted,
)

LOOKS = (3, 5, 7, 10)


def paired_p(d: np.ndarray, n: int) -> np.ndarray:
    """Two-sided paired t p-values on the first n seeds of per-seed differences d [..., seeds]
    (what compare's paired t, scipy.stats.ttest_rel, gives)."""
    return sps.ttest_1samp(d[..., :n], 0.0, axis=-1).pvalue


def test_adding_seeds_after_looking_inflates_false_positives():
    """Finding 4: 5 seeds, then 7 because the first test was not significant, each at 0.05 (what
    dr_grpo_length_bias did), and looks at 3/5/7/10 at 0.05 each, on A/A data."""
    rng = np.random.default_rng(28)
    d = rng.standard_normal((40_000, 10))  # A/A: per-seed differences with mean 0
    once = paired_p(d, 5) < 0.05
    then7 = once | (paired_p(d, 7) < 0.05)
    every = np.zeros(len(d), bool)
    for n in LOOKS:
        every |= paired_p(d, n) < 0.05
    print(
        f"\nA/A false positives: one look at 5 seeds {once.mean():.3f}; 5 then 7 seeds {then7.mean():.3f}; "
        f"looks at 3/5/7/10 {every.mean():.3f} (all at α 0.05)"
    )
    # 40,000 studies: binomial SE of a rate near 0.05-0.13 is <= 0.0017
    assert abs(once.mean() - 0.05) < 0.006
    assert then7.mean() > 0.07 and every.mean() > 0.10


def test_spending_functions_spend_alpha_by_the_last_look():
    for spending in ("obrien_fleming", "pocock"):
        d = Design(LOOKS, 0.05, spending)
        assert np.all(np.diff(d.cumulative_alpha) > 0) and np.all(d.look_alpha > 0)
        # the increments are differences of the cumulative spend: their sum telescopes to alpha
        # up to ~K eps (K = 4 additions of numbers <= 0.05)
        assert abs(d.look_alpha.sum() - 0.05) < 1e-15
    obf = Design(LOOKS)
    # Lan-DeMets O'Brien-Fleming at t = 0.5: 2 - 2 Phi(1.959964 / sqrt(0.5)) = 2 * sf(2.771808)
    assert obf.cumulative_alpha[1] == pytest.approx(2 * sps.norm.sf(1.959963984540054 / math.sqrt(0.5)), rel=1e-12)
    assert obf.phrase(2) == "looks 3,5 of 3/5/7/10, α spent 0.0056 of 0.05 (O'Brien-Fleming-type spending)"


def test_design_settings_are_validated_and_capped():
    assert design_from_settings(None, max_seeds=6).looks == (3, 5, 6)
    assert design_from_settings({"looks": [4, 8]}, max_seeds=8).looks == (4, 8)
    assert design_from_settings({}, max_seeds=3).looks == (3,)
    for bad, words in [
        ({"looks": [5, 3]}, "compare.sequential.looks"),
        ({"looks": "3,5"}, "compare.sequential.looks"),
        ({"spending": "obf"}, "compare.sequential.spending"),
        ({"every": 2}, "unknown key 'every'"),
        ({"futility": "worse"}, "compare.sequential.futility"),
        ([3, 5], "expected a mapping"),
    ]:
        with pytest.raises(ValueError, match=words):
            design_from_settings(bad)


def simulate(design: Design, effects: np.ndarray, *, n_studies: int, seed: int, sesoi: float | None = None):
    """`--until-decided` on simulated studies: ``len(effects)`` arms against one baseline, one
    metric (higher is better), per-seed paired differences N(effect, 1). Returns the final statuses
    [n_studies, arms] and the seeds each comparison ran to (its deciding look)."""
    rng = np.random.default_rng(seed)
    m = len(effects)
    d = rng.standard_normal((n_studies, m, design.looks[-1])) + np.asarray(effects)[None, :, None]
    status = np.full((n_studies, m), "", dtype=object)
    seeds_run = np.zeros((n_studies, m), int)
    conf = futility_confidence(design)
    for k, n in enumerate(design.looks):
        x = d[..., :n]
        p = paired_p(d, n)  # [studies, arms]
        delta, se = x.mean(-1), x.std(-1, ddof=1) / math.sqrt(n)
        fut = (
            futile(delta, se, n - 1, sesoi=sesoi, improvement_sign=1.0, confidence=conf)
            if sesoi
            else np.zeros_like(p, bool)
        )
        seeds_run[status == ""] = n
        rejection = np.where(delta > 0, "better", "worse").astype(object)
        status = decide_family(design, k, status, p, rejection, np.full((n_studies, m), "", dtype=object), fut)
    return status, seeds_run


def test_vectorised_holm_is_the_reports_holm():
    from workbench.compare.stats import adjust_pvalues

    rng = np.random.default_rng(5)
    p = rng.uniform(0, 0.2, (200, 5)) ** 2
    p[rng.uniform(size=p.shape) < 0.2] = np.nan  # out of the family
    ours = holm_adjusted(p)
    theirs = np.array([adjust_pvalues(row, "holm")[0] for row in p])
    # both are products of a p-value by a small integer and running maxima: bit-identical
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("spending", ["obrien_fleming", "pocock"])
def test_until_decided_keeps_family_wise_false_positives_at_alpha(spending):
    """Acceptance (#28): A/A studies, 4 arms against one baseline, looks at 3/5/7/10 seeds:
    family-wise false "better/worse" <= 5.5%."""
    design = Design(LOOKS, 0.05, spending)
    status, seeds = simulate(design, np.zeros(4), n_studies=6000, seed=1)
    fwer = np.isin(status, REJECTED).any(axis=1).mean()
    print(
        f"\n{spending}: A/A family-wise false better/worse {fwer:.4f} (6000 studies, 4 arms, looks 3/5/7/10); "
        f"mean seeds {seeds.mean():.1f}"
    )
    # union bound: the true rate is <= 0.05; 6000 studies: SE <= 0.0028, so 0.055 is ~2 SE above
    assert fwer <= 0.055


def test_until_decided_power_and_seeds_for_a_real_effect():
    """Power figure: one arm 1.5 SD (of the per-seed differences) better, three null arms."""
    design = Design(LOOKS)
    effects = np.array([1.5, 0, 0, 0])
    status, seeds = simulate(design, effects, n_studies=4000, seed=2)
    power = (status[:, 0] == "better").mean()
    false = np.isin(status[:, 1:], REJECTED).any(axis=1).mean()
    # reference: the fixed design, 10 seeds, Holm over the 4 arms at 0.05 (same data)
    d = np.random.default_rng(2).standard_normal((4000, 4, 10)) + effects[None, :, None]
    fixed = (holm_adjusted(paired_p(d, 10))[:, 0] < 0.05).mean()
    print(
        f"\npower (effect 1.5 SD, 4 arms, OBF looks 3/5/7/10): {power:.3f} sequential vs {fixed:.3f} fixed "
        f"10 seeds (Holm); mean seeds to decide the real effect {seeds[:, 0].mean():.2f}; "
        f"false better/worse among the 3 null arms {false:.3f}"
    )
    assert power > 0.8 and false <= 0.055


def test_futility_stops_null_arms_early_and_keeps_real_effects():
    design = Design(LOOKS)
    status, seeds = simulate(design, np.array([-0.5, 1.5]), n_studies=4000, seed=3, sesoi=1.0)
    futile_bad = (status[:, 0] == "futile").mean()
    futile_good = (status[:, 1] == "futile").mean()
    print(
        f"\nfutility (SESOI 1 SD): arm 0.5 SD worse stopped futile {futile_bad:.3f} (mean seeds "
        f"{seeds[:, 0].mean():.2f}); arm 1.5 SD better stopped futile {futile_good:.3f}"
    )
    assert futile_bad > 0.5
    # a true improvement of 1.5 SD > SESOI: stopping it is rarer than stopping one at the SESOI (<= 5%)
    assert futile_good <= 0.05


def test_futility_error_at_the_sesoi_is_at_most_5_percent():
    """A true improvement of exactly the SESOI is stopped for futility in <= 5% of studies
    (Bonferroni over the looks); the arm is alone so nothing else stops it first."""
    design = Design(LOOKS)
    rng = np.random.default_rng(4)
    d = rng.standard_normal((20_000, 10)) + 1.0
    hit = np.zeros(len(d), bool)
    for n in design.looks:
        x = d[:, :n]
        hit |= futile(
            x.mean(1),
            x.std(1, ddof=1) / math.sqrt(n),
            n - 1,
            sesoi=1.0,
            improvement_sign=1.0,
            confidence=futility_confidence(design),
        )
    print(f"\nfalse futility at the SESOI over 4 looks: {hit.mean():.4f}")
    assert hit.mean() <= 0.05  # bound 0.05; 20,000 studies: SE 0.0015


def test_decide_family_holm_keeps_stopped_comparisons_in_the_family():
    design = Design((3, 5))
    level = design.look_alpha[1]
    # two open comparisons, one futile earlier (p = 1), one rejected earlier (out of the family)
    p = [level / 3.5, level / 2.5, 0.9, 0.9]
    out = decide_family(
        design, 1, ["", "", "futile", "better"], p, ["better", "worse", "x", "x"], ["", "", "", ""], [False] * 4
    )
    # Holm over m = 3 (the rejected one left out): level/3.5 < level/3 rejects; then level/2.5 > level/2? no: rejects
    assert out.tolist() == ["better", "worse", "futile", "better"]
    out = decide_family(
        design, 1, ["", "", "futile", "futile"], p, ["better", "worse", "x", "x"], ["", "", "", ""], [False] * 4
    )
    # m = 4 now: level/3.5 >= level/4, nothing rejected; at the last look the open ones are inconclusive
    assert out.tolist() == ["inconclusive", "inconclusive", "futile", "futile"]
    withheld = decide_family(design, 1, [""], [1e-9], ["better"], ["withheld"], [False])
    assert withheld.tolist() == ["inconclusive"]


def summary_frame(effects: dict[str, float], n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(n)
    rows = [
        {
            "run_id": f"grpo{s}",
            "variant": "grpo",
            "arm": "grpo",
            "seed": s,
            "status": "FINISHED",
            "final_eval_accuracy": base[s],
        }
        for s in range(n)
    ]
    for v, e in effects.items():
        vals = base + e + 0.1 * rng.standard_normal(n)
        rows += [
            {
                "run_id": f"{v}{s}",
                "variant": v,
                "arm": v,
                "seed": s,
                "status": "FINISHED",
                "final_eval_accuracy": vals[s],
            }
            for s in range(n)
        ]
    return pd.DataFrame(rows)


def test_cli_look_uses_compare_p_values_and_the_same_decisions():
    """The CLI's look (decide_metrics: compare_variants at the passed level, then decide_families)
    on a summary: the p-values are compare's paired t's, a large effect is declared, the null
    arm stays open, and compare is given alpha = look level x open / family."""
    design = Design((3, 5))
    summary = summary_frame({"big": 2.0, "null": 0.0}, 5, seed=0)
    plan = Plan(
        ["final_eval_accuracy"],
        "grpo",
        {"grpo": "grpo", "big": "big", "null": "null"},
        {"grpo": "grpo", "big": "grpo", "null": "grpo"},
    )
    plan.status = {("final_eval_accuracy", a): "" for a in ("big", "null")}
    levels, rows = decide_metrics(summary, plan, design, 1)
    level = levels["final_eval_accuracy"]
    assert level == pytest.approx(design.look_alpha[1])  # 2 open of a family of 2
    table = compare_variants(
        summary, "grpo", ["final_eval_accuracy"], CompareSettings(confidence=1 - level, n_resamples=0)
    )
    p = dict(zip(table.df["variant"], table.df["p_value"], strict=True))
    x = summary.pivot(index="seed", columns="arm", values="final_eval_accuracy")
    assert p["big"] == pytest.approx(sps.ttest_rel(x["big"], x["grpo"]).pvalue, rel=1e-12)
    by_arm = {r.arm: r.status for r in rows}
    assert by_arm["big"] == "better" and by_arm["null"] in ("inconclusive", "open")
    assert plan.status["final_eval_accuracy", "big"] == "better"


def test_an_ablation_asks_futility_about_worsening():
    """The bug dapo_ablation's first look hit (#37): its baseline is the full method, its question whether
    removing a part hurts. Removing dynamic sampling cost 4.6 points at 3 seeds (p 0.07), and the default
    futility rule stopped it: "the removal cannot be 3 points *better*", the side nobody asked about.
    ``futility: worsening`` stops only when a 3-point loss is excluded; ``none`` never stops."""
    design = Design((3, 6, 9))
    summary = summary_frame({"removal_hurts": -1.5, "removal_neutral": 0.0}, 3, seed=4)  # in SDs of a run
    decided = {}
    for side in ("improvement", "worsening", "none"):
        plan = Plan(
            ["final_eval_accuracy"],
            "grpo",
            {"grpo": "grpo", "removal_hurts": "removal_hurts", "removal_neutral": "removal_neutral"},
            {"grpo": "grpo", "removal_hurts": "grpo", "removal_neutral": "grpo"},
            sesoi={"final_eval_accuracy": 1.0},
            futility=side,
        )
        plan.status = {("final_eval_accuracy", a): "" for a in ("removal_hurts", "removal_neutral")}
        decide_metrics(summary, plan, design, 0)
        decided[side] = plan.status["final_eval_accuracy", "removal_hurts"]
    assert decided["improvement"] == "futile"  # stopped the arm that shows the effect
    assert decided["worsening"] == "" and decided["none"] == ""  # left open: more seeds can show the loss


def test_a_same_or_different_question_stops_only_when_both_sides_are_excluded():
    """``futility: difference`` (engines_trl: do two engines train the same thing?): an arm stops for futility
    only when an effect of the SESOI is excluded on *both* sides. The per-seed differences here have SD 0.1 and
    the SESOI is 1.0, so at 3 seeds a ±1.5 arm is far from 0 and the 0 arm's bounds are ~0.3 either side: each
    one-sided rule stops the arm on the side it does not ask about, ``difference`` stops only the 0 arm."""
    design = Design((3, 6, 9))
    summary = summary_frame({"lower": -1.5, "higher": 1.5, "same": 0.0}, 3, seed=5)
    futile_arms = {}
    for side in ("improvement", "worsening", "difference", "none"):
        arms = ("lower", "higher", "same")
        plan = Plan(
            ["final_eval_accuracy"],
            "grpo",
            {"grpo": "grpo"} | {a: a for a in arms},
            {"grpo": "grpo"} | dict.fromkeys(arms, "grpo"),
            sesoi={"final_eval_accuracy": 1.0},
            futility=side,
        )
        plan.status = {("final_eval_accuracy", a): "" for a in arms}
        decide_metrics(summary, plan, design, 0)
        futile_arms[side] = sorted(a for a in arms if plan.status["final_eval_accuracy", a] == "futile")
    assert futile_arms == {
        "improvement": ["lower", "same"],
        "worsening": ["higher", "same"],
        "difference": ["same"],
        "none": [],
    }


def test_difference_futility_error_and_power_by_simulation():
    """Error: a true effect of exactly the SESOI, on either side, is stopped for ``difference`` futility in
    <= 5% of studies over the looks (each side's bound at 1 - 0.05/K, as the one-sided rule). Power: a true
    null (two engines that agree) is stopped by the last look in 44% of studies at SESOI = 1 SD of the
    per-seed differences, looks 3/6/9 (at 9 seeds both bounds lie inside ±1 only when |mean| < ~0.13: the
    half-width is t(0.983, 8)·s/3 ≈ 0.87 s). A null that is not stopped ends inconclusive, never worse."""
    design = Design((3, 6, 9))
    conf = futility_confidence(design)
    rng = np.random.default_rng(11)
    rates = {}
    for effect in (-1.0, 0.0, 1.0):
        d = rng.standard_normal((20_000, 9)) + effect  # per-seed differences, SD 1
        hit = np.zeros(len(d), bool)
        for n in design.looks:
            x = d[:, :n]
            mean, se = x.mean(1), x.std(1, ddof=1) / math.sqrt(n)
            both = [futile(mean, se, n - 1, sesoi=1.0, improvement_sign=s, confidence=conf) for s in (1.0, -1.0)]
            hit |= both[0] & both[1]
        rates[effect] = hit.mean()
    print(
        f"\ndifference futility, SESOI 1 SD, looks 3/6/9: stopped at -SESOI {rates[-1.0]:.4f}, "
        f"at 0 {rates[0.0]:.4f}, at +SESOI {rates[1.0]:.4f}"
    )
    # bound 0.05; 20,000 studies: SE <= 0.0015
    assert rates[-1.0] <= 0.05 and rates[1.0] <= 0.05
    assert rates[0.0] > 0.4  # measured 0.4403; SE 0.0035


def test_a_study_waits_only_on_its_primary_metrics():
    """Secondary comparisons (not in compare.primary) are decided when the data allow but neither keep
    the study running nor earn an arm more seeds."""
    plan = Plan(
        ["acc", "kl"],
        "base",
        {"base": "base", "x": "x", "y": "y"},
        {"base": "base", "x": "base", "y": "base"},
        secondary=["kl"],
    )
    plan.status = {("acc", "x"): "better", ("acc", "y"): "", ("kl", "x"): "", ("kl", "y"): ""}
    assert plan.primary == ["acc"]
    assert plan.needed_arms() == {"y", "base"}  # x's only open comparison is secondary
    assert not plan.done()
    plan.status["acc", "y"] = "futile"
    assert plan.done()  # kl still open for both arms: it ends with the study
    everything = Plan(["acc", "kl"], "base", plan.arm_variant, plan.baseline_of, status=dict(plan.status))
    assert not everything.done() and everything.needed_arms() == {"x", "y", "base"}
