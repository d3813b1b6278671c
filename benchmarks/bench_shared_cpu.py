"""Step time of bench_sanity on a shared machine: alone, beside 1 and beside 3 CPU-bound processes.

    python benchmarks/bench_shared_cpu.py [--rounds 3] [--steps 8] [--out docs/findings/shared_cpu.json]

For each round and each condition (0, 1, 3 busy processes: ``while True: pass`` loops this script
starts and stops), every thread setting runs once, in an order rotated each round, so drifts in the
machine's background load hit every setting alike. A setting is ``--threads`` of bench_sanity
(``torch`` = torch's own default, the behaviour before issue #32; ``auto`` = what a workbench run
picks now; or a fixed N) plus an optional ``OMP_WAIT_POLICY``. The table printed (markdown, as in
docs/engines.md) gives the median step time over rounds and the 1-minute load average seen just
before each condition's busy processes started (the background load, from other users); each JSON
row also has the load average just before and after its run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SANITY = Path(__file__).with_name("bench_sanity.py")
#: (label, --threads, OMP_WAIT_POLICY or "")
SETTINGS = (
    ("torch default (before; 1 thread per CPU)", "torch", ""),
    ("1 thread", "1", ""),
    ("2 threads, OMP_WAIT_POLICY=PASSIVE", "2", "PASSIVE"),
    ("auto (after)", "auto", ""),
)
BUSY = (0, 1, 3)


def start_busy(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def one_run(threads: str, wait_policy: str, steps: int, extra: list[str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    if wait_policy:
        env["OMP_WAIT_POLICY"] = wait_policy
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            str(SANITY),
            "--steps",
            str(steps),
            "--threads",
            threads,
            "--json",
            str(out),
            "--set",
            "task.eval_size=32",
            *extra,
        ]
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6, help="RL steps per run (the first is not timed)")
    parser.add_argument("--busy", type=int, nargs="*", default=list(BUSY))
    parser.add_argument("--out", help="write every measurement as JSON here")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    extra = [a for kv in args.set for a in ("--set", kv)]
    rows: list[dict] = []
    for rnd in range(args.rounds):
        for busy in args.busy:
            background = os.getloadavg()[0]
            procs = start_busy(busy)
            try:
                time.sleep(1.0)  # let the busy loops get scheduled
                order = SETTINGS[rnd % len(SETTINGS) :] + SETTINGS[: rnd % len(SETTINGS)]
                for label, threads, policy in order:
                    load_before = os.getloadavg()[0]
                    result = one_run(threads, policy, args.steps, extra)
                    row = {
                        "round": rnd,
                        "busy": busy,
                        "setting": label,
                        "background_load": background,
                        "load_before": load_before,
                        "load_after": os.getloadavg()[0],
                        **result,
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            finally:
                stop(procs)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    print(markdown(rows, args.busy))


def markdown(rows: list[dict], busy_levels: list[int]) -> str:
    head = "| setting | " + " | ".join(f"beside {b} busy" if b else "alone" for b in busy_levels) + " |"
    lines = [head, "|---" * (len(busy_levels) + 1) + "|"]
    for label, _, _ in SETTINGS:
        cells = []
        for b in busy_levels:
            got = [r for r in rows if r["setting"] == label and r["busy"] == b]
            if got:
                threads = sorted({r["threads"] for r in got})
                cells.append(
                    f"{statistics.median(r['step_s'] for r in got):.2f} s "
                    f"({len(got)} runs, {'/'.join(map(str, threads))} thr)"
                )
            else:
                cells.append("-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    loads = [
        f"{'alone' if b == 0 else f'beside {b}'}: "
        + ", ".join(f"{r['background_load']:.1f}" for r in rows if r["busy"] == b and r["setting"] == SETTINGS[0][0])
        for b in busy_levels
    ]
    lines.append("")
    lines.append("Background 1-min load average before each condition (per round): " + "; ".join(loads))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
