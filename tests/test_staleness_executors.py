"""A staleness study like any other (issue #46): under the Ray executor and under `--until-decided`, each run
key runs exactly once (a second invocation skips it), the pipelined arm logs its lag, and the study's export
loads into a fresh store that prints the same `compare` table."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from tests.execution_helpers import child_runs, fast_run_config, install_empty_mlflow_db, statuses_by_key
from tests.ray_cluster import ray_cluster  # noqa: F401 - a fixture
from workbench.cli.main import app
from workbench.study import expand, load_study

pytestmark = pytest.mark.slow


def invoke(*args, env=None):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False, env=env)


def write_staleness_study(path: Path, name: str, seeds, **extra) -> Path:
    """The synchronous arm and k = 1, two steps each on the micro model."""
    data = {
        "name": name,
        "base": fast_run_config(2),
        "variants": {"s0": {}, "s1": {"rollout": {"staleness": 1}}},
        "seeds": list(seeds),
        "compare": {"baseline": "s0"} | extra.pop("compare", {}),
    }
    path.write_text(yaml.safe_dump(data | extra, sort_keys=False))
    return path


def check_once_each(uri: str, path: Path, name: str) -> list:
    """Every run key in the store FINISHED exactly once, the study file's among them; the k = 1 runs logged
    lags 0 then 1."""
    client = MlflowClient(uri)
    runs = child_runs(client, name)
    statuses = statuses_by_key(runs)
    assert {spec.run_key for spec in expand(load_study(path))} <= set(statuses)
    assert statuses == dict.fromkeys(statuses, ["FINISHED"]), statuses
    for run in runs:
        lags = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "offpolicy/staleness_max")]
        assert lags == ([(0, 0.0), (1, 1.0)] if run.data.tags["workbench.variant"] == "s1" else []), lags
    return runs


def check_export_reloads_the_same_table(workdir: Path, path: Path, name: str, uri: str) -> None:
    export_dir, fresh = workdir / "export", f"sqlite:///{workdir / 'fresh.db'}"
    wrote = invoke("export", path, "--to", export_dir, "--tracking-uri", uri)
    assert wrote.exit_code == 0, wrote.output
    loaded = invoke("import", "workbench", export_dir, "--tracking-uri", fresh)
    assert loaded.exit_code == 0, loaded.output
    tables = [invoke("compare", path, "--no-log", "--format", "md", "--tracking-uri", u) for u in (uri, fresh)]
    assert all(t.exit_code == 0 for t in tables), [t.output for t in tables]
    assert tables[0].stdout == tables[1].stdout and "s1" in tables[1].stdout


def test_a_staleness_study_on_a_ray_cluster_runs_each_key_once_and_exports(workdir, ray_cluster):  # noqa: F811 - the fixture imported above
    uri = install_empty_mlflow_db(workdir)
    path = write_staleness_study(workdir / "study.yaml", "stale-ray", seeds=[0, 1])
    result = invoke("run", path, "--executor", "ray", "--address", ray_cluster.address, "--quiet")
    assert result.exit_code == 0, result.output
    assert len(check_once_each(uri, path, "stale-ray")) == 4
    again = invoke("run", path, "--executor", "ray", "--address", ray_cluster.address, "--quiet")
    assert again.exit_code == 0 and again.output.count("SKIPPED") == 4, again.output
    check_once_each(uri, path, "stale-ray")
    check_export_reloads_the_same_table(workdir, path, "stale-ray", uri)


def test_a_staleness_study_until_decided_runs_each_key_once_and_exports(workdir):
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    path = write_staleness_study(
        workdir / "study.yaml", "stale-seq", seeds=[0], compare={"sequential": {"looks": [2, 3]}}
    )
    first = invoke("run", path, "--until-decided", "--max-seeds", "2", "--quiet")
    assert first.exit_code == 0, first.output
    assert "look 1 of 1: 2 seeds" in first.output, first.output  # --max-seeds 2 keeps the look at 2
    runs = check_once_each(uri, path, "stale-seq")
    assert sorted(r.data.tags["workbench.seed"] for r in runs) == ["0", "0", "1", "1"]  # the look's 2 seeds per arm
    again = invoke("run", path, "--until-decided", "--max-seeds", "2", "--quiet")
    assert again.exit_code == 0 and "SKIPPED" in again.output, again.output
    assert len(check_once_each(uri, path, "stale-seq")) == 4
    check_export_reloads_the_same_table(workdir, path, "stale-seq", uri)
