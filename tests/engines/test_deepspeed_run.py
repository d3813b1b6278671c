"""RL runs end to end with ``learner: {backend: deepspeed, zero_stage: 2}``, through the real
``execute_run`` and a real MLflow store; a DeepSpeed checkpoint resumes a killed run."""

from __future__ import annotations

from tests.engines.conftest import require_engine

require_engine("deepspeed")

import pytest
from mlflow import MlflowClient

from tests.execution_helpers import fast_run_config
from tests.resume_helpers import LENGTH_REWARD, check_resumed, interrupt_and_resume, resume_config
from tests.tolerance import order_tolerance
from workbench.config import RunConfig, deep_merge
from workbench.execution.run import execute_run
from workbench.tracking.store import resolve_tracking_uri

ZERO2 = {"backend": "deepspeed", "zero_stage": 2}
# Canonical per-step metrics (docs/metrics.md) the learner side produces, plus the rollout side's.
STEP_METRICS = [
    "grad/norm",
    "loss/policy",
    "entropy/mean",
    "clip/frac",
    "clip/frac_low",
    "clip/frac_high",
    "mismatch/prob_abs_diff_mean",
    "mismatch/prob_abs_diff_max",
    "mismatch/kl",
    "reward/mean",
    "accuracy/train",
    "length/mean",
    "perf/step_s",
    "perf/learn_tokens_per_s",
    "health/status",
]


def test_rl_steps_with_the_deepspeed_zero2_learner_log_the_canonical_metrics(workdir):
    """3 RL steps, micro-batches of 6 (16 sequences: accumulation over 3 micro-batches), KL to a reference."""
    cfg = RunConfig.model_validate(
        deep_merge(
            fast_run_config(steps=3),
            {"learner": ZERO2 | {"micro_batch_size": 6}, "algorithm": {"kl_coef": 0.01}, "reward": LENGTH_REWARD},
        )
    )
    outcome = execute_run(cfg, study="ds-e2e", variant="zero2", label="zero2")
    assert outcome.status == "FINISHED", outcome.error
    assert outcome.steps == 3
    client = MlflowClient(resolve_tracking_uri())
    run = client.get_run(outcome.run_id)
    assert run.data.params["learner.backend"] == "deepspeed" and run.data.params["learner.zero_stage"] == "2"
    for key in STEP_METRICS + ["kl/ref"]:
        logged = {m.step for m in client.get_metric_history(outcome.run_id, key)}
        assert {0, 1, 2} <= logged, key  # every RL step (some also at the final eval-only step 3)
    norms = [m.value for m in client.get_metric_history(outcome.run_id, "grad/norm")]
    assert all(0 < v < float("inf") for v in norms)
    assert run.data.tags["workbench.health"] == "ok"


def test_killed_zero2_run_resumes_from_its_deepspeed_checkpoint(workdir):
    """Ctrl-C after step 1 (run KILLED), run again: it starts at step 2 from `engine.load_checkpoint`, and
    every step agrees with the uninterrupted run up to float32 rounding. Bitwise is not promised:
    DeepSpeed's CPU Adam kernel keeps a process-wide β^t that it advances by multiplication for consecutive
    steps and recomputes with pow() after a jump, as when an engine resumes at step k+1 or two engines step
    in turn (≈1 ulp in the bias correction; test_deepspeed_learner shows it)."""
    record = interrupt_and_resume(resume_config(ZERO2), crash_after=1, error=KeyboardInterrupt)
    assert record.first.status == "KILLED"
    # Adam's bias correction off by ≈1 ulp per step → weights off by ~lr·eps; the metrics that follow are
    # sums of ≤ 400 operands (16 sequences × 14 positions + reduction depth ≈ 170): 400 × eps32, relative
    # (tests/tolerance.py).
    check_resumed(record, crash_after=1, tolerance=order_tolerance(400, 1.0))
    worst = max(abs(record.resumed[k][s] - record.reference[k][s]) for k in record.reference for s in (2, 3))
    print(f"largest |resumed - uninterrupted| at steps 2-3: {worst:.2e}")


@pytest.mark.parametrize("sampler_dtype", ["float32", "bfloat16"])
def test_zero3_run_finishes_with_the_hf_sampler_on_the_partitioned_module(workdir, sampler_dtype):
    """ZeRO-3 through the loop as it is: in float32 the HF sampler samples with learner.model
    (gathered by ZeRO-3's hooks); in bfloat16 it keeps its own plain copy, built from the gathered
    weights (a deepcopy would drag ZeRO-3's hooks along). The KL reference is a full copy."""
    cfg = RunConfig.model_validate(
        deep_merge(
            fast_run_config(steps=2),
            {
                "sampler": {"dtype": sampler_dtype},
                "learner": {
                    "backend": "deepspeed",
                    "zero_stage": 3,
                    "deepspeed_config": {"zero_optimization": {"stage3_param_persistence_threshold": 0}},
                },
                "algorithm": {"kl_coef": 0.01},
            },
        )
    )
    outcome = execute_run(cfg, study="ds-zero3", variant="zero3", label="zero3")
    assert outcome.status == "FINISHED", outcome.error
    assert outcome.steps == 2
