"""The Sampler protocol: any engine that turns prompts into completions with logprobs."""

from __future__ import annotations

from typing import Protocol

from workbench.batch import Rollouts
from workbench.tasks import Problem


class Sampler(Protocol):
    def generate(self, problems: list[Problem], group_size: int, *, temperature: float, seed: int) -> Rollouts:
        """``group_size`` completions per problem; temperature 0 means greedy."""
        ...

    def sync_weights(self, learner_model) -> None:
        """Make the sampler's policy equal to the learner's current weights."""
        ...

    def close(self) -> None:
        """Release the engine (the training loop calls it when the run ends, however it ends)."""
        ...
