"""How many CPU threads a run gets: from the CPUs actually free, not the machine's total.

Torch's default (one intra-op thread per CPU) is right on an idle machine and badly wrong on a
shared one: its OpenMP threads spin-wait for each other, so beside other CPU-bound processes a
2-thread run on 2 CPUs spends its time waiting for a descheduled sibling thread. Measured with
``benchmarks/bench_shared_cpu.py`` (docs/engines.md, "Shared machines"): beside three busy
processes torch's default took 36 s per step, one thread 3.5 s. So a run takes the CPUs of its
affinity mask that are idle when it starts (sampled from ``/proc/stat`` for 0.3 s), at least one.
Not the load average: other users' processes that wait on I/O or sleep in bursts count in it
without taking the CPUs (alone at load 5, torch's two threads were the fastest setting). An
explicit ``OMP_NUM_THREADS`` or ``--threads`` wins.
"""

from __future__ import annotations

import math
import os
import time

__all__ = ["cpu_count", "free_cpus", "idle_cpus", "load_average", "oversubscription_warning", "threads_per_run"]

SAMPLE_S = 0.3  # how long the idle CPUs are sampled: a few scheduler ticks on every CPU


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


def _cpu_times(cpus: set[int]) -> tuple[int, int] | None:
    """(idle, total) jiffies summed over ``cpus`` from /proc/stat; None where there is none."""
    try:
        lines = open("/proc/stat", encoding="ascii").read().splitlines()  # noqa: SIM115 - one read of /proc, closed when collected
    except OSError:
        return None
    idle = total = 0
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            values = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
            idle += values[3] + values[4]
            total += sum(values)
    return (idle, total) if total else None


def idle_cpus(sample_s: float = SAMPLE_S) -> float | None:
    """How many of our CPUs were idle over the next ``sample_s`` seconds (None: not measurable)."""
    try:
        cpus = os.sched_getaffinity(0)
    except AttributeError:  # not on Linux
        return None
    before = _cpu_times(cpus)
    time.sleep(sample_s)
    after = _cpu_times(cpus)
    if before is None or after is None or after[1] <= before[1]:
        return None
    return len(cpus) * (after[0] - before[0]) / (after[1] - before[1])


def free_cpus(cpus: int | None = None, idle: float | None = None) -> int:
    """CPUs of our affinity mask that other processes leave idle (at least 1), rounded to nearest:
    1.6 idle CPUs of 2 still count as 2. Where idle time cannot be measured: all of them."""
    cpus = cpu_count() if cpus is None else cpus
    idle = idle_cpus() if idle is None else idle
    if idle is None:
        return cpus
    return max(1, min(cpus, math.floor(idle + 0.5)))


def threads_per_run(parallel: int, cpus: int | None = None, idle: float | None = None) -> int:
    """Torch threads for each of ``parallel`` runs started now (``OMP_NUM_THREADS`` wins when set)."""
    explicit = os.environ.get("OMP_NUM_THREADS", "")
    if explicit.isdigit() and int(explicit) > 0:
        return int(explicit)
    return max(1, free_cpus(cpus, idle) // max(1, parallel))


def oversubscription_warning(
    cpus: int | None = None, load: float | None = None, idle: float | None = None
) -> str | None:
    """One line when the machine is busier than our CPUs (1-minute load average above them), else None."""
    cpus = cpu_count() if cpus is None else cpus
    load = load_average() if load is None else load
    if load <= cpus:
        return None
    return (
        f"warning: the machine is oversubscribed (load average {load:.1f} on {cpus} CPUs): runs use "
        f"{threads_per_run(1, cpus, idle)} torch thread(s) each (the CPUs idle now) and steps will be "
        "slower than on a quiet machine"
    )
