"""The default torch thread count: the CPUs actually free, one line when the machine is oversubscribed."""

from __future__ import annotations

import pytest

from workbench.execution.threads import free_cpus, oversubscription_warning, threads_per_run


@pytest.mark.parametrize(("cpus", "load", "free"), [
    (2, 0.0, 2), (2, 0.4, 2),  # an idle machine keeps torch's one thread per CPU
    (2, 1.0, 1), (2, 3.0, 1), (2, 20.0, 1),  # beside busy processes: fewer threads, never 0
    (16, 3.2, 13), (16, 40.0, 1),
])
def test_free_cpus_is_the_cpus_minus_the_load_on_them(cpus, load, free):
    assert free_cpus(cpus, load) == free


def test_threads_per_run_splits_the_free_cpus_and_an_explicit_omp_num_threads_wins(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads_per_run(2, cpus=16, load=0.0) == 8
    assert threads_per_run(4, cpus=16, load=8.0) == 2
    assert threads_per_run(3, cpus=2, load=0.0) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads_per_run(1, cpus=2, load=20.0) == 3


def test_oversubscription_warning_is_one_line_only_when_the_load_exceeds_the_cpus(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert oversubscription_warning(cpus=2, load=1.9) is None
    line = oversubscription_warning(cpus=2, load=5.3)
    assert line is not None and "\n" not in line
    assert "load average 5.3 on 2 CPUs" in line and "1 torch thread" in line
