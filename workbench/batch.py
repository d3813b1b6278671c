"""Typed containers passed between stages: Rollouts (sampled) -> ScoredRollouts (rewarded)
-> TrainBatch (what the policy update consumes).

Scoring may still be running when the update starts (``reward.overlap``): then the stages hand on
``PendingScores`` and ``PendingBatch``, which hold what is known already (the rollouts, the loss mask)
and wait for the rewards in ``ready()``. Every stage calls ``ready()`` where it first needs a reward;
on a finished value it is the value itself.

Shapes: B sequences (prompts × group), P prompt tokens (left-padded), T response tokens
(right-padded). ``mask`` is 1 on response tokens, EOS included.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
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
    # [B] bool: the verifier ran out of time (scored incorrect); None: not scored by an AnswerVerifier
    timed_out: torch.Tensor | None = None

    def ready(self) -> ScoredRollouts:
        return self  # scored already


class PendingScores:
    """Rollouts whose rewards a background thread is still computing; ``ready()`` waits for them (and
    raises what the scoring raised)."""

    def __init__(self, rollouts: Rollouts, future: Future) -> None:
        self.rollouts = rollouts
        self._future = future

    def ready(self) -> ScoredRollouts:
        return self._future.result()


@dataclass
class TrainBatch:
    """One RL step's update input, handed from scoring and advantage estimation to the learner.

    The token ids, masks and sampler logprobs are the rollouts'; the rest is named here.
    """

    step: int  # the RL step this batch trains (fault injection and followers key on it)
    rollouts: Rollouts  # token ids [B, P+T], response mask [B, T], sampler logprobs [B, T]
    advantages: torch.Tensor  # [B] one advantage per sequence
    loss_mask: torch.Tensor  # [B, T] the response tokens that carry gradient (token filters applied)
    ref_logp: torch.Tensor | None = None  # [B, T] reference-policy logprobs (KL); None without KL

    @classmethod
    def of(
        cls,
        rollouts: Rollouts,
        advantages: torch.Tensor,
        *,
        step: int = 0,
        loss_mask: torch.Tensor | None = None,
        ref_logp: torch.Tensor | None = None,
    ) -> TrainBatch:
        """A batch whose loss mask defaults to every response token."""
        return cls(step, rollouts, advantages, rollouts.mask if loss_mask is None else loss_mask, ref_logp)

    def ready(self) -> TrainBatch:
        return self  # its advantages are known

    def to(self, device: torch.device | str) -> TrainBatch:
        """The same batch with every tensor on ``device``."""
        return TrainBatch(
            self.step,
            self.rollouts.to(device),
            self.advantages.to(device),
            self.loss_mask.to(device),
            None if self.ref_logp is None else self.ref_logp.to(device),
        )


class PendingBatch:
    """A ``TrainBatch`` whose advantages wait on rewards still being scored: the update runs what needs
    no reward (the learner's forward, the mismatch metrics) and then calls ``ready()``."""

    def __init__(
        self,
        step: int,
        rollouts: Rollouts,
        loss_mask: torch.Tensor,
        ref_logp: torch.Tensor | None,
        complete: Callable[[], TrainBatch],
    ) -> None:
        self.step, self.rollouts, self.loss_mask, self.ref_logp = step, rollouts, loss_mask, ref_logp
        self._complete = complete  # waits for the rewards, returns the whole batch
        self._batch: TrainBatch | None = None

    def ready(self) -> TrainBatch:
        if self._batch is None:  # once: the advantages are computed (and timed) one time
            self._batch = self._complete()
        return self._batch


def select(scored: ScoredRollouts, keep: torch.Tensor) -> ScoredRollouts:
    """The completions where ``keep`` [B] is true (whole groups, for batch filters)."""
    r = scored.rollouts
    idx = keep.nonzero().squeeze(-1)
    rollouts = Rollouts(
        problems=[r.problems[i] for i in idx.tolist()],
        group_ids=r.group_ids[idx],
        prompt_ids=r.prompt_ids[idx],
        prompt_mask=r.prompt_mask[idx],
        completion_ids=r.completion_ids[idx],
        mask=r.mask[idx],
        sampler_logp=r.sampler_logp[idx],
        truncated=r.truncated[idx],
        texts=[r.texts[i] for i in idx.tolist()],
    )
    return ScoredRollouts(
        rollouts,
        scored.rewards[idx],
        scored.correct[idx],
        {k: v[idx] for k, v in scored.reward_terms.items()},
        None if scored.timed_out is None else scored.timed_out[idx],
    )


def concat(parts: list[ScoredRollouts]) -> ScoredRollouts:
    """Stack rounds of scored rollouts; prompts re-padded on the left, completions on the right.

    Group ids are renumbered so groups from different rounds never collide.
    """
    if len(parts) == 1:
        return parts[0]
    P = max(p.rollouts.prompt_ids.shape[1] for p in parts)
    T = max(p.rollouts.completion_ids.shape[1] for p in parts)
    pad_id = 0  # any id works under a zero attention mask; 0 keeps the tensors valid indices

    def left(x: torch.Tensor, width: int, value) -> torch.Tensor:
        return torch.nn.functional.pad(x, (width - x.shape[1], 0), value=value)

    def right(x: torch.Tensor, width: int, value) -> torch.Tensor:
        return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)

    offset, group_ids = 0, []
    for p in parts:
        group_ids.append(p.rollouts.group_ids + offset)
        offset += int(p.rollouts.group_ids.max()) + 1 if len(p.rollouts.group_ids) else 0
    rs = [p.rollouts for p in parts]
    rollouts = Rollouts(
        problems=[q for r in rs for q in r.problems],
        group_ids=torch.cat(group_ids),
        prompt_ids=torch.cat([left(r.prompt_ids, P, pad_id) for r in rs]),
        prompt_mask=torch.cat([left(r.prompt_mask, P, 0) for r in rs]),
        completion_ids=torch.cat([right(r.completion_ids, T, pad_id) for r in rs]),
        mask=torch.cat([right(r.mask, T, 0.0) for r in rs]),
        sampler_logp=torch.cat([right(r.sampler_logp, T, 0.0) for r in rs]),
        truncated=torch.cat([r.truncated for r in rs]),
        texts=[t for r in rs for t in r.texts],
    )
    terms = {k: torch.cat([p.reward_terms[k] for p in parts]) for k in parts[0].reward_terms}
    flags = [p.timed_out for p in parts]
    timed_out = None if any(f is None for f in flags) else torch.cat([f for f in flags if f is not None])
    return ScoredRollouts(
        rollouts, torch.cat([p.rewards for p in parts]), torch.cat([p.correct for p in parts]), terms, timed_out
    )
