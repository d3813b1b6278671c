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
        rows += [{"run_id": rid, "variant": variant, "seed": seed, "step": s, "metric": metric, "value": v}
                 for s, v in enumerate(values)]
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
    events = pd.DataFrame([
        {"run_id": "a-1", "rule": "r", "step": 1, "severity": "warn", "message": "m1", "watches": ["reward/mean"]},
        {"run_id": "a-2", "rule": "r", "step": 9, "severity": "fail", "message": "m2", "watches": ["reward/mean"]},
        {"run_id": "a-0", "rule": "r", "step": -1, "severity": "warn", "message": "m3", "watches": ["reward/mean"]},
        {"run_id": "a-0", "rule": "q", "step": 1, "severity": "warn", "message": "other", "watches": ["x/y"]},
    ])
    full = history[history["metric"] == "reward/mean"]
    markers = event_markers(events, "reward/mean", full, {"a-1": "a/seed=1"})
    assert list(markers.columns) == list(MARKER_COLUMNS)
    # a-1 at step 1: 2.0; a-2 at step 9 (after its last step 2): 7.0; a-0 before step 0: its first, 0.0
    assert markers["y"].tolist() == [2.0, 7.0, 0.0]
    assert markers["label"].tolist() == ["a/seed=1", "a-2", "a-0"]
    panel = curve_panel(history, runs, "reward/mean", health_events=events, markers=True)
    pd.testing.assert_frame_equal(panel.markers, event_markers(events, "reward/mean", full, None))


def test_summary_panel_is_the_comparison_table_with_scipys_t_interval():
    # one eval point per run: its final value (the mean of its last 3 eval points) is that point
    history, runs = frames({("a", 0): [0.5], ("a", 1): [0.6], ("a", 2): [0.9],
                            ("b", 0): [0.1], ("b", 1): [0.2], ("b", 2): [0.3]}, metric="eval/accuracy")
    panel = summary_panel(history, runs, ["final:eval/accuracy"], "b")
    assert panel.values["final:eval/accuracy"].tolist() == [0.5, 0.6, 0.9, 0.1, 0.2, 0.3]
    (metric, rows), = list(panel.rows())
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
    assert (ilo[rows.index[rows["variant"] == "a"][0]], ihi[rows.index[rows["variant"] == "a"][0]]) == \
        pytest.approx((lo, hi), abs=1e-12)
    pts = seed_points(panel.values, metric, ["a"])
    assert pts["variant"].tolist() == ["a"] * 3 and pts["value"].tolist() == [0.5, 0.6, 0.9]
