"""Intervals over seeds and eval problems (issue 29): hand-computed values, statsmodels' mixed model
on the same design, the table plumbing, and the coverage simulation.

Simulation model (one simulated study per replicate): a population of problems, each with a
difficulty on the logit scale (sd 1.5) and, per arm, an arm x problem effect (sd 1.0, mean 0, the
two arms' effects i.i.d.: an arm is better on some problems and worse on others, and over the
population of problems neither arm is better). Each study draws ONE eval set of 100 problems shared
by every seed of both arms; a seed adds a run effect (sd 0.1, half of it shared by the same seed in
both arms); a run scores each problem 0/1 with its probability. The targets are the population
quantities: the accuracy difference (0, by symmetry) and an arm's mean accuracy (a logit-normal
mean, by Gauss-Hermite quadrature). Monte-Carlo error: R = 600 studies per cell, so a coverage of
0.95 has s.e. sqrt(0.95 x 0.05 / 600) = 0.9 points.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tests.tolerance import EPS64
from workbench.compare import compare_variants, summarize_runs
from workbench.compare.problems import TWO_WAY_METHOD, per_problem_values, two_way_difference, two_way_mean
from workbench.compare.stats import mean_difference, t_interval

# --------------------------------------------------------------------------------------------
# Hand-computed values
# --------------------------------------------------------------------------------------------

Y = np.array([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])  # 3 seeds x 4 problems


def test_variance_terms_by_hand():
    """Row means 3/4, 1/2, 3/4 (grand 2/3): var = (1/144 + 4/144 + 1/144) / 2 = 1/48, V_seed = 1/144.
    Column means 2/3, 1/3, 1, 2/3: var = (0 + 1/9 + 1/9 + 0) / 3 = 2/27, V_problem = 1/54.
    Residual SS = total - rows - columns = 8/3 - 4 (6/144) - 3 (2/9) = 11/6 (total: eight 1s at
    (1/3)^2, four 0s at (2/3)^2), MS = (11/6) / 6, V_overlap = MS / 12 = 11/432.
    The problem draw's component V_problem - V_overlap = -3/432 < 0 is 0: V = V_seed = 1/144 at the
    seed level's df, S - 1 = 2 (exactly the seed-only t interval)."""
    resid = Y - Y.mean(1, keepdims=True) - Y.mean(0, keepdims=True) + Y.mean()
    assert (resid**2).sum() == pytest.approx(11 / 6, abs=48 * EPS64)  # 12 squares of values <= 1, 4 ops each
    t = two_way_mean(Y)
    # rel 1e-12: each component is a few dozen sums/products of values <= 1 (<= ~100 ops x eps 2.2e-16
    # = 2e-14 relative), 50x margin for another CPU's summation order
    assert t.v_seed == pytest.approx(1 / 144, rel=1e-12)
    assert t.v_problem == pytest.approx(1 / 54, rel=1e-12)
    assert t.v_overlap == pytest.approx(11 / 432, rel=1e-12)
    assert t.se**2 == pytest.approx(1 / 144, rel=1e-12) and t.df == 2
    q = 4.302652729749464  # scipy.stats.t.ppf(0.975, 2)
    # rel 1e-9: scipy's t quantile at 2 df is accurate to ~1e-12 relative; the rest as above
    assert (t.lo, t.hi) == pytest.approx((2 / 3 - q / 12, 2 / 3 + q / 12), rel=1e-9)
    _, lo, hi = t_interval(Y.mean(1))
    assert (t.lo, t.hi) == pytest.approx((lo, hi), rel=1e-9)


