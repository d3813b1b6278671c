"""How long the read-only commands take to answer (issue 45: ≤ 2 s for the first three, ≤ 5 s for `plan`).

    python benchmarks/bench_cli_startup.py [--repeats 5] [--tree DIR ...] [--dir /tmp/wb-bench-cli]

Times, each in a fresh process (``python -m workbench.cli.main``, output discarded, exit code 0 checked):

* ``--help``, ``algorithms``, ``metrics``;
* ``plan studies/sanity.yaml --format json`` in an empty directory (no store: nothing to read back);
* ``compare engines-mismatch --format json`` on a store loaded once from the committed export
  ``docs/findings/data/engines-mismatch`` (7 runs; the command also logs its HTML report).

The commands run in turns (one of each, then again), so a change of load mid-way touches all of them
alike; with several ``--tree`` (source trees put first on ``PYTHONPATH``, e.g. a worktree of the commit
before a change and this one) the trees alternate too. Prints the median, min and max of ``--repeats``
runs per command and tree, the modules a run loaded among the heavy ones (torch, transformers, mlflow,
...), and the load average (1 min) before and after.

Measured 2026-11-29 05:45 on the 2 shared cores (load average 1.4 before, 1.7 after: other sessions'
tests and the benchmark itself), 5 runs each, alternating the two trees; median (min-max) in seconds.
Before: 0efcf2f (this change's parent), its ``workbench/`` and ``dashboards/`` unpacked to a directory put
first on PYTHONPATH; after: the CLI's eager import of the study reader (pandas) and of ``seed_plan``
deferred, pandas imported where used in ``cli/`` and numpy in ``metrics/final.py``, ``plan`` taking its
three helpers from the new ``execution/plan.py`` instead of ``execution/study.py`` (the executor: pool,
Ray, the run, transformers) and importing MLflow only when a store exists.

    ========================  ================  ================  =====================================
    command                   before            after             heavy modules, before -> after
    ========================  ================  ================  =====================================
    --help                    0.42 (0.38-0.77)  0.15 (0.14-0.22)  pandas -> none
    algorithms                1.87 (1.60-2.45)  1.48 (1.34-1.55)  torch, pandas -> torch
    metrics                   0.48 (0.44-0.54)  0.20 (0.19-0.21)  pandas -> none
    plan (sanity, json)       3.63 (3.51-4.33)  2.52 (2.33-3.46)  torch, transformers, mlflow, plotly,
                                                                  scipy, pandas -> the same less
                                                                  transformers and mlflow
    compare (7 runs, json)    3.74 (3.61-4.59)  3.86 (3.74-5.83)  mlflow, plotly, scipy, statsmodels,
                                                                  pandas (unchanged)
    ========================  ================  ================  =====================================

A first ``plan`` before the change, timed by hand on a cold cache (load 0.3), took 4.95 s. All within the issue's targets (2 s, 5 s).
``algorithms`` still imports torch: each preset is resolved by the run config's validation, which checks
its names against the registered units, and those live in the torch modules of ``workbench/algorithms``.
``plan`` imports torch for the same validation, scipy for the seed plan's power calculation; ``compare``
needs MLflow (it logs its report) and scipy (its statistics). On the loaded machine of the issue (44 s
for ``algorithms``, 106 s for ``plan``) the figures scale with the load; the imports left are the ones
the commands use.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXPORT = ROOT / "docs" / "findings" / "data" / "engines-mismatch"
STUDY = "engines-mismatch"
HEAVY = ("torch", "transformers", "mlflow", "ray", "optuna", "plotly", "scipy", "statsmodels", "pandas")

# runs the CLI as `python -m workbench.cli.main` does, then reports which heavy modules it loaded
PROBE = """
import atexit, json, os, sys
def _report():
    with open(os.environ["WB_BENCH_MODULES"], "w") as f:
        json.dump([m for m in {heavy!r} if m in sys.modules], f)
atexit.register(_report)
sys.argv = ["workbench", *sys.argv[1:]]
from workbench.cli.main import main
main()
"""


def commands(work: Path) -> dict[str, tuple[list[str], Path]]:
    """name -> (arguments, working directory)."""
    empty = work / "empty"
    empty.mkdir(parents=True, exist_ok=True)
    return {
        "--help": (["--help"], empty),
        "algorithms": (["algorithms"], empty),
        "metrics": (["metrics"], empty),
        "plan (sanity, json)": (["plan", str(ROOT / "studies" / "sanity.yaml"), "--format", "json"], empty),
        "compare (7 runs, json)": (["compare", STUDY, "--format", "json"], work / "store"),
    }


def env_for(tree: Path, work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["COLUMNS"] = "120"
    env["WB_BENCH_MODULES"] = str(work / "modules.json")
    return env


def load_store(work: Path) -> None:
    """The committed export, loaded once into ``work/store/mlflow.db`` (the compare's default store there)."""
    store = work / "store"
    if (store / "mlflow.db").exists():
        return
    store.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "workbench.cli.main", "import", "workbench", str(EXPORT)],
        cwd=store,
        env=env_for(ROOT, work),
        check=True,
        capture_output=True,
    )


def time_once(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, list[str]]:
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{args[:2]} exited {done.returncode}: {done.stderr[-600:]}")
    return wall, json.loads(Path(env["WB_BENCH_MODULES"]).read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="runs per command and tree (the median is shown)")
    ap.add_argument(
        "--tree",
        action="append",
        type=Path,
        help="a source tree to time (repeatable; default: this one); put first on PYTHONPATH",
    )
    ap.add_argument("--dir", type=Path, default=Path("/tmp/wb-bench-cli"))
    args = ap.parse_args()
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    load_store(args.dir)
    cmds = commands(args.dir)
    times: dict[tuple[str, Path], list[float]] = {}
    loaded: dict[tuple[str, Path], list[str]] = {}
    load0 = os.getloadavg()[0]
    for _ in range(args.repeats):
        for name, (argv, cwd) in cmds.items():
            for tree in trees:
                wall, modules = time_once(argv, cwd, env_for(tree, args.dir))
                times.setdefault((name, tree), []).append(wall)
                loaded[name, tree] = modules
    load1 = os.getloadavg()[0]
    print(f"{'command':<24} {'tree':<20} {'median s':>9} {'min':>6} {'max':>6}  heavy modules loaded")
    for (name, tree), walls in times.items():
        print(
            f"{name:<24} {str(tree)[-20:]:<20} {statistics.median(walls):>9.2f} {min(walls):>6.2f} "
            f"{max(walls):>6.2f}  {', '.join(loaded[name, tree]) or '-'}"
        )
    print(
        f"load average (1 min) {load0:.1f} before, {load1:.1f} after; {os.cpu_count()} cores; {args.repeats} runs "
        f"each, alternating; {time.strftime('%Y-%m-%d %H:%M')}"
    )


if __name__ == "__main__":
    main()
