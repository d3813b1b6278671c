"""A study tracked in a real PostgreSQL store whose role has a password: the password appears in
no command output, no MLflow param, tag or artifact, and not on the `mlflow server` command line."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from tests.conftest import micro_run_config
from tests.postgres import _free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def store_with_password(postgres_url):
    """(tracking URI with a password, the password): a new role and database on the test server."""
    import psycopg

    password = "Pw" + secrets.token_hex(12)
    suffix = f"{os.getpid()}_{int(time.time())}"
    role, database = f"wb_secret_{suffix}", f"mlflow_secret_{suffix}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        conn.execute(f'CREATE DATABASE "{database}" OWNER {role}')
    host = postgres_url.split("@", 1)[1].rsplit("/", 1)[0]
    uri = f"postgresql://{role}:{password}@{host}/{database}"
    MlflowClient(uri).search_experiments()  # MLflow's schema, created with the role's credentials
    return uri, password


def cli(workdir: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return subprocess.run(
        [sys.executable, "-m", "workbench.cli.main", *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def every_artifact(client: MlflowClient, run_id: str, dest: Path) -> list[Path]:
    local = Path(client.download_artifacts(run_id, "", str(dest / run_id)))
    return [p for p in local.rglob("*") if p.is_file()]


def test_the_store_password_appears_in_no_output_param_tag_or_artifact(workdir, store_with_password):
    uri, password = store_with_password
    study = workdir / "s.yaml"
    study.write_text(yaml.safe_dump({"name": "secret-study", "base": micro_run_config(tracking={"uri": uri})}))

    outputs = []
    for args in (["run", "s.yaml", "--quiet"], ["plan", "s.yaml"], ["health", "s.yaml", "--format", "json"]):
        result = cli(workdir, *args)
        outputs.append(result.stdout + result.stderr)
        assert result.returncode == 0, outputs[-1]
    assert all(password not in out for out in outputs)
    host_part = uri.split("@", 1)[1]
    assert f":***@{host_part}" in outputs[0]  # the summary names the study's store (redacted), not ./mlflow.db
    assert "mlflow.db" not in outputs[0] and not (workdir / "mlflow.db").exists()

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("secret-study")
    assert password not in str(experiment.tags)
    runs = client.search_runs([experiment.experiment_id])
    assert {r.data.tags.get("workbench.role") for r in runs} == {"study", "run"}
    for run in runs:
        assert password not in str(run.data.params) and password not in str(run.data.tags), run.info.run_id
        for path in every_artifact(client, run.info.run_id, workdir / "downloads"):
            assert password.encode() not in path.read_bytes(), path
    child = next(r for r in runs if r.data.tags.get("workbench.role") == "run")
    assert child.data.params["tracking.uri"] == uri.replace(password, "***")  # stored, redacted


def _descendants(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children")
    found = [int(c) for c in children.read_text().split()] if children.exists() else []
    return found + [d for c in found for d in _descendants(c)]


def test_workbench_ui_passes_the_store_to_mlflow_server_through_its_environment(workdir, store_with_password):
    uri, password = store_with_password
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli.main", "ui", "--tracking-uri", uri, "--port", str(_free_port())],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        link = proc.stdout.readline()  # the study's URL alone on the first line, once the server answers
        banner = proc.stdout.readline()  # then "MLflow UI at ... (store <redacted URI>; ...)"
        assert password not in link
        assert "MLflow UI" in banner and password not in banner and ":***@" in banner, banner
        seen, argv = set(), []
        deadline = time.monotonic() + 20  # the server and its workers start within this (or not at all)
        while time.monotonic() < deadline:
            for pid in _descendants(proc.pid):
                if pid not in seen:
                    try:
                        argv.append(Path(f"/proc/{pid}/cmdline").read_bytes())
                        seen.add(pid)
                    except OSError:  # exited meanwhile
                        pass
            time.sleep(0.5)
        assert argv and any(b"mlflow" in a and b"server" in a for a in argv)
        assert all(password.encode() not in a for a in argv)
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    assert password not in rest
