"""Typed containers passed between stages: Rollouts -> ScoredRollouts -> StepStats.

Shapes: B sequences (prompts × group), P prompt tokens (left-padded), T response tokens
(right-padded). ``mask`` is 1 on response tokens, EOS included.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from workbench.tasks import Problem


@dataclass
class Rollouts:
    """What a sampler returns for B = len(problems) × group_size completions."""

    problems: list[Problem]  # [B] the problem each completion answers (repeated per group)
    group_ids: torch.Tensor  # [B] long: completions of one prompt share an id
    prompt_ids: torch.Tensor  # [B, P] left-padded
    prompt_mask: torch.Tensor  # [B, P]
    completion_ids: torch.Tensor  # [B, T] right-padded
    mask: torch.Tensor  # [B, T] float, 1 on response tokens (EOS included)
    sampler_logp: torch.Tensor  # [B, T] logprob of each sampled token under the sampling distribution
    truncated: torch.Tensor  # [B] bool: hit max_new_tokens without EOS
    texts: list[str]  # [B] decoded completions (EOS and padding stripped)
    sample_seconds: float = 0.0

    def to(self, device: torch.device | str) -> Rollouts:
        """The same rollouts with every tensor on ``device`` (the learner's)."""
        moved = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in vars(self).items()}
        return Rollouts(**moved)

    @property
    def lengths(self) -> torch.Tensor:  # [B] response tokens per completion
        return self.mask.sum(-1)

    @property
    def input_ids(self) -> torch.Tensor:  # [B, P+T] what the learner runs teacher-forced
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:  # [B, P+T]
        return torch.cat([self.prompt_mask, self.mask.to(self.prompt_mask.dtype)], dim=1)


@dataclass
class ScoredRollouts:
    rollouts: Rollouts
    rewards: torch.Tensor  # [B] total reward
    correct: torch.Tensor  # [B] bool, judged by the verifier
    reward_terms: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> [B]
    score_seconds: float = 0.0
