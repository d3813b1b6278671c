"""One stopwatch for a run's timing metrics (``perf/*``): named sections of wall-clock time.

    watch = Stopwatch()
    with watch("learn"):
        ...
    watch.lap()  # {"learn": 0.42}: the seconds per section since the last lap

A section entered several times adds up; sections may nest (``learn`` holds ``algorithm``) and may be
timed on another thread (background scoring) as long as it ends before the lap that reports it.
A stopwatch is the update's ``Section`` (``workbench.train.learner_protocol``): handed to the update,
it times the algorithm's own computations there, so the update holds no timing of its own.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager


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

    def add(self, section: str, seconds: float) -> None:
        """Count ``seconds`` timed elsewhere (the pipelined sampler's thread) in ``section``."""
        with self._lock:
            self.seconds[section] += seconds

    def lap(self) -> dict[str, float]:
        """The seconds per section since the last lap; starts the next lap from zero."""
        with self._lock:
            seconds, self.seconds = dict(self.seconds), defaultdict(float)
        return seconds
