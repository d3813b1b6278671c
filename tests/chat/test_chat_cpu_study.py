"""The newcomer's walk down the real-model path (#53): `workbench chat-model` builds a small local chat model
and studies/chat_cpu.yaml runs on it without a single --set (the shipped GPU study needed 14)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from workbench.cli.main import app

ROOT = Path(__file__).parents[2]


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_chat_model_refuses_a_directory_with_files_in_one_line(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "config.json").write_text("{}")
    result = invoke("chat-model", tmp_path / "taken")
    assert result.exit_code == 2 and "exists and is not an empty directory" in result.output
    assert (tmp_path / "taken" / "config.json").read_text() == "{}"  # nothing overwritten
    bad = invoke("chat-model", tmp_path / "new", "--family", "gpt2")
    assert bad.exit_code == 2 and "--family: expected one of qwen2, llama3" in bad.output
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_the_cpu_chat_study_runs_without_overrides_on_a_built_chat_model(workdir):
    studies = workdir / "studies"  # the repository's layout: the study's paths are relative to its root
    studies.mkdir()
    for name in ("qwen_gsm8k.yaml", "chat_cpu.yaml"):
        shutil.copy(ROOT / "studies" / name, studies / name)
    shutil.copytree(ROOT / "studies" / "data", studies / "data")
    built = invoke("chat-model", ".workbench/chat-model")
    assert built.exit_code == 0, built.output
    assert (workdir / ".workbench" / "chat-model" / "tokenizer.json").is_file()

    result = invoke("run", "studies/chat_cpu.yaml", "--quiet")
    assert result.exit_code == 0, result.output
    assert "warning:" not in result.output
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("chat-cpu")
    runs = client.search_runs([experiment.experiment_id], "tags.`workbench.role` = 'run'")
    assert sorted(r.data.tags["workbench.variant"] for r in runs) == ["dr_grpo", "grpo"]
    assert all(r.info.status == "FINISHED" and r.data.params["model.chat_template"] == "auto" for r in runs)
