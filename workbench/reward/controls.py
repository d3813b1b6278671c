"""Spurious-reward controls: a registered reward that replaces the verifier's correctness term in training.

Shao et al. 2025, "Spurious Rewards: Rethinking Training Signals in RLVR" (arXiv:2506.10947) train
Qwen2.5-Math-7B with rewards that carry little or no information about correctness (random, format-only,
incorrect-label) and report MATH-500 gains close to ground truth's, which they attribute to the clipping
bias of PPO/GRPO (docs/findings.md sets the workbench's study beside their figures). ``reward.control``
names one of these units; the reward is then ``control + Σ shaping``. The verifier still judges every
completion, so ``accuracy/train`` and every ``eval/*`` stay true correctness; only the signal the learner
trains on changes.

Contract of a control registered in :data:`REWARD_CONTROLS`::

    control(inp: ControlInput, **params) -> Tensor[B] (float32)

reading only the fields it needs (its params are keyword-only, checked up front by
:func:`validate_control`). No I/O; randomness only from ``inp.seed`` (the batch's sampling seed, which
the run derives from its seed, the step and the sampling round), so a resumed run draws the same rewards.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import torch

from workbench.registry import Activity, Registry
from workbench.reward.shaping import has_boxed_answer

__all__ = ["REWARD_CONTROLS", "ControlInput", "validate_control"]

RANDOM_SALT = 0x5EED_C0DE  # keeps the random reward's stream apart from the sampler's, which uses the same seed


@dataclass(frozen=True)
class ControlInput:
    """One batch of completions as a control sees it (``B`` completions)."""

    completions: Sequence[str]  # [B] decoded response texts
    answers: Sequence[str]  # [B] gold answers
    correct: torch.Tensor  # [B] bool, the verifier's judgement (against the gold answer)
    extracted: Sequence[str | None]  # [B] the answer the task's answer format read, None if none
    seed: int  # the batch's sampling seed
    # (the B completions, one label each) -> [B] bool, the verifier; its timeouts count in reward/verify_timeout_frac
    judge: Callable[[Sequence[str], Sequence[str]], torch.Tensor]


Control = Callable[..., torch.Tensor]
REWARD_CONTROLS: Registry[Control] = Registry(
    "reward control", activity=Activity.always("replaces the correctness reward of every response")
)


@REWARD_CONTROLS.register("random")
def random_reward(inp: ControlInput, *, p: float = 0.5) -> torch.Tensor:
    """1 with probability ``p``, else 0, independently per completion, whatever it says.

    Spurious Rewards (Shao et al. 2025, arXiv:2506.10947), the random reward (a Bernoulli(γ) draw per
    response; γ = 0.5 is this default). Seeded by the batch's sampling seed: the same run draws the same
    rewards, another seed other ones.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"reward control random: p must be in [0, 1], got {p}")
    generator = torch.Generator().manual_seed((inp.seed ^ RANDOM_SALT) % 2**63)
    return (torch.rand(len(inp.completions), generator=generator) < p).to(torch.float32)  # [B]


@REWARD_CONTROLS.register("format_only")
def format_only(inp: ControlInput, *, boxed: bool = False) -> torch.Tensor:
    """1 where the completion states an answer in the expected form, right or wrong; else 0.

    Spurious Rewards (Shao et al. 2025, arXiv:2506.10947), the format reward (a non-empty ``\\boxed{}``,
    ``boxed: true``). With ``boxed: false`` (default) the form is the task's own answer format: 1 where it
    read an answer at all (``task.answer_format``; the built-in tasks' ``####`` lines have no box).
    """
    if boxed:
        return torch.tensor([1.0 if has_boxed_answer(c) else 0.0 for c in inp.completions], dtype=torch.float32)
    return torch.tensor([0.0 if e is None else 1.0 for e in inp.extracted], dtype=torch.float32)  # [B]


def wrong_label(answer: str, offset: int) -> str:
    """The gold answer moved by ``offset`` (a number: ``"12"`` → ``"13"``); ``ValueError`` for a non-number."""
    try:
        value = Decimal(answer.strip().replace(",", ""))
    except InvalidOperation:
        raise ValueError(f"reward control incorrect_label needs numeric gold answers, got {answer!r}") from None
    return str(value + offset)


@REWARD_CONTROLS.register("incorrect_label")
def incorrect_label(inp: ControlInput, *, offset: int = 1) -> torch.Tensor:
    """1 where the completion matches a wrong label (the gold answer + ``offset``), judged by the verifier.

    Spurious Rewards (Shao et al. 2025, arXiv:2506.10947), the incorrect-label reward. The paper's wrong
    labels come from its own procedure (read its §2 for it); here the label is a fixed, always-wrong
    transform of the gold answer, so the reward is correlated with nearly-right arithmetic, not with truth.
    """
    if offset == 0:
        raise ValueError("reward control incorrect_label: offset 0 is the gold answer, not an incorrect label")
    labels = [wrong_label(a, offset) for a in inp.answers]
    return inp.judge(inp.completions, labels).to(torch.float32)  # [B]


@REWARD_CONTROLS.register("constant")
def constant(inp: ControlInput, *, value: float = 1.0) -> torch.Tensor:
    """``value`` for every completion: no signal at all (every group's rewards are equal).

    The no-information floor of Spurious Rewards' controls (Shao et al. 2025, arXiv:2506.10947): a
    group-normalised advantage is then 0 everywhere, so any change of the policy comes from elsewhere
    (KL, shaping terms, or a baseline that is not the group's).
    """
    return torch.full((len(inp.completions),), float(value), dtype=torch.float32)  # [B]


def validate_control(name: str, params: Mapping[str, Any]) -> None:
    """``ValueError`` for an unknown control (listing the valid ones) or params it does not take."""
    fn = REWARD_CONTROLS.get(name)
    sig = inspect.signature(fn)
    try:
        sig.bind(None, **dict(params))
    except TypeError as error:
        accepted = [p.name for p in list(sig.parameters.values())[1:]]
        raise ValueError(
            f"bad params for reward control {name!r}: {error}; it accepts {accepted}, got {sorted(params)}"
        ) from None
