"""Each rule fires at a hand-computed step; contract tests every registered rule passes.

A new rule's tests live here: its hand-computed case in ``CASES`` and its planted failure in
``FAILURES`` (run by test_false_alarms.py). The streams of streams.py carry every catalogued
metric, so whichever metric the rule watches is already in them.
"""

from __future__ import annotations

import math

import pytest
from pydantic import BaseModel

from workbench.health import HEALTH_RULES, HealthMonitor, HealthRule, RuleParams
from workbench.health.rules import to_float
from workbench.metrics.catalogue import BY_NAME

from .streams import (
    BASE,
    HEALTHY_KINDS,
    healthy,
    make,
    noisy_healthy,
    spike,
    step_change,
)


def run(stream, cfg=None) -> HealthMonitor:
    monitor = HealthMonitor.from_config(cfg)
    for step, metrics in stream:
        monitor.observe(step, metrics)
    return monitor


def fired(monitor: HealthMonitor) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for e in monitor.events:
        out.setdefault(e.rule, []).append(e.step)
    return out


# --- one stream per rule, with the step worked out by hand under the default preset ----------
# default: baseline 3 obs, patience 5 unless noted.
CASES = {
    # initial = mean(1,1,1) = 1; threshold 0.2; 0.1 < 0.2 from step 10; 5th violation at 14.
    "entropy_collapse": (make(30, entropy__mean=step_change(1.0, 0.1, 10)), 14, 0.1, 0.2),
    # threshold 3 x 1 = 3; 3.5 > 3 from step 10 -> fires at 14.
    "entropy_blowup": (make(30, entropy__mean=step_change(1.0, 3.5, 10)), 14, 3.5, 3.0),
    # 0.5 > 0.3 from step 20 -> fires at 24.
    "length_blowup": (make(40, length__truncated_frac=step_change(0.05, 0.5, 20)), 24, 0.5, 0.3),
    # ratio = 1 + 0.05 s, a straight line. The rule first evaluates at observation min_window 40 =
    # step 39; the line has no residuals (no noise: z = +inf), so the slope is significant and the
    # fitted ratio 1 + 0.05·39 = 2.95 > 1.5; violated at 39, 40, 41 -> patience 3 -> fires at 41
    # with fitted ratio 1 + 0.05·41 = 3.05.
    "incorrect_length_gap": (make(70, length__incorrect_mean=lambda s: 20.0 * (1.0 + 0.05 * s)), 41, 3.05, 1.5),
    # running mean of 20, first evaluated at observation noise_window 60 + window 20 = step 79; a
    # constant history has no noise (SE 0), so the noise limit is its mean 0.8 and the threshold
    # min(best 0.8 - margin 0.2, 0.8) = 0.6. Drop to 0.2 at step 80: with j + 1 low steps in the
    # window the running mean is 0.8 - 0.03 (j + 1): 0.62 at 85 (ok), 0.59 < 0.6 at 86 -> 86..89
    # (patience 4) -> fires at 89 with running 0.8 - 0.03 · 10 = 0.5.
    "reward_collapse": (make(100, reward__mean=step_change(0.8, 0.2, 80)), 89, 0.5, 0.6),
    # patience 10: 0.95 > 0.9 from step 10 -> fires at 19.
    "no_learning_signal": (make(30, batch__zero_std_frac=step_change(0.3, 0.95, 10)), 19, 0.95, 0.9),
    # patience 1: 0.95 > 0.8 at step 15.
    "mismatch_spike": (make(30, mismatch__prob_abs_diff_max=spike(0.2, 0.95, 15)), 15, 0.95, 0.8),
    # patience 2: NeMo-RL's band, 1.2 > 1.05 from step 10 -> fires at 11.
    "mismatch_bands": (make(30, mismatch__token_mult_prob_error=step_change(1.01, 1.2, 10)), 11, 1.2, 1.05),
    # patience 3: 0.3 > 0.05 from step 10 -> fires at 12.
    "mismatch_tail": (make(30, mismatch__is_ratio_tail_frac=step_change(0.01, 0.3, 10)), 12, 0.3, 0.05),
    # baseline mean(first 20, steps 0-19) = 0.001 -> limit max(3 × 0.001, 2e-4) = 0.003; the window of the
    # next 20 is full at step 39, its mean 0.001 + 0.009 × (k/20) with k = steps >= 30 in it: 0.0055 at 39
    # (k = 10), already above 0.003 -> patience 3 -> fires at 41 with k = 12: 0.001 + 0.0054 = 0.0064.
    "mismatch_growth": (make(60, mismatch__kl=step_change(0.001, 0.01, 30)), 41, 0.0064, 0.003),
    # 0.5 > 0.3 from step 30 -> fires at 34.
    "clip_fraction_anomaly": (make(40, clip__frac=step_change(0.05, 0.5, 30)), 34, 0.5, 0.3),
    # patience 1: 2.0 > 1.0 at step 12.
    "kl_explosion": (make(30, kl__ref=spike(0.02, 2.0, 12)), 12, 2.0, 1.0),
    # window 10, evaluated from step 9: 0.06 from step 10 -> the mean is 0.006 at 10, 0.012 > 0.01 at 11
    # (patience 1) -> fires at 11.
    "verifier_timeouts": (make(30, reward__verify_timeout_frac=step_change(0.0, 0.06, 10)), 11, 0.012, 0.01),
    # immediate.
    "non_finite": (make(30, grad__norm=spike(1.0, math.inf, 7)), 7, math.inf, None),
}


