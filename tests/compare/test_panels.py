"""workbench.compare.panels: the data a dashboard panel draws, checked by hand and against scipy,
without plotly."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from workbench.compare.panels import (
    MARKER_COLUMNS,
    curve_panel,
    event_markers,
    interval_bounds,
    panel_groups,
    resolve_baseline,
    run_labels,
    seed_points,
    summary_panel,
    thin_steps,
)

# Three seeds of "a" (known curves) and one run of "b".
CURVES = {("a", 0): [0.0, 1.0, 2.0], ("a", 1): [1.0, 2.0, 3.0], ("a", 2): [2.0, 3.0, 7.0], ("b", 0): [5.0, 5.0, 5.0]}
# Means of "a" per step by hand: (0+1+2)/3 = 1, (1+2+3)/3 = 2, (2+3+7)/3 = 4.
MEANS_A = [1.0, 2.0, 4.0]
# A mean of 3 values <= 7 is exact up to 3 roundings of numbers below 12: 3 * eps * 12 < 1e-14.
MEAN_TOL = 1e-14


def frames(curves=CURVES, metric="reward/mean"):
    rows, runs = [], []
    for (variant, seed), values in curves.items():
        rid = f"{variant}-{seed}"
        runs.append({"run_id": rid, "variant": variant, "seed": seed})
        rows += [
            {"run_id": rid, "variant": variant, "seed": seed, "step": s, "metric": metric, "value": v}
            for s, v in enumerate(values)
        ]
    history, runs = pd.DataFrame(rows), pd.DataFrame(runs)
    history["seed"] = history["seed"].astype("Int64")
    runs["seed"] = runs["seed"].astype("Int64")
    return history, runs


def test_mean_band_is_the_hand_mean_with_scipys_t_interval():
    history, runs = frames()
    panel = curve_panel(history, runs, "reward/mean", aggregation="mean")
    assert panel.groups == ["a", "b"] and panel.curves is None and panel.markers is None
    assert panel.interval == "95% t interval of the mean across runs at each x"
    a = panel.band("a")
    assert a["step"].tolist() == [0, 1, 2] and a["n"].tolist() == [3, 3, 3]
    np.testing.assert_allclose(a["estimate"], MEANS_A, rtol=0, atol=MEAN_TOL)
    m = np.array([CURVES[("a", s)] for s in range(3)])
    low, high = sps.t.interval(0.95, 2, loc=m.mean(axis=0), scale=sps.sem(m, axis=0))
    # mean and sd of 3 values < 12 (a few roundings each), times a t quantile < 5: well under 1e-13
    np.testing.assert_allclose(a["lo"], low, rtol=0, atol=1e-13)
    np.testing.assert_allclose(a["hi"], high, rtol=0, atol=1e-13)
    assert (a["lo"] <= a["estimate"]).all() and (a["estimate"] <= a["hi"]).all()
    b = panel.band("b")  # one run: its own curve, no interval
    assert b["estimate"].tolist() == [5.0, 5.0, 5.0] and b["n"].tolist() == [1, 1, 1]
    assert b["lo"].isna().all() and b["hi"].isna().all()


def test_a_non_negative_metrics_band_is_cut_at_zero_and_an_unbounded_ones_is_not():
    # The same three curves as a k3 KL (catalogue bounds [0, inf)) and as reward/mean (unbounded).
    # Step 0 of "a" is 0, 1, 2: mean 1, sd 1, half-width 4.3027 / sqrt(3) = 2.484 > 1, so the
    # t interval starts at -1.484: impossible for a KL, whose mean is >= 0.
    kl = curve_panel(*frames(metric="mismatch/kl"), "mismatch/kl").band("a")
    free = curve_panel(*frames(), "reward/mean").band("a")
    assert free["lo"].iloc[0] == pytest.approx(1 - sps.t.ppf(0.975, 2) / np.sqrt(3))
    assert free["lo"].iloc[0] < 0 and kl["lo"].iloc[0] == 0.0
    # where the t interval is inside the bounds, the cut changes nothing
    np.testing.assert_array_equal(kl["hi"], free["hi"])
    np.testing.assert_array_equal(kl["lo"].iloc[1:], np.maximum(free["lo"].iloc[1:], 0.0))
    np.testing.assert_array_equal(kl["estimate"], free["estimate"])


def test_a_run_missing_at_a_step_counts_in_n_and_leaves_no_band_below_two_runs():
    curves = {("a", 0): [0.0, 1.0, 2.0], ("a", 1): [1.0, 2.0], ("a", 2): [2.0]}
    history, runs = frames(curves)
    a = curve_panel(history, runs, "reward/mean").band("a")
    assert a["n"].tolist() == [3, 2, 1]
    np.testing.assert_allclose(a["estimate"], [1.0, 1.5, 2.0], rtol=0, atol=MEAN_TOL)
    assert np.isfinite(a["lo"].iloc[:2]).all() and a["lo"].iloc[2:].isna().all()


def test_iqm_band_centre_is_scipys_trimmed_mean():
    curves = {("a", s): [float(s), float(s * s)] for s in range(5)}
    history, runs = frames(curves)
    panel = curve_panel(history, runs, "reward/mean", aggregation="iqm")
    assert "IQM" in panel.interval
    m = np.array([curves[("a", s)] for s in range(5)])
    expected = sps.trim_mean(m, 0.25, axis=0)  # 5 runs: floor(1.25) = 1 dropped at each end
    assert expected.tolist() == pytest.approx([2.0, 14 / 3])  # (1+2+3)/3, (1+4+9)/3 by hand
    # 3 kept values of magnitude <= 16, summed and divided: well inside 10 * eps * 16 < 4e-14.
    np.testing.assert_allclose(panel.band("a")["estimate"], expected, rtol=0, atol=4e-14)


def test_no_aggregation_keeps_every_run_and_an_unlogged_metric_has_no_panel():
    history, runs = frames()
    panel = curve_panel(history, runs, "reward/mean", aggregation="none")
    assert panel.bands is None and panel.interval == ""
    assert len(panel.curves) == 12 and set(panel.curves["run_id"]) == set(runs["run_id"])
    assert curve_panel(history, runs, "never/logged") is None
    with pytest.raises(ValueError, match="unknown aggregation 'median'"):
        curve_panel(history, runs, "reward/mean", aggregation="median")


def test_runs_are_grouped_by_arm():
    history, runs = frames({("a", 0): [1.0], ("a", 1): [3.0], ("b", 0): [0.0]})
    runs["arm"] = ["a/lr=1", "a/lr=2", "b"]  # two grid points of "a": never averaged together
    panel = curve_panel(history, runs, "reward/mean")
    assert panel.groups == ["a/lr=1", "a/lr=2", "b"]
    assert panel.band("a/lr=2")["estimate"].tolist() == [3.0]
    assert panel_groups(history, runs) == ["a/lr=1", "a/lr=2", "b"]
    assert run_labels(runs) == {"a-0": "a/lr=1/seed=0", "a-1": "a/lr=2/seed=1", "b-0": "b/seed=0"}
    assert resolve_baseline(runs, "b", panel_groups(history, runs)) == ("b", ["b"])
    assert resolve_baseline(runs, None, panel_groups(history, runs)) == ("a", ["a/lr=1", "a/lr=2"])


def test_thin_steps_keeps_evenly_spaced_steps_with_both_ends():
    hist = pd.DataFrame({"step": np.arange(10), "value": np.arange(10.0)})
    assert thin_steps(hist, 4)["step"].tolist() == [0, 3, 6, 9]  # round(linspace(0, 9, 4)) = 0, 3, 6, 9
    assert thin_steps(hist, 10) is hist


def test_markers_sit_on_the_last_value_at_or_before_their_step():
    history, runs = frames()
    events = pd.DataFrame(
        [
            {"run_id": "a-1", "rule": "r", "step": 1, "severity": "warn", "message": "m1", "watches": ["reward/mean"]},
            {"run_id": "a-2", "rule": "r", "step": 9, "severity": "fail", "message": "m2", "watches": ["reward/mean"]},
            {"run_id": "a-0", "rule": "r", "step": -1, "severity": "warn", "message": "m3", "watches": ["reward/mean"]},
            {"run_id": "a-0", "rule": "q", "step": 1, "severity": "warn", "message": "other", "watches": ["x/y"]},
        ]
    )
    full = history[history["metric"] == "reward/mean"]
    markers = event_markers(events, "reward/mean", full, {"a-1": "a/seed=1"})
    assert list(markers.columns) == list(MARKER_COLUMNS)
    # a-1 at step 1: 2.0; a-2 at step 9 (after its last step 2): 7.0; a-0 before step 0: its first, 0.0
    assert markers["y"].tolist() == [2.0, 7.0, 0.0]
    assert markers["label"].tolist() == ["a/seed=1", "a-2", "a-0"]
    panel = curve_panel(history, runs, "reward/mean", health_events=events, markers=True)
    pd.testing.assert_frame_equal(panel.markers, event_markers(events, "reward/mean", full, None))


def test_summary_panel_is_the_comparison_table_with_scipys_t_interval():
    # one eval point per run after step 0: its final value (mean of the last 3 evals after step 0) is that point
    history, runs = frames(
        {
            ("a", 0): [0.0, 0.5],
            ("a", 1): [0.0, 0.6],
            ("a", 2): [0.0, 0.9],
            ("b", 0): [0.0, 0.1],
            ("b", 1): [0.0, 0.2],
            ("b", 2): [0.0, 0.3],
        },
        metric="eval/accuracy",
    )
    panel = summary_panel(history, runs, ["final:eval/accuracy"], "b")
    assert panel.values["final:eval/accuracy"].tolist() == [0.5, 0.6, 0.9, 0.1, 0.2, 0.3]
    ((metric, rows),) = list(panel.rows())
    a = rows[rows["variant"] == "a"].iloc[0]
    finals = np.array([0.5, 0.6, 0.9])
    lo, hi = sps.t.interval(0.95, df=2, loc=finals.mean(), scale=sps.sem(finals))
    assert hi > 1.18  # the t interval passes 1, which no accuracy can: the table cuts it to [0, 1]
    hi = 1.0
    # mean 2/3 by hand: 3 additions and a division of values <= 2: 4 * eps * 2 < 1e-15; the t bounds
    # add a few more operations (sd, sqrt, ppf times se) on values < 10: 1e-12 is generous.
    assert a["mean"] == pytest.approx(2 / 3, abs=1e-15)
    assert (a["mean_lo"], a["mean_hi"]) == pytest.approx((lo, hi), abs=1e-12)
    ilo, ihi = interval_bounds(rows)
    assert (ilo[rows.index[rows["variant"] == "a"][0]], ihi[rows.index[rows["variant"] == "a"][0]]) == pytest.approx(
        (lo, hi), abs=1e-12
    )
    pts = seed_points(panel.values, metric, ["a"])
    assert pts["variant"].tolist() == ["a"] * 3 and pts["value"].tolist() == [0.5, 0.6, 0.9]


# --------------------------------------------------------------------------------------------
# Per-checkpoint eval noise: a Wilson interval over the problems of each eval
# --------------------------------------------------------------------------------------------

Z95 = 1.959963984540054  # the 97.5% normal quantile


def wilson_by_hand(p: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval, written from its formula: centre (p + z²/2n) / (1 + z²/n),
    half-width z / (1 + z²/n) · sqrt(p(1-p)/n + z²/4n²)."""
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def eval_frames(with_counts=("a-0", "a-1")):
    """eval/accuracy at steps 0 and 1 of runs a-0, a-1 (10 problems each) and b-0; only the runs in
    ``with_counts`` logged eval/n_problems (b-0 is an older run)."""
    accuracy = {("a", 0): [0.0, 0.5], ("a", 1): [0.2, 0.5], ("b", 0): [0.3, 0.4]}
    history, runs = frames(accuracy, metric="eval/accuracy")
    counts = history[history["run_id"].isin(with_counts)].assign(metric="eval/n_problems", value=10.0)
    return pd.concat([history, counts], ignore_index=True), runs


