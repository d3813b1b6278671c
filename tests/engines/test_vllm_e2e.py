"""End to end with the vLLM sampler: `workbench run` trains a few RL steps and MLflow has the metrics.

The real path (study YAML -> execute -> train loop -> vLLM sampling -> torch learner -> in-place
sync, verified every step), read back from the MLflow store it wrote.
"""

from __future__ import annotations

import pytest
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.conftest import micro_run_config
from tests.engines.conftest import require_engine

require_engine("vllm")

from tests.engines.test_vllm_sampler import ENGINE_MODEL, FP32_TOLERANCE
from workbench.cli.main import app

pytestmark = pytest.mark.slow

STEP_METRICS = [
    "reward/mean",
    "accuracy/train",
    "entropy/mean",
    "length/mean",
    "mismatch/prob_abs_diff_mean",
    "mismatch/prob_abs_diff_max",
    "mismatch/kl",
    "loss/policy",
    "grad/norm",
    "perf/sample_tokens_per_s",
    "health/status",
]


def test_rl_steps_with_vllm_sampling_log_the_canonical_metrics(workdir):
    steps = 2
    config = micro_run_config(
        model=ENGINE_MODEL, sampler={"backend": "vllm", "max_new_tokens": 8}, rollout={"steps": steps, "eval_every": 2}
    )
    study = workdir / "study.yaml"
    study.write_text(yaml.safe_dump({"name": "vllm-e2e", "base": config}))
    result = CliRunner().invoke(app, ["run", str(study), "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "FINISHED" in result.output

    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("vllm-e2e")
    (run,) = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'run'")
    assert run.info.status == "FINISHED"
    assert run.data.params["sampler.backend"] == "vllm"
    history = {key: {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)} for key in STEP_METRICS}
    for key, values in history.items():
        assert set(range(steps)) <= set(values), key
    # the sampler was synced (and verified) after step 0's update, so step 1 samples on-policy too
    for step in range(steps):
        assert history["mismatch/prob_abs_diff_max"][step] < FP32_TOLERANCE  # |Δp| ≤ |Δlogp|: its analysis
    assert {m.step for m in client.get_metric_history(run.info.run_id, "eval/accuracy")} == {0, 2}
