"""The mismatch rules' false-alarm rates on healthy token streams and their detection of planted failures.

tests/health/mismatch_sim.py simulates 100 runs × 200 steps of sampled tokens (fp32 and bf16 samplers,
and four failures planted at step 100). Each rule, with its default parameters, must fire in at most 5%
of the healthy 200-step runs and catch its planted failures in at least 95% of runs, within
``DETECT_WITHIN`` steps of the onset (and not before it). Monte-Carlo error: an observed rate over 100
runs has standard error √(p(1−p)/100), ≤ 2.2 points at 5%; the measured rates (printed, ``-s``) sit far
enough from both bounds that the verdict does not depend on the draw.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
import torch

from workbench.health import HEALTH_RULES
from workbench.metrics.mismatch import mismatch_metrics

from .mismatch_sim import (
    FAILURES,
    HEALTHY,
    ONSET,
    RUNS,
    STEPS,
    batched_rule_metrics,
    simulate_deltas,
)

MAX_FALSE_ALARM = 0.05
MIN_DETECTION = 0.95
# Steps after the onset within which a catch counts: a leaked setting shows at once; a stopped sync as the
# copy ages; a sharpening model as its logits grow (×1.03 per step: ×5.9 after 60 steps).
DETECT_WITHIN = {"temperature": 10, "top_k": 10, "stale": 30, "bf16_drift": 60}
MISMATCH_RULES = ("mismatch_bands", "mismatch_tail", "mismatch_growth")
# Which planted failures each rule is built to catch. The level rules (bands, tail) see an abrupt change of
# sampler; a slowly growing gap they see only once it is large (the growth rule's job).
CATCHES = {
    "mismatch_bands": ("temperature", "top_k", "stale"),
    "mismatch_tail": ("temperature", "top_k", "stale"),
    "mismatch_growth": ("stale", "bf16_drift"),
}


@cache
def metric_streams(scenario: str) -> dict[str, np.ndarray]:
    """Per metric, the ``[RUNS, STEPS]`` values the runs of ``scenario`` log (seed 0)."""
    columns: dict[str, list[np.ndarray]] = {}
    for _, delta in simulate_deltas(scenario):
        for name, values in batched_rule_metrics(delta).items():
            columns.setdefault(name, []).append(values.numpy())
    return {name: np.stack(cols, axis=1) for name, cols in columns.items()}


@cache
def first_firing(rule: str, scenario: str) -> tuple[int | None, ...]:
    """Per run, the first step at which ``rule`` (defaults) fires, or None."""
    streams = {name: values.tolist() for name, values in metric_streams(scenario).items()}
    firsts = []
    for run in range(RUNS):
        monitor_rule = HEALTH_RULES.get(rule)()
        first = None
        for step in range(STEPS):
            if monitor_rule.observe(step, {k: v[run][step] for k, v in streams.items()}) is not None:
                first = step
                break
        firsts.append(first)
    return tuple(firsts)


def test_the_simulation_logs_what_the_metrics_module_computes():
    torch.manual_seed(0)
    for scenario in ("bf16", "temperature"):
        _, delta = next(d for d in simulate_deltas(scenario, runs=3, steps=ONSET + 1) if d[0] == ONSET)
        batched = batched_rule_metrics(delta)
        # Δ as learner − sampler logprobs of zero sampler logprob: the module sees the same ratios
        ours = mismatch_metrics(delta[1:2], torch.zeros_like(delta[1:2]), torch.ones_like(delta[1:2]))
        for name, values in batched.items():
            # both float64 means over 64 tokens of values ≤ e^1: 64·eps64·3 ≈ 4e-14
            assert ours[name] == pytest.approx(float(values[1]), abs=1e-12), name


@pytest.mark.parametrize("scenario", HEALTHY)
@pytest.mark.parametrize("rule", MISMATCH_RULES)
def test_rule_rarely_fires_on_healthy_runs(rule, scenario):
    fired = sum(step is not None for step in first_firing(rule, scenario)) / RUNS
    print(f"\n{rule}: false alarms on healthy {scenario} sampler runs ({STEPS} steps): {fired:.1%} of {RUNS}")
    assert fired <= MAX_FALSE_ALARM


@pytest.mark.parametrize("rule,scenario", [(r, s) for r in MISMATCH_RULES for s in CATCHES[r]])
def test_rule_catches_its_planted_failure_soon_after_the_onset(rule, scenario):
    firsts = first_firing(rule, scenario)
    within = DETECT_WITHIN[scenario]
    on_time = sum(step is not None and ONSET <= step < ONSET + within for step in firsts) / RUNS
    delays = [step - ONSET for step in firsts if step is not None and step >= ONSET]
    print(
        f"\n{rule}: detects {scenario} in {on_time:.1%} of {RUNS} runs within {within} steps "
        f"(median delay {np.median(delays) if delays else float('nan'):.0f} steps)"
    )
    assert on_time >= MIN_DETECTION


def test_scenarios_cover_the_failures():
    assert set(FAILURES) == {"temperature", "top_k", "stale", "bf16_drift"}
