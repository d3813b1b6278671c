"""Block-by-block health (``observe_all``, health/columns.py) == ``observe`` step by step.

The column form of every rule must give the same events, at the same steps, with the same words,
the same report and the same rule state as the step-by-step rules: on the hand-computed cases, on
planted failures in noisy runs, on random streams (hypothesis), on long autocorrelated histories
where the trend rules evaluate thousands of times, at every block size (1 = each step its own
block). The trend kernels are batch-invariant, so a row gives the same bits alone or in a batch.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.health import HEALTH_RULES, HealthMonitor, HealthRule, Reading
from workbench.health.trend import mean_shift_se, slope_tests

from .autocorrelated import ar1
from .streams import noisy_healthy, plant
from .test_monitor import CONFIGS, streams
from .test_rules import CASES, FAILURE_AT, FAILURES

BLOCKS = (1, 5, 64, 8192)


def step_by_step(stream, cfg=None) -> HealthMonitor:
    monitor = HealthMonitor.from_config(cfg)
    for step, metrics in stream:
        monitor.observe(step, metrics)
    return monitor


def rule_state(monitor: HealthMonitor) -> dict[str, dict]:
    """Every rule's own state (streaks, baselines, windows), to compare beyond the report."""

    def plain(v):
        if hasattr(v, "values") and hasattr(v, "critical"):  # a WindowTrend or an ExpandingTrend
            return list(v.values)
        return list(v) if hasattr(v, "maxlen") else v

    return {name: {k: plain(v) for k, v in vars(rule).items() if k != "params"} for name, rule in monitor.rules.items()}


def assert_same(stream, cfg=None, blocks=BLOCKS) -> HealthMonitor:
    reference = step_by_step(stream, cfg)
    for size in blocks:
        got = HealthMonitor.from_config(cfg).observe_all(stream, block_steps=size)
        assert repr(got.events) == repr(reference.events), size  # repr: a NaN value equals no other NaN
        assert got.report() == reference.report(), size
        assert got.status == reference.status and got.should_stop == reference.should_stop
        assert repr(rule_state(got)) == repr(rule_state(reference)), size  # repr: NaN == NaN
    return reference


@pytest.mark.parametrize("rule", sorted(CASES))
def test_hand_computed_cases_give_the_same_events_block_by_block(rule):
    stream, step, _, _ = CASES[rule]
    reference = assert_same(stream)
    assert [e.step for e in reference.events] == [step]


@pytest.mark.parametrize("rule", sorted(FAILURES))
def test_planted_failures_in_noisy_runs_give_the_same_events(rule):
    metric, value, _ = FAILURES[rule]
    for seed in range(3):
        stream = plant(noisy_healthy("improving", n=160, seed=seed), FAILURE_AT, metric, value)
        assert_same(stream)


def test_blocks_then_steps_continue_as_steps_alone():
    # the rules' state after a block is the state after its steps: observing on, step by step, agrees
    stream = plant(noisy_healthy("flat", n=300, seed=4), 200, "reward/mean", lambda k, old: 0.1)
    reference = step_by_step(stream)
    monitor = HealthMonitor.from_config(None).observe_all(stream[:150], block_steps=64)
    for step, metrics in stream[150:]:
        monitor.observe(step, metrics)
    assert monitor.report() == reference.report()
    assert [e.rule for e in reference.events] == ["reward_collapse"]


# test_monitor's configs, and rules whose column form takes another branch: non_finite on named keys,
# mismatch_bands with a band switched off
COLUMN_CONFIGS = st.one_of(
    CONFIGS,
    st.just(
        {
            "on_fail": "continue",
            "rules": {
                "non_finite": {"keys": ["loss/policy", "grad/norm", "entropy/mean"]},
                "mismatch_bands": {"is_ratio_mean": None, "min_ess": None},
            },
        }
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=streams(), cfg=COLUMN_CONFIGS, size=st.integers(1, 25))
def test_random_streams_give_the_same_report(stream, cfg, size):
    assert_same(stream, cfg, blocks=(size,))


def long_history(seed: int, n: int = 3000) -> list[tuple[int, dict[str, float]]]:
    """Autocorrelated reward and length ratio (φ 0.8), every few hundred steps a collapse or a
    drift, a growing mismatch, a NaN now and then, and gaps where metrics are missing: the trend
    rules evaluate at nearly every step, with full and filling windows, across many blocks."""
    rng = np.random.default_rng(seed)
    noise = ar1(rng, 2, n, 0.8, 0.05)
    t = np.arange(n)
    reward = 0.5 + noise[0] - np.where((t % 700 > 500) & (t % 700 < 560), 0.4, 0.0)
    ratio = 1.6 + noise[1] + np.where(t % 900 > 700, 0.03 * (t % 900 - 700), 0.0)
    kl = rng.uniform(0, 0.005, n) + np.where(t % 1000 > 800, 0.0005 * (t % 1000 - 800), 0.0)
    out = []
    for s in range(n):
        m = {
            "reward/mean": float(reward[s]),
            "length/correct_mean": 20.0,
            "length/incorrect_mean": 20.0 * ratio[s],
            "mismatch/kl": float(kl[s]),
            "entropy/mean": 1.0 - s / (2 * n),
            "clip/frac": float(rng.uniform(0, 0.4)),
            "loss/policy": 0.01,
        }
        if s % 97 == 13:
            m["grad/norm"] = math.nan
        if s % 251 < 20:  # a stretch where the reward was not logged
            del m["reward/mean"]
        out.append((3 * s + 1, m))
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_long_autocorrelated_histories_give_the_same_events(seed):
    stream = long_history(seed)
    reference = assert_same(stream, {"on_fail": "continue"}, blocks=(1000, 8192))
    fired = {e.rule for e in reference.events}
    assert {"reward_collapse", "incorrect_length_gap", "non_finite"} <= fired, fired
    assert reference.rules["reward_collapse"].evaluated > 2000


def test_trend_kernels_give_a_row_the_same_bits_alone_or_in_a_batch():
    rng = np.random.default_rng(3)
    for n in (6, 11, 60, 65, 150, 166):
        rows = ar1(rng, 300, n, 0.7, 0.1) * 10.0 ** rng.uniform(-3, 3, size=(300, 1)) + rng.normal(size=(300, 1))
        batch = mean_shift_se(rows, 5, min(n, 60))
        tests = slope_tests(rows, 3, 4.5)
        for i in range(len(rows)):
            assert mean_shift_se(rows[i], 5, min(n, 60)) == batch[i]
            alone = slope_tests(rows[i][None, :], 3, 4.5)
            assert alone.at(0) == tests.at(i)
            assert rows[i].mean() == rows.mean(axis=-1)[i]


class Spiky(HealthRule):
    """A rule with no column form: the block keeps its rows and the rule goes step by step."""

    name = "spiky"
    watches = ("grad/norm",)

    def update(self, metrics):
        x = metrics.get("grad/norm")
        return None if x is None else Reading(x > 1.5, "grad/norm", x, 1.5, f"grad/norm = {x}")


def test_a_rule_without_a_column_form_is_observed_step_by_step():
    stream = noisy_healthy("flat", n=120, seed=2)

    def rules():
        return [Spiky(patience=1), HEALTH_RULES.get("clip_fraction_anomaly")()]

    reference = HealthMonitor(rules())
    for step, metrics in stream:
        reference.observe(step, metrics)
    got = HealthMonitor(rules()).observe_all(stream, block_steps=16)
    assert got.report() == reference.report() and got.events
