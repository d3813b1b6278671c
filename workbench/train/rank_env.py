"""Which rank this process is, and what several ranks cannot run: read from the launcher's
environment (``WORLD_SIZE``, ``RANK``), with no process group needed (:mod:`workbench.train.ranks`
holds the rank-0-drives protocol itself)."""

from __future__ import annotations

import os

ZERO3 = (
    "learner.zero_stage=3 with WORLD_SIZE={world}: under ZeRO-3 every forward is a collective (rank 0's "
    "sampling, reference and eval forwards too), which the rank-0-drives design cannot mirror; use "
    "zero_stage 0-2 with several processes, or one process (docs/engines.md, 'DeepSpeed learner')"
)
NOT_DEEPSPEED = (
    "learner.backend={backend} with WORLD_SIZE={world}: only learner.backend=deepspeed runs on "
    "several processes; launch one process for the torch learner"
)


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def multi_rank() -> bool:
    return world_size() > 1


def is_follower() -> bool:
    return multi_rank() and rank() > 0


def check_multi_rank(learner_cfg) -> None:
    """Refuse what several ranks cannot run: by preflight on rank 0 (before MLflow is touched), and by
    ``build_learner`` on every rank."""
    if not multi_rank():
        return
    if learner_cfg.backend != "deepspeed":
        raise ValueError(NOT_DEEPSPEED.format(backend=learner_cfg.backend, world=world_size()))
    if learner_cfg.zero_stage == 3:
        raise ValueError(ZERO3.format(world=world_size()))
