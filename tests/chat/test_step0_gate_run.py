"""The step-0 gate end to end: a `workbench run` whose sampler leaks the model directory's generation
settings stops before its first update, FAILED, with the gate's one line in the terminal and on the run.

The planted fault: a model directory whose generation_config.json sets repetition_penalty (as many
chat checkpoints ship), sampled with transformers' generate without the sampler's guard
(``run_config_only``, which pins generate to the run's own settings; a sampler or engine without it
applies the directory's defaults, e.g. vLLM's ``generation_config="auto"``)."""

from __future__ import annotations

import contextlib
import json
import shutil

from mlflow import MlflowClient
from typer.testing import CliRunner

import workbench.rollout.hf as hf
from tests.chat.gpu_study import GSM8K_FIXTURE, SMALL, STUDY
from tests.chat.test_gpu_study import CPU_ENGINES
from workbench.cli.main import app


def test_a_run_whose_sampler_leaks_a_repetition_penalty_stops_at_step_0(qwen2_chat_dir, workdir, monkeypatch):
    leaky = workdir / "qwen2-leaky"
    shutil.copytree(qwen2_chat_dir, leaky)
    config = json.loads((leaky / "generation_config.json").read_text())
    (leaky / "generation_config.json").write_text(json.dumps({**config, "repetition_penalty": 1.3}))
    monkeypatch.setattr(hf, "run_config_only", lambda model, tokenizer: contextlib.nullcontext())
    settings = [
        f"model.path={leaky}",
        f"task.path={GSM8K_FIXTURE}",
        f"task.eval_path={GSM8K_FIXTURE}",
        *CPU_ENGINES,
        *SMALL,
        "sampler.decode=generate",
    ]
    result = CliRunner().invoke(
        app, ["run", str(STUDY), "--only", "variant=grpo,seed=0", *[a for s in settings for a in ("--set", s)]]
    )
    assert result.exit_code != 0, result.output
    # the run's line in the progress log says why, whole, on one line
    (failed,) = [line for line in result.output.splitlines() if " FAILED grpo/seed=0 " in line]
    assert "MismatchGateError: step-0 mismatch gate" in failed and "repetition_penalty" in failed, failed

    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("qwen-gsm8k")
    (run,) = client.search_runs([experiment.experiment_id], "tags.`workbench.role` = 'run'")
    assert run.info.status == "FAILED"
    assert "step-0 mismatch gate" in run.data.tags["workbench.error"]
    assert "train/loss" not in run.data.metrics  # stopped before the first update
