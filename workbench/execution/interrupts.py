"""Ctrl-C that cannot be lost.

Python delivers a signal as an exception raised wherever the main thread happens to be. When that
is a ``__del__`` method or a weakref callback (SQLAlchemy's class registry runs them in every
MLflow call), CPython prints "Exception ignored in ..." and the ``KeyboardInterrupt`` is gone: a
cancelled Ray task, or a run process told to stop, would train on to the end and close its run
FINISHED. So each handler here also *remembers* the request: the driver checks
``owner.interrupted`` between polls, and a run checks :func:`raise_if_stop_requested` at every
step boundary (:func:`workbench.execution.run.execute_run`).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_stop_requested = False  # this process was told to stop its run (SIGINT, or SIGTERM where handled)


def interrupt_once(signum, frame):
    """First SIGINT/SIGTERM: stop the run (KeyboardInterrupt, and remembered); later ones are ignored so
    that marking the run KILLED is not itself interrupted (a terminal's Ctrl-C reaches a run's process
    and the parent's SIGTERM follows). A Python-level no-op rather than SIG_IGN: swapping the handler
    while a signal is pending makes CPython print a "race condition" error."""
    global _stop_requested
    if not _stop_requested:
        _stop_requested = True
        raise KeyboardInterrupt


def stop_requested() -> bool:
    return _stop_requested


def raise_if_stop_requested() -> None:
    """Raise the KeyboardInterrupt of a stop request whose own exception Python swallowed."""
    if _stop_requested:
        raise KeyboardInterrupt("stop requested")


@contextmanager
def stopping_on(*signums: int) -> Iterator[None]:
    """Within: ``signums`` stop this process's run through :func:`interrupt_once`. The request belongs
    to the block: unset on entry and on exit (a Ray worker process runs one task after another; a test
    process, one command after another), and the previous handlers come back. Only the main thread
    gets signals: elsewhere nothing changes."""
    global _stop_requested
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _stop_requested = False
    previous = {signum: signal.signal(signum, interrupt_once) for signum in signums}
    previous_hook = sys.unraisablehook

    def quiet_swallowed_stop(unraisable: Any) -> None:
        # The stop's KeyboardInterrupt raised inside a weakref callback or __del__: CPython would print
        # "Exception ignored in ... Traceback"; the request is remembered (module docstring), so the run
        # still stops KILLED at its next step boundary: nothing is lost, and nothing to print.
        if _stop_requested and isinstance(unraisable.exc_value, KeyboardInterrupt):
            return
        previous_hook(unraisable)

    sys.unraisablehook = quiet_swallowed_stop
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sys.unraisablehook = previous_hook
        _stop_requested = False


@contextmanager
def noting_ctrl_c(owner: Any) -> Iterator[None]:
    """The driver's side: SIGINT raises KeyboardInterrupt as usual (each time: a second Ctrl-C stops
    the waiting) and also sets ``owner.interrupted``: a Ctrl-C that lands inside a SQLite call can
    come out as that call's cleanup error ("database is locked"), which best-effort MLflow updates
    swallow, and the study would then end as if not stopped."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread gets signals
        yield
        return

    def on_sigint(signum, frame):
        owner.interrupted = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