# Wilson bounds from statsmodels and from the formula above differ by a few roundings of numbers
# below 2 (about 20 operations): 20 * eps * 2 < 1e-14.
WILSON_TOL = 1e-14


def test_each_runs_eval_point_gets_its_wilson_interval_and_an_old_run_none():
    history, runs = eval_frames()
    panel = curve_panel(history, runs, "eval/accuracy", aggregation="none")
    noise = panel.checkpoint.set_index(["run_id", "step"])
    assert panel.checkpoint_interval.startswith("binomial over problems, this checkpoint (95% Wilson")
    # 0 of 10 solved: Wilson gives [0, z²/(n+z²)] = [0, 3.8415/13.8415] = [0, 0.27753]
    assert noise.loc[("a-0", 0), "lo"] == pytest.approx(0.0, abs=WILSON_TOL)
    assert noise.loc[("a-0", 0), "hi"] == pytest.approx(Z95**2 / (10 + Z95**2), abs=WILSON_TOL)
    assert noise.loc[("a-0", 0), "hi"] == pytest.approx(0.27753, abs=1e-5)
    for rid, step, p in (("a-0", 1, 0.5), ("a-1", 0, 0.2), ("a-1", 1, 0.5)):
        lo, hi = wilson_by_hand(p, 10)
        assert noise.loc[(rid, step), "n_problems"] == 10
        assert noise.loc[(rid, step), ["lo", "hi"]].tolist() == pytest.approx([lo, hi], abs=WILSON_TOL)
    assert noise.loc[("a-0", 1), "lo"] == pytest.approx(0.23659, abs=1e-5)  # 5 of 10: [0.2366, 0.7634]
    old = noise.loc["b-0"]
    assert old["n_problems"].isna().all() and old["lo"].isna().all() and old["hi"].isna().all()


