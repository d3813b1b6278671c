"""`workbench compare` on a synthetic study of 200 runs x 30 metrics x 500 steps (issue #6).

    python benchmarks/bench_compare.py [--dir /tmp/wb-bench] [--runs 200] [--metrics 30] [--steps 500]
                                       [--layout training|key-major] [--baseline-runs 200] [--compare-only]

Builds a local MLflow sqlite store the size of a large study (runs created through MlflowClient,
their 3M metric points inserted into MLflow's own ``metrics``/``latest_metrics`` tables in bulk,
so building takes seconds instead of the ~4 minutes ``log_batch`` would), then times:

1. ``workbench compare STUDY --no-log`` end to end (cold: empty history cache), in a subprocess;
2. the same again (warm: finished runs come from the on-disk cache);
3. the reader alone, all 30 metrics (``load_study_frames``, no cache);
4. the baseline: one ``MlflowClient.get_metric_history`` call per run and metric for the same
   data (on the first ``--baseline-runs`` runs, extrapolated linearly if fewer than all).

Targets: (1) under 30 s on 2 cores; (3) at least 5x faster than (4).

Search scale (issue 28): ``--dir /tmp/wb-bench3000 --runs 3000 --metrics 30 --steps 500 --compare-only``.
The store (12.7 GB) is built once (5-12 min here) and reused by every later call with the same sizes and
layout (``built.txt`` marks a finished build). ``--layout training`` (default) writes the rows as a study does:
4 runs at a time, each logging a step's 30 metrics in one batch, one second apart. ``--layout key-major``
writes them in the order of MLflow's primary key at one timestamp, so one run's points are spread over the
whole file (the worst case for reading a run; the layout of the 2026-11-25 figures below).

Measured 2026-11-28 on the 2 cores (load 0.8-1.2: the benchmark itself), alternating before / after, two pairs
each, median (= mean of 2) in seconds; "reading" is the command's own "in X s" (SQL, frames, cache writes),
"compute" its total minus that. Before: 97c621a (the session's start) run from a worktree through PYTHONPATH;
after: one SQLite query for all runs instead of one per 500 (the key filter re-scanned each key's index range
per chunk), sorter threads (``PRAGMA threads``), the run id as a category in the fast path, cache files through
pyarrow, summaries grouped on integer codes. The HTML reports are identical but for their "generated" minute.

    ===========  ==========  =====================  =====================  ================
    layout       compare     cold: wall (reading)   warm: wall (reading)   compute (cold)
    ===========  ==========  =====================  =====================  ================
    training     before      78.4 (63.6)            25.7 (10.0)            13.8
    training     after       46.8 (33.8)            21.5 (8.0)             12.1
    key-major    before      86.0 (71.8)            25.2 (9.3)             13.3
    key-major    after       43.1 (30.4)            21.4 (8.2)             11.8
    ===========  ==========  =====================  =====================  ================

    single runs, cold wall: training before 81.1, 75.7, after 43.9, 49.7; key-major before 102.4, 69.7,
    after 43.3, 42.9.

Cold is under 60 s on both layouts (target of issue 28). Of the ~30 s left for reading, about half is SQLite
scanning, sorting and handing over the 12M points, half making frames of them and writing the cache (profiled).

Earlier (2026-11-25, key-major, the compute speed-ups of that session): cold 157 s before, 127 s after
(reading 87 -> 99 s), warm 81 s -> 45 s.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.design_metrics import DESIGN_METRICS  # the names tests/test_metrics.py holds the catalogue to
from workbench.compare.summary import SUMMARY_METRICS  # noqa: F401 - fail early if the package is broken

STUDY = "bench-compare"
BUILT_MARKER = "built.txt"  # written last: a store without it was interrupted mid-build
# DESIGN.md's table but the two IS-correction metrics (logged only with a correction), and four more the loop logs
# every step: 30 names in the order the benchmark has always used (a metric's values depend on its column)
_EVERY_STEP = [name for name in DESIGN_METRICS if not name.startswith("mismatch/is_")]
CANONICAL = [
    *_EVERY_STEP[:-1],
    "perf/sample_tokens",
    _EVERY_STEP[-1],  # health/status
    "policy/approx_kl",
    "policy/ratio_mean",
    "policy/ratio_max",
]


def build(root: Path, n_runs: int, n_metrics: int, n_steps: int, layout: str = "training", workers: int = 4) -> str:
    from mlflow import MlflowClient
    from mlflow.entities import Param, RunTag

    root.mkdir(parents=True, exist_ok=True)
    db = root / "mlflow.db"
    uri = f"sqlite:///{db}"
    if db.exists():
        built = root / BUILT_MARKER
        if not built.exists() or built.read_text().split() != [str(n_runs), str(n_metrics), str(n_steps), layout]:
            raise SystemExit(
                f"{root}: holds a store that is not a finished {n_runs}x{n_metrics}x{n_steps} {layout} "
                "build; delete it or pass another --dir"
            )
        return uri
    client = MlflowClient(uri)
    exp = client.create_experiment(STUDY, artifact_location=(root / "mlartifacts").resolve().as_uri())
    parent = client.create_run(
        exp, run_name=f"study:{STUDY}", tags={"workbench.role": "study", "workbench.study": STUDY}
    )
    variants = ["grpo", "dr_grpo", "dapo", "gspo"]
    metrics = (CANONICAL * (1 + n_metrics // len(CANONICAL)))[:n_metrics]
    run_ids = []
    for i in range(n_runs):
        variant, seed = variants[i % len(variants)], i // len(variants)
        run = client.create_run(
            exp,
            run_name=f"{variant}/seed={seed}",
            tags={
                "workbench.role": "run",
                "workbench.study": STUDY,
                "workbench.variant": variant,
                "workbench.seed": str(seed),
                "workbench.run_key": f"{i:016x}",
                "workbench.health": "ok",
                "workbench.health_reasons": "",
                "mlflow.parentRunId": parent.info.run_id,
            },
        )
        rid = run.info.run_id
        client.log_batch(
            rid,
            params=[
                Param("learner.lr", "0.0001"),
                Param("rollout.prompts_per_step", "32"),
                Param("rollout.group_size", "8"),
                Param("seed", str(seed)),
            ],
            tags=[RunTag("mlflow.runName", f"{variant}/seed={seed}")],
        )
        client.set_terminated(rid, "FINISHED")
        run_ids.append(rid)
    client.set_terminated(parent.info.run_id, "FINISHED")
    # All points drawn first (float64 [run, metric, step]: 360 MB at 3000 x 30 x 500, in the same order as one
    # rng.normal per run and metric), so both layouts hold the same values. Either order appends to MLflow's
    # primary-key index on `metrics` (key, timestamp, step, run_uuid) at a few places only: 45M points take
    # minutes, not an hour.
    rng = np.random.default_rng(0)
    steps = np.arange(n_steps)
    skill = 0.1 * (np.arange(n_runs) % len(variants))
    values = np.empty((n_runs, len(metrics), n_steps))
    for i in range(n_runs):
        for k in range(len(metrics)):
            values[i, k] = 0.3 + (0.3 + skill[i]) * steps / n_steps + rng.normal(0, 0.03, n_steps) + 0.01 * k
    con = sqlite3.connect(db)
    con.execute("PRAGMA synchronous = OFF")  # a store interrupted mid-build is rebuilt anyway (BUILT_MARKER)
    con.execute("PRAGMA cache_size = -1000000")  # 1 GB of page cache
    insert = "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) VALUES (?,?,?,?,?,0)"
    unique = [k for k, name in enumerate(metrics) if name not in metrics[:k]]  # a repeated name: its first column
    ts0 = int(time.time() * 1000)
    with con:
        if layout == "training":
            # As a study writes them: `workers` runs at a time, each logging a step's metrics in one batch (one
            # second apart), so a run's rows lie together in the table and timestamps grow with the rows.
            for g in range(0, n_runs, workers):
                group = list(range(g, min(g + workers, n_runs)))
                for s in range(n_steps):
                    ts = ts0 + 1000 * ((g // workers) * n_steps + s)
                    con.executemany(
                        insert, ((metrics[k], float(values[i, k, s]), ts, run_ids[i], s) for i in group for k in unique)
                    )
            last_ts = {i: ts0 + 1000 * ((i // workers) * n_steps + n_steps - 1) for i in range(n_runs)}
        else:
            # Worst case: every point at one timestamp, inserted in the order of MLflow's primary key (key,
            # timestamp, step, run_uuid), so one run's points of a metric are spread over the whole table.
            by_uuid = np.argsort(run_ids)
            for k in sorted(unique, key=lambda k: metrics[k]):
                for s in range(n_steps):
                    col = values[by_uuid, k, s].tolist()
                    con.executemany(
                        insert,
                        ((metrics[k], v, ts0, run_ids[i], s) for i, v in zip(by_uuid.tolist(), col, strict=True)),
                    )
            last_ts = dict.fromkeys(range(n_runs), ts0)
        con.executemany(
            "INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid) VALUES (?,?,?,?,?,?)",
            (
                (metrics[k], float(values[i, k, -1]), last_ts[i], n_steps - 1, 0, rid)
                for i, rid in enumerate(run_ids)
                for k in unique
            ),
        )
    con.close()
    (root / BUILT_MARKER).write_text(f"{n_runs} {n_metrics} {n_steps} {layout}\n")
    return uri


def timed_compare(root: Path, cache: Path) -> tuple[float, str]:
    env = os.environ | {"WORKBENCH_HISTORY_CACHE": str(cache), "COLUMNS": "160"}
    env.pop("MLFLOW_TRACKING_URI", None)
    t0 = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "workbench.cli.main",
            "compare",
            STUDY,
            "--no-log",
            "--out",
            str(root / "report.html"),
            "-m",
            "final_eval_accuracy",
            "-m",
            "eval_auc",
            "-m",
            "final_length_ratio",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    if out.returncode:
        raise SystemExit(out.stdout + out.stderr)
    return wall, out.stderr.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/wb-bench"))
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--metrics", type=int, default=30)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument(
        "--layout",
        choices=["training", "key-major"],
        default="training",
        help="row order of the built store: as a study with 4 workers writes it (default), or the "
        "worst case for reading a run (MLflow's primary-key order, one timestamp)",
    )
    parser.add_argument("--baseline-runs", type=int, default=200)
    parser.add_argument(
        "--compare-only",
        action="store_true",
        help="time compare cold and warm only (skip the reader-alone and get_metric_history timings)",
    )
    args = parser.parse_args()

    t0 = time.perf_counter()
    uri = build(args.dir, args.runs, args.metrics, args.steps, args.layout)
    print(
        f"store: {uri} ({args.runs} runs x {args.metrics} metrics x {args.steps} steps, {args.layout} layout; "
        f"built/found in {time.perf_counter() - t0:.1f} s)"
    )

    import shutil

    cache = args.dir / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    cold, line = timed_compare(args.dir, cache)
    print(f"workbench compare, cold: {cold:.1f} s wall   [{line}]")
    warm, line = timed_compare(args.dir, cache)
    print(f"workbench compare, warm: {warm:.1f} s wall   [{line}]")
    print(f"report: {(args.dir / 'report.html').stat().st_size / 1e6:.1f} MB")
    if args.compare_only:
        return

    from workbench.results.reader import load_study_frames

    t0 = time.perf_counter()
    history, runs = load_study_frames(STUDY, uri, cache_dir=False)
    bulk = time.perf_counter() - t0
    print(f"reader, all metrics, no cache: {bulk:.2f} s for {len(history):,} points of {len(runs)} runs")

    from mlflow import MlflowClient

    client = MlflowClient(uri)
    ids = runs["run_id"].tolist()[: args.baseline_runs]
    keys = sorted(history["metric"].unique())
    t0 = time.perf_counter()
    n = 0
    for rid in ids:
        for key in keys:
            n += len(client.get_metric_history(rid, key))
    per_call = time.perf_counter() - t0
    scale = len(runs) / len(ids)
    base = per_call * scale
    print(
        f"get_metric_history per run and metric: {per_call:.1f} s for {len(ids)} runs x {len(keys)} metrics "
        f"({n:,} points){f', extrapolated to {base:.1f} s for all runs' if scale != 1 else ''}"
    )
    print(f"speed-up of the bulk reader: {base / bulk:.1f}x")


if __name__ == "__main__":
    main()
