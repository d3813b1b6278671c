"""Simulation tests: the default rules stay quiet on healthy noisy runs and fire on their failure.

Every default rule must fire on at most 5% of healthy 100-step runs (``noisy_healthy``: noisy
flat and noisy slowly improving streams, fixed seeds) and still fire on its planted failure at
the step the rule's definition gives. Monte-Carlo error: with ``RUNS`` = 200 runs per stream
kind, an observed rate has standard error sqrt(p(1-p)/200), at most 1.5 points at p = 5%; the
rules are built to sit well below that (most never fire here), so the bound is not met by luck.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from functools import cache

import pytest

from workbench.health import HEALTH_RULES, HealthMonitor

from .streams import HEALTHY_KINDS, noisy_healthy, plant

RUNS = 200
STEPS = 100
MAX_FALSE_FIRE_RATE = 0.05
FAILURE_AT = 50


def _events(stream, cfg=None):
    monitor = HealthMonitor.from_config(cfg)
    for step, metrics in stream:
        monitor.observe(step, metrics)
    return monitor.events


@cache
def _runs_with_a_false_fire(kind: str) -> Counter:
    """Per rule: in how many of ``RUNS`` healthy runs it fired at least once (default preset)."""
    counts: Counter = Counter()
    for seed in range(RUNS):
        counts.update({e.rule for e in _events(noisy_healthy(kind, STEPS, seed))})
    return counts


@pytest.mark.parametrize("kind", HEALTHY_KINDS)
@pytest.mark.parametrize("rule", HEALTH_RULES.names())
def test_default_rule_rarely_fires_on_healthy_runs(kind, rule):
    rate = _runs_with_a_false_fire(kind)[rule] / RUNS
    assert rate <= MAX_FALSE_FIRE_RATE, f"{rule} fired on {rate:.1%} of healthy {kind} runs"


def test_a_stable_length_gap_is_not_a_growing_one():
    # The measurement: a flat incorrect/correct ratio of 1.6 ± 0.05 (above max_ratio 1.5)
    # made the old "ratio > value 5 observations earlier" check fire in 20 of 20 runs.
    fired = sum(
        any(e.rule == "incorrect_length_gap" for e in _events(noisy_healthy("flat", STEPS, 1000 + seed)))
        for seed in range(20)
    )
    assert fired <= 1


@pytest.mark.parametrize("reward_sd", [0.12, 0.2, 0.3])
@pytest.mark.parametrize("kind", HEALTHY_KINDS)
def test_reward_collapse_stays_quiet_on_noisier_rewards(kind, reward_sd):
    # Small batches or shaped rewards are noisier than the streams above (sd 0.08): a fixed
    # 0.2 margin below the running maximum fired on 22% (sd 0.12) to 95% (sd 0.2) of flat runs.
    rule_cls = HEALTH_RULES.get("reward_collapse")
    fired = 0
    for seed in range(RUNS):
        rng, rule = random.Random(seed), rule_cls()
        for step in range(STEPS):
            level = 0.5 if kind == "flat" else 0.3 + 0.5 * step / (STEPS - 1)
            reward = min(max(level + rng.gauss(0, reward_sd), 0.0), 1.0)
            if rule.observe(step, {"reward/mean": reward}) is not None:
                fired += 1
                break
    assert fired / RUNS <= MAX_FALSE_FIRE_RATE


# --- planted failures: (metric, new value from the failure step on, expected firing steps) --------
# Expected steps follow from the default Params (failure at step 50):
#   patience 5 -> the 5th violating observation is step 54; patience 1 -> 50; patience 10 -> 59.
#   reward_collapse: the running mean of 5 goes 0.42, 0.34, 0.26, 0.18 at steps 50..53 (from a
#   level of 0.5); its best so far is 0.5 plus the noise maximum of the running mean (sd
#   0.08/sqrt(5) = 0.036, max over ~45 windows ~ +0.03..+0.12), so the limit best - 0.2 lies in
#   0.33..0.42: first violated at step 50..53 -> patience 5 -> fires at 54..57.
#   incorrect_length_gap: the ratio grows 0.03/step from 1.6 (noise sd 0.05). Over a full
#   12-observation ramp the slope's standard error is 0.05/sqrt(143) = 0.0042 (t ~ 7 against a
#   critical 3.72 at one-sided 0.002, df 10), so it is significant once roughly 5 ramp steps are
#   in the window (step ~54), then patience 3: 56..60 typically; 53..63 allows the noise.
FAILURES = {
    "entropy_collapse": ("entropy/mean", lambda k, old: 0.1 * old, {54}),
    "entropy_blowup": ("entropy/mean", lambda k, old: 3.5 * old, {54}),
    "length_blowup": ("length/truncated_frac", lambda k, old: 0.5, {54}),
    "incorrect_length_gap": (
        "length/incorrect_mean",
        lambda k, old: old + 20.0 * 0.03 * (k + 1),  # correct length ~20: ratio +0.03 per step
        set(range(53, 64)),
    ),
    "reward_collapse": ("reward/mean", lambda k, old: 0.1, {54, 55, 56, 57}),
    "no_learning_signal": ("batch/zero_std_frac", lambda k, old: 1.0, {59}),
    "mismatch_spike": ("mismatch/prob_abs_diff_max", lambda k, old: 0.95, {50}),
    "clip_fraction_anomaly": ("clip/frac", lambda k, old: 0.5, {54}),
    "kl_explosion": ("kl/ref", lambda k, old: 2.0, {50}),
    "non_finite": ("grad/norm", lambda k, old: math.nan if k == 0 else old, {50}),
}
FAILURE_RUNS = 50


def test_every_rule_has_a_planted_failure():
    assert sorted(FAILURES) == HEALTH_RULES.names()


@pytest.mark.parametrize("rule", sorted(FAILURES))
def test_default_rule_fires_on_its_failure_at_the_expected_step(rule):
    key, value, expected = FAILURES[rule]
    first_steps = []
    for seed in range(FAILURE_RUNS):
        stream = plant(noisy_healthy("flat", STEPS, seed), FAILURE_AT, key, value)
        steps = [e.step for e in _events(stream, {"on_fail": "continue"}) if e.rule == rule]
        first_steps.append(steps[0] if steps else None)
    on_time = sum(step in expected for step in first_steps)
    # at least 95% of runs fire within the expected steps (all of them for the level rules)
    assert on_time >= 0.95 * FAILURE_RUNS, f"{rule}: first firing steps {Counter(first_steps)}"
