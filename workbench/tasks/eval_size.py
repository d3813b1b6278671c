"""The eval-size cap of the generated tasks, checked from their settings alone (no problem drawn), so
that a config can be refused before a study is planned."""

from __future__ import annotations

from workbench.tasks.arithmetic import OPS as ARITHMETIC_OPS
from workbench.tasks.arithmetic import check_arithmetic_eval_size
from workbench.tasks.arithmetic import count_prompts as count_arithmetic_prompts
from workbench.tasks.base import EVAL_SHARE_OF_SPACE
from workbench.tasks.scratchpad import DEFAULT_OPERANDS, check_scratchpad_eval_size
from workbench.tasks.scratchpad import OPS as SCRATCHPAD_OPS
from workbench.tasks.scratchpad import count_prompts as count_scratchpad_prompts


def check_task_eval_size(name: str, *, digits: int, ops: str, operands: int | None, eval_size: int) -> None:
    """``ValueError`` naming task.eval_size when it exceeds a quarter of the task's distinct prompts.
    Settings the task itself rejects (digits, ops) are left to it; a JSONL task has no cap here."""
    if digits < 1 or not ops:
        return
    if name == "arithmetic" and not set(ops) - set(ARITHMETIC_OPS):
        check_arithmetic_eval_size(digits, ops, eval_size)
    elif name == "scratchpad" and not set(ops) - set(SCRATCHPAD_OPS):
        check_scratchpad_eval_size(digits, operands or DEFAULT_OPERANDS, ops, eval_size)


def fitting_eval_size(name: str, *, digits: int, ops: str, operands: int | None, default: int) -> int:
    """The default eval size for a generated task: ``default``, or the largest the task allows (a
    quarter of its distinct prompts) when ``default`` would exceed it, so that a valid small task (1-digit
    addition: 100 prompts, eval 25) plans without the user finding the field. A JSONL task, or settings
    the task itself rejects, keep ``default``."""
    if digits < 1 or not ops:
        return default
    if name == "arithmetic" and not set(ops) - set(ARITHMETIC_OPS):
        space = count_arithmetic_prompts(digits, ops)
    elif name == "scratchpad" and not set(ops) - set(SCRATCHPAD_OPS):
        space = count_scratchpad_prompts(
            digits, operands or DEFAULT_OPERANDS, ops, cap=EVAL_SHARE_OF_SPACE * (default + 1)
        )
    else:
        return default
    return max(1, min(default, space // EVAL_SHARE_OF_SPACE))
