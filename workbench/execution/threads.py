"""How many CPU threads a run gets: from the CPUs actually free, not the machine's total.

Torch's default (one intra-op thread per CPU) is right on an idle machine and badly wrong on a
shared one: its OpenMP threads spin-wait for each other, so beside other CPU-bound processes a
2-thread run on 2 CPUs spends its time waiting for a descheduled sibling thread. Measured with
``benchmarks/bench_shared_cpu.py`` (docs/engines.md, "Shared machines"): one thread beside three
busy processes is ~2x faster than torch's default. So a run takes the CPUs its affinity mask allows
minus the load already on them (1-minute load average), at least one; an explicit
``OMP_NUM_THREADS`` or ``--threads`` wins.
"""

from __future__ import annotations

import math
import os

__all__ = ["cpu_count", "free_cpus", "load_average", "oversubscription_warning", "threads_per_run"]


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def load_average() -> float:
    """Runnable (and uninterruptible) tasks on the machine, averaged over the last minute; 0 if unknown."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # not on Unix
        return 0.0


def free_cpus(cpus: int | None = None, load: float | None = None) -> int:
    """CPUs of our affinity mask not already kept busy by other processes (at least 1).

    The load average counts tasks machine-wide; within a smaller affinity mask it over-counts,
    which errs on the safe side (fewer threads only cost speed on an idle machine, and the load
    there is near 0). Rounded to nearest: a load of 0.4 on 2 CPUs still leaves 2.
    """
    cpus = cpu_count() if cpus is None else cpus
    load = load_average() if load is None else load
    return max(1, min(cpus, math.floor(cpus - load + 0.5)))


def threads_per_run(parallel: int, cpus: int | None = None, load: float | None = None) -> int:
    """Torch threads for each of ``parallel`` runs started now (``OMP_NUM_THREADS`` wins when set)."""
    explicit = os.environ.get("OMP_NUM_THREADS", "")
    if explicit.isdigit() and int(explicit) > 0:
        return int(explicit)
    return max(1, free_cpus(cpus, load) // max(1, parallel))


def oversubscription_warning(cpus: int | None = None, load: float | None = None) -> str | None:
    """One line when the machine is already busier than our CPUs (else None)."""
    cpus = cpu_count() if cpus is None else cpus
    load = load_average() if load is None else load
    if load <= cpus:
        return None
    return (f"warning: the machine is oversubscribed (load average {load:.1f} on {cpus} CPUs): runs use "
            f"{threads_per_run(1, cpus, load)} torch thread(s) each and steps will be slower than on a quiet machine")