def test_a_groups_mean_gets_the_interval_at_the_mean_and_none_if_a_run_lacks_the_count():
    history, runs = eval_frames()
    panel = curve_panel(history, runs, "eval/accuracy", aggregation="mean")
    assert "at the mean over runs: an upper bound" in panel.checkpoint_interval
    a = panel.checkpoint[panel.checkpoint["variant"] == "a"].set_index("step")
    for step, mean in ((0, 0.1), (1, 0.5)):  # (0.0 + 0.2) / 2, (0.5 + 0.5) / 2
        assert a.loc[step, ["lo", "hi"]].tolist() == pytest.approx(wilson_by_hand(mean, 10), abs=WILSON_TOL)
    assert panel.checkpoint[panel.checkpoint["variant"] == "b"][["n_problems", "lo", "hi"]].isna().all().all()
    history, runs = eval_frames(with_counts=("a-0",))  # a-1 is an old run: a's mean has no count
    mixed = curve_panel(history, runs, "eval/accuracy", aggregation="mean").checkpoint
    assert mixed[["n_problems", "lo", "hi"]].isna().all().all()


def test_only_a_proportion_of_a_logged_count_gets_checkpoint_noise():
    panel = curve_panel(*frames(), "reward/mean", aggregation="none")
    assert panel.checkpoint is None and panel.checkpoint_interval == ""


