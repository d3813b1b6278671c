"""A run whose prompt order keeps state between steps (``data.order: shuffled`` walks the pool in passes,
``curriculum`` walks each stage's chunk in passes) resumes with the rest of the pass it was in: the
checkpoint holds the order's queue, so the resumed steps train on the prompts the uninterrupted run drew.

Pool 6, 4 prompts per step: steps 0 and 1 draw a whole pass and 2 prompts of the next, so the checkpoint
after step 1 leaves 4 prompts queued; step 2 draws exactly those. Without the queue a resumed run would
start a fresh permutation there and train on other prompts (other rewards, losses, gradients).
"""

from __future__ import annotations

import json
import logging

import pytest
import torch
from mlflow import MlflowClient

from tests.resume_helpers import STEPS, Interrupt, check_resumed, interrupt_and_resume, resume_config
from workbench.execution.run import execute_run
from workbench.tracking.store import checkpoint_root, resolve_tracking_uri

pytestmark = pytest.mark.slow  # 3 micro runs per resume (8-17 s on the loaded 2-core machine), 2 for the old one


def test_a_crashed_shuffled_run_resumes_mid_pass_bit_for_bit(workdir):
    cfg = resume_config({}, data={"pool": 6, "order": "shuffled"})
    check_resumed(interrupt_and_resume(cfg, crash_after=1), crash_after=1)


def test_a_crashed_stale_curriculum_run_resumes_with_the_queue_before_its_drawn_ahead_steps(workdir):
    """Staleness 2: when step 0 ends, the prompts of steps 1 to 2 are already drawn (their requests queued
    with the sampler thread), so the queue saved is the one before step 1's draws, not the current one. Two
    stages of 6 prompts over 4 steps: stage 0 is steps 0-1; step 0 leaves 2 of its 6 queued for step 1."""
    curriculum = {"pool": 12, "order": "curriculum", "curriculum": {"by": "difficulty", "stages": 2}}
    cfg = resume_config({}, data=curriculum, rollout={"staleness": 2})
    check_resumed(interrupt_and_resume(cfg, crash_after=0), crash_after=0)


def test_a_checkpoint_without_the_queue_resumes_as_before_and_says_so(workdir, caplog):
    """A checkpoint written before the queue was kept (its loop.pt has no ``prompt_queue``) still resumes: a fresh
    pass from the restored RNG, as resumes did then, with a warning naming the order and the step."""
    cfg = resume_config({}, data={"pool": 6, "order": "shuffled"})

    def crash(step: int, metrics: dict) -> None:
        if step == 1:
            raise Interrupt("interrupted after step 1")

    assert execute_run(cfg, study="old", variant="v", label="r", on_step=crash).status == "FAILED"
    directory = checkpoint_root(resolve_tracking_uri()) / cfg.run_key()
    loop_pt = directory / json.loads((directory / "latest.json").read_text())["dir"] / "loop.pt"
    state = torch.load(loop_pt, weights_only=True)
    queue = state.pop("prompt_queue")  # 8 drawn of a pool of 6: the second pass has 4 left, in stage 0
    assert len(queue["queue"]) == 4 and set(queue["queue"]) <= set(range(6)) and queue["stage"] == 0
    torch.save(state, loop_pt)  # as the checkpoint code before the queue was kept wrote it

    with caplog.at_level(logging.WARNING, logger="workbench.train"):
        second = execute_run(cfg, study="old", variant="v", label="r")
    assert second.status == "FINISHED" and second.steps == STEPS
    assert MlflowClient(resolve_tracking_uri()).get_run(second.run_id).data.tags["workbench.resumed_from_step"] == "2"
    warned = [r.getMessage() for r in caplog.records if r.name == "workbench.train"]
    assert len(warned) == 1 and "data.order=shuffled starts a fresh pass at step 2" in warned[0], warned
