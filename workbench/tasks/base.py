"""What a task is: problems with a gold answer, split into disjoint train and eval sets."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol

# The eval set may take at most this share of a generated task's distinct prompts, so that at least
# three quarters remain for training (counted in prompts, not in draw probability: see
# ``GeneratedSplits.check_eval_size``).
EVAL_SHARE_OF_SPACE = 4


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


def check_eval_size(eval_size: int, space: int, settings: str) -> None:
    """``eval_size`` must be at most a quarter of the ``space`` distinct prompts a task draws.

    A task whose prompts are not equally likely loses more than that share of its training *draws*:
    an eval set of distinct prompts takes the likeliest ones first (``docs/findings.md`` gives the
    scratchpad task's figures)."""
    if eval_size > space // EVAL_SHARE_OF_SPACE:
        raise ValueError(
            f"task.eval_size={eval_size} leaves too few training problems: {settings} draws "
            f"{space:,} distinct prompts and the eval set may take at most a quarter of them "
            f"({space // EVAL_SHARE_OF_SPACE:,})"
        )


class GeneratedSplits:
    """Disjoint splits for a task that generates its problems with ``_draw(rng)``: the eval set is
    drawn once from ``seed`` (distinct prompts), and a training problem whose prompt is in it is
    rejected. A dataclass task with ``seed`` and ``eval_size`` calls ``_draw_eval_set(tag)`` last
    in ``__post_init__``; ``tag`` keeps each task's eval set its own for the same seed."""

    seed: int
    eval_size: int

    def _draw(self, rng: random.Random) -> Problem:
        raise NotImplementedError

    def _draw_eval_set(self, tag: str) -> None:
        rng = random.Random(f"{tag}-eval-{self.seed}")
        seen: dict[str, Problem] = {}
        while len(seen) < self.eval_size:
            p = self._draw(rng)
            seen.setdefault(p.prompt, p)
        self._eval = list(seen.values())
        self._eval_prompts = frozenset(seen)

    def sample_train(self, n: int, rng: random.Random) -> list[Problem]:
        out: list[Problem] = []
        while len(out) < n:
            p = self._draw(rng)
            if p.prompt not in self._eval_prompts:
                out.append(p)
        return out

    def eval_problems(self) -> list[Problem]:
        return list(self._eval)


def boxed(answer: str) -> str:
    """The answer format every worked example ends with (R1-style)."""
    return f"\\boxed{{{answer}}}"
