"""MLflow outages (workbench/tracking/writer.py) and one execution of a study at a time
(workbench/execution/lock.py, workbench/tracking/store.py).

"Unreachable" here is a real MLflow REST client pointed at a port nobody listens on: the same
connection refusal a stopped ``mlflow server`` gives (tests/test_outage_server.py stops a real one).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tests.postgres import _free_port
from workbench.execution.lock import StudyBusy, study_lock
from workbench.tracking.redact import redact_text
from workbench.tracking.store import ensure_store
from workbench.tracking.writer import (
    OutagePolicy,
    RunTracker,
    TrackingOutage,
    bound_mlflow_http_retries,
    call_with_retries,
    resend_spills,
    spill_path,
)

REPO = Path(__file__).resolve().parents[1]


HTTP_BOUNDS = ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "MLFLOW_HTTP_REQUEST_TIMEOUT")


@pytest.fixture(autouse=True)
def bounded_http(monkeypatch):
    for name in HTTP_BOUNDS:
        monkeypatch.delenv(name, raising=False)
    bound_mlflow_http_retries()  # what every RunTracker does
    yield
    for name in HTTP_BOUNDS:
        os.environ.pop(name, None)


def dead_server_uri(userinfo: str = "") -> str:
    return f"http://{userinfo}127.0.0.1:{_free_port()}"  # bound, then released: nobody listens there


def test_backoff_doubles_up_to_its_cap_and_the_waits_add_up_to_the_deadline():
    # by hand: 1, 2, 4, 4 (cap), then 1 more fills 12 s
    assert OutagePolicy(deadline_s=12, first_wait_s=1, max_wait_s=4).waits() == [1, 2, 4, 4, 1]
    assert OutagePolicy(deadline_s=0.5, first_wait_s=1).waits() == [0.5]
    assert sum(OutagePolicy().waits()) == OutagePolicy().deadline_s


def test_an_unreachable_store_is_retried_with_a_visible_line_then_raises_at_the_deadline(tmp_path):
    lines: list[str] = []
    uri = dead_server_uri("alice:s3cret@")
    policy = OutagePolicy(deadline_s=3, first_wait_s=0.5, max_wait_s=1, warn=lines.append)
    started = time.monotonic()
    with pytest.raises(TrackingOutage, match="MLflow unreachable at .* for [0-9]+ s") as outage:
        call_with_retries(MlflowClient(uri).search_experiments, policy=policy, uri=uri, what="a test")
    assert "s3cret" not in str(outage.value) and "alice:***@" in str(outage.value)  # MLflow's text quotes the URL
    took = time.monotonic() - started
    # waits 0.5 + 1 + 1 + 0.5 = 3 s; each refused call returns in well under a second (MLflow's
    # own retry bounded to one, backoff factor 1: <= ~1 s), so 4 calls add at most ~4 s
    assert 3 <= took < 3 + 8, took
    assert len(lines) == 4, lines
    assert lines[0] == f"MLflow unreachable at http://alice:***@{uri.rsplit('@', 1)[1]}, retrying in 0.5s (1/4)…"
    assert all("s3cret" not in line for line in lines)
    assert [line.rsplit("(", 1)[1] for line in lines] == ["1/4)…", "2/4)…", "3/4)…", "4/4)…"]


def test_ctrl_c_inside_a_store_call_is_not_retried_as_an_outage():
    # Seen in CI: Ctrl-C landed inside a SQLite call; SQLAlchemy's cleanup then failed with "database
    # is locked", so the interrupt survived only as that error's context, and the run process kept
    # "retrying" an outage for minutes instead of stopping.
    lines: list[str] = []
    calls = []

    def store_call():
        calls.append(1)
        try:
            raise KeyboardInterrupt  # the terminal's SIGINT, mid-query
        except KeyboardInterrupt:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")  # noqa: B904 - the rollback's own failure, raised while handling

    with pytest.raises(KeyboardInterrupt):
        call_with_retries(
            store_call, policy=OutagePolicy(deadline_s=60, warn=lines.append), uri="sqlite:///x.db", what="a test"
        )
    assert calls == [1] and lines == []

    def locked():  # the same error without an interrupt behind it is an outage: retried
        calls.append(1)
        raise RuntimeError("(sqlite3.OperationalError) database is locked")

    calls.clear()
    with pytest.raises(TrackingOutage):
        call_with_retries(
            locked,
            policy=OutagePolicy(deadline_s=0.2, first_wait_s=0.1, warn=lines.append),
            uri="sqlite:///x.db",
            what="a test",
        )
    assert len(calls) >= 2 and lines


def test_passwords_in_uris_inside_any_text_are_masked():
    assert (
        redact_text("to http://bob:pw@h:1/api and postgresql+psycopg://u:p%40ss@db/x; http://h/a@b")
        == "to http://bob:***@h:1/api and postgresql+psycopg://u:***@db/x; http://h/a@b"
    )


def test_a_refused_request_is_not_retried(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    lines: list[str] = []
    with pytest.raises(MlflowException, match="not found|does not exist|No Run"):
        call_with_retries(
            MlflowClient(uri).get_run,
            "0" * 32,
            policy=OutagePolicy(deadline_s=60, warn=lines.append),
            uri=uri,
            what="a test",
        )
    assert lines == []


def test_metrics_stay_buffered_through_a_failed_flush_are_spilled_and_resent_exactly_once(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    lines: list[str] = []
    tracker = RunTracker(
        uri,
        "outage",
        "run",
        {"workbench.role": "run"},
        flush_every=3,
        outage=OutagePolicy(deadline_s=1, first_wait_s=0.5, warn=lines.append),
    )
    run_id = tracker.start()
    for step in range(3):  # sent: steps 0-2
        tracker.log_metrics({"reward/mean": step / 10, "loss/policy": -step}, step)
    tracker.client = MlflowClient(dead_server_uri())  # the store goes away
    tracker.log_metrics({"reward/mean": 0.3, "loss/policy": -3}, 3)
    tracker.log_metrics({"reward/mean": 0.4, "loss/policy": -4}, 4)
    with pytest.raises(TrackingOutage):
        tracker.log_metrics({"reward/mean": 0.5, "loss/policy": -5}, 5)  # the flush: unreachable for 1 s
    assert len(tracker._buffer) == 6  # nothing dropped: 3 steps x 2 metrics still waiting
    assert any("retrying" in line for line in lines)

    path = tracker.spill("key1", "FAILED", TrackingOutage("gone"))
    assert path == spill_path(uri, "key1", run_id) and path.exists()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["step"] for r in records if r["kind"] == "metric") == [3, 3, 4, 4, 5, 5]
    assert records[-1]["kind"] == "end" and records[-1]["status"] == "FAILED"

    client = MlflowClient(uri)
    assert client.get_run(run_id).info.status == "RUNNING"  # the spill's try to end it went nowhere
    assert resend_spills(uri, "key1") == 6
    assert not path.exists()
    assert resend_spills(uri, "key1") == 0  # gone once sent: a second resume sends nothing
    run = client.get_run(run_id)
    assert run.info.status == "FAILED" and "gone" in run.data.tags["workbench.error"]
    for key in ("reward/mean", "loss/policy"):
        assert sorted(m.step for m in client.get_metric_history(run_id, key)) == [0, 1, 2, 3, 4, 5]


def test_a_spill_sent_twice_keeps_one_point_each_and_a_refused_spill_is_kept_aside(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = RunTracker(
        uri,
        "outage",
        "run",
        {"workbench.role": "run"},
        flush_every=100,
        outage=OutagePolicy(deadline_s=0.5, warn=lambda line: None),
    )
    run_id = tracker.start()
    tracker.log_metrics({"reward/mean": 0.25}, 0)
    tracker.log_metrics({"reward/mean": 0.5}, 1)
    tracker.client = MlflowClient(dead_server_uri())
    path = tracker.spill("key2", "FAILED", TrackingOutage("gone"))
    copy = path.read_text()
    assert resend_spills(uri, "key2") == 2
    path.write_text(copy)  # as if the first re-send had died before removing the spill
    assert resend_spills(uri, "key2") == 2
    assert [
        (m.step, m.value)
        for m in sorted(MlflowClient(uri).get_metric_history(run_id, "reward/mean"), key=lambda m: m.step)
    ] == [(0, 0.25), (1, 0.5)]

    orphan = spill_path(uri, "key3", "f" * 32)  # its run is not in this store (deleted, another store)
    orphan.write_text(copy)
    lines: list[str] = []
    assert resend_spills(uri, "key3", OutagePolicy(deadline_s=1, warn=lines.append)) == 0
    assert not orphan.exists() and orphan.with_suffix(".rejected").exists()
    assert len(lines) == 1 and "could not re-send" in lines[0]


# ------------------------------------------------------------------------------------ the lock
HOLD = """
import sys, time
from workbench.execution.lock import study_lock
with study_lock(sys.argv[1], sys.argv[2], shared=sys.argv[3] == "shared", command=sys.argv[4]):
    print("held", flush=True)
    time.sleep(600)