def test_wilson_covers_95_percent_per_checkpoint_and_bounds_the_noise_of_a_mean_over_runs():
    """A checkpoint's accuracy over n problems of a task whose problems are solved with probability p:
    the 95% Wilson interval of one run covers p with probability >= 93% at every p and n tried (exact:
    summed over the binomial pmf, no simulation noise). Five runs on the same problems (each problem i
    solved by each run with its own probability q_i ~ Beta(1.5, 1.5·(1-p)/p), mean p): the interval at
    their mean accuracy over n covers p at least 95% of the time in 2,000 seeded draws (it is an upper
    bound on that mean's problem-draw noise; 2,000 draws put a coverage of 0.95 within ±0.01 at 2 sd)."""
    from workbench.compare.panels import wilson_bounds

    rng = np.random.default_rng(29)
    draws, runs = 2_000, 5
    for n in (100, 500):
        for p in (0.05, 0.3, 0.5, 0.9):
            solved = np.arange(n + 1)
            lo, hi = wilson_bounds(solved / n, np.full(n + 1, n), 0.95)
            single = float(sps.binom.pmf(solved, n, p)[(lo <= p) & (p <= hi)].sum())
            q = rng.beta(1.5, 1.5 * (1 - p) / p, size=(draws, n))  # [draws, n] per-problem solve rates
            mean = rng.binomial(runs, q).sum(axis=1) / (runs * n)  # runs solving each problem, over all
            lo, hi = wilson_bounds(mean, np.full(draws, n), 0.95)
            shared = float(np.mean((lo <= p) & (p <= hi)))
            print(f"n={n} p={p}: Wilson covers {single:.3f} (one run, exact), {shared:.3f} (mean of {runs} runs)")
            assert single >= 0.93 and shared >= 0.95