def test_a_positive_problem_component_adds_to_the_seed_variance_at_the_seed_levels_df():
    """A design where every component is positive: V = V_seed + V_problem - V_overlap, at the seed
    level's df S - 1 = 2 (not Satterthwaite's, which the seed share's 2-df estimate would inflate)."""
    y = np.array([[0.9, 0.1, 0.6], [0.7, 0.0, 0.5], [0.3, 0.0, 0.1]])
    s, p = y.shape
    v_seed = y.mean(1).var(ddof=1) / s
    v_problem = y.mean(0).var(ddof=1) / p
    resid = y - y.mean(1, keepdims=True) - y.mean(0, keepdims=True) + y.mean()
    v_overlap = (resid**2).sum() / ((s - 1) * (p - 1)) / (s * p)
    v = v_seed + v_problem - v_overlap
    assert v > max(v_seed, v_problem)
    t = two_way_mean(y)
    assert t.se**2 == pytest.approx(v, rel=1e-12)
    # the seed term at its 75% upper bound: v_seed * 2 / chi2_2(0.25), chi2_2(0.25) = -2 ln(0.75)
    bound = v_seed * 2 / (-2 * math.log(0.75))
    assert t.df == pytest.approx((bound + v - v_seed) ** 2 / (bound**2 / 2 + (v - v_seed) ** 2 / 2), rel=1e-9)


def test_unpaired_degrees_of_freedom_are_welchs_over_the_two_arms_seed_terms_by_hand():
    """x: 3 seeds, y: 5 seeds, 6 shared problems (0/1). Row means of x 2/3, 1/3, 5/6 (mean 11/18):
    var = (1 + 25 + 16)/324 / 2 = 7/108, V_x,seed = 7/324. Row means of y 1/3, 1/6, 1/3, 1/3, 1/2
    (mean 1/3): var = (2/36)/4 = 1/72, V_y,seed = 1/360. The seed level's df is Welch's, as the
    seed-only unpaired test: (7/324 + 1/360)^2 / ((7/324)^2/2 + (1/360)^2/4) = 24964/9881 = 2.5265
    Problem component: V_problem - V_x,overlap - V_y,overlap = 689/40500 - 11/1620 - 37/9000 =
    11/1800 > 0, so V = 7/324 + 1/360 + 11/1800 = 247/8100. df: the seed term at its 75% upper bound
    B = (1/360 + 7/324) x 2.5265 / chi2_2.5265(0.25), with the problem component's P - 1 = 5 df:
    (B + 11/1800)^2 / (B^2/2.5265 + (11/1800)^2/5)."""
    x = np.array([[1, 1, 0, 1, 1, 0], [0, 1, 0, 1, 0, 0], [1, 1, 1, 1, 1, 0]], dtype=float)
    y = np.array(
        [[1, 0, 0, 1, 0, 0], [0, 0, 0, 1, 0, 0], [1, 0, 0, 1, 0, 0], [0, 1, 0, 1, 0, 0], [1, 0, 0, 1, 1, 0]],
        dtype=float,
    )
    t = two_way_difference(x, y, paired=False)
    # rel 1e-12: each term is a few dozen operations on values <= 1 (~1e-14 relative), 100x margin
    assert t.v_seed == pytest.approx(7 / 324 + 1 / 360, rel=1e-12)
    assert t.v_problem - t.v_overlap == pytest.approx(11 / 1800, rel=1e-12)
    assert t.se**2 == pytest.approx(247 / 8100, rel=1e-12)
    welch = 24964 / 9881
    bound = (7 / 324 + 1 / 360) * welch / 0.8985725422911254  # scipy.stats.chi2.ppf(0.25, 24964 / 9881)
    assert bound == pytest.approx(0.068556, rel=1e-4)  # the seed term, 0.02438, at its upper bound: x 2.81
    # rel 1e-9: the chi-square quantile is accurate to ~1e-12 relative; a dozen operations besides
    assert t.df == pytest.approx((bound + 11 / 1800) ** 2 / (bound**2 / welch + (11 / 1800) ** 2 / 5), rel=1e-9)
    assert welch < t.df < 5  # between the seed level's df and the problem level's


