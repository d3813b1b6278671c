"""Learner wrappers: a behaviour added around any learner backend, chosen by ``build_learner``.

A wrapper has its learner's whole surface (``workbench.train.learner_protocol.Learner``): it forwards
every call it does not change, so the update and the loop never know whether one is there.
"""

from __future__ import annotations

import torch

from workbench.batch import PendingBatch, TrainBatch
from workbench.config import AlgorithmConfig
from workbench.train.learner_protocol import Learner, OldLogprobObserver, Section, no_section
from workbench.train.update import policy_update


class LearnerWrapper:
    """Forwards everything to ``inner``; subclasses override what they change."""

    def __init__(self, inner: Learner) -> None:
        self.inner = inner

    def __getattr__(self, name: str):  # only called for what this wrapper does not define itself
        if name == "inner":  # not set yet (copy, unpickling): no endless recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


class NonFiniteInjection(LearnerWrapper):
    """Fault injection (``learner.inject_nonfinite_at_step``): the update of batch step ``at_step``
    back-propagates a NaN loss, so its gradient is non-finite. The backend reports it (``grad/norm``)
    and never applies it, and the health rules see what a real blow-up looks like.

    Wrap a backend directly: the update runs over this wrapper's calls (``policy_update(self, ...)``),
    so ``backward`` comes here. ``build_learner`` puts the multi-rank leader outside it."""

    def __init__(self, inner: Learner, at_step: int) -> None:
        super().__init__(inner)
        self.at_step = at_step
        self.poisoned = False  # inside the update of step at_step

    def update(
        self,
        batch: TrainBatch | PendingBatch,
        algo: AlgorithmConfig,
        temperature: float,
        generator: torch.Generator,
        section: Section = no_section,
        observe_old_logp: OldLogprobObserver | None = None,
    ) -> dict[str, float]:
        self.poisoned = batch.step == self.at_step
        try:
            return policy_update(
                self,
                batch,
                algo,
                temperature,
                generator,
                section,  # its backward() comes here
                observe_old_logp,
            )
        finally:
            self.poisoned = False

    def backward(self, loss: torch.Tensor) -> None:
        self.inner.backward(loss * float("nan") if self.poisoned else loss)
