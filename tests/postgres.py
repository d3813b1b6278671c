"""A real PostgreSQL server for the multi-worker tests (Optuna storage and MLflow store).

``postgres_url`` is $WORKBENCH_TEST_POSTGRES_URL, or a throwaway server started from the Debian
``postgresql`` binaries. Missing server or driver: the test skips, unless
``WORKBENCH_REQUIRE_POSTGRES=1`` (CI), where it fails.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    return next((str(v / name) for v in versions if (v / name).exists()), None)


@pytest.fixture
def postgres_url():
    """A PostgreSQL database URL: $WORKBENCH_TEST_POSTGRES_URL, or a throwaway local server."""
    require = os.environ.get("WORKBENCH_REQUIRE_POSTGRES") == "1"
    missing = pytest.fail if require else pytest.skip
    if importlib.util.find_spec("psycopg") is None:  # SQLAlchemy 2.1's driver for postgresql:// URLs
        missing("the PostgreSQL driver is not installed (pip install 'psycopg[binary]')")
    if os.environ.get("WORKBENCH_TEST_POSTGRES_URL"):
        yield os.environ["WORKBENCH_TEST_POSTGRES_URL"]
        return
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not (initdb and pg_ctl):
        missing("no PostgreSQL server binaries (apt-get install postgresql)")
    root = Path(tempfile.mkdtemp(prefix="workbench-pg-"))
    run_as: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root
        shutil.chown(root, "postgres")
        run_as = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    data = root / "data"
    try:
        subprocess.run(
            [*run_as, initdb, "-D", str(data), "-U", "workbench", "--auth=trust", "-E", "UTF8"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        subprocess.run(
            [
                *run_as,
                pg_ctl,
                "-D",
                str(data),
                "-l",
                str(root / "server.log"),
                "-w",
                "-t",
                "60",
                "-o",
                f"-p {port} -k {root} -c listen_addresses=127.0.0.1",
                "start",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        yield f"postgresql://workbench@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*run_as, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)