"""


def hold_lock(uri: str, experiment: str, *, shared: bool = False, command: str = "workbench run"):
    env = os.environ | {"PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, uri, experiment, "shared" if shared else "x", command],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_execution_is_refused_naming_the_holder_and_a_killed_holder_frees_the_study(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    holder = hold_lock(uri, "study-a")
    try:
        with pytest.raises(StudyBusy) as busy:
            with study_lock(uri, "study-a"):
                pass
        message = str(busy.value)
        assert "\n" not in message
        assert f"pid {holder.pid}" in message and socket.gethostname() in message and "since 20" in message
        assert "workbench run" in message
        with study_lock(uri, "study-b"):  # another study of the same store is free
            pass
    finally:
        holder.send_signal(signal.SIGKILL)  # dies without releasing anything itself
        holder.wait()
    with study_lock(uri, "study-a"):  # the kernel dropped the dead holder's lock
        pass


def test_the_last_holder_removes_the_lock_file(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with study_lock(uri, "study-f") as path:
        assert path.is_file()
    assert not path.exists()  # a finished (or stopped) run leaves no lock file behind


def test_workers_share_the_study_and_exclude_a_run(tmp_path):
    uri = "http://tracking.example:5000"  # a server store: the lock lives in a per-store folder
    os.environ["WORKBENCH_LOCK_DIR"] = str(tmp_path / "locks")
    try:
        worker = hold_lock(uri, "study-w", shared=True, command="workbench worker")
        try:
            with study_lock(uri, "study-w", shared=True, command="workbench worker") as path:  # a second joins
                pass
            assert path.is_file()  # and leaves it: the first worker still holds it
            with pytest.raises(StudyBusy, match=f"workbench worker on host .*, pid {worker.pid}"):
                with study_lock(uri, "study-w"):
                    pass
        finally:
            worker.kill()
            worker.wait()
        with study_lock(uri, "study-w"):  # the file the killed worker left is locked again, then removed
            pass
        assert not path.exists()
    finally:
        del os.environ["WORKBENCH_LOCK_DIR"]


CREATE = """
import sys
from mlflow import MlflowClient
from workbench.tracking.store import ensure_store, get_or_create_experiment
ensure_store(sys.argv[1])
get_or_create_experiment(MlflowClient(sys.argv[1]), "same", sys.argv[1])
"""


@pytest.mark.slow
def test_processes_creating_a_fresh_sqlite_store_at_once_all_succeed(tmp_path):
    uri = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"
    env = os.environ | {"PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen([sys.executable, "-c", CREATE, uri], env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    ensure_store(uri)  # and this process finds it ready
    assert [e.name for e in MlflowClient(uri).search_experiments() if e.name == "same"] == ["same"]


def test_a_refused_process_waits_briefly_for_the_holder_to_name_itself(tmp_path):
    """The holder writes its line just after taking the lock; a process refused in between used to
    say "another process (starting up)" (seen once on CI). It now reads again for up to 2 s."""
    import threading

    from workbench.execution.lock import _holder

    path = tmp_path / "study.lock"
    path.write_text("")  # locked, not yet named
    line = {"command": "workbench run", "host": "h", "pid": 7, "since": "now"}
    threading.Timer(0.3, lambda: path.write_text(json.dumps(line))).start()
    assert _holder(path, wait_s=2.0) == "workbench run on host h, pid 7, since now"
    path.write_text("")
    assert _holder(path) == "another process (starting up)"  # no wait: what a holder checks about itself
