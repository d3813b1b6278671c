"""A store that cannot write (issue #31, class 6: disk full): metrics are kept in memory up to a
bound, the rest counted as lost, the run marked FAILED with the cause on one line, and no
traceback on the terminal.

The fault is real, not mocked: the writer runs in a child process whose RLIMIT_FSIZE is the size
its SQLite store has reached, so every write that would grow the file fails (EFBIG, which SQLite
reports as "disk I/O error"). Why this mechanism: it needs no privileges (a size-limited tmpfs or
loop mount needs root), it stops exactly the writes a full disk stops (growing a file) and leaves
the rest (reading, rewriting a page in place) working, as a full disk does.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

CHILD = r"""
import json, os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
from workbench.tracking import writer
writer.MAX_UNSENT_POINTS = int(sys.argv[2])
db = sys.argv[1]
t = writer.RunTracker(f"sqlite:///{db}", "e", "r", {}, flush_every=1)
t.start()
t.log_metrics({"before": 1.0}, step=0)
size = os.path.getsize(db)
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))  # the soft limit: the disk is full from here on
for step in range(1, 11):  # each refused flush costs MLflow ~1-2 s here: few steps, many points
    t.log_metrics({f"m{k}": float(step) for k in range(200)}, step=step)  # 2,000 points: none may raise
held = len(t._buffer)
try:
    t.finish("FINISHED")
    ended = "finished"
except writer.StoreWriteFailed as e:
    ended = str(e)
print(json.dumps({"run_id": t.run_id, "held": held, "lost": t.lost_points, "ended": ended}))
"""


@pytest.mark.slow
def test_metrics_a_full_disk_refuses_are_kept_counted_and_the_run_fails_in_one_line(tmp_path):
    db = tmp_path / "mlflow.db"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(db), "500"], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"\nheld {result['held']}, lost {result['lost']}; stderr: {done.stderr.strip().splitlines()[-1:]}")
    with sqlite3.connect(db) as con:  # read back without the limit: what the user's store holds
        written = con.execute("SELECT COUNT(*) FROM metrics WHERE key != 'before'").fetchone()[0]
    # some points fit in pages SQLite had already allocated; every other one is held or counted lost
    assert result["held"] == 500 and result["lost"] > 0 and written + result["held"] + result["lost"] == 2000
    assert result["ended"] == (
        f"the store could not write this run's metrics (disk I/O error): 500 point(s) unsent, "
        f"{result['lost']:,} lost beyond the in-memory bound of 500"
    )
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert (
        len(warnings) == 1 and "cannot write metrics to sqlite:///" in warnings[0] and "disk I/O error" in warnings[0]
    )
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    with sqlite3.connect(db) as con:  # read back without the limit: what the user's store holds
        (status,) = con.execute("SELECT status FROM runs WHERE run_uuid = ?", (result["run_id"],)).fetchone()
        points = con.execute("SELECT COUNT(*) FROM metrics WHERE run_uuid = ?", (result["run_id"],)).fetchone()[0]
        error = con.execute(
            "SELECT value FROM tags WHERE run_uuid = ? AND key = 'workbench.error'", (result["run_id"],)
        ).fetchone()
    # the status is a row rewritten in place and the tag fits a page SQLite already has: both written
    assert status == "FAILED" and error == (result["ended"],)
    assert points == written + 1


@pytest.mark.slow
def test_space_coming_back_sends_what_was_held(tmp_path):
    """The limit lifted before the end: the held points are written at the next flush, none lost,
    the run FINISHED."""
    child = CHILD.replace(
        "held = len(t._buffer)", "held = len(t._buffer)\nresource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))"
    )
    db = tmp_path / "mlflow.db"
    done = subprocess.run(
        [sys.executable, "-c", child, str(db), "5000"], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["lost"] == 0 and result["ended"] == "finished", result
    assert "written to sqlite:///" in done.stderr and "again; none lost" in done.stderr
    with sqlite3.connect(db) as con:
        (status,) = con.execute("SELECT status FROM runs WHERE run_uuid = ?", (result["run_id"],)).fetchone()
        points = con.execute("SELECT COUNT(*) FROM metrics WHERE run_uuid = ?", (result["run_id"],)).fetchone()[0]
    assert status == "FINISHED" and points == 2001  # "before" + 2,000


WHOLE_RUN = r"""
import os, resource, runpy, signal, sys
if __name__ == "__main__":  # (the verifier's forkserver children import this file too)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limit = os.path.getsize("mlflow.db") + int(sys.argv[1])  # no file may grow past this: the disk fills mid-run
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    sys.argv = ["workbench", *sys.argv[2:]]
    runpy.run_module("workbench.cli.main", run_name="__main__")
"""


@pytest.mark.slow
def test_a_whole_run_on_a_filling_disk_fails_in_one_line_without_a_traceback(workdir):
    """`workbench run` itself, not the writer alone: the store fills after the run has started (128 KiB
    above an empty store: the run, its params and its first metrics fit). The command exits 1, the run
    is FAILED with the cause and the counts in `workbench.error`, the terminal gets one warning line and
    no traceback (MLflow's SQL store logs each refused write with its traceback: those go to the
    `workbench.tracking` log; the redaction had turned them into text the old filter did not see)."""
    import yaml

    from tests.conftest import micro_run_config
    from tests.execution_helpers import install_empty_mlflow_db
    from workbench.config import RunConfig
    from workbench.models import model_dir

    cfg = micro_run_config(rollout={"steps": 30, "eval_every": 10})
    (workdir / "s.yaml").write_text(yaml.safe_dump({"name": "full", "base": cfg}))
    parsed = RunConfig.model_validate(cfg)
    model_dir(parsed.model, parsed.task, progress=False)  # the cold start exists before the disk fills
    install_empty_mlflow_db(workdir)
    (workdir / "run.py").write_text(WHOLE_RUN)
    done = subprocess.run(
        [sys.executable, "run.py", str(128 * 1024), "run", "s.yaml", "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=workdir,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "ERROR mlflow" not in done.stderr, done.stderr[-3000:]
    warnings = [line for line in done.stderr.splitlines() if "cannot write metrics" in line]
    assert len(warnings) == 1 and "disk I/O error" in warnings[0], done.stderr[-2000:]
    with sqlite3.connect(workdir / "mlflow.db") as con:
        ((status, error),) = con.execute(
            "SELECT r.status, t.value FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
            "WHERE t.key = 'workbench.error'"
        ).fetchall()
    assert status == "FAILED" and error.startswith("the store could not write this run's metrics (disk I/O error): ")
    assert "point(s) unsent" in error
    # with --debug the same tracebacks are there, from the workbench.tracking log, for whoever needs them
    (workdir / "mlflow.db").unlink()
    install_empty_mlflow_db(workdir)
    debug = subprocess.run(
        [sys.executable, "run.py", str(128 * 1024), "--debug", "run", "s.yaml", "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=workdir,
    )
    assert debug.returncode == 1 and "DEBUG workbench.tracking: SQLAlchemy database error" in debug.stderr
    assert "sqlite3.OperationalError: disk I/O error" in debug.stderr