# --- one planted failure per rule, for the simulations of test_false_alarms.py -----------------
# rule -> (metric, new value from FAILURE_AT on in a noisy healthy run, expected firing steps).
# Expected steps follow from the default Params (failure at step 80, after the trend rules'
# first evaluations at steps 55 and 64, so their noise history is healthy):
#   patience 5 -> the 5th violating observation is step 84; patience 1 -> 80; patience 10 -> 89.
#   reward_collapse: the running mean of 20 falls 0.02 per planted step, 0.5 - 0.02 (j + 1) at step
#   80 + j (from a level of 0.5); it is first evaluated at step 79; its best is 0.5 plus the noise
#   maximum of the 20-step mean (sd 0.08/sqrt(20) = 0.018, max ~ +0.01..+0.03), so best - margin 0.2
#   is ~0.31..0.33; the noise limit is the mean of the 60 steps before (0.5 ± 0.01) minus 5 standard
#   errors of the difference (5 × 0.08 × sqrt(1/20 + 1/60) = 0.10, ±15% estimation noise), ~0.38..0.42.
#   The threshold, the smaller of the two, lies in ~0.31..0.33: first violated when 0.02 (j + 1) >
#   ~0.17..0.19, j = 8..9 (steps 86..89, allowing ±1 step of noise) -> patience 4 -> fires at 89..93.
#   incorrect_length_gap: the ratio grows 0.03/step from 1.6 (iid noise sd 0.05). The slope's
#   standard error over the 16-step window is 0.05/sqrt(340) = 0.0027; with j ramp steps in the
#   window the noiseless slope is 3.0, 4.0, 5.0, 6.1, 7.1, 8.1 standard errors for j = 5..10
#   (onset+4..+9). The critical 4.5 is crossed at onset+6 without noise; allowing ±2-3 sd of noise
#   in z, the first significant window is onset+4..+10, then patience 3: fires at 85..93
#   (onset+5 needs z > 4.5 at +3, +4 and +5, noiseless 2.1, 3.0, 4.0: rare but possible).
FAILURE_AT = 80
FAILURES = {
    "entropy_collapse": ("entropy/mean", lambda k, old: 0.1 * old, {84}),
    "entropy_blowup": ("entropy/mean", lambda k, old: 3.5 * old, {84}),
    "length_blowup": ("length/truncated_frac", lambda k, old: 0.5, {84}),
    "incorrect_length_gap": (
        "length/incorrect_mean",
        lambda k, old: old + 20.0 * 0.03 * (k + 1),  # correct length ~20: ratio +0.03 per step
        set(range(85, 94)),
    ),
    "reward_collapse": ("reward/mean", lambda k, old: 0.1, set(range(89, 94))),
    "no_learning_signal": ("batch/zero_std_frac", lambda k, old: 1.0, {89}),
    "mismatch_spike": ("mismatch/prob_abs_diff_max", lambda k, old: 0.95, {80}),
    "mismatch_bands": ("mismatch/token_mult_prob_error", lambda k, old: 1.2, {81}),
    "mismatch_tail": ("mismatch/is_ratio_tail_frac", lambda k, old: 0.3, {82}),
    # kl ~ U(0, 0.005): the 3× level is crossed after 2-5 planted 0.05s; the noise margin (#49) decides.
    # log U(0, a) has mean log a − 1 ≈ −6.3 and sd 1, so the SE of a 20-vs-20 log-mean shift is ≈ √(2/20)
    # = 0.32 and the margin 4.5 × 0.32 = 1.42; each planted log 0.05 = −3.0 adds (−3.0 + 6.3)/20 = 0.165:
    # 9 planted (step 88) on average, ±2 steps per SD of the shift's noise (0.32 / 0.165), plus patience
    # 3 → fires at about 90, 84..96 within ±2 SD. (At the real bf16 log-sd 0.45 the margin is 0.64: the
    # level decides.)
    "mismatch_growth": ("mismatch/kl", lambda k, old: 0.05, set(range(84, 97))),
    "clip_fraction_anomaly": ("clip/frac", lambda k, old: 0.5, {84}),
    "kl_explosion": ("kl/ref", lambda k, old: 2.0, {80}),
    # healthy streams carry no timeouts (catalogue range [0, 0]); 0.06 from 80: 10-step mean 0.012 > 0.01 at 81.
    "verifier_timeouts": ("reward/verify_timeout_frac", lambda k, old: 0.06, {81}),
    "non_finite": ("grad/norm", lambda k, old: math.nan if k == 0 else old, {80}),
}


