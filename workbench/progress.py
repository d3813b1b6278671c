"""How often long work prints a plain progress line when its output is not a terminal (a log file, CI,
a pipe): ``$WORKBENCH_PROGRESS_EVERY`` seconds, 30 by default (0: at every step). A study's runs and a
tiny model's cold start both read it."""

from __future__ import annotations

import os

__all__ = ["DEFAULT_PROGRESS_EVERY", "PROGRESS_EVERY_ENV", "progress_interval"]

PROGRESS_EVERY_ENV = "WORKBENCH_PROGRESS_EVERY"
DEFAULT_PROGRESS_EVERY = 30.0


def progress_interval() -> float:
    """Seconds between plain progress lines: ``$WORKBENCH_PROGRESS_EVERY`` or 30 (0: every step)."""
    raw = os.environ.get(PROGRESS_EVERY_ENV, "")
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_PROGRESS_EVERY
    except ValueError:
        raise ValueError(f"{PROGRESS_EVERY_ENV}: expected seconds, got {raw!r}") from None
