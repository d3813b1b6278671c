"""studies/qwen_gsm8k.yaml's shape on CPU, run and checked the same way by tests/chat/test_gpu_study.py (the main
environment's engines: HF sampler, torch learner) and tests/engines/test_gpu_study_engines.py (the shipped ones:
vLLM, DeepSpeed)."""

from __future__ import annotations

import json
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Run
from typer.testing import CliRunner

from tests.test_e2e_run import STEP_METRICS
from workbench.cli.main import app

ROOT = Path(__file__).parents[2]
STUDY = ROOT / "studies" / "qwen_gsm8k.yaml"
GSM8K_FIXTURE = Path(__file__).parent / "data" / "gsm8k_mini.jsonl"
# Sizes only: tokens, prompts, group, steps, eval set, micro-batch.
SMALL = [
    "sampler.max_new_tokens=24",
    "rollout.prompts_per_step=2",
    "rollout.group_size=2",
    "rollout.steps=2",
    "rollout.eval_every=2",
    "rollout.eval_size=4",
    "rollout.log_samples=4",
    "learner.micro_batch_size=2",
]


def invoke(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def run_gpu_study(model_dir: Path, workdir: Path, settings: list[str]) -> tuple[MlflowClient, list[Run]]:
    """Plan and run seed 0 of both variants on ``model_dir`` with ``settings`` and SMALL, check the runs
    (FINISHED, the canonical step metrics, the chat template and answer format, eval/problems.csv.gz), then
    that ``health`` and ``compare`` exit 0. Returns the MLflow client and the two runs for further checks."""
    settings = [
        f"model.path={model_dir}",
        f"task.path={GSM8K_FIXTURE}",
        f"task.eval_path={GSM8K_FIXTURE}",
        *settings,
        *SMALL,
    ]
    overrides = [arg for s in settings for arg in ("--set", s)]
    planned = invoke("plan", STUDY, "--only", "seed=0", *overrides)
    assert planned.exit_code == 0 and "note:" not in planned.output, planned.output  # every path is here
    result = invoke("run", STUDY, "--quiet", "--only", "seed=0", *overrides)
    assert result.exit_code == 0, result.output
    assert "warning:" not in result.output

    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("qwen-gsm8k")
    runs = client.search_runs([experiment.experiment_id], "tags.`workbench.role` = 'run'")
    assert sorted(r.data.tags["workbench.variant"] for r in runs) == ["dr_grpo", "grpo"]
    for run in runs:
        assert run.info.status == "FINISHED", run.info.run_name
        missing = [m for m in [*STEP_METRICS, "eval/accuracy"] if m not in run.data.metrics]
        assert not missing, (run.info.run_name, missing)
        assert run.data.params["model.chat_template"] == "auto"
        assert run.data.params["task.answer_format"] == "gsm8k"
        # the completions were scored against the problems' GSM8K solutions: every sampled row has one
        local = client.download_artifacts(run.info.run_id, "eval/problems.csv.gz", str(workdir / run.info.run_id))
        assert Path(local).stat().st_size > 0

    health = invoke("health", STUDY, "--format", "json")
    assert health.exit_code == 0, health.output
    assert len(json.loads(health.output)["runs"]) == 2
    compared = invoke("compare", STUDY, "--no-log", "--format", "json")
    assert compared.exit_code == 0, compared.output
    assert "dr_grpo" in compared.output
    return client, runs