def test_paired_difference_is_the_mean_of_the_differences_and_reduces_to_the_seed_t_interval():
    """Problems that add nothing (every problem alike in both arms: the per-seed difference is the
    same on every problem) leave V = V_seed with S - 1 df: exactly the paired t interval."""
    x = np.array([[0.6] * 5, [0.7] * 5, [0.5] * 5, [0.9] * 5])
    y = np.array([[0.5] * 5, [0.55] * 5, [0.45] * 5, [0.6] * 5])
    t = two_way_difference(x, y, paired=True)
    seed_only = mean_difference(x.mean(1), y.mean(1), x_seeds=range(4), y_seeds=range(4))
    assert seed_only.paired
    assert t.estimate == pytest.approx(seed_only.delta, abs=20 * EPS64)  # means of 20 values <= 1
    assert (t.lo, t.hi) == pytest.approx(seed_only.interval(0.95), rel=1e-9)
    assert t.df == 3 and t.problem_share == 0.0


def test_matches_statsmodels_mixed_model_on_a_balanced_design():
    """The moment estimate of Var(grand mean) equals the REML fit of a crossed random-effects model
    (statsmodels MixedLM, seed and problem variance components) on balanced data. The tolerance is
    MixedLM's optimizer convergence (its gradient tolerance leaves ~1e-5 relative), not float error."""
    import statsmodels.formula.api as smf

    rng = np.random.default_rng(3)
    s, p = 4, 12
    y = 0.5 + rng.normal(0, 0.1, s)[:, None] + rng.normal(0, 0.2, p)[None, :] + rng.normal(0, 0.05, (s, p))
    frame = pd.DataFrame(
        {"y": y.ravel(), "seed": np.repeat(np.arange(s), p), "problem": np.tile(np.arange(p), s), "one": 1}
    )
    fit = smf.mixedlm(
        "y ~ 1", frame, groups="one", vc_formula={"seed": "0 + C(seed)", "problem": "0 + C(problem)"}
    ).fit(reml=True)
    assert two_way_mean(y).se ** 2 == pytest.approx(float(fit.bse["Intercept"]) ** 2, rel=1e-3)


def test_unpaired_difference_adds_both_arms_terms():
    rng = np.random.default_rng(0)
    x, y = rng.binomial(1, 0.6, (3, 40)).astype(float), rng.binomial(1, 0.5, (5, 40)).astype(float)
    t = two_way_difference(x, y, paired=False)
    assert t.estimate == pytest.approx(x.mean() - y.mean(), abs=400 * EPS64)
    # rel 1e-12: the same means and variances computed in another order (<= ~200 ops x eps = 4e-14)
    assert t.v_seed == pytest.approx(x.mean(1).var(ddof=1) / 3 + y.mean(1).var(ddof=1) / 5, rel=1e-12)
    assert t.v_problem == pytest.approx((x.mean(0) - y.mean(0)).var(ddof=1) / 40, rel=1e-12)
    with pytest.raises(ValueError, match="one shape"):
        two_way_difference(x, y, paired=True)
    with pytest.raises(ValueError, match="at least 2 runs"):
        two_way_mean(x[:1])


# --------------------------------------------------------------------------------------------
# From the per-problem table, and in the comparison table
# --------------------------------------------------------------------------------------------


def long_table(values: dict[str, np.ndarray], steps: list[int]) -> pd.DataFrame:
    """run_id -> [steps, problems] 0/1 array, as the reader's long frame."""
    return pd.DataFrame(
        [
            {"run_id": rid, "step": step, "problem_id": f"p{j}", "correct": int(a[i, j])}
            for rid, a in values.items()
            for i, step in enumerate(steps)
            for j in range(a.shape[1])
        ]
    )


