"""What the import tests share: running the CLI in a subprocess and reading a store back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def workbench(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    """``workbench ARGS`` in a fresh process (the real CLI, its exit code and stderr)."""
    full_env = {**os.environ, "COLUMNS": "200", "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true", **(env or {})}
    full_env.pop("MLFLOW_TRACKING_URI", None)  # each test names its stores explicitly
    return subprocess.run(
        [sys.executable, "-m", "workbench.cli.main", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def sqlite_uri(path: Path) -> str:
    return f"sqlite:///{path}"


def child_runs(uri: str, study: str):
    """The study's child runs (``workbench.role=run``), as MLflow ``Run`` objects."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(study)
    assert exp is not None, f"no experiment {study!r} in {uri}"
    return client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'run'", max_results=1000)
