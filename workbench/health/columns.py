"""A run's metric history as columns, block by block: what the health rules judge all at once.

``HealthMonitor.observe`` costs ~0.1-0.3 ms a step in Python (14 rules, each with its bookkeeping;
``reward_collapse`` refits its AR(1) noise at every step), so a 1M-step history would take
minutes. :class:`StepColumns` collects ``(step, metrics)`` pairs into blocks (:class:`Block`) of a few
thousand steps, numpy arrays per metric a rule reads, and hands each to
``HealthMonitor.observe_block``: every rule judges the whole block with numpy
(``HealthRule.observe_block``) and carries its state to the next block, so memory stays bounded
and the events, their steps and messages, the report and the rules' state are the same as
observing the steps one by one (tests/health/test_columns.py compares them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["BLOCK_STEPS", "Block", "StepColumns"]

#: Steps per block: large enough that numpy's per-call cost is spread thin, small enough that a
#: block's arrays (and the rules' batched windows of up to 166 values per step) stay a few MB.
BLOCK_STEPS = 8192


def _number(v: Any) -> float | None:
    """``rules.to_float`` (a metric value as a float, None if not a number), with floats passed
    straight through: they are nearly every value, and this runs once per value."""
    if type(v) is float:
        return v
    if v is None or isinstance(v, (bool, str, bytes)):
        return None
    try:
        return float(v)
    except Exception:  # noqa: BLE001 - whatever does not convert is not a number (rules.to_float)
        return None


@dataclass
class Block:
    """Consecutive observed steps of a run, as columns.

    ``values[name]`` holds each step's value of ``name`` as a float, NaN where the step had none
    (or a value that is not a number); ``present[name]`` says which steps had a number for it.
    Only the metrics the rules read are columns, and only those some step had; ``numeric`` (the step had any number) and
    ``non_finite`` (position -> the step's NaN/inf values) serve ``non_finite``, which reads every
    metric. ``rows`` keeps the steps' own dicts, only when a rule has no column form.
    """

    steps: np.ndarray  # int64, strictly ascending
    values: dict[str, np.ndarray]
    present: dict[str, np.ndarray]
    numeric: np.ndarray  # bool per step
    non_finite: dict[int, list[tuple[str, float]]]
    names: set[str]  # every metric name the block's steps carried (the monitor's "seen")
    rows: list[Mapping[str, Any]] | None = None

    def __len__(self) -> int:
        return len(self.steps)

    def has(self, name: str) -> np.ndarray:
        """Which steps had a number for ``name``."""
        x = self.present.get(name)
        return np.zeros(len(self), dtype=bool) if x is None else x

    def finite(self, name: str) -> np.ndarray:
        """``name``'s values with NaN wherever a rule would not evaluate it (absent, NaN, ±inf)."""
        x = self.values.get(name)
        if x is None:
            return np.full(len(self), math.nan)
        return np.where(np.isfinite(x), x, math.nan)

    def row(self, position: int, names: Iterable[str]) -> dict[str, float]:
        """The step at ``position`` as a rule's ``update`` would get it, restricted to ``names``."""
        return {n: float(self.values[n][position]) for n in names if n in self.present and self.present[n][position]}


@dataclass
class StepColumns:
    """Collects ``(step, metrics)`` pairs (steps strictly increasing) into blocks of ``size``
    steps, each handed to ``sink`` when full and by :meth:`finish`. ``names``: the metrics kept as
    columns; ``keep_rows``: keep the steps' dicts too (a rule without a column form reads them)."""

    names: Iterable[str]
    sink: Callable[[Block], Any]
    keep_rows: bool = False
    size: int = BLOCK_STEPS
    last_step: int | None = None
    _steps: list[int] = field(default_factory=list)
    _numeric: list[bool] = field(default_factory=list)
    _non_finite: dict[int, list[tuple[str, float]]] = field(default_factory=dict)
    _seen: set[str] = field(default_factory=set)
    _rows: list[Mapping[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.names = tuple(dict.fromkeys(self.names))
        self._new_columns()

    def _new_columns(self) -> None:
        # Python lists while filling (an item store is ~4x cheaper than into a numpy array), None where absent
        self._values: dict[str, list[float | None]] = {n: [None] * self.size for n in self.names}
        self._filled: set[str] = set()  # the columns some step of the block had

    def add(self, step: int, metrics: Mapping[str, Any]) -> None:
        """One step (once per step of a history of millions: kept lean)."""
        if self.last_step is not None and step <= self.last_step:
            raise ValueError(
                f"health monitor steps must strictly increase: got step {step} after {self.last_step} "
                "(merge a step's metrics into one dict and call observe once per step)"
            )
        self.last_step = step
        i = len(self._steps)
        self._steps.append(step)
        self._seen.update(metrics)
        if self.keep_rows:
            self._rows.append(metrics)
        numeric = False
        values, isfinite = self._values, math.isfinite
        for name, v in metrics.items():
            x = v if type(v) is float else _number(v)
            if x is None:
                continue
            numeric = True
            if not isfinite(x):
                self._non_finite.setdefault(i, []).append((name, x))
            column = values.get(name)
            if column is not None:
                column[i] = x
                self._filled.add(name)
        self._numeric.append(numeric)
        if i + 1 == self.size:
            self._flush()

    def finish(self) -> None:
        """Hand over the last, partial block."""
        if self._steps:
            self._flush()

    def _flush(self) -> None:
        n = len(self._steps)
        filled = {k: self._values[k][:n] for k in self._filled}
        present = {k: np.fromiter((x is not None for x in v), dtype=bool, count=n) for k, v in filled.items()}
        values = {
            k: np.fromiter((math.nan if x is None else x for x in v), dtype=float, count=n) for k, v in filled.items()
        }
        block = Block(
            steps=np.array(self._steps, dtype=np.int64),
            values=values,
            present=present,
            numeric=np.array(self._numeric, dtype=bool),
            non_finite=self._non_finite,
            names=self._seen,
            rows=self._rows if self.keep_rows else None,
        )
        self._steps, self._numeric, self._non_finite, self._seen, self._rows = [], [], {}, set(), []
        self._new_columns()
        self.sink(block)
