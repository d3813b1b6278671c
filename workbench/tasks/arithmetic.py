"""Arithmetic problems (+ − × ÷) generated from a seed, with disjoint train/eval splits."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from workbench.tasks.base import GeneratedSplits, Problem, boxed, check_eval_size

OPS = "+-*/"


def count_prompts(digits: int, ops: str) -> int:
    """Distinct prompts ``ArithmeticTask._draw`` produces: every pair for + and ×, a >= b for −,
    a = b·q with b >= 1 for ÷ (operands below ``10**digits``)."""
    n = 10**digits
    per_op = {"+": n * n, "-": n * (n + 1) // 2, "*": n * n, "/": (n - 1) * n}
    return sum(per_op[op] for op in set(ops))


def check_arithmetic_eval_size(digits: int, ops: str, eval_size: int) -> None:
    check_eval_size(eval_size, count_prompts(digits, ops), f"arithmetic with digits={digits}, ops={ops!r}")


@dataclass
class ArithmeticTask(GeneratedSplits):
    """Problems ``a op b=`` with operands of up to ``digits`` digits.

    Subtraction keeps results non-negative and division is exact (``a = b·q``), so every
    answer is an integer. The eval set is drawn once from ``seed``; training problems that
    coincide with an eval problem are rejected, so the splits are disjoint.
    """

    digits: int = 2
    ops: str = "+-"
    seed: int = 0
    eval_size: int = 200
    name: str = "arithmetic"
    _eval: list[Problem] = field(init=False, repr=False)
    _eval_prompts: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.digits < 1:
            raise ValueError(f"task.digits must be >= 1, got {self.digits}")
        bad = sorted(set(self.ops) - set(OPS))
        if not self.ops or bad:
            raise ValueError(f"task.ops must be a non-empty string of {OPS!r}, got {self.ops!r}")
        check_arithmetic_eval_size(self.digits, self.ops, self.eval_size)
        self._draw_eval_set("arithmetic")

    def difficulty(self, problem: Problem) -> float:
        """The task's own difficulty knob: digits of the larger operand (a curriculum's ``by: difficulty``)."""
        return float(max(len(x) for x in re.split(r"[-+*/]", problem.prompt.rstrip("="))))

    def solution_forms(self, problem: Problem, wrong: int) -> dict[str, str]:
        """The cold start's solution forms (``data.prime``). A two-operand problem has no steps to show, so
        worked and terse are the same boxed answer, and wrong boxes ``wrong``."""
        return {"worked": boxed(problem.answer), "terse": boxed(problem.answer), "wrong": boxed(str(wrong))}

    def _draw(self, rng: random.Random) -> Problem:
        hi = 10**self.digits - 1
        op = rng.choice(self.ops)
        a, b = rng.randint(0, hi), rng.randint(0, hi)
        if op == "-" and a < b:
            a, b = b, a
        if op == "/":  # exact division: choose divisor and quotient, show their product
            b = rng.randint(1, hi)
            q = rng.randint(0, hi)
            a, result = b * q, q
        else:
            result = {"+": a + b, "-": a - b, "*": a * b}[op]
        return Problem(prompt=f"{a}{op}{b}=", answer=str(result), solution=boxed(str(result)))
