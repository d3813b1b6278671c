"""What keeping every completion costs (issue 51): time per step and bytes per 1k completions, as a table.

    python benchmarks/bench_rollouts.py [--study studies/sanity.yaml] [--steps 30] [--flush-every 10]
        [--set KEY=VALUE ...] [--json OUT.json]

Trains the study's base config for ``--steps`` steps into a throwaway MLflow store (sqlite, local artifacts)
with the rollout log on, as ``workbench run`` does (:func:`workbench.execution.run.rollout_recorder`), and
reports the recorder's own time (building the rows, parquet encoding, writing the artifacts: it times
itself) against the step time, and the bytes it wrote per 1,000 completions. The model is built (and
cached) before the timed part.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from bench_sanity import TimedSink  # the sibling script (benchmarks/ is sys.path[0]): one sink for both
from rich.console import Console
from rich.table import Table

from workbench.execution.run import rollout_recorder
from workbench.execution.threads import threads_per_run
from workbench.health import HealthMonitor
from workbench.models import model_dir
from workbench.study import apply_overrides, expand, load_study
from workbench.tracking.writer import RunTracker
from workbench.train.loop import train


def long_text_bytes(chars: int = 2000) -> float:
    """Bytes per 1k completions of ``chars``-character English text (disjoint slices of this repo's README and
    docs, a proxy for a larger model's answers), encoded as the recorder encodes a chunk: one chunk."""
    from workbench.tracking.rollouts import _schema, encode_parquet

    root = Path(__file__).resolve().parents[1]
    corpus = " ".join(p.read_text() for p in [root / "README.md", *sorted(root.glob("docs/*.md"))])
    n = len(corpus) // chars
    texts = [corpus[i * chars : (i + 1) * chars] for i in range(n)]
    columns = {
        "split": ["train"] * n,
        "step": [i // 128 for i in range(n)],
        "prompt_id": [f"{i // 8:012x}" for i in range(n)],
        "group": [i // 8 % 16 for i in range(n)],
        "sample": [i % 8 for i in range(n)],
        "text": texts,
        "reward": [float(i % 2) for i in range(n)],
        "correct": [bool(i % 2) for i in range(n)],
        "length": [chars // 4] * n,
        "truncated": [False] * n,
        "sampler_logp_sum": [-0.37 * i for i in range(n)],
        "advantage": [0.5 - i % 2 for i in range(n)],
        "kept": [True] * n,
    }
    return 1000 * len(encode_parquet(columns, _schema([]))) / n


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
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    torch.set_num_threads(threads_per_run(1))

    study = apply_overrides(
        load_study(args.study),
        [f"rollout.steps={args.steps}", f"rollout.eval_every={max(args.steps // 3, 1)}", *args.set],
    )
    cfg = expand(study)[0].config
    model_dir(cfg.model, cfg.task)  # build outside the timed region
    recorders = []
    with tempfile.TemporaryDirectory() as tmp:
        tracker = RunTracker(f"sqlite:///{Path(tmp) / 'bench.db'}", "bench", "bench", {"workbench.role": "run"})
        tracker.start()
        build = rollout_recorder(cfg, tracker)

        def keep(parts):
            recorders.append(build(parts))
            return recorders[-1]

        sink = TimedSink(tracker)
        start = time.perf_counter()
        result = train(cfg, sink, HealthMonitor.from_config(cfg.health), rollout_log=keep)
        tracker.finish("FINISHED")
        total = time.perf_counter() - start
    log = recorders[0]
    manifest = result.rollouts

    steps = [r for r in sink.rows[1:] if "perf/step_s" in r]  # step 0 warms up
    step_s = statistics.median(r["perf/step_s"] for r in steps)
    all_step_s = sum(r["perf/step_s"] for r in sink.rows if "perf/step_s" in r)
    stored = sum(manifest["rows"].values())
    per_step = log.seconds / len(sink.rows)
    figures = {
        "study": study.name,
        "steps": args.steps,
        "completions_per_step": cfg.rollout.prompts_per_step * cfg.rollout.group_size,
        "max_new_tokens": cfg.sampler.max_new_tokens,
        "stored": stored,
        "dropped": sum(manifest["dropped"].values()),
        "bytes": manifest["bytes"],
        "chunks": manifest["chunks"],
        "bytes_per_1k": 1000 * manifest["bytes"] / max(stored, 1),
        "recorder_s": log.seconds,
        "recorder_s_per_step": per_step,
        "step_s_median": step_s,
        "overhead_pct": 100 * log.seconds / all_step_s,
        "total_s": total,
        "long_text_bytes_per_1k": long_text_bytes(),
    }
    table = Table(title=f"rollout log, {study.name} base config, {args.steps} steps ({total:.1f} s total)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in [
        ("completions per step (prompts × group)", f"{figures['completions_per_step']}"),
        ("sampler.max_new_tokens", f"{figures['max_new_tokens']}"),
        ("completions stored (train + eval)", f"{stored:,} ({figures['dropped']} dropped)"),
        ("bytes written (parquet chunks, prompts included)", f"{manifest['bytes']:,} in {manifest['chunks']} chunk(s)"),
        ("bytes per 1k completions", f"{figures['bytes_per_1k']:,.0f}"),
        ("step seconds (median)", f"{step_s:.3f}"),
        ("rollout log s per step (its own clock)", f"{per_step:.5f}"),
        ("rollout log overhead, % of step time (target <= 2%)", f"{figures['overhead_pct']:.2f}%"),
        ("bytes per 1k completions of 2,000-char English text (proxy)", f"{figures['long_text_bytes_per_1k']:,.0f}"),
    ]:
        table.add_row(name, value)
    Console().print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