def test_per_problem_values_weight_the_evals_as_the_summary_does():
    a = np.array([[0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]])  # steps 0, 10, 20, 40 x 3 problems
    table = long_table({"r": a}, [0, 10, 20, 40])
    last3, ids = per_problem_values(table, ["r"], "final_eval_accuracy")
    assert ids == ["p0", "p1", "p2"] and last3.tolist() == [[2 / 3, 2 / 3, 1.0]]
    last2, _ = per_problem_values(table, ["r"], "final_eval_accuracy", {"k": 2})
    assert last2.tolist() == [[0.5, 1.0, 1.0]]
    # eval_auc: trapezoid weights (5, 10, 15, 10) / 40 over steps 0, 10, 20, 40
    auc, _ = per_problem_values(table, ["r"], "eval_auc")
    assert auc[0] == pytest.approx([(0 + 10 + 15 + 0) / 40, (0 + 0 + 15 + 10) / 40, 1.0], abs=8 * EPS64)
    assert per_problem_values(table, ["r", "missing"], "final_eval_accuracy") is None
    assert per_problem_values(pd.concat([table, table]), ["r"], "final_eval_accuracy") is None  # rows twice
    other = long_table({"q": a[:, :2]}, [0, 10, 20, 40])  # another eval set: a problem short
    assert per_problem_values(pd.concat([table, other]), ["r", "q"], "final_eval_accuracy") is None


def study(rng: np.random.Generator, *, seeds: int = 4, problems: int = 30, steps=(0, 10, 20)):
    """history, runs and the per-problem table of a two-variant study (b is 0.15 better)."""
    runs, history, table = [], [], {}
    for variant, p in (("a", 0.4), ("b", 0.55)):
        for seed in range(seeds):
            rid = f"{variant}{seed}"
            a = rng.binomial(1, p, (len(steps), problems))
            table[rid] = a
            runs.append({"run_id": rid, "variant": variant, "seed": seed, "status": "FINISHED"})
            history += [
                {
                    "run_id": rid,
                    "variant": variant,
                    "seed": seed,
                    "step": s,
                    "metric": "eval/accuracy",
                    "value": a[i].mean(),
                }
                for i, s in enumerate(steps)
            ]
    return pd.DataFrame(history), pd.DataFrame(runs), long_table(table, list(steps))


def test_compare_fills_the_two_way_columns_and_names_the_method_in_every_format():
    history, runs, problems = study(np.random.default_rng(1))
    summary = summarize_runs(history, runs, ["final_eval_accuracy", "final:eval/accuracy"])
    table = compare_variants(summary, "a", ["final_eval_accuracy", "final:eval/accuracy"], problems=problems)
    rows = table.for_metric("final_eval_accuracy").set_index("variant")
    b = rows.loc["b"]
    assert b["two_way_method"] == TWO_WAY_METHOD and b["n_problems"] == 30
    assert b["delta_2way_lo"] < b["delta"] < b["delta_2way_hi"]
    x, _ = per_problem_values(problems, [f"b{s}" for s in range(4)], "final_eval_accuracy")
    y, _ = per_problem_values(problems, [f"a{s}" for s in range(4)], "final_eval_accuracy")
    expected = two_way_difference(x, y, paired=True, confidence=b["delta_level"])
    # rel 1e-12: the same function on the same per-problem matrices; only the order of the runs' rows can differ
    assert (b["delta_2way_lo"], b["delta_2way_hi"]) == pytest.approx((expected.lo, expected.hi), rel=1e-12)
    assert rows.loc["a", "two_way_method"] == TWO_WAY_METHOD and math.isnan(rows.loc["a", "delta_2way_lo"])
    assert TWO_WAY_METHOD in table.to_markdown() and "CI over seeds and problems" in table.to_markdown()
    assert TWO_WAY_METHOD in table.to_json() and TWO_WAY_METHOD in table.to_csv()
    assert table.settings["two_way_ci"] == TWO_WAY_METHOD

    without = compare_variants(summary, "a", ["final_eval_accuracy"])  # no tables: seed-only, nothing added
    assert (without.df["two_way_method"] == "").all() and "over seeds and problems" not in without.to_markdown()
    assert "t interval over seeds" in without.to_markdown()  # the seed-only interval says so


