"""What a task is: problems with a gold answer, split into disjoint train and eval sets."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Problem:
    prompt: str  # the text the model continues, e.g. "47+38="
    answer: str  # gold answer checked by math-verify, e.g. "85"
    solution: str | None = None  # a worked completion for the cold-start SFT, e.g. "\\boxed{85}"


class Task(Protocol):
    name: str

    def sample_train(self, n: int, rng: random.Random) -> list[Problem]:
        """n training problems drawn with the caller's rng (never from the eval set)."""
        ...

    def eval_problems(self) -> list[Problem]:
        """The fixed held-out set, identical on every call."""
        ...


def boxed(answer: str) -> str:
    """The answer format every worked example ends with (R1-style)."""
    return f"\\boxed{{{answer}}}"
