"""The Sampler protocol: any engine that turns prompts into completions with logprobs."""

from __future__ import annotations

from typing import Protocol

import torch

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


def grouped_rollouts(
    problems: list[Problem],
    group_size: int,
    enc,
    *,
    completion: torch.Tensor,
    mask: torch.Tensor,
    sampler_logp: torch.Tensor,
    truncated: torch.Tensor,
    texts: list[str],
) -> Rollouts:
    """Package ``group_size`` completions per problem (rows grouped by problem) as ``Rollouts``;
    ``enc`` holds the left-padded prompts, one row per problem."""
    return Rollouts(
        problems=[p for p in problems for _ in range(group_size)],
        group_ids=torch.arange(len(problems)).repeat_interleave(group_size),
        prompt_ids=enc["input_ids"].repeat_interleave(group_size, dim=0),
        prompt_mask=enc["attention_mask"].repeat_interleave(group_size, dim=0),
        completion_ids=completion,
        mask=mask,
        sampler_logp=sampler_logp,
        truncated=truncated,
        texts=texts,
    )
