"""Distributed execution (`workbench worker`): real Optuna storages, real MLflow stores, real
worker processes, some of them killed with SIGKILL.

Fast tests drive :class:`workbench.execution.worker.Worker` in-process without training (enqueue,
duplicates, stale-trial retry). Slow ones start worker subprocesses on a shared Optuna storage and
a shared sqlite MLflow store. The PostgreSQL test starts a throwaway server from the Debian
``postgresql`` package (or uses ``WORKBENCH_TEST_POSTGRES_URL``); it is skipped where the
server or the ``psycopg`` driver is missing, unless ``WORKBENCH_REQUIRE_POSTGRES=1`` (CI).
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from pathlib import Path

import optuna
import pytest
from mlflow import MlflowClient
from optuna.trial import TrialState

from tests.execution_helpers import (
    child_runs,
    install_empty_mlflow_db,
    spawn,
    statuses_by_key,
    stop_group,
    wait_for,
    workbench_cmd,
    write_study,
)
from workbench.execution.worker import (
    KEY,
    LOST,
    OUTCOME,
    RETRY_OF,
    WORKER,
    Worker,
    WorkerOptions,
    open_storage,
)
from workbench.study import expand, load_study

warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")


def storage_url(kind: str, root: Path) -> str:
    return f"sqlite:///{root / 'optuna.db'}" if kind == "sqlite" else str(root / "optuna-journal.log")


def trials_of(url: str, name: str) -> list:
    """A fresh look at the study's trials, as a separate process would see them."""
    storage = open_storage(url, heartbeat_interval=1)
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


def make_worker(study_path: Path, url: str, **options) -> Worker:
    study = load_study(study_path)
    return Worker(study, expand(study), url, WorkerOptions(log=lambda line: None, **options))


# ------------------------------------------------------------------------------------------ fast
@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_enqueue_is_idempotent_and_duplicates_are_pruned(workdir, kind):
    install_empty_mlflow_db(workdir)
    path = write_study(workdir / "study.yaml", "enqueue", seeds=[0, 1, 2])
    url = storage_url(kind, workdir)
    first = make_worker(path, url)
    first.connect()
    second = make_worker(path, url)  # a second worker joining: nothing is enqueued twice
    second.connect()
    trials = trials_of(url, "enqueue")
    keys = [t.user_attrs[KEY] for t in trials]
    assert len(keys) == 3 and len(set(keys)) == 3
    assert {t.state for t in trials} == {TrialState.WAITING}
    assert first.ctx.parent_run_id == second.ctx.parent_run_id  # one MLflow parent run

    # A duplicate (as two workers enqueueing at the same instant would make) never runs:
    second.ostudy.enqueue_trial({}, user_attrs=dict(trials[0].user_attrs))
    popped = [second.ostudy.ask() for _ in range(4)]
    assert popped[3].user_attrs[KEY] == keys[0]
    with pytest.raises(optuna.TrialPruned, match="duplicate of trial 0"):
        second._objective(popped[3])
    assert popped[3].user_attrs[OUTCOME] == "duplicate"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_lost_worker_s_run_is_failed_in_mlflow_and_retried_up_to_max_retries(workdir, kind):
    uri = install_empty_mlflow_db(workdir)
    path = write_study(workdir / "study.yaml", "stale", seeds=[0])
    url = storage_url(kind, workdir)
    worker = make_worker(path, url, heartbeat_interval=1, grace_period=1, max_retries=1)
    worker.connect()
    client = MlflowClient(uri)
    key = worker.specs[0].run_key

    def lose_a_worker():
        """A worker takes the trial, starts its MLflow run, sends one heartbeat, and dies."""
        trial = worker.ostudy.ask()
        assert trial.user_attrs[KEY] == key
        trial.set_user_attr(WORKER, "elsewhere:1")
        run = client.create_run(
            worker.ctx.experiment_id,
            tags={"workbench.role": "run", "workbench.run_key": key, "mlflow.parentRunId": worker.ctx.parent_run_id},
        )
        worker.ostudy._storage.record_heartbeat(trial._trial_id)
        time.sleep(2.2)  # > grace_period
        optuna.storages.fail_stale_trials(worker.ostudy)
        return trial, client.get_run(run.info.run_id)

    trial, run = lose_a_worker()
    assert run.info.status == "FAILED" and "was lost" in run.data.tags["workbench.error"]
    states = {t.number: (t.state, t.user_attrs.get(LOST)) for t in trials_of(url, "stale")}
    assert states[trial.number][0] == TrialState.FAIL
    assert states[trial.number + 1] == (TrialState.WAITING, 1)  # the retry

    trial, run = lose_a_worker()  # the retry's worker dies too: max_retries=1 is used up
    assert run.info.status == "FAILED"
    assert [t.state for t in trials_of(url, "stale")] == [TrialState.FAIL, TrialState.FAIL]
    report = worker.loop()  # nothing left to run: the worker exits and reports the failure
    assert report.total == 1 and report.failed == [worker.specs[0].label]


