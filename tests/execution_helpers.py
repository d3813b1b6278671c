"""Helpers for the study-execution tests (local pool, distributed workers): fast micro studies,
an MLflow store created once and copied (creating one runs migrations for several seconds),
and process inspection through /proc."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tests.conftest import micro_run_config

_TEMPLATE: Path | None = None


def fast_run_config(steps: int = 3, **overrides) -> dict:
    """The micro run config with no SFT warm-up: the model builds in about a second."""
    from workbench.config import deep_merge

    cfg = micro_run_config(model={"tiny": {"sft_max_steps": 0}}, rollout={"steps": steps, "eval_every": max(steps, 1)})
    return deep_merge(cfg, overrides)


def write_study(path: Path, name: str, *, steps: int = 3, variants=None, seeds=(0, 1), **extra) -> Path:
    data = {"name": name, "base": fast_run_config(steps), "variants": variants or {"base": {}}, "seeds": list(seeds)}
    path.write_text(yaml.safe_dump(data | extra, sort_keys=False))
    return path


def broken_model_dir(root: Path) -> Path:
    """Passes the preflight check (the micro model's config and tokenizer load), fails when the
    weights load: they are overwritten with zeros."""
    from workbench.config import RunConfig
    from workbench.models import model_dir

    built = RunConfig.model_validate(micro_run_config())
    broken = root / "broken-model"
    if not broken.exists():
        shutil.copytree(model_dir(built.model, built.task, progress=False), broken)
        (broken / "model.safetensors").write_bytes(b"\0" * 64)
    return broken


def install_empty_mlflow_db(workdir: Path) -> str:
    """Put an empty, migrated MLflow sqlite store at workdir/mlflow.db; returns its URI."""
    global _TEMPLATE
    if _TEMPLATE is None:
        from mlflow import MlflowClient

        template = Path(tempfile.mkdtemp(prefix="workbench-mlflow-template-")) / "mlflow.db"
        atexit.register(shutil.rmtree, template.parent, True)
        MlflowClient(f"sqlite:///{template}").search_experiments()  # creates the tables
        _TEMPLATE = template
    shutil.copy(_TEMPLATE, workdir / "mlflow.db")
    return f"sqlite:///{workdir / 'mlflow.db'}"


def child_runs(client, study: str) -> list:
    exp = client.get_experiment_by_name(study)
    return client.search_runs([exp.experiment_id], "tags.`workbench.role` = 'run'") if exp else []


def statuses_by_key(runs) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for run in runs:
        out.setdefault(run.data.tags["workbench.run_key"], []).append(run.info.status)
    return out


def workbench_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "workbench.cli.main", *map(str, args)]


def spawn(args: list[str], cwd: Path, log: Path, env: dict | None = None) -> subprocess.Popen:
    """A CLI process in its own session (so a test can signal its whole group like a terminal)."""
    path = os.pathsep.join(p for p in [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")] if p)
    full_env = os.environ | {"PYTHONPATH": path} | (env or {})
    return subprocess.Popen(
        args, cwd=cwd, env=full_env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def wait_for(predicate, timeout: float, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def children(pid: int) -> list[int]:
    """Direct child processes of ``pid`` (Linux /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def stop_group(proc: subprocess.Popen) -> None:
    """Clean up a test's process group, whatever state it is in."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # also any grandchild left behind (reward workers)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
