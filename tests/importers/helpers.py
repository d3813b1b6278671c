"""What the import tests share: running the CLI in a subprocess and reading a store back."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
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


def import_args(
    source: str,
    *paths: object,
    study: str,
    dst: str,
    variant: str | None = None,
    seeds: Sequence[int] = (),
    **options: object,
) -> list[str]:
    """The arguments of ``workbench import SOURCE PATH... --study STUDY [--variant V] [--seed N]... [--OPTION VALUE]...
    --tracking-uri DST``; an option is named by its flag in Python (``eval_rollouts`` for ``--eval-rollouts``,
    ``from_`` for ``--from``), and ``True`` gives a flag without a value (``skip_bad_lines=True``)."""
    args = ["import", source, *map(str, paths), "--study", study]
    if variant is not None:
        args += ["--variant", variant]
    for seed in seeds:
        args += ["--seed", str(seed)]
    for name, value in options.items():
        flag = "--" + name.rstrip("_").replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    return [*args, "--tracking-uri", dst]


def sqlite_uri(path: Path) -> str:
    return f"sqlite:///{path}"


def child_runs(uri: str, study: str):
    """The study's child runs (``workbench.role=run``), as MLflow ``Run`` objects."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(study)
    assert exp is not None, f"no experiment {study!r} in {uri}"
    return client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'run'", max_results=1000)