def test_a_win_carried_by_three_problems_is_said_to_hold_on_these_problems_only():
    """b solves problems 0-2 that a never does, at every seed: the seed-only test calls b better
    (Δ = 3/30 at every seed, the seeds agree), but over problems drawn alike the gain rests on 3 of
    30 problems and the interval over seeds and problems includes 0: the note says so."""
    rng = np.random.default_rng(3)
    steps, runs, history, values = [0, 10, 20], [], [], {}
    base = (rng.random(30) < 0.4).astype(int)
    base[:3] = 0
    for variant, extra in (("a", 0), ("b", 1)):
        for seed in range(5):
            a = np.tile(base, (len(steps), 1))
            a[:, :3] = extra
            flip = rng.integers(3, 30)  # a seed's noise: one other problem flips at the last eval
            a[-1, flip] = 1 - a[-1, flip]
            rid = f"{variant}{seed}"
            values[rid] = a
            runs.append({"run_id": rid, "variant": variant, "seed": seed, "status": "FINISHED"})
            history += [
                {
                    "run_id": rid,
                    "variant": variant,
                    "seed": seed,
                    "step": s,
                    "metric": "eval/accuracy",
                    "value": a[i].mean(),
                }
                for i, s in enumerate(steps)
            ]
    summary = summarize_runs(pd.DataFrame(history), pd.DataFrame(runs), ["final_eval_accuracy"])
    table = compare_variants(summary, "a", ["final_eval_accuracy"], problems=long_table(values, steps))
    b = table.for_metric("final_eval_accuracy").set_index("variant").loc["b"]
    assert b["status"] == "better" and b["delta_lo"] > 0  # over seeds: clear
    assert b["delta_2way_lo"] <= 0 <= b["delta_2way_hi"]
    assert "better on these 30 eval problems only" in b["note"]


def test_a_run_without_its_table_leaves_the_seed_only_interval_and_says_why():
    history, runs, problems = study(np.random.default_rng(2))
    summary = summarize_runs(history, runs, ["final_eval_accuracy"])
    table = compare_variants(summary, "a", ["final_eval_accuracy"], problems=problems[problems["run_id"] != "b1"])
    b = table.for_metric("final_eval_accuracy").set_index("variant").loc["b"]
    assert b["two_way_method"] == "" and math.isnan(b["delta_2way_lo"]) and math.isfinite(b["delta_lo"])
    assert "intervals over seeds only (no per-problem results for 1/4 runs of b)" in b["note"]
    empty = compare_variants(summary, "a", ["final_eval_accuracy"], problems=problems.iloc[:0])
    assert (empty.df["two_way_method"] == "").all()


def test_per_problem_results_that_disagree_with_the_logged_accuracy_are_not_used():
    history, runs, problems = study(np.random.default_rng(3))
    flipped = problems.copy()
    hit = (flipped["run_id"] == "a0") & (flipped["step"] == 20) & (flipped["problem_id"] == "p0")
    flipped.loc[hit, "correct"] = 1 - flipped.loc[hit, "correct"]
    summary = summarize_runs(history, runs, ["final_eval_accuracy"])
    table = compare_variants(summary, "a", ["final_eval_accuracy"], problems=flipped)
    a = table.for_metric("final_eval_accuracy").set_index("variant").loc["a"]
    assert a["two_way_method"] == "" and "disagree with its logged eval/accuracy" in a["note"]


# --------------------------------------------------------------------------------------------
# Coverage
# --------------------------------------------------------------------------------------------


def logit_normal_mean(mu: float, sd: float) -> float:
    x, w = np.polynomial.hermite_e.hermegauss(80)
    return float((w / (1 + np.exp(-(mu + sd * x)))).sum() / w.sum())


def simulate_study(rng, seeds: int, problems: int, *, sd_difficulty=1.5, sd_arm_problem=1.0, sd_seed=0.1):
    """Both arms' ``seeds x problems`` 0/1 results on one shared draw of eval problems (module docstring)."""
    difficulty = rng.normal(0.0, sd_difficulty, problems)
    arm_problem = rng.normal(0.0, sd_arm_problem, (2, problems))
    seed = rng.normal(0.0, sd_seed * math.sqrt(0.5), seeds)[None, :] + rng.normal(
        0.0, sd_seed * math.sqrt(0.5), (2, seeds)
    )
    logits = difficulty[None, None, :] + arm_problem[:, None, :] + seed[:, :, None]  # [arm, seed, problem]
    results = rng.binomial(1, 1.0 / (1.0 + np.exp(-logits))).astype(float)
    return results[0], results[1]


