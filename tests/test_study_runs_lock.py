"""Closing lost runs while the study's other processes hold the SQLite store (a Ctrl-C of
``--parallel N``: N run processes close their runs in one file at once). CI once printed MLflow's
"database is locked" traceback from that moment and left the run RUNNING."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

import pytest
from execution_helpers import install_empty_mlflow_db
from mlflow import MlflowClient

from workbench.tracking.study_runs import mark_orphaned_runs
from workbench.tracking.writer import route_store_tracebacks_to_log

HOLD_S = 24.0  # longer than the 20 s busy_timeout MLflow sets on SQLite (mlflow/store/db/utils.py): one try alone fails


@pytest.mark.slow
def test_a_store_locked_past_the_busy_timeout_is_waited_for_and_the_run_closed(tmp_path):
    uri = install_empty_mlflow_db(tmp_path)
    client = MlflowClient(uri)
    experiment = client.create_experiment("locked")
    run = client.create_run(experiment, tags={"workbench.role": "run", "workbench.run_key": "k1"})

    holder = sqlite3.connect(tmp_path / "mlflow.db", isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # what a run process writing its last metrics holds
    release = threading.Timer(HOLD_S, holder.execute, args=("COMMIT",))
    release.start()
    started = time.monotonic()
    try:
        closed = mark_orphaned_runs(client, experiment, ["k1"], reason="interrupted", status="KILLED")
    finally:
        release.join()
        holder.close()
    assert time.monotonic() - started >= HOLD_S - 0.5  # it did meet the lock
    assert closed == [run.info.run_id]
    after = client.get_run(run.info.run_id)
    assert after.info.status == "KILLED" and after.data.tags["workbench.error"] == "interrupted"


def test_mlflow_store_tracebacks_go_to_the_log_not_the_terminal(capsys):
    route_store_tracebacks_to_log()
    try:
        raise RuntimeError("database is locked")
    except RuntimeError:
        logging.getLogger("mlflow.store.db.utils").exception("SQLAlchemy database error.")
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
