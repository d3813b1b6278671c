"""HealthMonitor: statuses, stopping, report, presets on streams, and recheck == live."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.health import (
    HEALTH_RULES,
    REPORT_ARTIFACT,
    HealthConfig,
    HealthMonitor,
    iter_history,
    recheck,
)

from .streams import healthy, make, nan_stream, spike, step_change
from .test_rules import fired, run

# entropy 1.0 - 0.03 s; initial = mean(1.0, 0.97, 0.94) = 0.97.
# default: threshold 0.2 x 0.97 = 0.194, first below at s = 27 (0.19), patience 5 -> fires 31;
# strict: threshold 0.35 x 0.97 = 0.3395, first below at s = 23 (0.31), patience 3 -> fires 25.
DRIFT = make(40, entropy__mean=lambda s: 1.0 - 0.03 * s)


def test_strict_fires_earlier_than_default_on_the_same_drift():
    assert fired(run(DRIFT)) == {"entropy_collapse": [31]}
    assert fired(run(DRIFT, "strict")) == {"entropy_collapse": [25]}


def test_overrides_change_the_trigger_step():
    # min_fraction 0.5: threshold 0.485, first below at s = 18 (0.46); patience 2 -> fires 19.
    cfg = {"rules": {"entropy_collapse": {"min_fraction": 0.5, "patience": 2}}}
    assert fired(run(DRIFT, cfg)) == {"entropy_collapse": [19]}
    # baseline over 10 steps: mean(1 - 0.03 s, s < 10) = 0.865 -> threshold 0.173;
    # first below at s = 28 (0.16) -> fires 32.
    cfg = {"rules": {"entropy_collapse": {"baseline_steps": 10}}}
    assert fired(run(DRIFT, cfg)) == {"entropy_collapse": [32]}
    cfg = {"rules": {"entropy_collapse": {"enabled": False}}}
    assert fired(run(DRIFT, cfg)) == {}


def test_status_is_worst_active_severity_and_run_status_is_sticky():
    # kl/ref above limit at 5..7 (warn, active), clear from 8; NaN at 12 (fail), clear from 13.
    stream = make(16, kl__ref=lambda s: 2.0 if 5 <= s <= 7 else 0.02, grad__norm=spike(1.0, math.nan, 12))
    monitor = HealthMonitor.from_config({"on_fail": "continue"})
    statuses, runs = [], []
    for step, metrics in stream:
        v = monitor.observe(step, metrics)
        statuses.append(v.status)
        runs.append(monitor.run_status)
        assert v.as_metrics() == {"health/status": float(v.status)}
    assert statuses == [0] * 5 + [1, 1, 1] + [0] * 4 + [2] + [0] * 3
    assert runs == ["ok"] * 5 + ["warn"] * 7 + ["fail"] * 4
    assert monitor.reasons == "kl_explosion@5,non_finite@12"
    assert monitor.should_stop is False  # on_fail: continue


def test_verdict_lists_events_and_active_rules():
    monitor = HealthMonitor.from_config()
    verdicts = [monitor.observe(s, m) for s, m in make(20, kl__ref=step_change(0.02, 2.0, 10))]
    assert [v.step for v in verdicts if v.events] == [10]
    assert verdicts[10].events[0].rule == "kl_explosion"
    assert verdicts[15].events == () and verdicts[15].active == ("kl_explosion",)
    assert verdicts[15].status_name == "warn"


def test_should_stop_on_fail_event_only():
    monitor = HealthMonitor.from_config()
    stopped_at = None
    for step, metrics in nan_stream(10, at=5):
        monitor.observe(step, metrics)
        if monitor.should_stop:
            stopped_at = step
            break
    assert stopped_at == 5 and monitor.run_status == "fail"
    assert monitor.reasons == "non_finite@5"
    # warn events never stop
    assert not run(DRIFT).should_stop
    # a warn rule escalated to fail stops
    cfg = {"rules": {"entropy_collapse": {"severity": "fail"}}}
    assert run(DRIFT, cfg).should_stop
    # non_finite downgraded to warn does not
    monitor = run(nan_stream(), {"rules": {"non_finite": {"severity": "warn"}}})
    assert not monitor.should_stop and monitor.run_status == "warn"


def test_off_preset_fires_nothing_even_on_nan():
    stream = make(
        40,
        entropy__mean=lambda s: 1.0 - 0.03 * s,
        loss__policy=lambda s: math.nan if s > 5 else 0.0,
        kl__ref=lambda s: math.inf,
    )
    monitor = run(stream, "off")
    assert monitor.events == [] and monitor.run_status == "ok" and not monitor.should_stop
    assert all(not r["enabled"] for r in monitor.report()["rules"].values())
    # the NaN guard can be switched back on alone
    monitor = run(stream, {"preset": "off", "rules": {"non_finite": {"enabled": True}}})
    assert fired(monitor) == {"non_finite": [0]}  # kl/ref = inf from step 0


def test_steps_must_strictly_increase():
    monitor = HealthMonitor.from_config()
    monitor.observe(3, {})
    with pytest.raises(ValueError, match="strictly increase"):
        monitor.observe(3, {})
    with pytest.raises(TypeError):
        monitor.observe(4, [("entropy/mean", 1.0)])
    with pytest.raises(TypeError):
        monitor.observe(4.5, {})


def test_from_config_accepts_config_dict_name_and_none():
    for cfg in (None, "default", {"preset": "default"}, HealthConfig()):
        assert HealthMonitor.from_config(cfg).config == HealthConfig()
    with pytest.raises(ValueError):
        HealthMonitor.from_config({"preset": "default", "bogus": 1})
    with pytest.raises(TypeError):
        HealthMonitor.from_config(3)


def test_report_is_strict_json_with_expected_contents(tmp_path):
    stream = make(30, entropy__mean=step_change(1.0, 0.1, 10), loss__policy=spike(0.0, math.nan, 20))
    monitor = run(stream, {"on_fail": "continue"})
    report = monitor.report()
    text = json.dumps(report, allow_nan=False)
    assert json.loads(text) == report
    assert report["status"] == "fail" and report["status_code"] == 2
    assert report["reasons"] == "entropy_collapse@14,non_finite@20"
    assert report["should_stop"] is False and report["first_fail_step"] == 20
    assert (report["steps_observed"], report["first_step"], report["last_step"]) == (30, 0, 29)
    assert report["config"] == {
        "preset": "default",
        "rules": {},
        "on_fail": "continue",
        "step0_gate": True,
        "mismatch_record_every": 100,
    }
    ec = report["rules"]["entropy_collapse"]
    assert ec["enabled"] and ec["count"] == 1 and ec["active"]
    assert ec["params"] == {
        "enabled": True,
        "severity": "warn",
        "patience": 5,
        "baseline_steps": 3,
        "min_fraction": 0.2,
    }
    assert ec["first_trigger"]["step"] == 14
    assert ec["first_trigger"]["value"] == pytest.approx(0.1)
    assert ec["first_trigger"]["threshold"] == pytest.approx(0.2)
    nf = report["rules"]["non_finite"]
    assert nf["first_trigger"]["value"] == "nan" and nf["first_trigger"]["metric"] == "loss/policy"
    assert report["rules"]["kl_explosion"] == {
        "enabled": True,
        "severity": "warn",
        "params": {"enabled": True, "severity": "warn", "patience": 1, "max_kl": 1.0},
        "watches": ["kl/ref"],
        "count": 0,
        "active": False,
        "first_trigger": None,
        "evaluated": 30,
        "not_evaluated": None,
        "not_applicable": None,
    }
    assert [e["rule"] for e in report["events"]] == ["entropy_collapse", "non_finite"]
    assert monitor.tags() == {
        "workbench.health": "fail",
        "workbench.health_reasons": "entropy_collapse@14,non_finite@20",
        "workbench.health_label": "fail",
    }
    path = monitor.write_report(tmp_path)
    assert path.endswith(REPORT_ARTIFACT)
    assert json.loads(Path(path).read_text(encoding="utf-8")) == report


def test_healthy_report():
    report = run(healthy(60)).report()
    assert (report["status"], report["reasons"], report["events"]) == ("ok", "", [])


# --- recheck ------------------------------------------------------------------------------------


def to_history(stream):
    """MLflow-like per-metric history: {name: [(step, value), ...]}."""
    hist: dict[str, list] = {}
    for step, metrics in stream:
        for k, v in metrics.items():
            hist.setdefault(k, []).append((step, v))
    return hist


def test_recheck_matches_live_and_does_not_touch_self():
    stream = make(30, entropy__mean=step_change(1.0, 0.1, 10), loss__policy=spike(0.0, math.nan, 20))
    live = run(stream, {"on_fail": "continue"})
    before = live.report()
    for history in (stream, iter(stream), to_history(stream)):
        again = live.recheck(history)
        assert again is not live and again.report() == before
    assert live.report() == before
    # MLflow Metric-like objects with .step / .value, and health/status is ignored
    hist = {k: [SimpleNamespace(step=s, value=v) for s, v in series] for k, series in to_history(stream).items()}
    hist["health/status"] = [SimpleNamespace(step=s, value=0.0) for s, _ in stream]
    assert recheck(hist, {"on_fail": "continue"}).report() == before


def test_iter_history_groups_and_sorts_steps():
    hist = {"a": [(2, 1.0), (0, 3.0), (2, 5.0)], "b": [(1, 2.0)]}
    assert list(iter_history(hist)) == [(0, {"a": 3.0}), (1, {"b": 2.0}), (2, {"a": 5.0})]


# Every metric a registered rule watches ("*" aside), so a new rule is covered; loss/policy is
# drawn separately below.
KEYS = list(
    dict.fromkeys(
        metric
        for name in HEALTH_RULES.names()
        for metric in HEALTH_RULES.get(name).watches
        if metric not in ("*", "loss/policy")
    )
)
VALUES = st.one_of(
    st.sampled_from([0.0, 0.05, 0.1, 0.3, 0.5, 0.95, 1.0, 2.0, 5.0, 30.0]),
    st.floats(min_value=-1.0, max_value=50.0, allow_nan=False),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)
SEGMENT = st.tuples(st.integers(1, 15), st.one_of(st.none(), VALUES))  # (length, value|absent)


@st.composite
def streams(draw):
    """Random streams made of constant segments per metric (so streaks and absences happen),
    with random step gaps; ``loss/policy`` is always present so no step is empty."""
    n = draw(st.integers(0, 60))
    columns = {}
    for key in KEYS:
        col: list = []
        for length, value in draw(st.lists(SEGMENT, max_size=8)):
            col.extend([value] * length)
        columns[key] = (col + [None] * n)[:n]
    loss = draw(st.lists(st.one_of(st.floats(-1, 1), st.just(math.nan)), min_size=n, max_size=n))
    gaps = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    out, step = [], 0
    for i in range(n):
        metrics = {k: columns[k][i] for k in KEYS if columns[k][i] is not None}
        metrics["loss/policy"] = loss[i]
        out.append((step, metrics))
        step += gaps[i]
    return out


CONFIGS = st.sampled_from(
    [
        None,
        "strict",
        {
            "preset": "strict",
            "on_fail": "continue",
            "rules": {n: {"patience": 1} for n in ("entropy_collapse", "reward_collapse", "length_blowup")},
        },
        # the smallest windows, so the trend rules evaluate within these short (<= 60-step) streams
        {
            "rules": {
                "incorrect_length_gap": {
                    "trend_window": 3,
                    "noise_window": 6,
                    "long_min_window": 6,
                    "long_window": 12,
                    "patience": 1,
                },
                "reward_collapse": {"window": 1, "noise_window": 6},
            }
        },
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=streams(), cfg=CONFIGS)
def test_recheck_gives_the_same_events_as_live(stream, cfg):
    live = HealthMonitor.from_config(cfg)
    statuses = []
    for s, m in stream:
        v = live.observe(s, m)
        statuses.append(v.status)
        # status is the worst severity among the active rules
        sev = {"warn": 1, "fail": 2}
        assert v.status == max((sev[live.rules[n].params.severity] for n in v.active), default=0)
    report = live.report()
    json.dumps(report, allow_nan=False)
    for history in (stream, to_history(stream)):
        again = HealthMonitor.from_config(cfg).recheck(history)
        assert again.events == live.events
        assert again.report() == report
        assert again.reasons == live.reasons and again.run_status == live.run_status
        assert again.should_stop == live.should_stop


def test_a_rule_whose_inputs_never_arrive_says_what_it_needs():
    """An imported run may lack a rule's inputs: the report says so instead of a silent pass."""
    # 90 steps: reward_collapse first evaluates at observation noise_window 60 + window 20 = 80.
    history = [(step, {"entropy/mean": 1.0, "reward/mean": 0.5}) for step in range(90)]
    rules = HealthMonitor.from_config(None).recheck(history).report()["rules"]
    assert rules["kl_explosion"]["evaluated"] == 0
    assert rules["kl_explosion"]["not_evaluated"] == "not evaluated: needs kl/ref"
    assert rules["incorrect_length_gap"]["not_evaluated"] == (
        "not evaluated: needs length/correct_mean, length/incorrect_mean"
    )
    assert rules["reward_collapse"]["evaluated"] > 0 and rules["reward_collapse"]["not_evaluated"] is None
    off = HealthMonitor.from_config("off").recheck(history).report()["rules"]
    assert off["kl_explosion"]["not_evaluated"] is None  # a disabled rule is "off", not "not evaluated"


