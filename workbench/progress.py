"""How often long work prints a plain progress line when its output is not a terminal (a log file, CI,
a pipe): ``$WORKBENCH_PROGRESS_EVERY`` seconds, 30 by default (0: at every step). A study's runs and a
tiny model's cold start both read it.

A line printed at the first step after the interval came late by up to one step (an eval step, a probe of
the cold start: seconds on a loaded machine; ``make demo`` measured gaps of 31-35 s, #53). :class:`Heartbeat`
bounds the gap instead: a daemon thread prints the current state when no progress line of this process came
for the interval minus :func:`heartbeat_slack`, so consecutive lines are at most the interval apart whatever
a step costs. Every plain progress line calls :func:`line_printed`, so the cold start's lines and a study's
share one clock and do not repeat each other."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

__all__ = [
    "DEFAULT_PROGRESS_EVERY",
    "PROGRESS_EVERY_ENV",
    "Heartbeat",
    "claim_beat",
    "heartbeat_slack",
    "line_printed",
    "progress_interval",
    "since_last_line",
]

PROGRESS_EVERY_ENV = "WORKBENCH_PROGRESS_EVERY"
DEFAULT_PROGRESS_EVERY = 30.0

_clock_lock = threading.Lock()
_last_line = time.monotonic()


def progress_interval() -> float:
    """Seconds between plain progress lines: ``$WORKBENCH_PROGRESS_EVERY`` or 30 (0: every step)."""
    raw = os.environ.get(PROGRESS_EVERY_ENV, "")
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_PROGRESS_EVERY
    except ValueError:
        raise ValueError(f"{PROGRESS_EVERY_ENV}: expected seconds, got {raw!r}") from None


def line_printed() -> None:
    """A plain progress line went out now (any source in this process)."""
    global _last_line
    with _clock_lock:
        _last_line = time.monotonic()


def since_last_line() -> float:
    with _clock_lock:
        return time.monotonic() - _last_line


def claim_beat(due: float) -> bool:
    """Whether no progress line came for ``due`` seconds; if so the clock restarts now, so that of two
    heartbeats due at once (a study's and its cold start's) only one prints."""
    global _last_line
    with _clock_lock:
        now = time.monotonic()
        if now - _last_line < due:
            return False
        _last_line = now
        return True


def heartbeat_slack(every: float) -> float:
    """How early a heartbeat fires: a tenth of the interval, at most 1 s (the thread's wake-up and the write
    through a pipe take milliseconds; a loaded machine can delay them more)."""
    return min(1.0, every / 10)


class Heartbeat:
    """``with Heartbeat(every, beat):`` calls ``beat()`` (which prints a progress line, calling
    :func:`line_printed`) from a daemon thread whenever no progress line came for ``every`` minus
    :func:`heartbeat_slack` seconds; ``every`` 0 (a line at every step already) starts no thread."""

    def __init__(self, every: float, beat: Callable[[], None]) -> None:
        self.every = every
        self.beat = beat
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        if self.every > 0:
            line_printed()  # the interval counts from the start of the work it watches
            self._thread = threading.Thread(target=self._loop, name="workbench-progress-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        due = self.every - heartbeat_slack(self.every)
        while not self._stop.wait(max(0.01, due - since_last_line())):
            if claim_beat(due):  # the clock restarts even if beat prints nothing: the next try is an interval on
                self.beat()