@pytest.mark.parametrize("outcome", [None, "KILLED"])
def test_a_run_whose_hand_over_was_lost_is_requeued_by_a_surviving_worker(workdir, outcome):
    """A worker can die after a trial is failed and before its retry is enqueued (killed while
    its stale-trial callback ran, or between ending a stopped run and handing it on). The run
    must not be orphaned: the next worker to look re-enqueues it and runs it, once."""
    uri = install_empty_mlflow_db(workdir)
    path = write_study(workdir / "study.yaml", "orphan", seeds=[0])
    url = storage_url("sqlite", workdir)
    worker = make_worker(path, url, heartbeat_interval=1, max_retries=1)
    worker.connect()
    key = worker.specs[0].run_key
    trial = worker.ostudy.ask()  # taken by a worker that then dies without handing the run on
    trial.set_user_attr(WORKER, "elsewhere:1")
    if outcome:
        trial.set_user_attr(OUTCOME, outcome)
    worker.ostudy.tell(trial, state=TrialState.FAIL)

    report = worker.loop()
    assert report.failed == [] and report.finished == 1
    trials = trials_of(url, "orphan")
    assert [(t.state, t.user_attrs.get(RETRY_OF), t.user_attrs.get(LOST, 0)) for t in trials] == [
        (TrialState.FAIL, None, 0),
        (TrialState.COMPLETE, trial.number, 0 if outcome else 1),
    ]
    finished = [r for r in child_runs(MlflowClient(uri), "orphan") if r.info.status == "FINISHED"]
    assert [r.data.tags["workbench.run_key"] for r in finished] == [key]


def test_a_worker_whose_own_trial_was_failed_as_stale_while_it_ran_goes_on(workdir):
    """On an overloaded machine a worker's heartbeat can starve past the grace period, and a stale-trial
    watch (its own or another worker's) fails the trial while its run goes on. Optuna then refuses to
    tell the trial; the worker says so and goes on (CI once crashed here with "Cannot tell a FAIL trial").
    Staged for real: when the run starts, the trial is failed in the shared storage, as a watch would."""
    uri = install_empty_mlflow_db(workdir)
    path = write_study(workdir / "study.yaml", "stale-self", seeds=[0])
    url = storage_url("sqlite", workdir)
    lines: list[str] = []
    worker = Worker(
        load_study(path), expand(load_study(path)), url, WorkerOptions(log=lines.append, heartbeat_interval=1)
    )

    def fail_own_trial(label):
        (running,) = worker.ostudy.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        worker.ostudy._storage.set_trial_state_values(running._trial_id, TrialState.FAIL)
        return None  # no progress bar

    worker.progress_factory = fail_own_trial
    worker.connect()
    worker.loop()  # returns instead of raising ValueError
    assert any("was failed as stale while it ran" in line for line in lines), lines
    finished = [r for r in child_runs(MlflowClient(uri), "stale-self") if r.info.status == "FINISHED"]
    assert [r.data.tags["workbench.run_key"] for r in finished] == [worker.specs[0].run_key]


