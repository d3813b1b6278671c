"""A lost worker is noticed while every surviving worker is busy running a run (issue #19,
finding 6): ``StaleTrialWatch`` fails stale trials from a background thread."""

from __future__ import annotations

import time
import warnings

import optuna
import pytest
from mlflow import MlflowClient
from optuna.trial import TrialState

from tests.execution_helpers import install_empty_mlflow_db, wait_for, write_study
from tests.test_distributed import make_worker, storage_url, trials_of
from workbench.execution.worker import KEY, LOST, WORKER, StaleTrialWatch

warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_lost_worker_is_failed_and_retried_while_the_survivor_is_busy(workdir, kind):
    uri = install_empty_mlflow_db(workdir)
    path = write_study(workdir / "study.yaml", "watch", seeds=[0])
    url = storage_url(kind, workdir)
    survivor = make_worker(path, url, heartbeat_interval=1, grace_period=1)
    survivor.connect()
    client = MlflowClient(uri)
    key = survivor.specs[0].run_key

    trial = survivor.ostudy.ask()  # another worker takes the run, opens its MLflow run, and dies
    trial.set_user_attr(WORKER, "elsewhere:1")
    lost = client.create_run(
        survivor.ctx.experiment_id,
        tags={"workbench.role": "run", "workbench.run_key": key, "mlflow.parentRunId": survivor.ctx.parent_run_id},
    )
    survivor.ostudy._storage.record_heartbeat(trial._trial_id)

    with StaleTrialWatch(survivor.ostudy, interval_s=0.2):
        started = time.monotonic()
        # the survivor's main thread is busy (think: running a long run) and never looks itself
        wait_for(lambda: client.get_run(lost.info.run_id).info.status == "FAILED", 30, what="the lost run FAILED")
        noticed = time.monotonic() - started
    # grace 1 s after the last heartbeat, then at most one 0.2 s round (plus storage latency)
    assert noticed < 10, noticed
    assert "was lost" in client.get_run(lost.info.run_id).data.tags["workbench.error"]
    states = {t.number: (t.state, t.user_attrs.get(LOST), t.user_attrs.get(KEY)) for t in trials_of(url, "watch")}
    assert states[trial.number][0] == TrialState.FAIL
    assert states[trial.number + 1] == (TrialState.WAITING, 1, key)  # the retry, waiting for a free worker
