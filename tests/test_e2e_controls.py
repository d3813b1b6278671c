"""Issue #50's knobs end to end on the micro model, real MLflow store: the spurious-reward controls, the
pass@k eval (rollout.eval_samples) and the pass@k objective (preset grpo_passk). Plumbing and metrics, not
learning: two steps each."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.conftest import micro_run_config
from workbench.cli.main import app

pytestmark = pytest.mark.slow

CONTROLS = {"random": {"p": 0.5}, "format_only": {}, "incorrect_label": {"offset": 1}, "constant": {"value": 1.0}}
VARIANTS = {
    "truth": {},
    **{c: {"reward": {"control": c, "control_params": p}} for c, p in CONTROLS.items()},
    "pass_at_4": {"rollout": {"eval_samples": 4, "eval_temperature": 1.0}},
    "passk_objective": {"algorithm": {"preset": "grpo_passk"}},
}


def test_controls_and_pass_at_k_run_and_log(workdir):
    study = {"name": "controls", "base": micro_run_config(rollout={"steps": 2, "eval_every": 2}), "variants": VARIANTS}
    (workdir / "controls.yaml").write_text(yaml.safe_dump(study))
    result = CliRunner().invoke(app, ["run", str(workdir / "controls.yaml"), "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0, result.output

    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("controls")
    runs = {
        r.data.tags["workbench.variant"]: r
        for r in client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'run'")
    }
    assert set(runs) == set(VARIANTS) and all(r.info.status == "FINISHED" for r in runs.values())
    for control in CONTROLS:
        run = runs[control]
        assert run.data.tags["reward/control"] == control  # a control arm says so
        assert {"reward/control", "accuracy/train", "eval/accuracy"} <= set(run.data.metrics)
    assert "reward/control" not in runs["truth"].data.tags and "reward/control" not in runs["truth"].data.metrics
    constant = runs["constant"].data.metrics
    assert constant["reward/mean"] == 1.0 and constant["reward/std"] == 0.0  # every completion paid 1
    assert constant["batch/zero_std_frac"] == 1.0  # so no group carries a signal

    m = runs["pass_at_4"].data.metrics
    assert {"eval/pass_at_1", "eval/pass_at_2", "eval/pass_at_4", "eval/mean_at_n"} <= set(
        m
    ) and "eval/pass_at_8" not in m
    assert (
        m["eval/pass_at_1"] <= m["eval/pass_at_2"] <= m["eval/pass_at_4"] and m["eval/pass_at_1"] == m["eval/mean_at_n"]
    )
    assert "eval/pass_at_1" not in runs["truth"].data.metrics  # one answer per problem: today's eval
    path = client.download_artifacts(runs["pass_at_4"].info.run_id, "eval/problems.csv.gz", str(workdir))
    header = gzip.decompress(Path(path).read_bytes()).decode().splitlines()[0]
    assert header == "step,problem_id,correct,length,truncated,samples,n_correct"
    assert runs["passk_objective"].data.params["algorithm.estimator"] == "grpo_passk"

    # the reader keeps the counts (compare's final:eval/pass_at_k interval over problems reads them)
    from workbench.results.reader import StudyReader

    reader = StudyReader(f"sqlite:///{workdir / 'mlflow.db'}", cache_dir=False)
    _, frame = reader.load_runs("controls")
    rows = reader.problem_results(frame)
    mine = rows[rows["run_id"] == runs["pass_at_4"].info.run_id]
    assert len(mine) and (mine["samples"] == 4).all() and mine["n_correct"].between(0, 4).all()
    assert rows[rows["run_id"] == runs["truth"].info.run_id]["n_correct"].isna().all()  # one answer: no count

    # an export keeps them: reloaded into a fresh store, the pass@4 run's table has the same counts
    from workbench.results.export import export_study, load_export

    export_study(f"sqlite:///{workdir / 'mlflow.db'}", "controls", workdir / "export")
    fresh = f"sqlite:///{workdir / 'fresh.db'}"
    load_export(workdir / "export", fresh)
    again = StudyReader(fresh, cache_dir=False)
    _, reloaded = again.load_runs("controls")
    back = again.problem_results(reloaded)
    ids = dict(zip(reloaded["run_id"], reloaded["variant"], strict=True))
    back = back[back["run_id"].map(ids) == "pass_at_4"]
    key = ["step", "problem_id"]
    assert (
        back.sort_values(key)[["n_correct", "samples"]].to_numpy().tolist()
        == mine.sort_values(key)[["n_correct", "samples"]].to_numpy().tolist()
    )
