"""``verifier_timeouts``: its false alarms and its power on simulated timeout counts.

A step's ``reward/verify_timeout_frac`` is a count of timeouts among the batch's completions (128 on the
CPU default: 16 prompts × 8) over 128, binomial given the per-completion timeout rate. The measured
healthy rate on this CPU under load: 3 steps with one timeout each in 2,070 logged steps of the
spurious_rewards study (nice 19 beside another run), ~1.1e-5 per completion. The rule's documented figures
(``VerifierTimeoutsParams.max_frac``) are these tests' simulations.
"""

from __future__ import annotations

import numpy as np
import pytest

from workbench.health import HEALTH_RULES
from workbench.health.columns import Block
from workbench.metrics.names import REWARD_VERIFY_TIMEOUT_FRAC

BATCH = 128
RUNS = 2000


def _block(values: np.ndarray, start: int = 0) -> Block:
    """Steps ``start, start + 1, …`` with these per-step timeout shares."""
    n = len(values)
    return Block(
        steps=np.arange(start, start + n, dtype=np.int64),
        values={REWARD_VERIFY_TIMEOUT_FRAC: values.astype(float)},
        present={REWARD_VERIFY_TIMEOUT_FRAC: np.ones(n, dtype=bool)},
        numeric=np.ones(n, dtype=bool),
        non_finite={},
        names={REWARD_VERIFY_TIMEOUT_FRAC},
    )


def first_fire(fracs: np.ndarray) -> int | None:
    """The step the default rule first fires on one run's per-step timeout shares (None: never)."""
    rule = HEALTH_RULES.get("verifier_timeouts")()
    events = rule.observe_block(_block(fracs))
    return events[0][1].step if events else None


def simulate(rng: np.random.Generator, rate: np.ndarray) -> np.ndarray:
    """``RUNS`` runs of per-step timeout shares, the per-completion rate ``rate[step]``."""
    return rng.binomial(BATCH, np.broadcast_to(rate, (RUNS, len(rate)))) / BATCH


def test_one_timeout_now_and_then_is_not_an_alarm():
    # The measured case: a single timeout in a 128-batch (0.0078) moves the 10-step mean by 0.00078.
    fracs = np.zeros(100)
    fracs[[5, 40, 41, 90]] = 1 / BATCH  # even two in consecutive steps: 0.0016
    assert first_fire(fracs) is None


def test_hand_computed_window():
    # 0.06 from step 10: the 10-step mean (evaluated from step 9) is 0.006 at 10, 0.012 > 0.01 at 11 -> fires at 11.
    fracs = np.where(np.arange(30) >= 10, 0.06, 0.0)
    rule = HEALTH_RULES.get("verifier_timeouts")()
    events = rule.observe_block(_block(fracs))
    assert [(e.step, round(e.value, 12), e.threshold) for _, e in events] == [(11, 0.012, 0.01)]
    assert "mean of the last 10" in events[0][1].message


def test_block_and_step_forms_agree_on_simulated_runs():
    rng = np.random.default_rng(50)
    rate = np.linspace(0.0, 0.03, 120)  # crosses the limit: fires, clears never
    for fracs in simulate(rng, rate)[:20]:
        stepwise = HEALTH_RULES.get("verifier_timeouts")()
        by_step = [e.step for s, x in enumerate(fracs) if (e := stepwise.observe(s, {REWARD_VERIFY_TIMEOUT_FRAC: x}))]
        # the block form, fed in three blocks, carries its window across them
        blockwise = HEALTH_RULES.get("verifier_timeouts")()
        by_block = [
            e.step
            for a, b in ((0, 7), (7, 60), (60, 120))
            for _, e in blockwise.observe_block(_block(fracs[a:b], start=a))
        ]
        assert by_block == by_step


@pytest.mark.parametrize("rate", [1.1e-5, 1e-4, 1e-3])
def test_false_alarms_on_healthy_rates(rate):
    # 500-step runs at up to ~90x the measured healthy rate: the 10-step mean exceeds 0.01 only with
    # more than 12.8 timeouts in 1,280 completions, P < 1e-9 per window at 1e-3 (Poisson mean 1.28).
    rng = np.random.default_rng([50, int(rate * 1e6)])
    runs = simulate(rng, np.full(500, rate))
    fired = sum(first_fire(r) is not None for r in runs)
    assert fired == 0


def test_power_on_a_step_to_three_percent():
    # From step 100 the rate is 3%: the 10-step mean passes 1% after ~4 steps (0.03 · k/10 > 0.01, k > 3.3).
    rng = np.random.default_rng(51)
    onset = 100
    runs = simulate(rng, np.where(np.arange(200) >= onset, 0.03, 1.1e-5))
    delays = [first_fire(r) for r in runs]
    assert all(d is not None and d >= onset for d in delays)
    lag = np.array(delays) - onset
    assert lag.max() <= 8, np.bincount(lag)  # measured 2-8 steps: binomial noise around the 4th step
    assert 2 <= np.median(lag) <= 4


def test_power_on_a_slow_drift():
    # The rate rises linearly from 0 at step 100 to 5% at step 300 (0.025% per step): a slow drift,
    # crossing 1% at step 140. The running mean lags its window's middle by ~4.5 steps.
    rng = np.random.default_rng(52)
    onset = 100
    t = np.arange(400)
    runs = simulate(rng, np.clip((t - onset) / 200, 0.0, 1.0) * 0.05)
    delays = [first_fire(r) for r in runs]
    assert all(d is not None and d >= onset for d in delays)
    lag = np.array(delays) - onset
    assert 35 <= np.median(lag) <= 50, np.percentile(lag, [5, 50, 95])
    assert lag.max() <= 80, np.percentile(lag, [5, 50, 95])
