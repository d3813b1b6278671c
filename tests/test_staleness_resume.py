"""A rollout.staleness run killed mid-way resumes where it stopped, samples the batches it would have sampled
(the checkpoint holds the weight snapshots of the versions still to sample with) and finishes once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from tests.execution_helpers import (
    child_runs,
    children,
    cmdline,
    install_empty_mlflow_db,
    spawn,
    stop_group,
    wait_for,
    workbench_cmd,
)
from tests.resume_helpers import COMPARED, check_resumed, interrupt_and_resume, resume_config
from workbench.execution.run import execute_run
from workbench.tracking.store import checkpoint_root, resolve_tracking_uri

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
    uri = install_empty_mlflow_db(workdir)
    study = workdir / "study.yaml"
    study.write_text(yaml.safe_dump({"name": "killed", "base": cfg.model_dump(mode="json", exclude={"tracking", "seed"}),
                                     "variants": {"stale": {}}, "seeds": [cfg.seed]}, sort_keys=False))
    latest = checkpoint_root(uri) / cfg.run_key() / "latest.json"
    client = MlflowClient(uri)
    proc = spawn(workbench_cmd("run", study, "--parallel", 2, "--quiet"), workdir, workdir / "run.log")
    try:
        def checkpointed() -> bool:
            assert proc.poll() is None, (workdir / "run.log").read_text()  # ended before the kill: say why
            return latest.exists() and json.loads(latest.read_text())["steps_done"] >= 2

        wait_for(checkpointed, 300, interval=0.05, what="a checkpoint at step 2")
        (run_proc,) = [pid for pid in children(proc.pid) if "spawn_main" in cmdline(pid)]
        os.kill(run_proc, signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        stop_group(proc)
    (killed,) = child_runs(client, "killed")
    assert killed.info.status == "FAILED" and "SIGKILL" in killed.data.tags["workbench.error"]
    done = json.loads(latest.read_text())["steps_done"]
    assert 2 <= done < steps

    again = subprocess.run(workbench_cmd("run", study, "--quiet"), cwd=workdir, capture_output=True, text=True,
                           env=os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    finished = [r for r in child_runs(client, "killed") if r.info.status == "FINISHED"]
    assert len(finished) == 1
    (resumed,) = finished
    assert resumed.data.tags["workbench.resumed_from_step"] == str(done)

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
