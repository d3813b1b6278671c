"""End to end: a study with ``replicate: {cold_start: 2}`` (two priming arms, 2 seeds, the micro model) runs to
FINISHED with two independent priming SFTs per arm, and ``compare`` decides over checkpoints."""

from __future__ import annotations

import json

import pytest
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.conftest import micro_run_config
from workbench.cli.main import app

pytestmark = pytest.mark.slow


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_a_study_with_two_cold_starts_per_arm_runs_and_compares_over_checkpoints(workdir, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    study = workdir / "study.yaml"
    study.write_text(
        yaml.safe_dump(
            {
                "name": "cs",
                "base": micro_run_config(),
                "seeds": [0, 1],
                "replicate": {"cold_start": 2},
                "variants": {
                    "worked": {"data": {"prime": {"mix": {"worked": 1.0}}}},
                    "terse": {"data": {"prime": {"mix": {"terse": 1.0}}}},
                },
                "compare": {"baseline": "worked", "metrics": ["final_eval_accuracy"]},
            }
        )
    )
    ran = invoke("run", study, "--quiet")
    assert ran.exit_code == 0, ran.output

    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("cs")
    runs = client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'run'")
    assert len(runs) == 8 and {r.info.status for r in runs} == {"FINISHED"}
    names = sorted(r.info.run_name for r in runs)
    assert names == sorted(f"{v}/cold_start={c}/seed={s}" for v in ("worked", "terse") for c in (0, 1) for s in (0, 1))
    assert {r.data.tags["workbench.arm"] for r in runs} == {"worked", "terse"}  # a cold start is not an arm
    by_name = {r.info.run_name: r for r in runs}
    assert by_name["terse/cold_start=1/seed=0"].data.params["model.cold_start"] == "1"
    assert "model.cold_start" not in by_name["terse/cold_start=0/seed=0"].data.params  # index 0: as before
    # two priming SFTs per arm, each its own model: their cold-start losses differ; the seeds of one share it
    loss = {name: client.get_metric_history(r.info.run_id, "cold_start/loss")[0].value for name, r in by_name.items()}
    for arm in ("worked", "terse"):
        assert loss[f"{arm}/cold_start=0/seed=0"] == loss[f"{arm}/cold_start=0/seed=1"]
        assert loss[f"{arm}/cold_start=0/seed=0"] != loss[f"{arm}/cold_start=1/seed=0"]

    md = invoke("compare", study, "--no-log", "--format", "md")
    assert md.exit_code == 0, md.output
    headline = md.stdout.splitlines()[0]
    assert headline.startswith("terse vs worked: ") and "with 2 checkpoints" in headline, headline
    assert (
        "Replication: the checkpoint is the unit. Each arm has 2 independent cold starts (checkpoints) with 2 "
        "RL seeds each" in md.stdout
    )
    assert "| n_checkpoints |" in md.stdout
    table = json.loads(invoke("compare", study, "--no-log", "--format", "json").stdout)
    assert table["settings"]["unit"] == "checkpoint"
    assert [r["n_seeds"] for r in table["rows"]] == [2, 2]  # two checkpoints per arm, not four runs