def coverage(seeds: int, replicates: int, **model) -> dict[str, float]:
    rng = np.random.default_rng(1000 + seeds)
    sd_total = math.sqrt(
        sum(model.get(k, d) ** 2 for k, d in (("sd_difficulty", 1.5), ("sd_arm_problem", 1.0), ("sd_seed", 0.1)))
    )
    target_mean = logit_normal_mean(0.0, sd_total)
    xs, ys, two_way_delta, two_way_arm = [], [], 0, 0
    for _ in range(replicates):
        x, y = simulate_study(rng, seeds, 100, **model)
        xs.append(x.mean(1))
        ys.append(y.mean(1))
        d = two_way_difference(x, y, paired=True)
        m = two_way_mean(x)
        two_way_delta += d.lo <= 0.0 <= d.hi
        two_way_arm += m.lo <= target_mean <= m.hi
    # the seed-only intervals compare prints: the paired t interval of Δ, the t interval of the mean
    _, lo, hi = t_interval(np.array(xs) - np.array(ys), axis=-1)
    _, mlo, mhi = t_interval(np.array(xs), axis=-1)
    return {
        "seed_only_delta": float(np.mean((lo <= 0) & (0 <= hi))),
        "two_way_delta": two_way_delta / replicates,
        "seed_only_mean": float(np.mean((mlo <= target_mean) & (target_mean <= mhi))),
        "two_way_mean": two_way_arm / replicates,
    }


@pytest.mark.parametrize("seeds", [3, 5, 10])
def test_two_way_interval_covers_when_arms_differ_only_by_the_problem_draw(seeds):
    """Seed-only intervals measure "on these 100 problems"; against the population of problems they
    under-cover, and more so with more seeds (their width shrinks, the problem draw stays). Measured
    (R = 600, issue 52's df): seed-only Δ 93.8 / 89.7 / 79.8%, two-way Δ 96.3 / 95.5 / 93.5%; seed-only
    arm mean 89.5 / 80.7 / 58.8%, two-way 96.3 / 94.8 / 94.8% at 3 / 5 / 10 seeds. Bounds: 93% is 95%
    minus 2.2 s.e. (0.9 points each); these cells were not used to calibrate SEED_SHARE_BOUND."""
    got = coverage(seeds, 600)
    print(f"\n{seeds} seeds, 100 problems, 600 studies: " + ", ".join(f"{k} {v:.1%}" for k, v in got.items()))
    assert got["two_way_delta"] >= 0.93 and got["two_way_mean"] >= 0.93
    assert got["seed_only_mean"] < 0.93
    if seeds >= 5:
        assert got["seed_only_delta"] < 0.93
    assert got["seed_only_delta"] < got["two_way_delta"]


@pytest.mark.parametrize("seeds", [3, 10])
def test_two_way_interval_stays_calibrated_when_problems_add_nothing_to_the_difference(seeds):
    """No arm x problem effect: the paired difference has no problem component, and the two-way
    interval must not inflate it much beyond the seed-only one. Printed here (R = 600): 96.2% and
    95.3% at 3 and 10 seeds (seed-only: 95.5%, 94.5%). Bounds: 95% +- 3 s.e. (2.7 points)."""
    got = coverage(seeds, 600, sd_arm_problem=0.0)
    print(f"\n{seeds} seeds, no arm x problem effect: " + ", ".join(f"{k} {v:.1%}" for k, v in got.items()))
    assert 0.923 <= got["two_way_delta"] <= 0.977


# --- final:eval/pass_at_k: the same two-way interval, from each problem's correct count of n answers ------------


