"""Several DeepSpeed processes for one study: rank 0 drives, the other ranks follow as learners.

Under a multi-process launch (``WORLD_SIZE > 1``, e.g. ``deepspeed --num_gpus 2 --no_local_rank
$(which workbench) run study.yaml``) rank 0 executes the study as one process would (MLflow, sampling,
rewards, health, eval, checkpoints' loop state). The other ranks never touch MLflow, never sample
or score: ``follow()`` receives rank 0's commands (``torch.distributed.broadcast_object_list`` on
the default group) and repeats each collective learner call with identical inputs:

    ("run", cfg)            drop the previous learner; build the run's learner (same model, same config)
    ("update", kwargs)      policy_update on the same rollouts, advantages, masks, RNG state, fault flag
    ("save", dir) / ("load", dir)   engine.save_checkpoint / load_checkpoint (collective in DeepSpeed)
    ("end",)                the run is over (sent in a ``finally``: a crash or health stop on rank 0 too)
    ("stop",)               the study is over: followers return

Identical data on every rank gives identical gradients; DeepSpeed's all-reduce averages them (the
same gradient), while ZeRO 1-2 partition optimizer states and gradients across the ranks (the memory
win). ZeRO-3 is refused: every forward (rank 0's sampling, reference and eval forwards) would be a
collective. If rank 0 dies hard (``kill -9``, OOM), no command comes: the launcher (deepspeed,
torchrun) kills the other ranks when one exits; otherwise they wait until the process-group timeout
(``WORKBENCH_RANK_TIMEOUT_S``, default 6 h, long enough for rank 0's sampling and eval between updates).

With ``WORLD_SIZE`` unset or 1 nothing here runs: every hook returns at once.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from workbench.train.rank_env import (  # noqa: F401 - ZERO3, NOT_DEEPSPEED, check_multi_rank: re-exported
    NOT_DEEPSPEED,
    ZERO3,
    check_multi_rank,
    is_follower,
    multi_rank,
    rank,
    world_size,
)


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


def cpu(value):
    """Tensors cross ranks on the CPU: a pickled CUDA tensor would land on rank 0's GPU number."""
    if value is None or isinstance(value, (int, float, bool, str)):
        return value
    return value.cpu() if isinstance(value, torch.Tensor) else value.to("cpu")


class LearnerLeader:
    """Rank 0's learner: the wrapped learner's surface; each collective call is first sent to the followers."""

    def __init__(self, learner) -> None:
        object.__setattr__(self, "inner", learner)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value) -> None:  # e.g. poison_next_update lands on the learner
        setattr(self.inner, name, value)

    def announce_update(self, rollouts, advantages, algo, temperature, generator, loss_mask, ref_logp) -> None:
        """Called by ``policy_update`` before it consumes anything: followers update on the same inputs."""
        send("update", {"rollouts": cpu(rollouts), "advantages": cpu(advantages), "algo": algo,
                        "temperature": temperature, "generator_state": generator.get_state(),
                        "loss_mask": cpu(loss_mask), "ref_logp": cpu(ref_logp),
                        "poison": bool(self.inner.poison_next_update)})

    def save_checkpoint(self, directory: Path) -> None:
        send("save", str(directory))
        self.inner.save_checkpoint(directory)

    def load_checkpoint(self, directory: Path) -> None:
        send("load", str(directory))
        self.inner.load_checkpoint(directory)

    def close(self) -> None:
        """The run is over, however it ended."""
        send("end")


def build_learner(model, cfg):
    """Rank 0 of several: followers build the same learner now (``deepspeed.initialize`` is collective)."""
    from workbench.train.learner import build_learner as build

    send("run", cfg)  # after load_policy: the tiny model is cached before followers load it
    return LearnerLeader(build(model, cfg.learner))


def stop_followers() -> None:
    """Rank 0 at the end of the CLI command, however it ended: followers return from ``follow()``."""
    if multi_rank() and not is_follower():
        send("stop")


def follow() -> int:
    """A follower rank's whole CLI command: mirror rank 0's learner calls until it says stop."""
    from workbench.models import load_policy
    from workbench.train.learner import build_learner
    from workbench.train.update import policy_update

    ensure_group()
    learner = None
    generator = torch.Generator()
    while True:
        command, *args = receive()
        if command == "stop":
            return 0
        if command == "end":
            learner = None
        elif command == "run":
            (cfg,) = args
            learner = None  # a run that crashed before its "end" (none is lost: "end" comes from a finally)
            torch.manual_seed(cfg.seed)
            model, _ = load_policy(cfg.model, cfg.task)
            learner = build_learner(model, cfg.learner)
        elif command == "update":
            (kw,) = args
            generator.set_state(kw["generator_state"])
            learner.poison_next_update = kw["poison"]
            device = learner.device
            optional = {k: None if kw[k] is None else kw[k].to(device) for k in ("loss_mask", "ref_logp")}
            policy_update(learner, kw["rollouts"].to(device), kw["advantages"].to(device), kw["algo"],
                          kw["temperature"], generator, **optional)
        elif command == "save":
            learner.save_checkpoint(Path(args[0]))
        elif command == "load":
            learner.load_checkpoint(Path(args[0]))
        else:
            raise RuntimeError(f"unknown command from rank 0: {command!r}")
