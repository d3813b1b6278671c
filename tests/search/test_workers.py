"""`workbench tune --workers 2` on a shared storage, with one worker process killed (SIGKILL) in the
middle of a trial: Optuna's heartbeat fails that trial, the surviving worker retries its parameters,
and the search completes exactly its n_trials with no trial lost or duplicated.

Storages: a JournalStorage file (always), and PostgreSQL through the fixture of the distributed-worker
tests ($WORKBENCH_TEST_POSTGRES_URL, or a throwaway local server; skipped without the server
binaries or the psycopg2 driver unless WORKBENCH_REQUIRE_POSTGRES=1).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from optuna.trial import TrialState

from tests.execution_helpers import children, install_empty_mlflow_db, spawn, stop_group, wait_for, workbench_cmd
from tests.search.helpers import load_spec, optuna_trials, trial_runs, write_search_study
from workbench.search.objective import OUTCOME, OVER_BUDGET, RETRY_OF, WORKER

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")]

N_TRIALS = 4


@pytest.fixture(params=["journal", "postgresql"])
def shared_storage(request, workdir) -> str:
    if request.param == "journal":
        return str(workdir / "optuna-journal.log")
    return request.getfixturevalue("postgres_url")


def test_a_worker_killed_mid_trial_is_replaced_by_a_retry_and_the_budget_is_met(workdir, shared_storage):
    uri = install_empty_mlflow_db(workdir)
    name = f"killed-{os.getpid()}-{int(time.time())}"  # unique: a shared PostgreSQL may hold older searches
    search = {
        "metric": "reward/mean",
        "params": {"learner.lr": {"low": 1.0e-3, "high": 3.0e-2, "log": True}},
        "sampler": {"name": "random", "seed": 0},
        "pruner": "none",
        "n_trials": N_TRIALS,
        "seeds": [0],
    }
    path = write_search_study(workdir / "study.yaml", name, search, steps=30, eval_every=10)
    spec = load_spec(path)
    log = workdir / "tune.log"
    pythonpath = os.pathsep.join(
        p for p in [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")] if p
    )
    proc = spawn(
        workbench_cmd(
            "tune",
            path,
            "--workers",
            2,
            "--storage",
            shared_storage,
            "--tracking-uri",
            uri,
            "--heartbeat",
            1,
            "--grace",
            3,
        ),
        workdir,
        log,
        env={"PYTHONPATH": pythonpath},
    )
    client = MlflowClient(uri)
    try:

        def a_trial_in_progress():
            """(trial number, worker pid) of a trial whose MLflow run has 20 or more of its 30 steps to go. A run
            merely RUNNING may be closing: on a loaded machine (load 10) the kill once landed after the trial
            completed. Metrics are sent every 10 steps: a RUNNING run with none sent is at most 9 steps in."""
            for run in trial_runs(client, name):
                if run.info.status == "RUNNING" and not client.get_metric_history(run.info.run_id, "reward/mean"):
                    break
            else:
                return None
            number = int(run.data.tags["workbench.trial"])
            trial = next(t for t in optuna_trials(spec, shared_storage) if t.number == number)
            pid = int(trial.user_attrs[WORKER].rsplit(":", 1)[1])
            return (number, pid) if pid in children(proc.pid) else None

        victim_trial, victim_pid = wait_for(a_trial_in_progress, 180, interval=0.3, what="a trial in progress")
        os.kill(victim_pid, signal.SIGKILL)
        proc.wait(timeout=300)
        output = log.read_text()
        assert proc.returncode == 0, output
    finally:
        stop_group(proc)
    assert f"worker {victim_pid}: worker process died with exit code -9: SIGKILL" in output

    trials = optuna_trials(spec, shared_storage)
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers))  # no duplicate trial numbers
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == N_TRIALS  # the budget, exactly
    killed = trials[victim_trial]
    assert killed.state == TrialState.FAIL
    (retry,) = [t for t in trials if t.system_attrs.get("failed_trial") == victim_trial]
    assert retry.state == TrialState.COMPLETE and retry.params == killed.params
    assert retry.user_attrs[RETRY_OF] == victim_trial
    for t in trials:  # every other trial completed, or found the budget taken and ran nothing
        assert t in complete or t is killed or t.user_attrs.get(OUTCOME) == OVER_BUDGET, t
    assert all(t.state != TrialState.RUNNING for t in trials)

    runs = trial_runs(client, name)
    by_trial: dict[int, list] = {}
    for run in runs:
        by_trial.setdefault(int(run.data.tags["workbench.trial"]), []).append(run)
    (lost,) = by_trial[victim_trial]
    assert lost.info.status == "FAILED" and "was lost" in lost.data.tags["workbench.error"]
    for t in complete:  # exactly one FINISHED run per complete trial, nothing left RUNNING
        assert [r.info.status for r in by_trial[t.number]] == ["FINISHED"]
    assert set(by_trial) == {t.number for t in complete} | {victim_trial}