def test_every_rule_has_a_case():
    assert sorted(CASES) == HEALTH_RULES.names()


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_fires_at_hand_computed_step(rule):
    stream, step, value, threshold = CASES[rule]
    monitor = run(stream)
    assert fired(monitor) == {rule: [step]}
    (event,) = monitor.events
    assert event.value == pytest.approx(value)
    if threshold is not None:
        assert event.threshold == pytest.approx(threshold)
    assert event.severity == ("fail" if rule == "non_finite" else "warn")
    assert rule in event.message and str(step) in event.message


def test_healthy_stream_fires_nothing_under_default():
    for seed in range(5):
        monitor = run(healthy(120, seed=seed))
        assert monitor.events == [], [e.message for e in monitor.events]
        assert monitor.run_status == "ok" and monitor.reasons == ""


def test_mismatch_kl_alone_fires_and_names_its_metric():
    monitor = run(make(20, mismatch__kl=spike(0.001, 0.1, 7)))
    (event,) = monitor.events
    assert (event.rule, event.step, event.metric, event.value) == ("mismatch_spike", 7, "mismatch/kl", 0.1)


def test_mismatch_check_can_be_switched_off_by_none():
    cfg = {"rules": {"mismatch_spike": {"max_prob_abs_diff": None}}}
    monitor = run(make(30, mismatch__prob_abs_diff_max=spike(0.2, 0.95, 15)), cfg)
    assert monitor.events == []


def test_incorrect_length_gap_needs_growth():
    # ratio constant at 2.0 (> 1.5) but not growing: evaluated from step 39 on, never fires.
    monitor = run(make(80, length__incorrect_mean=lambda s: 40.0))
    assert monitor.events == [] and monitor.rules["incorrect_length_gap"].evaluated == 41


def test_incorrect_length_gap_needs_the_fitted_ratio_above_the_limit():
    # rising perfectly (1.0 -> 1.445, significant at every evaluation) but the fitted ratio never
    # exceeds 1.5: evaluated from step 39 on, never fires.
    monitor = run(make(90, length__incorrect_mean=lambda s: 20.0 * (1.0 + 0.005 * s)))
    assert monitor.events == [] and monitor.rules["incorrect_length_gap"].evaluated == 51


def test_incorrect_length_gap_message_says_what_was_tested():
    (event,) = run(CASES["incorrect_length_gap"][0]).events
    assert "least-squares slope" in event.message and "standard errors above 0 > 9" in event.message
    assert "rises 0.05 per observation over the last 42" in event.message
    assert "AR(1) noise fitted around the line" in event.message
    assert "fitted value 3.05 > 1.5" in event.message


def test_entropy_baseline_is_mean_of_first_observations():
    # baseline (2 + 1 + 0) / 3 = 1 -> threshold 0.2; 0.15 from step 3 -> fires at 7.
    values = [2.0, 1.0, 0.0]
    monitor = run(make(12, entropy__mean=lambda s: values[s] if s < 3 else 0.15))
    assert fired(monitor) == {"entropy_collapse": [7]}
    assert monitor.rules["entropy_collapse"].initial == pytest.approx(1.0)


# --- streak / patience semantics ----------------------------------------------------------------


def test_streak_resets_on_a_clean_observation():
    # entropy low at 10..13 (4 obs), recovers at 14, low again from 15 -> fires at 19.
    monitor = run(make(30, entropy__mean=lambda s: 1.0 if s < 10 or s == 14 else 0.1))
    assert fired(monitor) == {"entropy_collapse": [19]}


def test_absent_steps_neither_advance_nor_reset_the_streak():
    # low at 10, 11, absent at 12, low at 13, 14, 15 -> 5th observation at 15.
    monitor = run(make(30, entropy__mean=lambda s: 1.0 if s < 10 else (None if s == 12 else 0.1)))
    assert fired(monitor) == {"entropy_collapse": [15]}


