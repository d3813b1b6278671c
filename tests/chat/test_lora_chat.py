"""LoRA on a chat model directory (``model.path``): the GSM8K study's run on the Qwen2 (GQA, q/k/v biases,
tied head) and Llama 3 (GQA, untied head) test models, with ``learner.lora`` on every linear layer, end to end:
FINISHED, the adapters' metrics logged, the adapters saved as the run's ``adapter/`` artifact."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.chat.gpu_study import GSM8K_FIXTURE, SMALL, STUDY
from tests.chat.test_gpu_study import CPU_ENGINES
from workbench.cli.main import app

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("model", ["qwen2_chat_dir", "llama3_chat_dir"])
def test_a_lora_run_on_a_chat_model_directory(model, request, workdir):
    directory = request.getfixturevalue(model)
    settings = [
        f"model.path={directory}",
        f"task.path={GSM8K_FIXTURE}",
        f"task.eval_path={GSM8K_FIXTURE}",
        *CPU_ENGINES,
        *SMALL,
        "learner.lora.rank=4",
        "learner.lora.alpha=8",
        "learner.lr=1e-3",
        "algorithm.kl_coef=0.01",
    ]  # the KL reference: the base under the adapters
    result = CliRunner().invoke(
        app,
        ["run", str(STUDY), "--only", "variant=grpo,seed=0", "--quiet", *[a for s in settings for a in ("--set", s)]],
    )
    assert result.exit_code == 0, result.output
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("qwen-gsm8k")
    (run,) = client.search_runs([experiment.experiment_id], "tags.`workbench.role` = 'run'")
    assert run.info.status == "FINISHED"
    assert run.data.params["learner.lora.rank"] == "4"
    assert run.data.metrics["lora/update_norm"] > 0 and 0 < run.data.metrics["lora/trainable_frac"] < 1
    assert {a.path for a in client.list_artifacts(run.info.run_id, "adapter")} == {
        "adapter/adapter_config.json",
        "adapter/adapter_model.safetensors",
    }
