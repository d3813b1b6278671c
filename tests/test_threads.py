"""The default torch thread count: the CPUs actually idle, one line when the machine is oversubscribed."""

from __future__ import annotations

import pytest

from workbench.execution.threads import free_cpus, idle_cpus, oversubscription_warning, threads_per_run


@pytest.mark.parametrize(
    ("cpus", "idle", "free"),
    [
        (2, 2.0, 2),
        (2, 1.6, 2),  # an idle machine keeps torch's one thread per CPU
        (2, 1.0, 1),
        (2, 0.3, 1),
        (2, 0.0, 1),  # beside busy processes: fewer threads, never 0
        (16, 12.7, 13),
        (16, 0.0, 1),
    ],
)
def test_free_cpus_is_the_idle_cpus_rounded(cpus, idle, free):
    assert free_cpus(cpus, idle) == free


def test_idle_cpus_is_a_share_of_our_cpus():
    idle = idle_cpus(0.05)
    assert idle is None or 0.0 <= idle <= free_cpus(idle=2.0**10)  # never more than the affinity mask


def test_threads_per_run_splits_the_free_cpus_and_an_explicit_omp_num_threads_wins(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads_per_run(2, cpus=16, idle=16.0) == 8
    assert threads_per_run(4, cpus=16, idle=8.0) == 2
    assert threads_per_run(3, cpus=2, idle=2.0) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads_per_run(1, cpus=2, idle=0.0) == 3


def test_oversubscription_warning_is_one_line_only_when_the_load_exceeds_the_cpus(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert oversubscription_warning(cpus=2, load=1.9, idle=0.5) is None
    line = oversubscription_warning(cpus=2, load=5.3, idle=0.2)
    assert line is not None and "\n" not in line
    assert "load average 5.3 on 2 CPUs" in line and "1 torch thread" in line
