"""What the learner backends share: the one update, and the weight views of a backend whose ``model``
holds every weight (a backend that partitions them, ZeRO-3, overrides those)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from workbench.batch import PendingBatch, TrainBatch
from workbench.config import AlgorithmConfig
from workbench.rollout.weights import plain_state_dict
from workbench.train.learner_protocol import Learner, OldLogprobObserver, Section, no_section
from workbench.train.lora import Adapters
from workbench.train.update import policy_update


class LearnerBase(Learner):
    """A backend's common part: subclasses set ``cfg``, ``model`` and ``device`` and define the passes
    (logprobs, backward, step), ``policy_copy`` and the checkpoints; with ``learner.lora`` they set ``adapters``."""

    adapters: Adapters | None = None  # LoRA (workbench.train.lora); None: full fine-tuning

    def update(
        self,
        batch: TrainBatch | PendingBatch,
        algo: AlgorithmConfig,
        temperature: float,
        generator: torch.Generator,
        section: Section = no_section,
        observe_old_logp: OldLogprobObserver | None = None,
    ) -> dict[str, float]:
        """One policy update on ``batch``; returns its learner-side metrics."""
        return policy_update(self, batch, algo, temperature, generator, section, observe_old_logp)

    @contextlib.contextmanager
    def gathered_model(self) -> Iterator[torch.nn.Module]:
        yield self.model  # the module holds every weight

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every weight under the module's own (HF) names: the live tensors, read-only (LoRA: the adapters
        merged in, ``rollout/weights.py``)."""
        return plain_state_dict(self.model)

    def close(self) -> None:
        """Nothing to release: the weights go with the object."""