def test_rule_fires_once_per_episode_and_again_after_clearing():
    # kl/ref above the limit at 5..9 (one episode), clear at 10, above again at 15.
    monitor = run(make(20, kl__ref=lambda s: 2.0 if 5 <= s <= 9 or s == 15 else 0.02))
    assert fired(monitor) == {"kl_explosion": [5, 15]}
    assert monitor.report()["rules"]["kl_explosion"]["count"] == 2


def test_non_finite_value_is_absent_for_other_rules():
    # a NaN entropy does not count as a collapse observation (non_finite reports it instead).
    stream = make(30, entropy__mean=lambda s: 1.0 if s < 10 else (math.nan if s == 12 else 0.1))
    monitor = run(stream, {"on_fail": "continue"})
    assert fired(monitor) == {"non_finite": [12], "entropy_collapse": [15]}


# --- absent metrics -----------------------------------------------------------------------------


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_without_its_metrics_does_not_evaluate(rule):
    cls = HEALTH_RULES.get(rule)
    stream, *_ = CASES[rule]
    watched = set(cls.watches) - {"*"}
    stripped = [(s, {k: v for k, v in m.items() if k not in watched}) for s, m in stream]
    if rule == "non_finite":
        stripped = [(s, {k: v for k, v in m.items() if math.isfinite(v)}) for s, m in stream]
    monitor = run(stripped)
    assert monitor.events == []


def test_empty_and_unrelated_metrics_fire_nothing():
    monitor = HealthMonitor.from_config("strict")
    for step in range(50):
        verdict = monitor.observe(step, {} if step % 2 else {"something/else": 1.0, "note": "text"})
        assert verdict.status == 0 and verdict.events == ()
    assert monitor.run_status == "ok"


def test_non_numeric_values_are_ignored():
    class Scalar:  # like a 0-d tensor
        def __float__(self):
            return 0.1

    assert to_float(Scalar()) == 0.1
    assert to_float(True) is None and to_float("nan") is None and to_float(None) is None
    assert to_float(3) == 3.0
    monitor = run([(s, {"entropy/mean": 1.0 if s < 3 else Scalar(), "tag": "x"}) for s in range(10)])
    assert fired(monitor) == {"entropy_collapse": [7]}


# --- contract: every registered rule ------------------------------------------------------------


@pytest.mark.parametrize("name", HEALTH_RULES.names())
def test_rule_contract(name):
    cls = HEALTH_RULES.get(name)
    assert issubclass(cls, HealthRule) and cls.name == name
    doc = cls.__doc__ or ""
    assert len(doc.split()) > 20 and "[" in doc, "docstring must say the symptom and cite a source"
    assert cls.watches and cls.consequence and cls.summary
    # every metric a rule watches is a canonical one ("*" = every metric of the step)
    unknown = [m for m in cls.watches if m != "*" and m not in BY_NAME]
    assert not unknown, f"{name} watches metrics missing from workbench/metrics/catalogue.py: {unknown}"
    assert issubclass(cls.Params, RuleParams) and issubclass(cls.Params, BaseModel)
    for field_name, field in cls.Params.model_fields.items():
        assert not field.is_required(), f"{name}.{field_name} needs a default"
        assert field.description, f"{name}.{field_name} needs a docstring"
    rule = cls()
    assert rule.observe(0, {}) is None and not rule.active
    # disabled rules never fire, whatever the stream
    disabled = cls(enabled=False)
    for step, metrics in CASES[name][0]:
        assert disabled.observe(step, metrics) is None
    # reset forgets state: replaying the case fires at the same step again
    stream, step, *_ = CASES[name]
    fresh = cls()
    first = [fresh.observe(s, m) for s, m in stream]
    fresh.reset()
    second = [fresh.observe(s, m) for s, m in stream]
    assert first == second and any(e is not None and e.step == step for e in first)


def test_rule_accepts_params_mapping_and_overrides():
    cls = HEALTH_RULES.get("entropy_collapse")
    assert cls({"patience": 2}).params.patience == 2
    assert cls(cls.Params(patience=2), min_fraction=0.5).params.min_fraction == 0.5
    with pytest.raises(TypeError):
        cls(HEALTH_RULES.get("kl_explosion").Params())


def test_base_values_are_healthy():
    monitor = run([(s, dict(BASE)) for s in range(50)], "strict")
    assert monitor.events == []


def test_streams_carry_every_catalogued_metric_within_its_bounds():
    # so a rule on any catalogued metric is evaluated on them without editing streams.py
    assert set(BASE) == set(BY_NAME)
    streams = [healthy(20), make(5)] + [noisy_healthy(kind, 20) for kind in HEALTHY_KINDS]
    for stream in streams:
        for _, metrics in stream:
            assert set(BY_NAME) <= set(metrics)
            for name, spec in BY_NAME.items():
                lo, hi = spec.bounds
                assert lo <= metrics[name] <= hi, (name, metrics[name])