def test_a_rule_on_metrics_the_config_never_logs_is_not_applicable_not_unevaluated():
    """kl/ref is only logged with a reference model: for a run with kl_coef 0, kl_explosion is
    'not applicable' (shown as off), while a rule whose inputs merely went missing stays 'not evaluated'."""
    from workbench.config import RunConfig
    from workbench.metrics.catalogue import PIPELINE_METRICS, unlogged_by_config
    from workbench.metrics.passk import PASS_AT_K_METRICS
    from workbench.metrics.reflection import REFLECTION_METRICS

    unlogged = unlogged_by_config(RunConfig().flat())  # defaults: kl_coef 0, no IS correction
    assert set(unlogged) == {
        "kl/ref",
        "mismatch/is_weight_mean",
        "mismatch/is_clipped_frac",
        "mismatch/is_reweighted_frac",
        "batch/filtered_frac",
        "batch/sampling_rounds",
        *PASS_AT_K_METRICS,
        "eval/mean_at_n",  # rollout.eval_samples = 1: one answer per problem
        *REFLECTION_METRICS["behaviour"],
        *REFLECTION_METRICS["eval"],  # the tiny model: no words
        *PIPELINE_METRICS,
    }  # rollout.staleness = 0: no pipeline, nothing stale, nobody waits
    history = [(step, {"entropy/mean": 1.0, "reward/mean": 0.5}) for step in range(6)]
    rules = HealthMonitor.from_config(None, unlogged=unlogged).recheck(history).report()["rules"]
    assert rules["kl_explosion"]["not_evaluated"] is None
    assert rules["kl_explosion"]["not_applicable"] == (
        "not applicable: kl/ref is not logged when algorithm.kl_coef = 0 (no reference model)"
    )
    assert rules["incorrect_length_gap"]["not_evaluated"].startswith("not evaluated: needs")
    assert rules["incorrect_length_gap"]["not_applicable"] is None
    # logged params are strings; a run with a reference model logs kl/ref, so nothing is unlogged for it
    assert "kl/ref" not in unlogged_by_config({"algorithm.kl_coef": "0.05", "algorithm.correction": "tis"})
    assert unlogged_by_config(
        {
            "algorithm.kl_coef": "0.0",
            "algorithm.correction": "None",
            "algorithm.batch_filter": "None",
            "rollout.eval_samples": "1",
            "model.builtin": "tiny",
            "rollout.staleness": "0",
        }
    ).keys() == set(unlogged)
    assert unlogged_by_config({}) == {}  # nothing known about the config: nothing assumed


