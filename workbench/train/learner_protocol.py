"""The learner's surface: what every backend (``TorchLearner``, ``DeepSpeedLearner``) and every wrapper
around one (``workbench.train.wrappers``) offers, so the update and the loop never ask which one runs.

    cfg                 the LearnerConfig (micro_batch_size: the update splits minibatches by it)
    model, device       the trainable module (full weights) and where rollouts must live
    logprobs(rollouts, rows, temperature, with_entropy) -> (logp [b,T], entropy [b,T] | None)
    backward(loss)      accumulate d loss / d weights (one micro-batch)
    step() -> float     clip the accumulated gradient, apply it if finite, clear it; returns the pre-clip norm
    update(batch, algo, temperature, generator, section) -> metrics
                        one policy update: ``policy_update`` over this learner's own passes
    gathered_model()    context: a module holding the full weights (ZeRO-3 partitions them elsewhere)
    full_state_dict()   the full weights by name (what a sampler loads; LoRA: the adapters merged in)
    policy_copy()       a frozen full copy (the reference policy for KL, full fine-tuning)
    adapters            LoRA's adapters (``workbench.train.lora.Adapters``: the base policy with them switched
                        off, their metrics, checkpoint state and saved files), or None for full fine-tuning
    save_checkpoint(dir) / load_checkpoint(dir)
    close()             the run is over

Backends get ``update`` from ``LearnerBase`` (``workbench.train.learner_base``): there is one update,
``workbench.train.update.policy_update``. A wrapper redefines ``update`` only to change what an update
does (the multi-rank leader broadcasts it first; fault injection poisons one step's backward).

Defined apart from the backends because the update, the wrappers and the run all type their learner
with it, and the backends import the update: here it depends on none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Protocol

import torch

from workbench.batch import PendingBatch, Rollouts, TrainBatch
from workbench.config import AlgorithmConfig, LearnerConfig
from workbench.train.lora import Adapters

# Opens a named section around part of the update ("algorithm": the algorithm's own computations):
# the run passes its Stopwatch (perf/algorithm_s), so the update itself holds no timing code.
Section = Callable[[str], AbstractContextManager[None]]


OldLogprobObserver = Callable[[torch.Tensor], None]
"""Called once per update with the learner's logprobs [B, T] of the batch before any optimizer step (the
"old" policy's, computed anyway): the mismatch record reads them instead of running a forward of its own."""


def no_section(name: str) -> AbstractContextManager[None]:
    """The ``Section`` of an update nobody times."""
    return nullcontext()


class Learner(Protocol):
    cfg: LearnerConfig
    model: torch.nn.Module
    device: torch.device
    adapters: Adapters | None

    def logprobs(
        self, rollouts: Rollouts, rows: torch.Tensor | slice, temperature: float, with_entropy: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    def backward(self, loss: torch.Tensor) -> None: ...

    def step(self) -> float: ...

    def update(
        self,
        batch: TrainBatch | PendingBatch,
        algo: AlgorithmConfig,
        temperature: float,
        generator: torch.Generator,
        section: Section = no_section,
        observe_old_logp: OldLogprobObserver | None = None,
    ) -> dict[str, float]: ...

    def gathered_model(self) -> AbstractContextManager[torch.nn.Module]: ...

    def full_state_dict(self) -> dict[str, torch.Tensor]: ...

    def policy_copy(self) -> torch.nn.Module: ...

    def save_checkpoint(self, directory: Path) -> None: ...

    def load_checkpoint(self, directory: Path) -> None: ...

    def close(self) -> None: ...
