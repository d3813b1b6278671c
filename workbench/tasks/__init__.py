"""Tasks: where prompts and gold answers come from."""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.tasks.arithmetic import ArithmeticTask
from workbench.tasks.base import Problem, Task, boxed
from workbench.tasks.jsonl import JsonlTask
from workbench.tasks.scratchpad import DEFAULT_OPERANDS, ScratchpadTask

if TYPE_CHECKING:
    from workbench.config import TaskConfig

__all__ = ["ArithmeticTask", "JsonlTask", "Problem", "ScratchpadTask", "Task", "boxed", "build_task"]


def build_task(cfg: TaskConfig) -> Task:
    if cfg.name == "arithmetic":
        return ArithmeticTask(digits=cfg.digits, ops=cfg.ops, seed=cfg.seed, eval_size=cfg.eval_size)
    if cfg.name == "scratchpad":
        return ScratchpadTask(
            digits=cfg.digits,
            operands=cfg.operands or DEFAULT_OPERANDS,
            ops=cfg.ops,
            seed=cfg.seed,
            eval_size=cfg.eval_size,
        )
    return JsonlTask(path=cfg.path or "", eval_path=cfg.eval_path, eval_size=cfg.eval_size, seed=cfg.seed)
