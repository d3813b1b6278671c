"""Where the workbench's RL step spends its CPU time, at the settings of ``bench_vs_trl.py``.

    python benchmarks/profile_step.py [--threads 1] [--steps 3] [--reference] [--ops]

Trains ``--steps`` steps (after one warm-up step) on the benchmark's model directory under cProfile
with a CPU-time clock (``time.process_time``: other processes' load does not inflate it) and prints
the CPU seconds per step in the step's parts; ``--ops`` adds the torch profiler's top aten ops.
``--reference`` profiles the reference paths (``sampler.decode: generate``, ``learner.forward: full``).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_vs_trl import GRAD_CLIP, GROUP_SIZE, LR, MAX_NEW_TOKENS, PROMPTS_PER_STEP, TASK_FILE, build_model_dir

PARTS = {  # (part of the module path, function name) -> label
    ("rollout/hf.py", "generate"): "sample (HFSampler.generate)",
    ("rollout/decode.py", "decode"): "  lean decode loop",
    ("rollout/hf.py", "generate_reference"): "  transformers generate",
    ("reward/rollouts.py", "score_rollouts"): "score (math-verify, workers)",
    ("train/update.py", "policy_update"): "learn (policy_update)",
    ("train/learner.py", "logprobs"): "  forward (logprobs)",
    ("train/learner.py", "backward"): "  backward",
    ("train/learner.py", "step"): "  clip + AdamW step",
    ("/train/", "rl_step"): "whole rl_step",  # train/loop.py, or train/step.py after the loop's restructuring
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--reference", action="store_true")
    parser.add_argument("--ops", action="store_true")
    parser.add_argument("--dir", type=Path, default=Path.home() / ".cache" / "rl-workbench" / "bench-vs-trl")
    args = parser.parse_args()

    import torch

    from workbench.config import RunConfig
    from workbench.health import HealthMonitor
    from workbench.train import loop

    torch.set_num_threads(args.threads)
    directory = build_model_dir(args.dir)
    cfg = RunConfig.model_validate(
        {
            "model": {"path": str(directory)},
            "task": {"name": "jsonl", "path": str(directory / TASK_FILE), "eval_size": 8},
            "sampler": {"max_new_tokens": MAX_NEW_TOKENS, "decode": "generate" if args.reference else "lean"},
            "learner": {
                "lr": LR,
                "grad_clip": GRAD_CLIP,
                "device": "cpu",
                "forward": "full" if args.reference else "lean",
            },
            "rollout": {
                "prompts_per_step": PROMPTS_PER_STEP,
                "group_size": GROUP_SIZE,
                "steps": args.steps + 1,
                "eval_every": args.steps + 1,
                "eval_size": 8,
            },
            "algorithm": {"preset": "grpo", "agg_mode": "token-mean"},
        }
    )
    profiler = cProfile.Profile(time.process_time)
    original = loop.rl_step
    calls = []

    def profiled_step(*a, **k):  # the warm-up step runs unprofiled
        calls.append(1)
        if len(calls) == 1:
            return original(*a, **k)
        profiler.enable()
        try:
            return original(*a, **k)
        finally:
            profiler.disable()

    class Sink:
        def log_metrics(self, metrics, step):
            pass

    loop.rl_step = profiled_step
    ops = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if args.ops else None
    if ops is not None:
        ops.__enter__()
    loop.train(cfg, Sink(), HealthMonitor.from_config(cfg.health))
    if ops is not None:
        ops.__exit__(None, None, None)
    stats = pstats.Stats(profiler).stats
    print(
        f"CPU seconds per RL step ({args.threads} torch thread(s), {args.steps} steps, "
        f"{'reference' if args.reference else 'lean'} paths):"
    )
    for (suffix, name), label in PARTS.items():
        total = sum(v[3] for (file, _, func), v in stats.items() if suffix in file and func == name)
        if total:
            print(f"  {label:<32} {total / args.steps:7.3f}")
    if ops is not None:
        print(ops.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
