"""Data as a variant: which training prompts RL sees (curation) and in what order (curriculum).

The data side of the pipeline, kept free of models so that every rule is testable on hand-built
outcomes:

    a fixed pool of training prompts (drawn once from the task's seed)
    -> their pass rates (measured elsewhere: ``workbench.train.data``, the run's own sampler and verifier)
    -> a curator keeps some (``CURATORS``, e.g. ``pass_rate``: Kimi k1.5 drops the prompts an SFT model
       already solves every time)
    -> an order: ``sampled`` (i.i.d. draws, today's default), ``shuffled`` (passes over the pool, reshuffled
       each pass) or ``curriculum`` (easy to hard in stages, by pass rate or by the task's own difficulty).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.registry import Registry
from workbench.tasks.base import Problem, Task

# A curator: (pass rates of the pool's prompts, settings) -> which prompts to keep.
Curator = Callable[..., np.ndarray]
CURATORS: Registry[Curator] = Registry("prompt curator")


@CURATORS.register("pass_rate")
def keep_by_pass_rate(pass_rates: np.ndarray, *, keep: tuple[float, float]) -> np.ndarray:
    """Keep the prompts whose measured pass rate lies in the closed range ``keep`` = [lo, hi].

    ``keep: [0.0, 0.9]`` drops the prompts the initial policy answers right more than 90% of the
    time (Kimi k1.5's "too easy" prompts); ``[0.1, 0.9]`` also drops the never-solved ones."""
    lo, hi = keep
    rates = np.asarray(pass_rates, dtype=float)
    return (rates >= lo) & (rates <= hi)


PASS_RATE_BINS = 10  # the logged histogram: [0, 0.1), ..., [0.9, 1.0]


def pass_rate_histogram(pass_rates: Sequence[float]) -> list[int]:
    """Prompt counts per pass-rate decile; the last bin holds rate 1.0 (always solved)."""
    counts, _ = np.histogram(np.asarray(pass_rates, dtype=float), bins=PASS_RATE_BINS, range=(0.0, 1.0))
    return [int(c) for c in counts]


def draw_pool(task: Task, size: int, seed: int) -> list[Problem]:
    """``size`` distinct training prompts, fixed by ``seed`` (the task's): the prompts a curation measures.

    A task with fewer distinct training prompts (a small JSONL file) gives what it has: draws stop after
    ``20 × size`` tries."""
    rng = random.Random(f"data-pool-{seed}")
    pool: dict[str, Problem] = {}
    for _ in range(20):
        for problem in task.sample_train(size, rng):
            pool.setdefault(problem.prompt, problem)
            if len(pool) == size:
                return list(pool.values())
    return list(pool.values())


def difficulty_of(task: Task, problem: Problem) -> float:
    """The task's own difficulty of a problem (scratchpad: operand count; arithmetic: digits of the
    larger operand). Raises ``ValueError`` for a task without such a knob (JSONL)."""
    measure = getattr(task, "difficulty", None)
    if measure is None:
        raise ValueError(
            f"data.curriculum.by=difficulty: task {task.name!r} has no difficulty knob "
            "(scratchpad and arithmetic have one); order by pass_rate instead"
        )
    return float(measure(problem))


def easy_to_hard(keys: Sequence[float], *, larger_is_easier: bool) -> list[int]:
    """Indices ordered easy to hard; ties keep pool order (a stable sort), so the order is deterministic."""
    values = np.asarray(keys, dtype=float)
    return [int(i) for i in np.argsort(-values if larger_is_easier else values, kind="stable")]


@dataclass(frozen=True)
class Stage:
    """One curriculum stage: steps [first_step, last_step] draw from pool positions [start, stop)."""

    first_step: int
    last_step: int
    start: int
    stop: int
    key_range: tuple[float, float]  # the ordering key (pass rate or difficulty) over the stage's prompts


def curriculum_stages(ordered_keys: Sequence[float], stages: int, steps: int) -> list[Stage]:
    """Split an easy-to-hard pool into ``stages`` consecutive chunks of (nearly) equal size, and the RL
    steps into as many equal spans: span k draws from chunk k. Fewer prompts or steps than stages give
    fewer stages."""
    n = len(ordered_keys)
    count = max(1, min(stages, n, steps))
    bounds = [round(k * n / count) for k in range(count + 1)]
    step_bounds = [math.floor(k * steps / count) for k in range(count + 1)]
    out = []
    for k in range(count):
        chunk = ordered_keys[bounds[k] : bounds[k + 1]]
        out.append(
            Stage(
                step_bounds[k], step_bounds[k + 1] - 1, bounds[k], bounds[k + 1], (float(min(chunk)), float(max(chunk)))
            )
        )
    return out


@dataclass
class PromptOrder:
    """Which prompts each RL step gets: ``draw(step, n)``.

    ``pool`` is None for ``sampled`` without curation: the task's own i.i.d. draws (the default, and
    exactly the draws runs made before the ``data`` section existed). Otherwise prompts come from the
    pool: ``sampled`` draws with replacement, ``shuffled`` walks the pool in passes (each a fresh
    permutation), ``curriculum`` walks stage k's chunk in passes during stage k's steps. The pass in
    progress is state besides ``rng``: a checkpoint keeps it (``queue_state``), or a resumed run would
    start a fresh pass where the uninterrupted one went on with the old."""

    task: Task
    rng: random.Random
    order: str = "sampled"
    pool: list[Problem] | None = None
    pass_rates: list[float] | None = None  # per pool prompt, when measured (data.curate)
    stages: list[Stage] = field(default_factory=list)
    _queue: list[int] = field(default_factory=list, init=False, repr=False)
    _queue_stage: int = field(default=-1, init=False, repr=False)

    def stage_at(self, step: int) -> int:
        return next((k for k, s in enumerate(self.stages) if s.first_step <= step <= s.last_step), len(self.stages) - 1)

    def _span(self, step: int) -> range:
        if self.order == "curriculum":
            stage = self.stages[self.stage_at(step)]
            return range(stage.start, stage.stop)
        return range(len(self.pool or ()))

    def draw(self, step: int, n: int) -> list[Problem]:
        if self.pool is None:
            return self.task.sample_train(n, self.rng)
        if self.order == "sampled":
            return [self.pool[self.rng.randrange(len(self.pool))] for _ in range(n)]
        stage = self.stage_at(step) if self.order == "curriculum" else 0
        if stage != self._queue_stage:  # a new stage starts a fresh pass over its chunk
            self._queue, self._queue_stage = [], stage
        out = []
        while len(out) < n:
            if not self._queue:
                self._queue = list(self._span(step))
                self.rng.shuffle(self._queue)
            out.append(self.pool[self._queue.pop()])
        return out

    def queue_state(self) -> dict[str, Any]:
        """The pass in progress: the pool indices still to draw (drawn from the end) and the stage they cover."""
        return {"queue": list(self._queue), "stage": self._queue_stage}

    def set_queue_state(self, state: dict[str, Any]) -> None:
        """Continue the pass ``queue_state`` returned."""
        self._queue, self._queue_stage = [int(i) for i in state["queue"]], int(state["stage"])

    def step_metrics(self, step: int, problems: Sequence[Problem]) -> dict[str, float]:
        """``data/*`` per step: the curriculum's stage, and the mean measured pass rate of the step's prompts."""
        metrics: dict[str, float] = {}
        if self.order == "curriculum":
            metrics["data/curriculum_stage"] = float(self.stage_at(step))
        if self.pool is not None and self.pass_rates is not None:
            rate = {p.prompt: r for p, r in zip(self.pool, self.pass_rates, strict=True)}
            metrics["data/prompt_pass_rate"] = float(np.mean([rate[p.prompt] for p in problems]))
        return metrics
