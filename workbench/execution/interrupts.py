"""Ctrl-C that cannot be lost: the local pool and the Ray driver both watch it this way."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def noting_ctrl_c(owner: Any) -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt as usual and also sets ``owner.interrupted``: a Ctrl-C that
    lands inside a SQLite call can come out as that call's cleanup error ("database is locked"),
    which best-effort MLflow updates swallow, and the study would then end as if not stopped."""
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
