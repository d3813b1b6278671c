"""Resumable run checkpoints (``learner.checkpoint_every``).

A run's checkpoints live in ``<root>/<run_key>/`` where ``<root>`` (``tracking.store.checkpoint_root``) is

* ``$WORKBENCH_CHECKPOINT_DIR`` if set (e.g. a shared disk, so a retried run finds them on another machine);
* else ``checkpoints/`` next to a local sqlite MLflow store (``mlflow.db``), the default store;
* else ``.workbench/checkpoints/`` in the working directory (MLflow on a server).

Each save writes ``step-<n>/`` (``n`` = RL steps done) holding the learner's state (its own format:
``engine.save_checkpoint`` for DeepSpeed, model + optimizer ``state_dict`` for torch) and ``loop.pt``
(the loop's RNG states, the prompt order's pass in progress, the metrics logged so far and the per-problem
eval rows), then points
``latest.json`` at it and removes older ones. A FAILED or KILLED run executed again restores the latest and continues
at step ``n``; a FINISHED run's checkpoints are removed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from workbench.tracking.store import checkpoint_root
from workbench.train.evaluate import ProblemResults
from workbench.train.learner_protocol import Learner

LATEST = "latest.json"
LOOP_STATE = "loop.pt"
PIPELINE_STATE = "pipeline.pt"  # rollout.staleness >= 1: the weight snapshots the next steps sample with


@dataclass
class LoopState:
    """What the loop needs besides the learner to continue exactly where it stopped."""

    steps_done: int
    task_rng: tuple  # random.Random state: which problems are sampled
    minibatch_rng: torch.Tensor  # torch.Generator state: minibatch order
    torch_rng: torch.Tensor  # torch global RNG state
    history: list[tuple[int, dict[str, float]]] = field(default_factory=list)  # (step, metrics) as logged
    samples: list[dict] = field(default_factory=list)  # completions shown at eval steps so far
    problems: dict[str, list] = field(default_factory=dict)  # per-problem eval rows so far, as columns
    # PromptOrder.queue_state() before the next step's draws; None: a checkpoint written before it was kept
    prompt_queue: dict[str, Any] | None = None


class RunCheckpoints:
    """The checkpoints of one run, in ``directory``; saved every ``every`` RL steps."""

    def __init__(self, directory: Path, every: int) -> None:
        self.directory = Path(directory)
        self.every = every
        self.save_seconds: list[float] = []
        self.load_seconds = 0.0

    @classmethod
    def for_run(cls, run_key: str, every: int | None, tracking_uri: str) -> RunCheckpoints | None:
        """None when checkpointing is off (``learner.checkpoint_every`` unset)."""
        return None if every is None else cls(checkpoint_root(tracking_uri) / run_key, every)

    def latest_step(self) -> int | None:
        """RL steps done at the latest complete checkpoint; None if there is none."""
        latest = self.directory / LATEST
        return json.loads(latest.read_text())["steps_done"] if latest.exists() else None

    def due(self, steps_done: int) -> bool:
        return steps_done % self.every == 0

    def save(self, learner: Learner, state: LoopState, pipeline: dict[str, Any] | None = None) -> None:
        """Write ``step-<n>/`` completely, then switch ``latest.json`` to it (a crash mid-save keeps the old one).
        ``pipeline``: the pipelined sampler's state (``StalePipeline.state``), tensors in plain containers."""
        start = time.perf_counter()
        target = self.directory / f"step-{state.steps_done}"
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        learner.save_checkpoint(target)
        torch.save(vars(state), target / LOOP_STATE)
        if pipeline is not None:
            torch.save(pipeline, target / PIPELINE_STATE)
        tmp = self.directory / f"{LATEST}.tmp"
        tmp.write_text(json.dumps({"steps_done": state.steps_done, "dir": target.name}))
        os.replace(tmp, self.directory / LATEST)
        for old in self.directory.glob("step-*"):
            if old != target:
                shutil.rmtree(old, ignore_errors=True)
        self.save_seconds.append(time.perf_counter() - start)

    def restore(self, learner: Learner, task_rng: random.Random, minibatch_rng: torch.Generator) -> LoopState:
        """Load the latest checkpoint into ``learner`` and the RNGs; returns the loop's state at that point."""
        start = time.perf_counter()
        target = self.directory / json.loads((self.directory / LATEST).read_text())["dir"]
        learner.load_checkpoint(target)
        state = LoopState(**torch.load(target / LOOP_STATE, weights_only=True))
        task_rng.setstate(_as_tuples(state.task_rng))
        minibatch_rng.set_state(state.minibatch_rng)
        torch.set_rng_state(state.torch_rng)
        self.load_seconds = time.perf_counter() - start
        return state

    def restore_pipeline(self) -> dict[str, Any] | None:
        """The pipelined sampler's state saved with the latest checkpoint; None when it saved none."""
        target = self.directory / json.loads((self.directory / LATEST).read_text())["dir"] / PIPELINE_STATE
        return torch.load(target, weights_only=True) if target.exists() else None

    def clear(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def capture(
    steps_done: int,
    task_rng: random.Random,
    minibatch_rng: torch.Generator,
    history: list,
    samples: list,
    problems: ProblemResults | None = None,
    prompt_queue: dict[str, Any] | None = None,
) -> LoopState:
    columns = {} if problems is None else {name: list(values) for name, values in vars(problems).items()}
    return LoopState(
        steps_done,
        task_rng.getstate(),
        minibatch_rng.get_state(),
        torch.get_rng_state(),
        list(history),
        list(samples),
        columns,
        prompt_queue,
    )


def _as_tuples(value):
    """random.Random state is nested tuples; keep it so whatever the serialiser returned."""
    return tuple(_as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value
