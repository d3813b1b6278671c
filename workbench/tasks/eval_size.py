"""The eval-size cap of the generated tasks, checked from their settings alone (no problem drawn), so
that a config can be refused before a study is planned."""

from __future__ import annotations

from workbench.tasks.arithmetic import OPS as ARITHMETIC_OPS
from workbench.tasks.arithmetic import check_arithmetic_eval_size
from workbench.tasks.scratchpad import DEFAULT_OPERANDS, check_scratchpad_eval_size
from workbench.tasks.scratchpad import OPS as SCRATCHPAD_OPS


def check_task_eval_size(name: str, *, digits: int, ops: str, operands: int | None, eval_size: int) -> None:
    """``ValueError`` naming task.eval_size when it exceeds a quarter of the task's distinct prompts.
    Settings the task itself rejects (digits, ops) are left to it; a JSONL task has no cap here."""
    if digits < 1 or not ops:
        return
    if name == "arithmetic" and not set(ops) - set(ARITHMETIC_OPS):
        check_arithmetic_eval_size(digits, ops, eval_size)
    elif name == "scratchpad" and not set(ops) - set(SCRATCHPAD_OPS):
        check_scratchpad_eval_size(digits, operands or DEFAULT_OPERANDS, ops, eval_size)
