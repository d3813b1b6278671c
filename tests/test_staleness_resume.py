"""A rollout.staleness run killed mid-way resumes where it stopped, samples the batches it would have sampled
(the checkpoint holds the weight snapshots of the versions still to sample with) and finishes once."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from tests.resume_helpers import (
    COMPARED,
    check_resumed,
    interrupt_and_resume,
    resume_config,
    sigkill_after_checkpoint_then_run_again,
)
from workbench.execution.run import execute_run
from workbench.tracking.store import resolve_tracking_uri

pytestmark = pytest.mark.slow


def test_a_crashed_stale_run_resumes_bit_for_bit(workdir):
    cfg = resume_config({}, rollout={"staleness": 2})
    record = interrupt_and_resume(cfg, crash_after=1)
    check_resumed(record, crash_after=1)
    # the resumed steps trained on batches sampled by versions t - 2: the lag is logged where it was
    assert record.resumed_tags["workbench.resumed_from_step"] == "2"


def test_sigkill_of_a_stale_run_then_run_again_finishes_once_without_a_duplicated_step(workdir, monkeypatch):
    """The run's process is SIGKILLed once it has checkpointed step 2 of 8 (k = 2: steps 3 and 4 were queued with
    versions 1 and 2, in the sampler's thread when it died); `workbench run` again resumes from the checkpoint.
    Every step is logged once, the run is FINISHED once, and its metrics are the uninterrupted run's."""
    steps = 8
    cfg = resume_config({}, rollout={"steps": steps, "eval_every": 4, "staleness": 2})
    killed = sigkill_after_checkpoint_then_run_again(workdir, cfg, "stale", steps=steps)
    client, resumed = killed.client, killed.resumed

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'reference.db'}")  # another store: no reuse
    reference = execute_run(cfg, study="uninterrupted", variant="stale", label="ref")
    assert reference.status == "FINISHED"
    ref_client = MlflowClient(resolve_tracking_uri())
    for key in (*COMPARED, "offpolicy/staleness_max"):
        history = client.get_metric_history(resumed.info.run_id, key)
        assert sorted(m.step for m in history) == list(range(steps)), key  # each step once
        mine = {m.step: m.value for m in history}
        theirs = {m.step: m.value for m in ref_client.get_metric_history(reference.run_id, key)}
        assert mine == theirs, key