def test_a_run_that_failed_by_itself_is_not_requeued(workdir):
    install_empty_mlflow_db(workdir)
    path = write_study(workdir / "study.yaml", "failed-itself", seeds=[0])
    url = storage_url("sqlite", workdir)
    worker = make_worker(path, url, heartbeat_interval=1)
    worker.connect()
    trial = worker.ostudy.ask()
    trial.set_user_attr(OUTCOME, "FAILED")
    worker.ostudy.tell(trial, state=TrialState.FAIL)
    report = worker.loop()
    assert report.failed == [worker.specs[0].label]
    assert [t.state for t in trials_of(url, "failed-itself")] == [TrialState.FAIL]


def test_bad_storage_is_one_line_exit_2(workdir):
    from typer.testing import CliRunner

    from workbench.cli.main import app

    path = write_study(workdir / "study.yaml", "bad-storage", seeds=[0])
    result = CliRunner().invoke(app, ["worker", str(path), "--storage", "nosuchdb://x/y"])
    assert result.exit_code == 2, result.output
    assert "Optuna storage nosuchdb://x/y: unsupported" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and "http" not in result.output  # a database, not a server


# ------------------------------------------------------------------------------------------ slow
def describe_failure(pid: int, logs: dict[int, str], url: str, name: str) -> str:
    """Every worker's log and the trial table: a race between workers shows only in all of them."""
    lines = [f"worker {pid} exited unexpectedly"]
    for other, log in logs.items():
        lines += [f"--- worker {other}", log]
    lines.append("--- trials (number, state, run_key, worker, outcome, retry of)")
    for t in trials_of(url, name):
        attrs = t.user_attrs
        lines.append(
            f"{t.number} {t.state.name} {attrs.get(KEY)} {attrs.get(WORKER)} {attrs.get(OUTCOME)} {attrs.get(RETRY_OF)}"
        )
    return "\n".join(lines)


