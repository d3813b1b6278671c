"""Several DeepSpeed processes for one study: rank 0 drives, the other ranks follow as learners.

Under a multi-process launch (``WORLD_SIZE > 1``, e.g. ``deepspeed --num_gpus 2 --no_local_rank
$(which workbench) run study.yaml``) rank 0 executes the study as one process would (MLflow, sampling,
rewards, health, eval, checkpoints' loop state). The other ranks never touch MLflow, never sample
or score: ``workbench.train.follower.follow()`` receives rank 0's commands
(``torch.distributed.broadcast_object_list`` on the default group) and repeats each collective
learner call with identical inputs:

    ("run", cfg)            drop the previous learner; build the run's learner (same model, same config)
    ("update", kwargs)      the same update on the same TrainBatch (its step too: fault injection repeats
                            itself) and RNG state
    ("save", dir) / ("load", dir)   engine.save_checkpoint / load_checkpoint (collective in DeepSpeed)
    ("end",)                the run is over (sent in a ``finally``: a crash or health stop on rank 0 too)
    ("stop",)               the study is over: followers return

Identical data on every rank gives identical gradients; DeepSpeed's all-reduce averages them (the
same gradient), while ZeRO 1-2 partition optimizer states and gradients across the ranks (the memory
win). ZeRO-3 is refused: every forward (rank 0's sampling, reference and eval forwards) would be a
collective. If rank 0 dies hard (``kill -9``, OOM), no command comes: the launcher (deepspeed,
torchrun) kills the other ranks when one exits; otherwise they wait until the process-group timeout
(``WORKBENCH_RANK_TIMEOUT_S``, default 6 h, long enough for rank 0's sampling and eval between updates).

Rank 0's side is ``MultiRankLeader``, the learner wrapper ``build_learner`` puts around rank 0's learner
when ``WORLD_SIZE > 1``; with ``WORLD_SIZE`` unset or 1 nothing here runs.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from workbench.batch import PendingBatch, TrainBatch
from workbench.config import AlgorithmConfig
from workbench.train.learner_protocol import OldLogprobObserver, Section, no_section
from workbench.train.rank_env import is_follower, multi_rank
from workbench.train.wrappers import LearnerWrapper


def ensure_group() -> None:
    """Join the default process group (DeepSpeed's backend for its accelerator) if not done yet."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return
    os.environ.setdefault("DS_ACCELERATOR", "cpu" if not torch.cuda.is_available() else "cuda")
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    if accelerator.device_name() != "cpu":  # NCCL serialises broadcast objects on the current device
        accelerator.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    timeout = timedelta(seconds=float(os.environ.get("WORKBENCH_RANK_TIMEOUT_S", "21600")))
    deepspeed.init_distributed(dist_backend=accelerator.communication_backend_name(), timeout=timeout)


def send(*command: Any) -> None:
    """Rank 0: broadcast one command to the followers."""
    ensure_group()
    torch.distributed.broadcast_object_list([command], src=0)


def receive() -> tuple:
    box: list[Any] = [None]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


class MultiRankLeader(LearnerWrapper):
    """Rank 0's learner: each collective call is first sent to the followers, which repeat it."""

    def update(
        self,
        batch: TrainBatch | PendingBatch,
        algo: AlgorithmConfig,
        temperature: float,
        generator: torch.Generator,
        section: Section = no_section,
        observe_old_logp: OldLogprobObserver | None = None,
    ) -> dict[str, float]:
        """Followers update on the same inputs (sent before anything is consumed, the RNG state included)."""
        batch = batch.ready()  # followers get the whole batch: rewards scored, advantages computed
        send(
            "update",
            {
                "batch": batch.to("cpu"),
                "algo": algo,  # CUDA tensors would land on rank 0's GPU
                "temperature": temperature,
                "generator_state": generator.get_state(),
            },
        )
        return self.inner.update(batch, algo, temperature, generator, section, observe_old_logp)  # rank 0 only

    def save_checkpoint(self, directory: Path) -> None:
        send("save", str(directory))
        self.inner.save_checkpoint(directory)

    def load_checkpoint(self, directory: Path) -> None:
        send("load", str(directory))
        self.inner.load_checkpoint(directory)

    def close(self) -> None:
        """The run is over, however it ended."""
        send("end")
        self.inner.close()


def stop_followers() -> None:
    """Rank 0 at the end of the CLI command, however it ended: followers return from ``follower.follow()``."""
    if multi_rank() and not is_follower():
        send("stop")
