"""`workbench import verl` of a long JSONL log: time and peak memory (issue #31: 1M lines, <= 60 s, <= 300 MB).

    python benchmarks/bench_import.py [--lines 1000000] [--write-lines 1000000] [--dir /tmp/wb-bench-import]

Writes a verl FileLogger log of ``--lines`` lines (three metrics a line, ~80 bytes: the issue's 1M
lines = 80 MB, 3M points), then measures, each in a process of its own (CPU seconds and peak RSS
from ``os.wait4``):

1. the validating pass alone (``check_import``: read, parse, check steps/values/names, health rules
   block by block, keep the checked points in a temporary file);
2. the whole ``workbench import`` (validate, then write: in bulk into a fresh SQLite store) of the
   first ``--write-lines`` lines;
3. the same command on a 10-line log: what any import costs whatever its length (Python and
   MLflow imported, the store created, artifacts and views written). Peak RSS above this row is
   what the length of the log adds.

Prints a table: lines, seconds, CPU seconds, peak RSS, lines per second, and the load average
(1 min) before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

MEASURE = """
import json, os, subprocess, sys, time
t0 = time.monotonic()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
_, status, usage = os.wait4(proc.pid, 0)
print(json.dumps({"code": os.waitstatus_to_exitcode(status), "rss_mb": usage.ru_maxrss / 1024,
                  "cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": time.monotonic() - t0,
                  "stderr": proc.stderr.read().decode()[-400:]}))
"""

VALIDATE_ONLY = """
import sys
from workbench.importers import ADAPTERS, runs_from_files
from workbench.importers.validate import check_import
from workbench.health import HealthMonitor
adapter = ADAPTERS.get("verl")
runs = runs_from_files(adapter, [sys.argv[1]], "grpo", [0])
(check,) = check_import(runs, "bench", adapter.convert_step, lambda: HealthMonitor.from_config(None)).values()
assert check.steps == int(sys.argv[2]), check.steps
"""


def write_log(path: Path, lines: int) -> None:
    if path.exists() and sum(1 for _ in path.open("rb")) == lines:
        return
    with path.open("w") as f:
        for step in range(1, lines + 1):
            f.write(
                json.dumps(
                    {
                        "step": step,
                        "data": {
                            "critic/score/mean": round(0.5 + 0.1 * ((step * 7) % 5 - 2), 3),
                            "actor/entropy": round(1.0 + 0.01 * (step % 13), 3),
                            "response_length/mean": 100 + step % 17,
                        },
                    }
                )
                + "\n"
            )


def measure(*argv: str) -> dict:
    out = subprocess.run([sys.executable, "-c", MEASURE, *argv], capture_output=True, text=True, check=True)
    figures = json.loads(out.stdout)
    if figures["code"] != 0:
        raise SystemExit(f"{argv[:4]} exited {figures['code']}: {figures['stderr']}")
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--write-lines", type=int, default=1_000_000)
    ap.add_argument("--dir", default="/tmp/wb-bench-import")
    args = ap.parse_args()
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    log = root / f"verl-{args.lines}.jsonl"
    write_log(log, args.lines)
    small = root / f"verl-{args.write_lines}.jsonl"
    write_log(small, args.write_lines)
    rows = []
    load0 = os.getloadavg()[0]
    v = measure(sys.executable, "-c", VALIDATE_ONLY, str(log), str(args.lines))
    rows.append(("validate only", args.lines, log.stat().st_size, v))
    db = root / "mlflow.db"
    db.unlink(missing_ok=True)
    w = measure(
        sys.executable,
        "-m",
        "workbench.cli.main",
        "import",
        "verl",
        str(small),
        "--study",
        "bench",
        "--variant",
        "grpo",
        "--seed",
        "0",
        "--tracking-uri",
        f"sqlite:///{db}",
    )
    rows.append(("import (validate + write)", args.write_lines, small.stat().st_size, w))
    tiny = root / "verl-10.jsonl"
    write_log(tiny, 10)
    db.unlink(missing_ok=True)
    fixed = measure(
        sys.executable,
        "-m",
        "workbench.cli.main",
        "import",
        "verl",
        str(tiny),
        "--study",
        "bench",
        "--variant",
        "grpo",
        "--seed",
        "0",
        "--tracking-uri",
        f"sqlite:///{db}",
    )
    rows.append(("import, 10 lines (fixed)", 10, tiny.stat().st_size, fixed))
    load1 = os.getloadavg()[0]
    print(f"{'phase':<26} {'lines':>10} {'MB':>6} {'wall s':>8} {'CPU s':>8} {'peak MB':>8} {'lines/s':>9}")
    for name, lines, size, f in rows:
        print(
            f"{name:<26} {lines:>10,} {size / 1e6:>6.0f} {f['wall_s']:>8.1f} {f['cpu_s']:>8.1f} {f['rss_mb']:>8.0f} "
            f"{lines / f['wall_s']:>9,.0f}"
        )
    print(
        f"load average (1 min) {load0:.1f} before, {load1:.1f} after; {os.cpu_count()} cores; "
        f"{time.strftime('%Y-%m-%d %H:%M')}"
    )


if __name__ == "__main__":
    main()
