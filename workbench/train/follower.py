"""A follower rank (``RANK > 0`` of several DeepSpeed processes): mirror rank 0's learner calls.

The protocol (the commands and why) is described in :mod:`workbench.train.ranks`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from workbench.models import load_policy
from workbench.train.learner import build_learner
from workbench.train.ranks import ensure_group, receive


def follow() -> int:
    """A follower rank's whole CLI command: mirror rank 0's learner calls until it says stop."""
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
            model, _ = load_policy(cfg.model, cfg.task, prime=cfg.data.prime)
            learner = build_learner(model, cfg)  # a follower: the backend (and fault injection), no leader
        elif command == "update":
            (kw,) = args
            generator.set_state(kw["generator_state"])
            learner.update(kw["batch"].to(learner.device), kw["algo"], kw["temperature"], generator)
        elif command == "save":
            learner.save_checkpoint(Path(args[0]))
        elif command == "load":
            learner.load_checkpoint(Path(args[0]))
        else:
            raise RuntimeError(f"unknown command from rank 0: {command!r}")
