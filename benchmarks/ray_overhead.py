"""Wall time of one study with ``--parallel 2`` and on Ray (a one-node ``ray start --head --num-cpus 2``
cluster, two runs at a time as well), alternating A/B on the same machine; the table in
docs/distributed.md ("Overhead") comes from here.

    PYTHONPATH=$PWD python benchmarks/ray_overhead.py --rounds 2

Each measurement is a fresh ``workbench run`` process on a fresh MLflow store (CLI start-up and the
study's set-up included in both); the tiny model is built once beforehand.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.execution_helpers import fast_run_config  # the tests' fast micro config


def write_study(path: Path, runs: int, steps: int) -> None:
    study = {"name": "overhead", "base": fast_run_config(steps), "variants": {"base": {}}, "seeds": list(range(runs))}
    path.write_text(yaml.safe_dump(study, sort_keys=False))


def timed_run(study: Path, args: list[str], env: dict) -> float:
    work = Path(tempfile.mkdtemp(prefix="ray-overhead-"))
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "workbench.cli.main", "run", str(study), "--quiet", *args],
        cwd=work,
        env=env | {"MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"},
        check=True,
        stdout=subprocess.DEVNULL,
    )
    took = time.monotonic() - started
    shutil.rmtree(work, ignore_errors=True)
    return took


def wait_for_port(address: str, timeout_s: float = 120.0) -> None:
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            time.sleep(5)  # the head's raylet registers a moment after its GCS answers
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--no-warmup", dest="warmup", action="store_false", help="the tiny model is cached already")
    parser.add_argument("--port", type=int, default=6391, help="the benchmark cluster's GCS port")
    a = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ray-overhead-study-"))
    study = root / "study.yaml"
    write_study(study, a.runs, a.steps)
    # a private head for the benchmark: no token auth (Ray 2.60 turns it on when ~/.ray/auth_token exists)
    env = dict(os.environ) | {"RAY_AUTH_MODE": "disabled"}
    from ray._private.services import get_node_ip_address

    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
    # --block in its own process group, stopped by signalling that group: `ray stop` would stop every
    # Ray instance on the machine (other users', a test cluster)
    head = subprocess.Popen(
        [
            ray,
            "start",
            "--head",
            "--block",
            "--port",
            str(a.port),
            "--num-cpus",
            "2",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = f"{get_node_ip_address()}:{a.port}"
    try:
        wait_for_port(address)
        if a.warmup:
            timed_run(study, ["--parallel", "2"], env)  # builds the tiny model, fills the page cache
        times: dict[str, list[float]] = {"--parallel 2": [], "--executor ray": []}
        for _ in range(a.rounds):
            for name, args in (
                ("--parallel 2", ["--parallel", "2"]),
                ("--executor ray", ["--executor", "ray", "--address", address]),
            ):
                times[name].append(timed_run(study, args, env))
                print(f"{name}: {times[name][-1]:.1f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(timeout=60)
    load = os.getloadavg()
    local, on_ray = statistics.median(times["--parallel 2"]), statistics.median(times["--executor ray"])
    print(f"| executor | wall s, median of {a.rounds} ({a.runs} runs x {a.steps} steps) | each measurement |")
    print("|---|---|---|")
    for name, values in times.items():
        print(f"| `{name}` | {statistics.median(values):.1f} | {', '.join(f'{v:.1f}' for v in values)} |")
    print(
        f"\nRay - local: {on_ray - local:+.1f} s for the study, {(on_ray - local) / a.runs:+.1f} s per run; "
        f"load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min)"
    )


if __name__ == "__main__":
    main()