def passk_study(rng: np.random.Generator, *, seeds: int = 4, problems: int = 30, steps=(0, 10, 20), n: int = 4):
    """Like :func:`study`, with n answers per problem: the table carries samples and n_correct, the history
    eval/pass_at_k as the run logs it (the mean over problems of each problem's unbiased pass@k)."""
    from workbench.metrics.passk import pass_at_k_metrics

    runs, history, rows = [], [], []
    for variant, p in (("a", 0.3), ("b", 0.45)):
        for seed in range(seeds):
            rid = f"{variant}{seed}"
            runs.append({"run_id": rid, "variant": variant, "seed": seed, "status": "FINISHED"})
            for step in steps:
                counts = rng.binomial(n, p, problems)
                rows += [
                    {
                        "run_id": rid,
                        "step": step,
                        "problem_id": f"p{j}",
                        "correct": int(c > 0),
                        "samples": n,
                        "n_correct": int(c),
                    }
                    for j, c in enumerate(counts)
                ]
                history += [
                    {"run_id": rid, "variant": variant, "seed": seed, "step": step, "metric": name, "value": value}
                    for name, value in pass_at_k_metrics(n, counts.tolist()).items()
                ]
    return pd.DataFrame(history), pd.DataFrame(runs), pd.DataFrame(rows)


def test_per_problem_pass_at_k_is_each_problems_unbiased_estimate():
    # one run, steps 0 and 10, n = 4: counts (1, 0, 4) then (2, 1, 3); pass@2 = 1 − C(4−c, 2)/C(4, 2):
    # c = 0 → 0, 1 → 1 − 3/6 = 1/2, 2 → 1 − 1/6 = 5/6, 3 → 1, 4 → 1; final (the one eval after step 0): step 10
    table = pd.DataFrame(
        [
            {"run_id": "r", "step": s, "problem_id": f"p{j}", "correct": int(c > 0), "samples": 4, "n_correct": c}
            for s, counts in ((0, (1, 0, 4)), (10, (2, 1, 3)))
            for j, c in enumerate(counts)
        ]
    )
    values, ids = per_problem_values(table, ["r"], "final:eval/pass_at_2")
    assert ids == ["p0", "p1", "p2"] and values[0] == pytest.approx([5 / 6, 1 / 2, 1.0], abs=8 * EPS64)
    ones, _ = per_problem_values(table, ["r"], "final:eval/pass_at_1")  # pass@1 = c/n
    assert ones[0] == pytest.approx([2 / 4, 1 / 4, 3 / 4], abs=8 * EPS64)
    # a run scored with one answer per problem has no counts: no interval over problems (seeds only)
    assert per_problem_values(table.drop(columns=["samples", "n_correct"]), ["r"], "final:eval/pass_at_2") is None
    assert per_problem_values(table, ["r"], "final:eval/pass_at_8") is None  # k > n: not logged, not estimable


def test_compare_fills_the_two_way_columns_for_pass_at_k_as_for_accuracy():
    history, runs, problems = passk_study(np.random.default_rng(2))
    metrics = ["final:eval/pass_at_4", "final:eval/pass_at_1"]
    summary = summarize_runs(history, runs, metrics)
    table = compare_variants(summary, "a", metrics, problems=problems)
    for metric in metrics:
        b = table.for_metric(metric).set_index("variant").loc["b"]
        assert b["two_way_method"] == TWO_WAY_METHOD and b["n_problems"] == 30, b.get("note")
        x, _ = per_problem_values(problems, [f"b{s}" for s in range(4)], metric)
        y, _ = per_problem_values(problems, [f"a{s}" for s in range(4)], metric)
        expected = two_way_difference(x, y, paired=True, confidence=b["delta_level"])
        # rel 1e-12: the same function on the same matrices, as for accuracy above
        assert (b["delta_2way_lo"], b["delta_2way_hi"]) == pytest.approx((expected.lo, expected.hi), rel=1e-12)
        assert b["delta_2way_lo"] < b["delta"] < b["delta_2way_hi"]


