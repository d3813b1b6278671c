"""Priming data: the cold start's supervised solutions as a knob (``data.prime.mix``).

The cognitive-behaviours thread (shared seeds, ``002_*``) reports that what a model is primed with
before RL decides whether RL takes off, and that worked solutions ending in a *wrong* answer prime
as well as correct ones: the reasoning pattern matters, not the answer. Here a task that has solution
forms (``solution_forms(problem, wrong)``) offers three: ``worked`` (its own steps), ``terse`` (the
boxed answer alone) and ``wrong`` (its own steps, the last one ending in a wrong result). A mix draws
one form per problem with the given shares.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from workbench.tasks.base import Problem, Task
from workbench.tasks.jsonl import read_numbered_problems

FORMS = ("worked", "terse", "wrong")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
WRONG_OFFSETS = (-3, -2, -1, 1, 2, 3)  # a wrong answer is the true one moved by a small non-zero amount


def wrong_answer(answer: str, rng: random.Random) -> int:
    """An integer near ``answer`` and never equal to it; non-negative when the answer is (the tasks' totals are)."""
    true, offset = int(answer), rng.choice(WRONG_OFFSETS)
    return true + offset if true + offset >= 0 else true - offset


def has_solution_forms(task: Task) -> bool:
    return callable(getattr(task, "solution_forms", None))


def primed_solutions(task: Task, mix: Mapping[str, float]) -> Callable[[Problem, random.Random], Problem]:
    """A function re-writing a problem's ``solution`` in a form drawn with the shares of ``mix``."""
    if not has_solution_forms(task):
        raise ValueError(
            f"data.prime.mix: task {task.name!r} has no solution forms (scratchpad and arithmetic "
            "do); a JSONL task primes from its own 'solution' field"
        )
    forms = [form for form in FORMS if mix.get(form, 0.0) > 0]
    weights = [mix[form] for form in forms]

    def rewrite(problem: Problem, rng: random.Random) -> Problem:
        form = rng.choices(forms, weights)[0]
        text = task.solution_forms(problem, wrong_answer(problem.answer, rng))[form]  # type: ignore[attr-defined]  # only tasks with solution_forms get here (checked when the task is built)
        return Problem(problem.prompt, problem.answer, text)

    return rewrite


@dataclass
class WorkedSolutions:
    """``data.prime.path`` read as the SFT stage's task (for ``model.path``): every line must carry a ``solution``."""

    path: str
    name: str = "prime"
    problems: list[Problem] = field(init=False)

    def __post_init__(self) -> None:
        numbered = read_numbered_problems(Path(self.path))
        lacking = [line for line, p in numbered if p.solution is None]
        if lacking:
            raise ValueError(
                f"{self.path}:{lacking[0]}: no 'solution' (data.prime.path is SFT data: every line "
                f"needs one; {len(lacking)} line(s) lack it)"
            )
        self.problems = [p for _, p in numbered]

    def sample_train(self, n: int, rng: random.Random) -> list[Problem]:
        return [rng.choice(self.problems) for _ in range(n)]

    def eval_problems(self) -> list[Problem]:
        return []

    def probe_correct(self, text: str, problem: Problem) -> bool:
        """Right when the last boxed value is the answer; without a box, when the text is the solution."""
        found = _BOXED.findall(text)
        return found[-1].strip() == problem.answer.strip() if found else text.strip() == (problem.solution or "")
