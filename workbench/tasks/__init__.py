"""Tasks: where prompts and gold answers come from."""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.tasks.arithmetic import OPS as ARITHMETIC_OPS
from workbench.tasks.arithmetic import ArithmeticTask, check_arithmetic_eval_size
from workbench.tasks.base import Problem, Task, boxed
from workbench.tasks.jsonl import JsonlTask
from workbench.tasks.scratchpad import OPS as SCRATCHPAD_OPS
from workbench.tasks.scratchpad import ScratchpadTask, check_scratchpad_eval_size

if TYPE_CHECKING:
    from workbench.config import TaskConfig

__all__ = ["ArithmeticTask", "JsonlTask", "Problem", "ScratchpadTask", "Task", "boxed", "build_task",
           "check_task_eval_size"]


SCRATCHPAD_OPERANDS = 4  # task.operands when a scratchpad study leaves it unset


def check_task_eval_size(cfg: TaskConfig) -> None:
    """A generated task's ``eval_size`` against its cap (a quarter of its distinct prompts), before any
    problem is drawn: ``ValueError`` naming task.eval_size. Settings the task itself rejects (digits,
    ops) are left to it."""
    if cfg.digits < 1 or not cfg.ops:
        return
    if cfg.name == "arithmetic" and not set(cfg.ops) - set(ARITHMETIC_OPS):
        check_arithmetic_eval_size(cfg.digits, cfg.ops, cfg.eval_size)
    elif cfg.name == "scratchpad" and not set(cfg.ops) - set(SCRATCHPAD_OPS):
        check_scratchpad_eval_size(cfg.digits, cfg.operands or SCRATCHPAD_OPERANDS, cfg.ops, cfg.eval_size)


def build_task(cfg: TaskConfig) -> Task:
    if cfg.name == "arithmetic":
        return ArithmeticTask(digits=cfg.digits, ops=cfg.ops, seed=cfg.seed, eval_size=cfg.eval_size)
    if cfg.name == "scratchpad":
        return ScratchpadTask(digits=cfg.digits, operands=cfg.operands or SCRATCHPAD_OPERANDS, ops=cfg.ops,
                              seed=cfg.seed, eval_size=cfg.eval_size)
    return JsonlTask(path=cfg.path or "", eval_path=cfg.eval_path, eval_size=cfg.eval_size, seed=cfg.seed)
