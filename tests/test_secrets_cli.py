"""Issue #31 class 1: a store password, whatever characters it holds, appears in no output of any
command that takes a URI: stdout, stderr, the files it writes, MLflow params, tags and artifacts.

Drives the real CLI (``python -m workbench.cli.main``, where the output guard is installed), the six
commands at once, each against a store it can reach quickly or fail on quickly: an unreachable MLflow
server (``run``, ``plan``, ``compare``; ``tracking.outage_deadline_s: 1``), an unreachable PostgreSQL
(``worker --storage``, ``ui``, ``import --from``), and a real SQLite store whose URI carries the
password as a query parameter (``import --tracking-uri``: runs, params, tags and artifacts written).
Passwords: hypothesis over the full printable range (quotes, spaces, ``@:/%?#&;=``, unicode), plus
fixed nasty ones. A distinctive prefix keeps a short generated password from matching a run id."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mlflow import MlflowClient

from tests.conftest import micro_run_config

pytestmark = pytest.mark.slow  # six CLI processes per example (~30 s each example on a loaded machine)

VERL_LOG = Path(__file__).parent / "importers" / "fixtures" / "verl_metrics.jsonl"
PREFIX = "Qx7"  # the secret is PREFIX + generated text: never a substring of an id or a timestamp

printable = st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"))  # what a user can type, unicode too


def spellings(password: str) -> set[str]:
    return {password, quote(password, safe=""), quote(password), quote(password, safe="@:")}


def commands(root: Path, password: str) -> dict[str, list[str]]:
    enc = quote(password, safe="")
    server = {"uri": f"http://bob:{password}@127.0.0.1:1/", "outage_deadline_s": 1}  # raw, as a user may write it
    (root / "raw.yaml").write_text(yaml.safe_dump({"name": "sec", "base": micro_run_config(tracking=server)}))
    encoded = {"uri": f"http://bob:{enc}@127.0.0.1:1/", "outage_deadline_s": 1}
    (root / "enc.yaml").write_text(yaml.safe_dump({"name": "sec", "base": micro_run_config(tracking=encoded)}))
    pg = f"postgresql://bob:{enc}@127.0.0.1:1/db"
    return {
        "run": ["run", "enc.yaml", "--quiet"],
        "plan": ["plan", "raw.yaml"],
        "compare": ["compare", "raw.yaml"],
        "worker": ["worker", "enc.yaml", "--storage", pg],
        "ui": ["ui", "--tracking-uri", pg, "--port", "1"],
        "import-from": [
            "import",
            "trl",
            "--from",
            pg,
            "--experiment",
            "e",
            "--variant-by",
            "param:v",
            "--seed-by",
            "param:s",
            "--study",
            "imp",
        ],
        "import-into": [
            "import",
            "verl",
            str(VERL_LOG),
            "--study",
            "imp",
            "--variant",
            "a",
            "--seed",
            "0",
            "--tracking-uri",
            f"sqlite:///{root}/d.db?password={enc}",
        ],
    }


def run_all(root: Path, cmds: dict[str, list[str]]) -> dict[str, subprocess.CompletedProcess]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "workbench.cli.main", *args],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, args in cmds.items()
    }
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        out[name] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return out


def everything_in_the_store(uri: str, dest: Path) -> str:
    client = MlflowClient(uri)
    parts = []
    for exp in client.search_experiments():
        parts.append(repr(exp.tags))
        for run in client.search_runs([exp.experiment_id]):
            parts += [repr(run.data.params), repr(run.data.tags), run.info.artifact_uri or ""]
            local = Path(client.download_artifacts(run.info.run_id, "", str(dest / run.info.run_id)))
            parts += [p.read_bytes().decode(errors="replace") for p in local.rglob("*") if p.is_file()]
    return "\n".join(parts)


@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))  # + 2 fixed: 21 CLI processes
@given(secret=st.text(printable, min_size=4, max_size=16))
@example(secret='it\'s a "secret" @:/%?#&;=')
@example(secret="пароль 🔑 ü%41%40 ")
def test_no_command_prints_or_stores_the_password(tmp_path_factory, secret):
    password = PREFIX + secret
    root = tmp_path_factory.mktemp("secrets")
    results = run_all(root, commands(root, password))
    for name, result in results.items():
        text = result.stdout + result.stderr
        assert "internal error" not in text, (name, text)
        for form in spellings(password):
            assert form not in text, (name, form, text)
    assert results["import-into"].returncode == 0, results["import-into"].stderr
    # every command against a store it cannot use exits 2 (`run` too: unreachable before any run started)
    assert all(r.returncode == 2 for n, r in results.items() if n != "import-into"), {
        n: (r.returncode, r.stderr[-300:]) for n, r in results.items()
    }
    stored = everything_in_the_store(f"sqlite:///{root}/d.db", root / "downloads")
    assert "imp" in stored  # the import wrote its runs: the check below looked at real records
    written = [p for p in root.rglob("*") if p.name not in ("raw.yaml", "enc.yaml", "d.db")]  # not the user's own
    files = "\n".join(str(p) + ("\n" + p.read_bytes().decode(errors="replace") if p.is_file() else "") for p in written)
    for form in spellings(password):
        assert form not in stored, form
        assert form not in files, form  # file names (locks, checkpoints) and contents
