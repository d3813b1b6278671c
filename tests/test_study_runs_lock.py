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
from sqlalchemy import event

from workbench.tracking.study_runs import mark_orphaned_runs
from workbench.tracking.writer import release_interrupted_statements, route_store_tracebacks_to_log

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


def _write_lock_is_free(db) -> bool:
    """Whether another connection could commit a write right now (no busy wait)."""
    probe = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN EXCLUSIVE")  # what a commit needs: no reader may hold the file
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError as error:
        assert "locked" in str(error)
        return False
    finally:
        probe.close()


def test_a_ctrl_c_inside_a_store_query_stops_holding_the_lock_once_released(tmp_path):
    """A Ctrl-C right after a SELECT ran (here raised where SQLAlchemy hands back the cursor, the point a
    signal lands at) leaves the statement un-finalized in the traceback's frames: the file stays locked and
    the process's own next write -- marking its run KILLED -- failed after MLflow's 20 s busy timeout (the
    SIGTERM tests in CI, stops 54-55). ``release_interrupted_statements`` lets it go."""
    uri = install_empty_mlflow_db(tmp_path)
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("interrupted"))
    armed = [True]

    def interrupt_after_a_select(conn, cursor, statement, params, context, executemany):
        if armed[0] and statement.lstrip().upper().startswith("SELECT"):
            armed[0] = False
            raise KeyboardInterrupt

    engine = client._tracking_client.store.engine  # MLflow's own engine: the pool the run's writes use
    event.listen(engine, "after_cursor_execute", interrupt_after_a_select)
    try:
        client.set_tag(run.info.run_id, "k", "v")  # a write session that first reads the run
    except KeyboardInterrupt as interrupt:
        assert not _write_lock_is_free(tmp_path / "mlflow.db")  # the leak this guards against
        release_interrupted_statements(interrupt)
        assert _write_lock_is_free(tmp_path / "mlflow.db")
        started = time.monotonic()
        client.set_terminated(run.info.run_id, "KILLED")
        assert time.monotonic() - started < 5  # not the 20 s busy timeout
    else:
        pytest.fail("the planted interrupt did not fire")
    finally:
        event.remove(engine, "after_cursor_execute", interrupt_after_a_select)
    assert client.get_run(run.info.run_id).info.status == "KILLED"
