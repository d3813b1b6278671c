"""Bring-your-own data: JSONL lines ``{"prompt": ..., "answer": ...}`` (GSM8K/MATH style)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from workbench.tasks.base import Problem


def read_problems(path: Path) -> list[Problem]:
    """Parse a JSONL file line by line; every error is one line naming the file and the line number.

    A line is an object with a non-empty string ``prompt`` (or ``question``, as GSM8K names it), an ``answer`` (string or number) and
    optionally a string ``solution`` (a worked completion, needed by the built-in model's SFT)."""
    return [problem for _, problem in read_numbered_problems(path)]


def read_numbered_problems(path: Path) -> list[tuple[int, Problem]]:
    """``(line number, problem)`` for each non-blank line of a JSONL file (see ``read_problems``)."""
    import stat

    if not path.is_file():
        raise FileNotFoundError(f"task file not found: {path}")
    if not stat.S_ISREG(path.stat().st_mode):  # is_file() follows links; refuse devices and pipes
        raise ValueError(f"{path}: not a regular file")
    problems = []
    with open(path, "rb") as handle:  # bytes: a bad UTF-8 sequence is reported with its line
        for lineno, raw in enumerate(handle, start=1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark (Windows editors)
                raw = raw[3:]
            problem = _parse_line(raw, f"{path}:{lineno}")
            if problem is not None:
                problems.append((lineno, problem))
    if not problems:
        raise ValueError(f"{path}: no problems found (expected one JSON object per line with 'prompt' and 'answer')")
    return problems


def _parse_line(raw: bytes, where: str) -> Problem | None:
    """One JSONL line -> a Problem, ``None`` for a blank line; ``ValueError`` naming ``where`` otherwise."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start} of the line)") from None
    if not line.strip():
        return None
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        where_in_line = f"{e.msg} column" if e.msg.endswith(" at") else f"{e.msg} at column"  # json's wording varies
        raise ValueError(f"{where}: invalid JSON ({where_in_line} {e.colno})") from None
    except RecursionError:
        raise ValueError(f"{where}: invalid JSON (nested too deeply)") from None
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object with 'prompt' and 'answer', got a {type(row).__name__}")
    if "prompt" not in row and "question" in row:  # GSM8K's own field name
        row["prompt"] = row["question"]
    missing = [key for key in ("prompt", "answer") if key not in row]
    if missing:
        raise ValueError(f"{where}: each line needs 'prompt' and 'answer'; missing {' and '.join(map(repr, missing))}")
    prompt, answer, solution = row["prompt"], row["answer"], row.get("solution")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"{where}: 'prompt' must be a non-empty string")
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)) or not str(answer).strip():
        raise ValueError(f"{where}: 'answer' must be a non-empty string or a number")
    if solution is not None and not isinstance(solution, str):
        raise ValueError(f"{where}: 'solution' must be a string")
    return Problem(prompt, str(answer), solution)


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
