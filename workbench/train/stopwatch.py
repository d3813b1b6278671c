"""One stopwatch for a run's timing metrics (``perf/*``): named sections of wall-clock time.

    watch = Stopwatch()
    with watch("learn"):
        ...
    watch.lap()  # {"learn": 0.42}: the seconds per section since the last lap

A section entered several times adds up; sections may nest (``learn`` holds ``algorithm``) and may be
timed on another thread (background scoring) as long as it ends before the lap that reports it.
``timed`` wraps the callables of a frozen dataclass (the update's algorithm units), so code that
calls them holds no timing of its own.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

Units = TypeVar("Units")


class Stopwatch:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._lock = threading.Lock()  # a background thread adds its section while the caller times others

    @contextmanager
    def __call__(self, section: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            with self._lock:
                self.seconds[section] += elapsed

    def lap(self) -> dict[str, float]:
        """The seconds per section since the last lap; starts the next lap from zero."""
        with self._lock:
            seconds, self.seconds = dict(self.seconds), defaultdict(float)
        return seconds

    def wrap(self, section: str, fn: Callable) -> Callable:
        """``fn``, each call timed into ``section``."""

        @functools.wraps(fn)
        def timed_call(*args, **kwargs):
            with self(section):
                return fn(*args, **kwargs)

        return timed_call

    def timed(self, units: Units, section: str) -> Units:
        """A copy of the dataclass ``units`` whose every field (a callable) is timed into ``section``."""
        return dataclasses.replace(units, **{f.name: self.wrap(section, getattr(units, f.name))
                                             for f in dataclasses.fields(units)})
