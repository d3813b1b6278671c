"""A real local Ray cluster for the Ray executor tests: a head with no CPUs (it places, it runs
nothing) and two worker nodes with one CPU each, so every run lands on a node a test can remove.

Ray missing: the tests skip, unless ``WORKBENCH_REQUIRE_RAY=1`` (CI, ``.ci/run``), where they fail.
The nodes' processes inherit this process's environment: ``PYTHONPATH`` gets this checkout first,
so the Ray workers import the ``workbench`` under test.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Node death noticed within ~3 s (default: 5 missed health checks 3 s apart, plus a 10 s timeout).
FAST_FAILURE_DETECTION = {
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 3,
}


def require_ray() -> None:
    if importlib.util.find_spec("ray") is None:
        missing = pytest.fail if os.environ.get("WORKBENCH_REQUIRE_RAY") == "1" else pytest.skip
        missing("Ray is not installed (pip install -e '.[ray]')")


STARTUP_ATTEMPTS = 3  # Ray gives a node 30 s to register (fixed); a 2-core machine under load can miss that


def started(start):
    """``start()``, tried again when Ray reports that the node timed out during its start-up."""
    for attempt in range(STARTUP_ATTEMPTS):
        try:
            return start()
        except Exception as error:  # Ray raises a bare Exception for it
            if "timed out during startup" not in str(error) or attempt == STARTUP_ATTEMPTS - 1:
                raise


def add_worker_node(cluster, **resources):
    return started(lambda: cluster.add_node(**({"num_cpus": 1, "include_dashboard": False} | resources)))


@pytest.fixture(scope="module")
def ray_cluster():
    """``(cluster, address)``: the head and two one-CPU worker nodes, shared by a module's tests."""
    require_ray()
    import ray
    from ray.cluster_utils import Cluster

    path = os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH")] if p)
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = path  # the node processes (and their workers) start with this environment
    cluster = Cluster()
    started(lambda: cluster.add_node(num_cpus=0, include_dashboard=False, _system_config=FAST_FAILURE_DETECTION))
    try:
        for _ in range(2):
            add_worker_node(cluster)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous
