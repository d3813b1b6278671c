"""How many CPU threads each of N concurrent runs gets (pool processes, Optuna workers)."""

from __future__ import annotations

import os


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def threads_per_run(parallel: int) -> int:
    return max(1, cpu_count() // max(1, parallel))
