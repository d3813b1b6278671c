"""Interrupt a run after step k, execute it again, compare with an uninterrupted run (any learner backend).

Shared by the torch-learner test (tests/test_resume.py) and the DeepSpeed one (tests/engines).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pytest
from mlflow import MlflowClient

from tests.execution_helpers import fast_run_config
from workbench.config import RunConfig, deep_merge
from workbench.execution.run import RunOutcome, execute_run
from workbench.results.reader import StudyReader
from workbench.tracking.store import checkpoint_root, resolve_tracking_uri

STEPS = 4
# Metrics that depend on the weights, the optimizer state and every RNG the loop uses.
COMPARED = (
    "loss/policy",
    "grad/norm",
    "entropy/mean",
    "reward/mean",
    "mismatch/kl",
    "clip/frac",
    "policy/ratio_mean",
    "length/mean",
)


# Rewards that vary within a group even for the never-correct untrained micro model: -length/8.
LENGTH_REWARD = {"shaping": [{"name": "overlong_soft", "weight": 1.0, "params": {"max_length": 8, "cache_length": 8}}]}


class Interrupt(RuntimeError):
    """Raised from on_step: the run crashes (FAILED) right after step k was logged."""


@dataclass
class ResumeRecord:
    reference: dict[str, dict[int, float]]  # uninterrupted run: key -> step -> value
    first: RunOutcome
    second: RunOutcome
    resumed: dict[str, dict[int, float]]
    resumed_tags: dict[str, str]
    checkpoint_dir_after: bool  # does the run's checkpoint directory still exist after it FINISHED?
    reference_problems: pd.DataFrame  # per-problem eval rows (eval/problems.csv.gz) of the uninterrupted run
    resumed_problems: pd.DataFrame  # ... and of the resumed one


def resume_config(learner: dict, **overrides) -> RunConfig:
    """A 4-step micro run that learns: a length reward (the untrained micro model is never correct, and
    all-zero rewards would leave the weights alone), lr 1e-2, two minibatches (the second one's loss
    then depends on the updated weights, Adam's moments and the minibatch order)."""
    base = fast_run_config(
        steps=STEPS,
        algorithm={"minibatches": 2},
        reward=LENGTH_REWARD,
        rollout={"eval_every": 2},  # an eval at the step a resume starts from
        learner={"checkpoint_every": 1, "lr": 1e-2, **learner},
    )
    return RunConfig.model_validate(deep_merge(base, overrides))


def problem_rows(run_id: str) -> pd.DataFrame:
    reader = StudyReader(resolve_tracking_uri(), cache_dir=False)
    info = reader.run_info(run_id)
    return reader.problem_results(pd.DataFrame({"run_id": [run_id], "artifact_uri": [info["artifact_uri"]]}))


def history(run_id: str) -> dict[str, dict[int, float]]:
    client = MlflowClient(resolve_tracking_uri())
    return {key: {m.step: m.value for m in client.get_metric_history(run_id, key)} for key in COMPARED}


def interrupt_and_resume(cfg: RunConfig, crash_after: int, error: type[BaseException] = Interrupt) -> ResumeRecord:
    """Run ``cfg`` uninterrupted; then again, crashing after step ``crash_after``; then once more."""
    reference = execute_run(cfg, study="uninterrupted", variant="v", label="ref")
    assert reference.status == "FINISHED"

    def crash(step: int, metrics: dict) -> None:
        if step == crash_after:
            raise error(f"interrupted after step {step}")

    if error is KeyboardInterrupt:  # Ctrl-C: the run is closed KILLED and the interrupt re-raised
        with pytest.raises(KeyboardInterrupt):
            execute_run(cfg, study="resumed", variant="v", label="r", on_step=crash)
        client = MlflowClient(resolve_tracking_uri())
        exp = client.get_experiment_by_name("resumed")
        first = RunOutcome("r", "v", cfg.seed, cfg.run_key(), client.search_runs([exp.experiment_id])[0].info.status)
    else:
        first = execute_run(cfg, study="resumed", variant="v", label="r", on_step=crash)
    second = execute_run(cfg, study="resumed", variant="v", label="r")
    run = MlflowClient(resolve_tracking_uri()).get_run(second.run_id)
    return ResumeRecord(
        history(reference.run_id),
        first,
        second,
        history(second.run_id),
        run.data.tags,
        (checkpoint_root(resolve_tracking_uri()) / cfg.run_key()).exists(),
        problem_rows(reference.run_id),
        problem_rows(second.run_id),
    )


def check_resumed(record: ResumeRecord, crash_after: int, tolerance: float = 0.0) -> None:
    """The second execution starts at step k+1 and its every step equals the uninterrupted run's
    (within ``tolerance``, relative and absolute; 0 = bitwise)."""
    assert record.first.status in ("FAILED", "KILLED")
    assert record.second.status == "FINISHED" and record.second.steps == STEPS
    assert record.resumed_tags["workbench.resumed_from_step"] == str(crash_after + 1)
    for key in COMPARED:
        assert sorted(record.resumed[key]) == list(range(STEPS)), key  # replayed 0..k, then k+1.. trained
        if tolerance == 0.0:
            assert record.resumed[key] == record.reference[key], key
        else:
            assert record.resumed[key] == pytest.approx(record.reference[key], rel=tolerance, abs=tolerance), key
    assert not record.checkpoint_dir_after  # a FINISHED run's checkpoints are removed
    # the per-problem table: every eval step once (the eval at k+1 ran again after the resume, its
    # rows from before the crash were not kept twice), the same rows as the uninterrupted run's
    resumed, reference = record.resumed_problems, record.reference_problems
    assert len(reference) and not resumed.duplicated(["step", "problem_id"]).any()
    key = ["step", "problem_id"]
    assert resumed[key].reset_index(drop=True).equals(reference[key].reset_index(drop=True))
    if tolerance == 0.0:
        assert (
            resumed.drop(columns="run_id")
            .reset_index(drop=True)
            .equals(reference.drop(columns="run_id").reset_index(drop=True))
        )


@dataclass
class KilledAndResumed:
    client: MlflowClient
    done: int  # the steps the killed run had checkpointed
    resumed: object  # the one FINISHED MLflow run (resumed from `done`)


def sigkill_after_checkpoint_then_run_again(
    workdir, cfg: RunConfig, variant: str, *, steps: int, at_step: int = 2
) -> KilledAndResumed:
    """Run ``cfg`` as a one-run study ``killed`` under ``workbench run``, SIGKILL the run's process once it has
    checkpointed step ``at_step`` (nothing of it runs after the signal: the OOM killer), check it is FAILED with
    the signal named, run the study again and return the single FINISHED run, resumed from the checkpoint.
    Shared by the LoRA and the staleness tests (their checkpoints hold more state than plain weights)."""
    import json
    import os
    import signal
    import subprocess
    from pathlib import Path

    import yaml

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

    uri = install_empty_mlflow_db(workdir)
    study = workdir / "study.yaml"
    study.write_text(
        yaml.safe_dump(
            {
                "name": "killed",
                "base": cfg.model_dump(mode="json", exclude={"tracking", "seed"}),
                "variants": {variant: {}},
                "seeds": [cfg.seed],
            },
            sort_keys=False,
        )
    )
    latest = checkpoint_root(uri) / cfg.run_key() / "latest.json"
    client = MlflowClient(uri)
    proc = spawn(workbench_cmd("run", study, "--parallel", 2, "--quiet"), workdir, workdir / "run.log")
    try:

        def checkpointed() -> bool:
            assert proc.poll() is None, (workdir / "run.log").read_text()  # ended before the kill: say why
            return latest.exists() and json.loads(latest.read_text())["steps_done"] >= at_step

        wait_for(checkpointed, 300, interval=0.05, what=f"a checkpoint at step {at_step}")
        (run_proc,) = [pid for pid in children(proc.pid) if "spawn_main" in cmdline(pid)]
        os.kill(run_proc, signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        stop_group(proc)
    (killed,) = child_runs(client, "killed")
    assert killed.info.status == "FAILED" and "SIGKILL" in killed.data.tags["workbench.error"]
    done = json.loads(latest.read_text())["steps_done"]
    assert at_step <= done < steps

    again = subprocess.run(
        workbench_cmd("run", study, "--quiet"),
        cwd=workdir,
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        timeout=600,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    finished = [r for r in child_runs(client, "killed") if r.info.status == "FINISHED"]
    assert len(finished) == 1, finished  # finished once
    (resumed,) = finished
    assert resumed.data.tags["workbench.resumed_from_step"] == str(done)
    return KilledAndResumed(client=client, done=done, resumed=resumed)
