"""Throughput and tracking overhead of the sanity config, printed as a table.

    python benchmarks/bench_sanity.py [--steps 30] [--study studies/sanity.yaml] [--set reward.overlap=false ...]
        [--threads auto|torch|N] [--json OUT.json]

Runs the study's base config for a few steps into a throwaway MLflow store and reports
sampler tokens/s, learner tokens/s, step seconds and the time spent in MLflow calls as a
percentage of step time (target <= 3%). The tiny model is built (and cached) first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from workbench.execution.threads import threads_per_run
from workbench.health import HealthMonitor
from workbench.models import model_dir
from workbench.study import apply_overrides, expand, load_study
from workbench.tracking.writer import RunTracker
from workbench.train.loop import train


class TimedSink:
    """Forwards to the tracker and records per-step metrics."""

    def __init__(self, tracker: RunTracker) -> None:
        self.tracker, self.rows = tracker, []

    def log_metrics(self, metrics, step):
        self.rows.append(metrics)
        self.tracker.log_metrics(metrics, step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="studies/sanity.yaml")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override, as `workbench run --set` takes it (repeatable)",
    )
    parser.add_argument(
        "--threads",
        default="auto",
        help="torch threads: auto (what a workbench run picks), torch (torch's own default), or N",
    )
    parser.add_argument("--json", help="also write the medians to this file (benchmarks/bench_shared_cpu.py reads it)")
    args = parser.parse_args()
    if args.threads == "auto":
        torch.set_num_threads(threads_per_run(1))
    elif args.threads != "torch":
        torch.set_num_threads(int(args.threads))

    study = apply_overrides(
        load_study(args.study), [f"rollout.steps={args.steps}", f"rollout.eval_every={args.steps}", *args.set]
    )
    cfg = expand(study)[0].config
    model_dir(cfg.model, cfg.task)  # build outside the timed region
    with tempfile.TemporaryDirectory() as tmp:
        tracker = RunTracker(f"sqlite:///{Path(tmp) / 'bench.db'}", "bench", "bench", {"workbench.role": "run"})
        tracker.start()
        sink = TimedSink(tracker)
        start = time.perf_counter()
        train(cfg, sink, HealthMonitor.from_config(cfg.health))
        tracker.finish("FINISHED")
        total = time.perf_counter() - start

    steps = [r for r in sink.rows[1:] if "perf/step_s" in r]  # skip step 0 (warm-up, eval)

    def med(key):
        return statistics.median(r[key] for r in steps)

    step_s = med("perf/step_s")
    tracking_per_step = tracker.seconds / len(sink.rows)
    table = Table(title=f"sanity config, {len(steps)} steps (median over steps; {total:.1f} s total)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows = [
        ("completions per step", f"{cfg.rollout.prompts_per_step * cfg.rollout.group_size}"),
        ("sampler tokens/s", f"{med('perf/sample_tokens_per_s'):,.0f}"),
        ("learner tokens/s", f"{med('perf/learn_tokens_per_s'):,.0f}"),
        ("step seconds", f"{step_s:.3f}"),
        ("  sampling s", f"{med('perf/sample_s'):.3f}"),
        ("  scoring s (math-verify)", f"{med('perf/score_s'):.3f}"),
        ("  learning s", f"{med('perf/learn_s'):.3f}"),
        ("  algorithm units s (advantage, IS, loss)", f"{med('perf/algorithm_s'):.4f}"),
        (
            "algorithm overhead, % of learning (target <= 5%)",
            f"{100 * med('perf/algorithm_s') / med('perf/learn_s'):.2f}%",
        ),
        ("health rules s per step", f"{med('perf/health_s'):.5f}"),
        ("health overhead (target <= 1%)", f"{100 * med('perf/health_s') / step_s:.3f}%"),
        ("tracking s per step", f"{tracking_per_step:.4f}"),
        ("tracking overhead (target <= 3%)", f"{100 * tracking_per_step / step_s:.2f}%"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "step_s": step_s,
                    "steps": len(steps),
                    "threads": torch.get_num_threads(),
                    "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
                    "total_s": total,
                }
            )
        )


if __name__ == "__main__":
    main()
