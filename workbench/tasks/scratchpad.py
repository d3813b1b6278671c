"""Multi-operand sums where the response length is the policy's choice: answer at once or show the steps.

``17+5-9+40=`` can be answered tersely (``\\boxed{53}``) or with a scratchpad of running totals
(``17+5=22,22-9=13,13+40=53,\\boxed{53}``). A tiny model adds two numbers far more reliably than
it adds four at once, so the longer form should be the more accurate one: RL can move the length,
and moving it should pay. The cold-start SFT sees both forms (half each), so the starting policy uses both
and the length distribution has room to go either way. This is the task the length-bias
studies (Dr. GRPO Fig. 1) need: on ``arithmetic`` the ``\\boxed{}`` format fixes the length.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

import numpy as np

from workbench.tasks.base import EVAL_SHARE_OF_SPACE, GeneratedSplits, Problem, boxed, check_eval_size

OPS = "+-"
DEFAULT_OPERANDS = 4  # task.operands when a scratchpad study leaves it unset
WORKED_FRACTION = 0.5  # share of cold-start solutions that show their steps (the rest are terse)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def worked_solution(operands: list[int], ops: list[str]) -> str:
    """Running totals, one ``a op b=r`` step per operator, then the boxed result."""
    total, steps = operands[0], []
    for op, x in zip(ops, operands[1:], strict=True):
        new = total + x if op == "+" else total - x
        steps.append(f"{total}{op}{x}={new}")
        total = new
    return ",".join([*steps, boxed(str(total))])


def parse_prompt(prompt: str) -> tuple[list[int], list[str]]:
    """``"17+5-9="`` -> ``([17, 5, 9], ["+", "-"])``: a problem's operands and operators from its prompt."""
    terms = re.findall(r"\d+|[+-]", prompt.rstrip("="))
    return [int(t) for t in terms[::2]], terms[1::2]


def wrong_worked_solution(operands: list[int], ops: list[str], wrong: int) -> str:
    """The worked solution with its last step ending in ``wrong`` instead of the true total (and boxing it):
    every earlier step is the task's own, so the reasoning is right and only the result is not."""
    steps = worked_solution(operands, ops).split(",")[:-1]
    head, _ = steps[-1].rsplit("=", 1)
    return ",".join([*steps[:-1], f"{head}={wrong}", boxed(str(wrong))])


def count_prompts(digits: int, operands: int, ops: str, cap: int) -> int:
    """How many distinct prompts ``ScratchpadTask._draw`` can produce, or ``cap`` if at least that many.

    A prompt is a sequence of 2..``operands`` numbers below ``10**digits`` joined by ``ops``, every
    running total >= 0 (a subtrahend is at most the total so far). Counted by running total: after
    each operator, ``prefixes[t]`` is the number of distinct prompt prefixes whose total is ``t``.
    Counts are clipped at ``cap`` (a clipped count still means at least ``cap`` prompts), so the
    arrays stay small and exact in int64 for any ``cap`` up to ~10**15 / 10**digits."""
    n = 10**digits
    if n * (n + 1) // 2 >= cap:  # two operands alone (the smallest slice, one '-') reach the cap
        return cap
    prefixes = np.ones(n, dtype=np.int64)  # the first operand: totals 0..n-1, one prefix each
    total = 0
    for _ in range(operands - 1):
        cumulative = np.concatenate([[0], np.cumsum(prefixes)])  # cumulative[i] = prefixes[:i].sum()
        size = len(prefixes)
        extended = np.zeros(size + n - 1, dtype=np.int64)
        if "+" in ops:  # total s reached from t = s-x, x in 0..n-1
            upper = np.minimum(np.arange(size + n - 1) + 1, size)
            lower = np.clip(np.arange(size + n - 1) - (n - 1), 0, size)
            extended += cumulative[upper] - cumulative[lower]
        if "-" in ops:  # total s reached from t = s+x, x in 0..n-1 (x <= t holds as s >= 0)
            upper = np.minimum(np.arange(size) + n, size)
            extended[:size] += cumulative[upper] - cumulative[np.arange(size)]
        prefixes = np.minimum(extended, cap)
        total = min(total + int(prefixes.sum()), cap)
    return total


def check_scratchpad_eval_size(digits: int, operands: int, ops: str, eval_size: int) -> None:
    enough = EVAL_SHARE_OF_SPACE * (eval_size + 1)  # any count this large passes the check
    check_eval_size(
        eval_size,
        count_prompts(digits, operands, ops, cap=enough),
        f"scratchpad with digits={digits}, operands={operands}, ops={ops!r}",
    )


@dataclass
class ScratchpadTask(GeneratedSplits):
    """Problems ``a op b op c ...=`` with 2..``operands`` operands of up to ``digits`` digits.

    Subtraction never takes the running total below zero, so every intermediate result is a
    non-negative integer. The eval set is drawn once from ``seed`` and training problems that
    coincide with an eval prompt are rejected (disjoint splits), as in ``arithmetic``. Each
    problem's cold-start ``solution`` is terse or worked (drawn with the problem), so
    solutions vary in length both by operand count and by form.
    """

    digits: int = 2
    operands: int = DEFAULT_OPERANDS
    ops: str = "+-"
    seed: int = 0
    eval_size: int = 200
    name: str = "scratchpad"
    _eval: list[Problem] = field(init=False, repr=False)
    _eval_prompts: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.digits < 1:
            raise ValueError(f"task.digits must be >= 1, got {self.digits}")
        if self.operands < 2:
            raise ValueError(f"task.operands must be >= 2, got {self.operands}")
        bad = sorted(set(self.ops) - set(OPS))
        if not self.ops or bad:
            raise ValueError(f"task.ops must be a non-empty string of {OPS!r} for scratchpad, got {self.ops!r}")
        check_scratchpad_eval_size(self.digits, self.operands, self.ops, self.eval_size)
        self._draw_eval_set("scratchpad")

    def _draw(self, rng: random.Random) -> Problem:
        hi = 10**self.digits - 1
        count = rng.randint(2, self.operands)
        operands, ops = [rng.randint(0, hi)], []
        total = operands[0]
        for _ in range(count - 1):
            op = rng.choice(self.ops)
            x = rng.randint(0, hi if op == "+" else min(hi, total))  # keeps every running total >= 0
            total = total + x if op == "+" else total - x
            operands.append(x)
            ops.append(op)
        prompt = "".join(str(a) + op for a, op in zip(operands, [*ops, "="], strict=True))
        solution = worked_solution(operands, ops) if rng.random() < WORKED_FRACTION else boxed(str(total))
        return Problem(prompt=prompt, answer=str(total), solution=solution)

    def difficulty(self, problem: Problem) -> float:
        """The task's own difficulty knob: the number of operands (a curriculum's ``by: difficulty``)."""
        return float(len(parse_prompt(problem.prompt)[0]))

    def solution_forms(self, problem: Problem, wrong: int) -> dict[str, str]:
        """The cold start's solution forms of a problem (``data.prime``): running totals, the bare boxed
        answer, and running totals whose last step ends in ``wrong``."""
        operands, ops = parse_prompt(problem.prompt)
        return {
            "worked": worked_solution(operands, ops),
            "terse": boxed(problem.answer),
            "wrong": wrong_worked_solution(operands, ops, wrong),
        }

    def probe_correct(self, text: str, problem: Problem) -> bool:
        """The SFT probe's check: the last boxed value is the answer, in either form.

        Exact match of the worked solution (what ``arithmetic`` uses) would count a right
        terse answer to a problem whose drawn solution was worked as wrong."""
        found = _BOXED.findall(text)
        return bool(found) and found[-1] == problem.answer
