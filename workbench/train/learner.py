"""The torch learner backend, the reference policy, and ``build_learner``: the run's learner.

``TorchLearner`` owns the weights and an AdamW optimizer in one process (CPU or one GPU); it offers the
learner surface (``workbench.train.learner_protocol.Learner``), as ``DeepSpeedLearner`` does.

``build_learner(model, cfg)`` builds the run's learner: the backend named by ``learner.backend``,
inside the wrappers the run asks for (``workbench.train.wrappers``): fault injection
(``learner.inject_nonfinite_at_step``) and, on rank 0 of several processes, the multi-rank leader.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from workbench.batch import Rollouts
from workbench.config import LearnerConfig, RunConfig
from workbench.train.deepspeed_learner import DeepSpeedLearner
from workbench.train.learner_base import LearnerBase
from workbench.train.learner_protocol import Learner
from workbench.train.logprobs import lean_sequence_logprobs, sequence_logprobs
from workbench.train.lora import Adapters
from workbench.train.rank_env import check_multi_rank, is_follower, multi_rank
from workbench.train.ranks import MultiRankLeader, send
from workbench.train.wrappers import NonFiniteInjection

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ReferencePolicy:
    """A frozen policy (the initial one, for KL regularisation; only built when kl_coef > 0).

    Give it a copy (``learner.policy_copy()``): it is put in eval mode and never trained. Or, for a LoRA
    learner, the learner's own module and its adapters (``reference_policy``): each forward runs with the
    adapters switched off, which is the initial policy exactly (B starts at 0), without a second copy.
    """

    def __init__(self, model, forward: str = "lean", adapters: Adapters | None = None) -> None:
        self.model = model if adapters is not None else model.eval().requires_grad_(False)
        self.adapters = adapters
        # lean: the torch learner's default forward (same logprobs as full to float tolerance, less work)
        self.forward = lean_sequence_logprobs if forward == "lean" else sequence_logprobs

    @torch.no_grad()
    def logprobs(self, rollouts: Rollouts, temperature: float) -> torch.Tensor:
        if self.adapters is None:
            return self.forward(self.model, rollouts, slice(None), temperature, with_entropy=False)[0]
        training = self.model.training
        with self.adapters.disabled():
            self.model.eval()  # as the frozen copy is
            try:
                return self.forward(self.model, rollouts, slice(None), temperature, with_entropy=False)[0]
            finally:
                self.model.train(training)


def reference_policy(learner: Learner) -> ReferencePolicy:
    """The KL reference: a frozen copy of the initial policy; for LoRA, the base under the adapters."""
    if learner.adapters is None:
        return ReferencePolicy(learner.policy_copy())
    return ReferencePolicy(learner.model, adapters=learner.adapters)


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def build_learner(model, cfg: RunConfig) -> Learner:
    """The run's learner, owning ``model`` from now on: the backend, inside the wrappers the run needs.

    On rank 0 of several processes the followers build the same learner at the same time
    (``deepspeed.initialize`` is collective) and then mirror its updates (``ranks.MultiRankLeader``)."""
    leader = multi_rank() and not is_follower()  # rank 0 of several DeepSpeed processes
    if leader:
        send("run", cfg)  # after load_policy: the tiny model is cached before followers load it
    learner: Learner = build_backend(model, cfg.learner)
    if cfg.learner.inject_nonfinite_at_step is not None:  # on every rank: followers poison the same step
        learner = NonFiniteInjection(learner, cfg.learner.inject_nonfinite_at_step)
    return MultiRankLeader(learner) if leader else learner


def build_backend(model, cfg: LearnerConfig) -> LearnerBase:
    """The learner backend named by ``cfg.backend``, owning ``model`` from now on.

    Every rank builds its learner here, so the multi-rank rules are checked here once (preflight
    checks them earlier, before MLflow is touched)."""
    check_multi_rank(cfg)  # several processes: DeepSpeed ZeRO 0-2 only, rank 0 driving (ranks.py)
    if cfg.backend == "deepspeed":
        return DeepSpeedLearner(model, cfg)  # deepspeed itself is imported there, when one is built
    return TorchLearner(model, cfg)


class TorchLearner(LearnerBase):
    """Owns the policy weights and the optimizer (single process, CPU or one GPU)."""

    CHECKPOINT_FILE = "learner.pt"

    def __init__(self, model, cfg: LearnerConfig) -> None:
        self.cfg = cfg
        self.device = torch.device(resolve_device(cfg.device))
        self.model = model.to(device=self.device, dtype=DTYPES[cfg.dtype]).train()
        # LoRA: adapters injected into self.model in place, the base frozen in cfg.dtype; AdamW trains them alone
        self.adapters = None if cfg.lora is None else Adapters(self.model, cfg.lora)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters() if self.adapters is None else self.adapters.parameters(),
            lr=cfg.lr,
            betas=cfg.betas,
            weight_decay=cfg.weight_decay,
        )
        self.optimizer.zero_grad(set_to_none=True)

    def logprobs(
        self, rollouts: Rollouts, rows: torch.Tensor | slice, temperature: float, with_entropy: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
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

    def policy_copy(self) -> torch.nn.Module:
        return copy.deepcopy(self.model)

    def save_checkpoint(self, directory: Path) -> None:
        """Weights and optimizer state (AdamW moments and step counts) into ``directory``. LoRA: the adapters
        instead of the weights (the frozen base is rebuilt from the model cache, bit for bit)."""
        weights = (
            {"model": self.model.state_dict()} if self.adapters is None else {"adapters": self.adapters.state_dict()}
        )
        torch.save(weights | {"optimizer": self.optimizer.state_dict()}, Path(directory) / self.CHECKPOINT_FILE)

    def load_checkpoint(self, directory: Path) -> None:
        state = torch.load(Path(directory) / self.CHECKPOINT_FILE, map_location=self.device, weights_only=True)
        if self.adapters is None:
            self.model.load_state_dict(state["model"])
        else:
            self.adapters.load_state_dict(state["adapters"])
        self.optimizer.load_state_dict(state["optimizer"])