def _healthy_native_step(step: int) -> dict:
    """Every metric the default preset's rules read, at healthy values (a native run logs them all)."""
    return {
        "entropy/mean": 1.0,
        "length/truncated_frac": 0.0,
        "length/correct_mean": 20.0,
        "length/incorrect_mean": 21.0 + 0.01 * (step % 3),
        "reward/mean": 0.5 + 0.01 * (step % 2),
        "batch/zero_std_frac": 0.2,
        "mismatch/prob_abs_diff_max": 0.01,
        "mismatch/kl": 1e-4 * (1 + step % 2),
        "mismatch/is_ratio_mean": 1.0,
        "mismatch/ess": 0.99,
        "mismatch/is_ratio_std": 0.01,
        "mismatch/kl_k1": 0.0,
        "mismatch/chi2_token": 0.01,
        "mismatch/token_mult_prob_error": 1.0,
        "mismatch/is_ratio_tail_frac": 0.0,
        "clip/frac": 0.01,
        "loss/policy": 0.1,
        "grad/norm": 1.0,
        "reward/verify_timeout_frac": 0.0,
    }


def test_a_short_run_reads_ok_only_for_the_rules_it_could_evaluate():
    # 20 steps: the entropy (baseline 3), level and band rules evaluate; incorrect_length_gap (40),
    # reward_collapse (80) and mismatch_growth (40) cannot; kl_explosion does not apply (kl_coef 0).
    monitor = HealthMonitor.from_config(None, unlogged={"kl/ref": "algorithm.kl_coef = 0"}).recheck(
        [(step, _healthy_native_step(step)) for step in range(20)]
    )
    report = monitor.report()
    unevaluated = sorted(n for n, r in report["rules"].items() if r["not_evaluated"])
    assert unevaluated == ["incorrect_length_gap", "mismatch_growth", "reward_collapse"]
    assert report["rules"]["reward_collapse"]["not_evaluated"] == (
        "not evaluated: needs ≥ 80 finite observations of reward/mean (this run has 20 steps)"
    )
    assert monitor.run_status == "ok" and monitor.coverage == (10, 13)  # 14 rules, kl_explosion not applicable
    assert monitor.run_label == report["label"] == "ok (10 of 13 rules evaluated)"
    assert monitor.tags()["workbench.health_label"] == "ok (10 of 13 rules evaluated)"
    assert monitor.tags()["workbench.health"] == "ok"  # the machine value stays ok / warn / fail

    full = HealthMonitor.from_config(None, unlogged={"kl/ref": "algorithm.kl_coef = 0"}).recheck(
        [(step, _healthy_native_step(step)) for step in range(120)]
    )
    assert full.coverage == (13, 13) and full.run_label == "ok"


def test_an_imported_run_without_a_rules_inputs_does_not_read_ok():
    # an imported run that logged only reward and entropy (e.g. a TensorBoard log), 150 steps, all-zero reward
    history = [(step, {"reward/mean": 0.0, "entropy/mean": 1.0}) for step in range(150)]
    monitor = HealthMonitor.from_config(None).recheck(history)
    evaluated, checkable = monitor.coverage
    assert (evaluated, checkable) == (4, 14)  # entropy_collapse, entropy_blowup, reward_collapse, non_finite
    assert monitor.run_label == "ok (4 of 14 rules evaluated)"
    assert monitor.report()["rules"]["no_learning_signal"]["not_evaluated"] == (
        "not evaluated: needs batch/zero_std_frac"
    )
