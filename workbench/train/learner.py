"""Learner backends: teacher-forced logprobs and entropy, accumulated backward passes, optimizer steps.

Every backend offers the same surface, so ``policy_update`` and the loop never ask which one runs:

    logprobs(rollouts, rows, temperature, with_entropy) -> (logp [b,T], entropy [b,T] | None)
    backward(loss)      accumulate d loss / d weights (one micro-batch)
    step() -> float     clip the accumulated gradient, apply it if finite, clear it; returns the pre-clip norm
    model, device       the trainable module (full weights) and where rollouts must live
    gathered_model()    context: a module holding the full weights (ZeRO-3 partitions them elsewhere)
    full_state_dict()   the full weights by name (what a sampler loads)
    policy_copy()       a frozen full copy (the reference policy for KL)
    save_checkpoint(dir) / load_checkpoint(dir)
    update(batch, algo, temperature, generator, units) -> metrics   one policy update (``policy_update``)
    close()             the run is over

``build_learner(model, cfg)`` builds the run's learner: the backend named by ``learner.backend``,
inside the wrappers the run asks for (``workbench.train.wrappers``): fault injection
(``learner.inject_nonfinite_at_step``) and, on rank 0 of several processes, the multi-rank leader.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path

import torch

from workbench.batch import PendingBatch, Rollouts, TrainBatch
from workbench.config import AlgorithmConfig, LearnerConfig, RunConfig
from workbench.train import ranks
from workbench.train.logprobs import (
    lean_sequence_logprobs,
    sequence_logprobs,  # noqa: F401 - re-exported (its home until now)
)
from workbench.train.rank_env import check_multi_rank
from workbench.train.update import ALGORITHM_UNITS, AlgorithmUnits, policy_update
from workbench.train.wrappers import NonFiniteInjection

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ReferencePolicy:
    """A frozen policy (the initial one, for KL regularisation; only built when kl_coef > 0).

    Give it a copy (``learner.policy_copy()``): it is put in eval mode and never trained.
    """

    def __init__(self, model, forward: str = "lean") -> None:
        self.model = model.eval().requires_grad_(False)
        # lean: the torch learner's default forward (same logprobs as full to float tolerance, less work)
        self.forward = lean_sequence_logprobs if forward == "lean" else sequence_logprobs

    @torch.no_grad()
    def logprobs(self, rollouts: Rollouts, temperature: float) -> torch.Tensor:
        return self.forward(self.model, rollouts, slice(None), temperature, with_entropy=False)[0]


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def build_learner(model, cfg: RunConfig):
    """The run's learner, owning ``model`` from now on: the backend, inside the wrappers the run needs.

    On rank 0 of several processes the followers build the same learner at the same time
    (``deepspeed.initialize`` is collective) and then mirror its updates (``ranks.MultiRankLeader``)."""
    leader = ranks.multi_rank() and not ranks.is_follower()  # rank 0 of several DeepSpeed processes
    if leader:
        ranks.send("run", cfg)  # after load_policy: the tiny model is cached before followers load it
    learner = build_backend(model, cfg.learner)
    if cfg.learner.inject_nonfinite_at_step is not None:  # on every rank: followers poison the same step
        learner = NonFiniteInjection(learner, cfg.learner.inject_nonfinite_at_step)
    return ranks.MultiRankLeader(learner) if leader else learner


def build_backend(model, cfg: LearnerConfig):
    """The learner backend named by ``cfg.backend``, owning ``model`` from now on.

    Every rank builds its learner here, so the multi-rank rules are checked here once (preflight
    checks them earlier, before MLflow is touched)."""
    check_multi_rank(cfg)  # several processes: DeepSpeed ZeRO 0-2 only, rank 0 driving (ranks.py)
    if cfg.backend == "deepspeed":
        from workbench.train.deepspeed_learner import DeepSpeedLearner  # deepspeed is imported there, lazily

        return DeepSpeedLearner(model, cfg)
    return TorchLearner(model, cfg)


class TorchLearner:
    """Owns the policy weights and the optimizer (single process, CPU or one GPU)."""

    CHECKPOINT_FILE = "learner.pt"

    def __init__(self, model, cfg: LearnerConfig) -> None:
        self.cfg = cfg
        self.device = torch.device(resolve_device(cfg.device))
        self.model = model.to(device=self.device, dtype=DTYPES[cfg.dtype]).train()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
        )
        self.optimizer.zero_grad(set_to_none=True)

    def logprobs(self, rollouts: Rollouts, rows: torch.Tensor | slice, temperature: float,
                 with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        forward = lean_sequence_logprobs if self.cfg.forward == "lean" else sequence_logprobs  # full: the reference
        return forward(self.model, rollouts, rows, temperature, with_entropy)

    def backward(self, loss: torch.Tensor) -> None:
        """Add ``d loss / d weights`` to the accumulated gradient (one micro-batch)."""
        loss.backward()

    def step(self) -> float:
        """Clip the accumulated global grad norm, step, clear the gradient. Returns the pre-clip norm."""
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        if torch.isfinite(grad_norm):  # a non-finite step is reported (health: non_finite), never applied
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(grad_norm)

    def optimizer_step(self, loss: torch.Tensor) -> float:
        """Backward, clip the global grad norm, step. Returns the pre-clip grad norm."""
        self.backward(loss)
        return self.step()

    def update(self, batch: TrainBatch | PendingBatch, algo: AlgorithmConfig, temperature: float,
               generator: torch.Generator, units: AlgorithmUnits = ALGORITHM_UNITS) -> dict[str, float]:
        """One policy update on ``batch``; returns its learner-side metrics."""
        return policy_update(self, batch, algo, temperature, generator, units)

    def close(self) -> None:
        """Nothing to release: the weights go with the object."""

    @contextlib.contextmanager
    def gathered_model(self) -> Iterator[torch.nn.Module]:
        yield self.model  # one process holds every weight

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every weight under the module's own (HF) names: the live tensors, read-only."""
        return {name: tensor.detach() for name, tensor in self.model.state_dict().items()}

    def policy_copy(self) -> torch.nn.Module:
        return copy.deepcopy(self.model)

    def save_checkpoint(self, directory: Path) -> None:
        """Weights and optimizer state (AdamW moments and step counts) into ``directory``."""
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()},
                   Path(directory) / self.CHECKPOINT_FILE)

    def load_checkpoint(self, directory: Path) -> None:
        state = torch.load(Path(directory) / self.CHECKPOINT_FILE, map_location=self.device, weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