def test_pass_at_k_without_counts_says_so_and_keeps_the_seed_interval():
    history, runs, problems = passk_study(np.random.default_rng(3))
    summary = summarize_runs(history, runs, ["final:eval/pass_at_4"])
    table = compare_variants(
        summary, "a", ["final:eval/pass_at_4"], problems=problems.drop(columns=["samples", "n_correct"])
    )  # e.g. an export's table
    b = table.for_metric("final:eval/pass_at_4").set_index("variant").loc["b"]
    assert b["two_way_method"] == "" and math.isnan(b["delta_2way_lo"]) and math.isfinite(b["delta_lo"])
    assert "no per-problem answer counts" in b["note"]


# --- issue 52: coverage at 3 seeds on realistic eval sets, the seed level comparable to the problem level ---------

#: Simulated studies per cell. A coverage of 0.95 then has binomial s.e. sqrt(0.95 x 0.05 / 2000) = 0.49
#: points; "reaches the label" is coverage >= 95% - 3 s.e. = 93.5% (a 95% interval fails it with
#: probability 0.13% per cell). Over-coverage is a fault too (an interval wider than its label says):
#: the ceiling is 95% + 5 s.e. = 97.5% (the seed level's df alone, S - 1, measured 97.6-99.9% here).
REALISTIC_STUDIES = 2000
REALISTIC_SE = math.sqrt(0.95 * 0.05 / REALISTIC_STUDIES)
REALISTIC_FLOOR, REALISTIC_CEILING = 0.95 - 3 * REALISTIC_SE, 0.95 + 5 * REALISTIC_SE


def realistic_coverage(problems: int, sd_seed: float, studies: int = REALISTIC_STUDIES) -> dict[str, float]:
    """Coverage of the population Δ (0) and arm mean by the two-way intervals at 3 seeds, with the
    mean shares of the paired Δ's variance that the seed level (V_seed - V_overlap) and the problem
    level (V_problem - V_overlap) contribute."""
    rng = np.random.default_rng(52_000 + problems)
    target_mean = logit_normal_mean(0.0, math.sqrt(1.5**2 + 1.0**2 + sd_seed**2))
    delta = arm = 0
    seed_part = problem_part = 0.0
    for _ in range(studies):
        x, y = simulate_study(rng, 3, problems, sd_seed=sd_seed)
        d = two_way_difference(x, y, paired=True)
        m = two_way_mean(x)
        delta += d.lo <= 0.0 <= d.hi
        arm += m.lo <= target_mean <= m.hi
        seed_part += d.v_seed - d.v_overlap
        problem_part += d.v_problem - d.v_overlap
    return {
        "two_way_delta": delta / studies,
        "two_way_mean": arm / studies,
        "seed_share": seed_part / (seed_part + problem_part),
    }


@pytest.mark.slow
@pytest.mark.parametrize(("problems", "sd_seed"), [(200, 0.15), (300, 0.15), (500, 0.2), (300, 0.5)])
def test_two_way_interval_reaches_its_label_at_three_seeds_on_hundreds_of_problems(problems, sd_seed):
    """The issue-52 setting: 3 seeds, 200-500 problems, the seed level's share of the paired Δ's
    variance comparable to the problem level's (0.15-0.2 logit sd; 0.5: seed-dominated). With
    plain Satterthwaite df (before issue 52) these cells measured Δ 96.2 / 95.8 / 93.8 / 92.8% and arm mean
    95.8 / 95.0 / 93.4 / 93.0% (same RNG stream): the last two below the floor; with S - 1 df alone Δ 99.8 /
    99.6 / 99.3 / 97.6%, arm mean 99.9 / 99.8 / 99.7 / 99.0%: above the ceiling. Now (R = 2000, this RNG stream): Δ 95.7 /
    96.0 / 95.2 / 94.7%, arm mean 96.2 / 96.0 / 95.3 / 96.0%; the seed share of Δ's variance 36 / 48 / 74 / 91%."""
    got = realistic_coverage(problems, sd_seed)
    print(f"\n3 seeds, {problems} problems, seed sd {sd_seed}: " + ", ".join(f"{k} {v:.1%}" for k, v in got.items()))
    for key in ("two_way_delta", "two_way_mean"):
        assert REALISTIC_FLOOR <= got[key] <= REALISTIC_CEILING, key
