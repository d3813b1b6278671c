"""Steps per second of the synchronous loop against the pipelined sampler at rollout.staleness: 1, as a table.

    python benchmarks/bench_async.py [--rounds 3] [--steps 8] [--study studies/sanity.yaml] [--set KEY=VALUE ...]

Each round runs both settings once, each in a fresh process (the tiny model built and cached first), in an
order alternated round by round so drifts in the machine's background load hit both alike. Equal batch
settings: the same config but ``rollout.staleness``. A run's steps/s is timed between the sink receiving
step 1 and step ``steps - 1`` (step 0's eval, the warm-up and the final eval left out). The table gives the
medians over rounds, the 1-minute load average before each run, and where a step's time goes: sampling
(on the sampler thread when pipelined), learning, the learner's wait for its batch, the sampler's idle wait.
Torch threads: what a workbench run picks (``threads_per_run(1)``, the idle CPUs); the pipeline halves them.
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

SETTINGS = (("synchronous (staleness 0)", 0), ("pipelined (staleness 1)", 1))
TIMED = ("perf/step_s", "perf/sample_s", "perf/learn_s", "perf/score_s", "perf/learner_wait_s", "perf/sampler_wait_s")


class ClockSink:
    """Records when each step's metrics arrive, and the metrics."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, float, dict]] = []

    def log_metrics(self, metrics, step):
        self.rows.append((step, time.perf_counter(), dict(metrics)))


def one_run(study_path: str, staleness: int, steps: int, sets: list[str]) -> dict:
    """One run of the study's first config in this process; its steps/s and median timings."""
    import torch

    from workbench.execution.threads import threads_per_run
    from workbench.health import HealthMonitor
    from workbench.models import model_dir
    from workbench.study import apply_overrides, expand, load_study
    from workbench.train.loop import train

    torch.set_num_threads(threads_per_run(1))
    threads = torch.get_num_threads()
    study = apply_overrides(
        load_study(study_path),
        [f"rollout.steps={steps}", f"rollout.eval_every={steps}", f"rollout.staleness={staleness}", *sets],
    )
    cfg = expand(study)[0].config
    model_dir(cfg.model, cfg.task)  # built outside the timed region
    sink = ClockSink()
    train(cfg, sink, HealthMonitor.from_config(cfg.health))
    at = {step: t for step, t, _ in sink.rows}
    timed = [m for step, _, m in sink.rows if 2 <= step <= steps - 1]  # the steps inside the timed interval
    return {
        "steps_per_s": (steps - 2) / (at[steps - 1] - at[1]),
        "threads": threads,
        **{key: statistics.median(m[key] for m in timed) for key in TIMED if all(key in m for m in timed)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="studies/sanity.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8, help="RL steps per run (steps 2..steps-1 are timed)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # child: one run, JSON out
    parser.add_argument("--out", help="write every measurement as JSON here")
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one_run(args.study, args.one, args.steps, args.set)))
        return
    rows = []
    for rnd in range(args.rounds):
        order = SETTINGS if rnd % 2 == 0 else SETTINGS[::-1]
        for label, staleness in order:
            load = os.getloadavg()[0]
            cmd = [
                sys.executable,
                __file__,
                "--study",
                args.study,
                "--steps",
                str(args.steps),
                "--one",
                str(staleness),
                *[a for kv in args.set for a in ("--set", kv)],
            ]
            out = subprocess.run(
                cmd,
                check=True,
                capture_output=True,
                text=True,
                env=os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])},
            )
            row = {"round": rnd, "setting": label, "load_before": load, **json.loads(out.stdout.splitlines()[-1])}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    print(markdown(rows))


def markdown(rows: list[dict]) -> str:
    lines = [
        "| setting | steps/s (median) | runs | step s | sample s | learn s | learner wait s | sampler wait s |"
        " load before each run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    medians = {}
    for label, _ in SETTINGS:
        got = [r for r in rows if r["setting"] == label]

        def med(key, got=got):
            values = [r[key] for r in got if key in r]
            return f"{statistics.median(values):.2f}" if values else "-"

        medians[label] = statistics.median(r["steps_per_s"] for r in got)
        lines.append(
            f"| {label} | {medians[label]:.3f} | {len(got)} | {med('perf/step_s')} | {med('perf/sample_s')} | "
            f"{med('perf/learn_s')} | {med('perf/learner_wait_s')} | {med('perf/sampler_wait_s')} | "
            + ", ".join(f"{r['load_before']:.1f}" for r in got)
            + " |"
        )
    sync, pipe = (medians[label] for label, _ in SETTINGS)
    lines += [
        "",
        f"Pipelined / synchronous: {pipe / sync:.2f}x (goal >= 1.4x); torch threads per run: "
        + ", ".join(sorted({str(r["threads"]) for r in rows})),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
