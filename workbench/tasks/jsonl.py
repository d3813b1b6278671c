"""Bring-your-own data: JSONL lines ``{"prompt": ..., "answer": ...}`` (GSM8K/MATH style)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from workbench.tasks.base import Problem


def read_problems(path: Path) -> list[Problem]:
    """Parse a JSONL file; errors name the file and line."""
    if not path.is_file():
        raise FileNotFoundError(f"task file not found: {path}")
    problems = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
        if not isinstance(row, dict) or not {"prompt", "answer"} <= row.keys():
            raise ValueError(f"{path}:{lineno}: each line needs the keys 'prompt' and 'answer'")
        solution = row.get("solution")
        problems.append(Problem(str(row["prompt"]), str(row["answer"]), None if solution is None else str(solution)))
    if not problems:
        raise ValueError(f"{path}: no problems found")
    return problems


@dataclass
class JsonlTask:
    """Train on ``path``; evaluate on ``eval_path``, or on a held-out ``eval_size`` slice of ``path``."""

    path: str
    eval_path: str | None = None
    eval_size: int = 200
    seed: int = 0
    name: str = "jsonl"
    _train: list[Problem] = field(init=False, repr=False)
    _eval: list[Problem] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        problems = read_problems(Path(self.path))
        if self.eval_path:
            self._train, self._eval = problems, read_problems(Path(self.eval_path))
            return
        if len(problems) < 2:
            raise ValueError(f"{self.path}: need at least 2 problems to split off an eval set")
        order = list(range(len(problems)))
        random.Random(f"jsonl-split-{self.seed}").shuffle(order)
        k = min(self.eval_size, len(problems) // 2)
        self._eval = [problems[i] for i in order[:k]]
        self._train = [problems[i] for i in order[k:]]

    def sample_train(self, n: int, rng: random.Random) -> list[Problem]:
        return [rng.choice(self._train) for _ in range(n)]

    def eval_problems(self) -> list[Problem]:
        return list(self._eval)
