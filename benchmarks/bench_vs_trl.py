"""Completion tokens/s per RL step: the workbench against TRL's ``GRPOTrainer`` (issue #14).

    python benchmarks/bench_vs_trl.py [--pairs 3] [--steps 10] [--threads 2] [--dir DIR]
        [--trl-python /work/main/.venv-trl/bin/python] [--decode lean|generate]

Both sides train the same untrained 1.06M-parameter Llama (hidden 128, 4 layers, 4 heads,
intermediate 512, tied embeddings, the workbench's 100-symbol character tokenizer, float32),
saved with ``save_pretrained`` into ``DIR`` together with a JSONL task of ``What is a+b? Answer:``
prompts. Settings: 16 prompts x 8 completions per step, 32 new tokens at temperature 1, beta 0,
token-mean (TRL: ``loss_type="dapo"``), clip 0.2, lr 1e-4 constant, grad clip 1.0, one optimizer
step per batch, one warm-up step then ``--steps`` timed ones.

The sides run alternately, each in a fresh subprocess with ``--threads`` torch threads, so slow
drift of the machine's load hits both. TRL is a benchmark-only dependency: it runs from its own
interpreter (``--trl-python``, a venv holding trl and this package); it is not in the main install.
Printed: per run the median s/step over the timed steps, completion tokens/s (completion tokens of
the step / step seconds, median), the workbench's phases (perf/sample_s, score_s, learn_s) and
/proc/loadavg before and after; then the ratio of the medians over the pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROMPTS_PER_STEP, GROUP_SIZE, MAX_NEW_TOKENS = 16, 8, 32
LR, CLIP, GRAD_CLIP = 1e-4, 0.2, 1.0
TASK_FILE = "task.jsonl"


# ---------------------------------------------------------------- the shared model directory
def build_model_dir(directory: Path) -> Path:
    """The untrained tiny Llama and its tokenizer (``save_pretrained``) plus the JSONL task."""
    from workbench.config import TinyModelConfig
    from workbench.models.tiny import init_tiny_model
    from workbench.models.tokenizer import build_char_tokenizer

    if (directory / "config.json").is_file() and (directory / TASK_FILE).is_file():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_char_tokenizer()
    shape = TinyModelConfig(arch="llama", hidden_size=128, num_layers=4, num_heads=4, intermediate_size=512, seed=0)
    model = init_tiny_model(shape, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    rng = random.Random("bench-vs-trl")
    with open(directory / TASK_FILE, "w") as out:
        for _ in range(1000):
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            out.write(json.dumps({"prompt": f"What is {a}+{b}? Answer:", "answer": str(a + b)}) + "\n")
    return directory


def model_parameters(directory: Path) -> int:
    from transformers import AutoModelForCausalLM

    return sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(directory).parameters())


# ---------------------------------------------------------------- one side, in its own process
def run_workbench(directory: Path, steps: int, decode: str) -> dict:
    from workbench.config import RunConfig
    from workbench.health import HealthMonitor
    from workbench.train.loop import train

    cfg = RunConfig.model_validate({
        "seed": 0,
        "model": {"path": str(directory)},
        "task": {"name": "jsonl", "path": str(directory / TASK_FILE), "eval_size": 8},
        "sampler": {"max_new_tokens": MAX_NEW_TOKENS, "temperature": 1.0, "decode": decode},
        "learner": {"lr": LR, "grad_clip": GRAD_CLIP, "device": "cpu"},
        "rollout": {"prompts_per_step": PROMPTS_PER_STEP, "group_size": GROUP_SIZE, "steps": steps + 1,
                    "eval_every": steps + 1, "eval_size": 8},
        "algorithm": {"preset": "grpo", "agg_mode": "token-mean"},
    })

    class Rows:
        def __init__(self) -> None:
            self.rows: list[dict] = []

        def log_metrics(self, metrics, step):
            if "perf/step_s" in metrics:
                self.rows.append(metrics)

    sink = Rows()
    train(cfg, sink, HealthMonitor.from_config(cfg.health))
    timed = sink.rows[1:]  # step 0 warms up
    return {
        "step_s": [r["perf/step_s"] for r in timed],
        "completion_tokens": [r["perf/sample_tokens"] for r in timed],
        "phases": {name: [r[f"perf/{name}_s"] for r in timed] for name in ("sample", "score", "learn")},
    }


def run_trl(directory: Path, steps: int) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from workbench.reward._worker import math_verify_scorer
    from workbench.tasks.jsonl import read_problems

    problems = read_problems(directory / TASK_FILE)
    dataset = Dataset.from_list([{"prompt": p.prompt, "answer": p.answer} for p in problems])

    def correct(completions, answer, **_):  # the workbench's verifier (math-verify), in process
        return [float(math_verify_scorer(c, a, 5.0)[0]) for c, a in zip(completions, answer, strict=True)]

    class StepTimes(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []
            self.started = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.started)

    tokenizer = AutoTokenizer.from_pretrained(directory, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(directory, dtype="float32")
    batch = PROMPTS_PER_STEP * GROUP_SIZE
    args = GRPOConfig(
        output_dir=str(directory / "trl-out"), use_cpu=True, bf16=False, gradient_checkpointing=False,
        per_device_train_batch_size=batch, gradient_accumulation_steps=1, steps_per_generation=1,
        num_generations=GROUP_SIZE, num_iterations=1, max_completion_length=MAX_NEW_TOKENS,
        temperature=1.0, top_p=1.0, top_k=0, beta=0.0, epsilon=CLIP, loss_type="dapo",
        learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=GRAD_CLIP,
        max_steps=steps + 1, logging_steps=1, save_strategy="no", report_to=[], use_vllm=False, seed=0,
        disable_tqdm=True, dataloader_num_workers=0,
    )
    timer = StepTimes()
    trainer = GRPOTrainer(model=model, reward_funcs=correct, args=args, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[timer])
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "completions/mean_length" in entry]
    lengths = [entry["completions/mean_length"] * batch for entry in logs]
    return {"step_s": timer.seconds[1:], "completion_tokens": lengths[1:], "phases": {}}


def child(side: str, directory: Path, steps: int, threads: int, decode: str) -> None:
    import torch

    torch.set_num_threads(threads)
    result = run_workbench(directory, steps, decode) if side == "workbench" else run_trl(directory, steps)
    print("RESULT " + json.dumps(result))


# ---------------------------------------------------------------- the driver
def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def one_run(python: str, side: str, args) -> dict:
    before = loadavg()
    cmd = [python, __file__, "--child", side, "--dir", str(args.dir), "--steps", str(args.steps),
           "--threads", str(args.threads), "--decode", args.decode]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="false")
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - started
    after = loadavg()
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        sys.exit(f"{side} run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    per_step = [tokens / seconds for tokens, seconds in zip(result["completion_tokens"], result["step_s"], strict=True)]
    return {"side": side, "s_per_step": statistics.median(result["step_s"]),
            "tokens_per_s": statistics.median(per_step),
            "completion_tokens": statistics.median(result["completion_tokens"]),
            "phases": {k: statistics.median(v) for k, v in result["phases"].items()},
            "steps": len(result["step_s"]), "wall_s": wall, "load_before": before, "load_after": after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per run (one warm-up step more)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=Path.home() / ".cache" / "rl-workbench" / "bench-vs-trl")
    parser.add_argument("--trl-python", default="/work/main/.venv-trl/bin/python")
    parser.add_argument("--decode", default="lean", choices=["lean", "generate"], help="workbench sampler.decode")
    parser.add_argument("--child", choices=["workbench", "trl"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.dir, args.steps, args.threads, args.decode)
        return

    build_model_dir(args.dir)
    print(f"model {args.dir}: {model_parameters(args.dir) / 1e6:.2f}M parameters; {args.threads} torch threads; "
          f"workbench sampler.decode={args.decode}; CPUs allowed: {sorted(os.sched_getaffinity(0))}")
    print(f"{'pair':>4} {'side':<9} {'s/step':>7} {'tok/s':>7} {'tokens':>6} {'sample':>7} {'score':>6} "
          f"{'learn':>6}  loadavg before -> after")
    runs = []
    for pair in range(args.pairs):
        for python, side in ((sys.executable, "workbench"), (args.trl_python, "trl")):
            run = one_run(python, side, args)
            runs.append(run)
            phases = run["phases"]
            cells = " ".join(f"{phases[k]:>{w}.3f}" if k in phases else " " * (w - 1) + "-"
                             for k, w in (("sample", 7), ("score", 6), ("learn", 6)))
            print(f"{pair:>4} {side:<9} {run['s_per_step']:>7.3f} {run['tokens_per_s']:>7.0f} "
                  f"{run['completion_tokens']:>6.0f} {cells}  {run['load_before']} -> {run['load_after']}",
                  flush=True)
    wb = statistics.median(r["tokens_per_s"] for r in runs if r["side"] == "workbench")
    trl = statistics.median(r["tokens_per_s"] for r in runs if r["side"] == "trl")
    print(f"median completion tokens/s per RL step: workbench {wb:.0f}, TRL {trl:.0f}; ratio {wb / trl:.2f}")


if __name__ == "__main__":
    main()
