"""A workbench step of an ``engine: trl`` run spans several TRL optimizer steps (``algorithm.minibatches`` > 1): its
metrics reduce those steps' logs as the native loop defines them, not the last log alone.

Found by the engines_trl study (docs/findings.md): with DAPO's 16 minibatches the TRL arm logged the 16th update's
clip fraction (0.032 against the native 0.019, the mean over 16 updates), its last minibatch's entropy and one
update's wall time as the step's.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from workbench.execution.trl_callback import WorkbenchCallback, step_metrics
from workbench.health import HealthMonitor
from workbench.metrics.names import CLIP_FRAC, ENTROPY_MEAN, GRAD_NORM, LENGTH_MAX, PERF_STEP_S, REWARD_MEAN


def test_hand_computed_reduction():
    logs = [
        {REWARD_MEAN: 0.5, CLIP_FRAC: 0.0, PERF_STEP_S: 2.0, LENGTH_MAX: 12.0, "source/epoch": 0.1},  # + generation
        {CLIP_FRAC: 0.02, PERF_STEP_S: 0.5, "source/epoch": 0.2, "source/clip_ratio/low_min": 0.7},
        {CLIP_FRAC: 0.04, PERF_STEP_S: 0.5, "source/epoch": 0.3, "source/clip_ratio/low_min": 0.6},
    ]
    out = step_metrics(logs)
    assert out[REWARD_MEAN] == 0.5  # logged once (the generation's update): as is
    assert out[CLIP_FRAC] == pytest.approx(0.02)  # (0 + 0.02 + 0.04) / 3, as update.py means over updates
    assert out[PERF_STEP_S] == 3.0  # the step's wall time: 2.0 + 0.5 + 0.5
    assert out[LENGTH_MAX] == 12.0 and out["source/clip_ratio/low_min"] == 0.6
    assert out["source/epoch"] == 0.3  # a counter: its last value
    assert step_metrics([]) == {}
    assert math.isnan(step_metrics([{GRAD_NORM: 1.0}, {GRAD_NORM: math.nan}])[GRAD_NORM])  # a NaN is not dropped
    assert math.isnan(step_metrics([{LENGTH_MAX: 1.0}, {LENGTH_MAX: math.nan}])[LENGTH_MAX])  # not by max() either


class Sink:
    def __init__(self) -> None:
        self.rows: dict[int, dict[str, float]] = {}

    def log_metrics(self, metrics, step):
        self.rows[step] = dict(metrics)


def test_the_callback_logs_one_reduced_row_per_workbench_step():
    """Two workbench steps of 4 optimizer steps each, fed through the callback's TrainerCallback events with TRL's
    own log names: one row per workbench step, the clip fraction and entropy means over its 4 updates."""
    sink = Sink()
    callback = WorkbenchCallback.inside_run(
        sink, HealthMonitor.from_config(None), per_step=4, unavailable={}, evaluate=None, eval_every=0
    )
    args, control = SimpleNamespace(), SimpleNamespace(should_training_stop=False)
    for global_step in range(1, 9):
        first = global_step % 4 == 1
        logs = {
            "clip_ratio/region_mean": 0.01 * global_step,
            "entropy": 1.0 - 0.01 * global_step,
            "grad_norm": 1.0,
            "step_time": 4.0 if first else 1.0,
            **({"reward": 0.25 * (global_step // 4 + 1)} if first else {}),
        }
        callback.on_log(args, SimpleNamespace(global_step=global_step), control, logs=logs)
    assert sorted(sink.rows) == [0, 1]
    step0, step1 = sink.rows[0], sink.rows[1]
    assert step0[CLIP_FRAC] == pytest.approx(0.025) and step1[CLIP_FRAC] == pytest.approx(0.065)  # means of 1..4, 5..8
    assert step0[ENTROPY_MEAN] == pytest.approx(0.975) and step0[GRAD_NORM] == 1.0
    assert step0[PERF_STEP_S] == 7.0 and step1[PERF_STEP_S] == 7.0  # 4 + 1 + 1 + 1
    assert step0[REWARD_MEAN] == 0.25 and step1[REWARD_MEAN] == 0.5