def run_workers_killing_one(
    workdir: Path,
    url: str,
    n_workers: int,
    name: str,
    seeds: list[int],
    terminate_another: bool = False,
    tracking_uri: str | None = None,
) -> None:
    """Start n workers on one study, SIGKILL the worker of the first run seen in progress (and,
    with ``terminate_another``, stop the worker of another run with SIGTERM, as `kill PID` or
    Ctrl-C would), and check that the others finish the study with exactly one FINISHED MLflow
    run per run_key."""
    uri = tracking_uri or install_empty_mlflow_db(workdir)
    path = write_study(workdir / "study.yaml", name, steps=40, seeds=seeds)
    keys = {s.run_key for s in expand(load_study(path))}
    args = [
        "worker",
        path,
        "--storage",
        url,
        "--tracking-uri",
        uri,
        "--heartbeat",
        "1",
        "--grace",
        "3",
        "--threads",
        "1",
    ]
    procs = [spawn(workbench_cmd(*args), workdir, workdir / f"worker{i}.log") for i in range(n_workers)]
    by_pid = {p.pid: p for p in procs}
    stopped: dict[int, tuple[object, str]] = {}  # pid -> (its trial, the signal's effect)
    client = MlflowClient(uri)
    try:

        def running_trial():
            """A trial in progress whose run is under way in MLflow (a signal before that finds no
            run to close), run by a worker not yet stopped."""
            try:
                trials = trials_of(url, name)
            except KeyError:  # the study is not created yet
                return None
            in_mlflow = {
                r.data.tags["workbench.run_key"] for r in child_runs(client, name) if r.info.status == "RUNNING"
            }
            return next(
                (
                    t
                    for t in trials
                    if t.state == TrialState.RUNNING
                    and WORKER in t.user_attrs
                    and t.user_attrs[KEY] in in_mlflow
                    and int(t.user_attrs[WORKER].rsplit(":", 1)[1]) not in stopped
                ),
                None,
            )

        for sig, effect in [(signal.SIGKILL, "FAILED"), (signal.SIGTERM, "KILLED")][: 1 + terminate_another]:
            trial = wait_for(running_trial, 120, what="a worker running a trial")
            pid = int(trial.user_attrs[WORKER].rsplit(":", 1)[1])
            os.kill(pid, sig)
            stopped[pid] = (trial, effect)
        for proc in procs:
            proc.wait(timeout=240)
        logs = {p.pid: (workdir / f"worker{i}.log").read_text() for i, p in enumerate(procs)}
        for pid, proc in by_pid.items():
            expected = {"FAILED": -signal.SIGKILL, "KILLED": 130}[stopped[pid][1]] if pid in stopped else 0
            assert proc.returncode == expected, describe_failure(pid, logs, url, name)
    finally:
        for proc in procs:
            stop_group(proc)

    runs = child_runs(client, name)
    statuses = statuses_by_key(runs)
    assert set(statuses) == keys
    effects = {trial.user_attrs[KEY]: effect for trial, effect in stopped.values()}
    for key, seen in statuses.items():  # every run executed to completion exactly once ...
        assert seen.count("FINISHED") == 1, (key, seen)
        # ... and the only other runs are the stopped ones: lost (FAILED) or stopped (KILLED)
        assert sorted(seen) == sorted(["FINISHED", *([effects[key]] if key in effects else [])]), (key, seen)
    lost = next(r for r in runs if r.info.status == "FAILED")
    assert "was lost" in lost.data.tags["workbench.error"]
    trials = trials_of(url, name)
    for key, effect in effects.items():  # the retry that completed the stopped run
        (retry,) = [t for t in trials if t.user_attrs.get(KEY) == key and t.state == TrialState.COMPLETE]
        assert retry.user_attrs[LOST] == (1 if effect == "FAILED" else 0)
    assert all(t.state in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED) for t in trials)

    # a worker started after the study is done enqueues nothing, runs nothing, and exits
    late = make_worker(path, url)
    os.environ["MLFLOW_TRACKING_URI"] = uri
    try:
        late.connect()
        report = late.loop()
    finally:
        del os.environ["MLFLOW_TRACKING_URI"]
    assert (report.total, report.finished, report.failed, report.outcomes) == (len(keys), len(keys), [], [])
    assert len(trials_of(url, name)) == len(trials)
    assert len(child_runs(MlflowClient(uri), name)) == len(runs)


@pytest.mark.slow
def test_two_workers_on_sqlite_one_killed_every_run_finishes_exactly_once(workdir):
    run_workers_killing_one(workdir, storage_url("sqlite", workdir), 2, "two-workers", seeds=[0, 1, 2])


# ------------------------------------------------------------------------------------ PostgreSQL
@pytest.mark.slow
def test_three_workers_on_postgresql_one_killed_one_stopped_every_run_finishes_exactly_once(workdir, postgres_url):
    name = f"pg-workers-{os.getpid()}-{int(time.time())}"  # unique: a shared server may hold older studies
    # As in docs/distributed.md, MLflow's store is PostgreSQL too: several processes writing one
    # sqlite file hit "database is locked" under load (seen in CI: a stopped worker could not
    # mark its run KILLED).
    tracking_uri = create_database(postgres_url, f"mlflow_{os.getpid()}_{int(time.time())}")
    MlflowClient(tracking_uri).search_experiments()  # create MLflow's schema once, before the workers race
    run_workers_killing_one(
        workdir, postgres_url, 3, name, seeds=[0, 1, 2, 3], terminate_another=True, tracking_uri=tracking_uri
    )


def create_database(server_url: str, database: str) -> str:
    """A new empty database on the server of ``server_url``; returns its URL."""
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    return server_url.rsplit("/", 1)[0] + f"/{database}"
