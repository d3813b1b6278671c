"""Completion tokens/s per RL step: the workbench against TRL's ``GRPOTrainer`` (issue #14).

    python benchmarks/bench_vs_trl.py [--pairs 3] [--steps 10] [--threads 2] [--dir DIR]
        [--trl-python /work/main/.venv-trl/bin/python] [--sides workbench,trl[,workbench-in-turn,...]]
        [--device cpu|cuda] [--model tiny|qwen2-0.5b] [--prompts 16] [--max-new-tokens 32]

Both sides train the same untrained 1.06M-parameter Llama (hidden 128, 4 layers, 4 heads,
intermediate 512, tied embeddings, the workbench's 100-symbol character tokenizer, float32),
saved with ``save_pretrained`` into ``DIR`` together with a JSONL task of ``What is a+b? Answer:``
prompts. Settings: 16 prompts x 8 completions per step, 32 new tokens at temperature 1, beta 0,
token-mean (TRL: ``loss_type="dapo"``), clip 0.2, lr 1e-4 constant, grad clip 1.0, one optimizer
step per batch, one warm-up step then ``--steps`` timed ones.

The sides run alternately, each in a fresh subprocess with ``--threads`` torch threads, so slow
drift of the machine's load hits both. TRL is a benchmark-only dependency: it runs from its own
interpreter (``--trl-python``, a venv holding trl and this package); it is not in the main install.
``workbench`` runs the defaults (``sampler.decode: lean``, ``learner.forward: lean``);
``workbench-reference`` the reference paths (``decode: generate``, ``forward: full``);
``workbench-overlap`` scores beside the learner's forward instead of before it (``reward.overlap: true``);
``workbench-2-verifiers`` scores in two math-verify processes (``reward.workers: 2``);
``workbench-compiled`` adds ``sampler.compile`` (its compiling falls in the warm-up step, which is not
timed: the run's wall time is printed too).
Printed: per run the median s/step over the timed steps, completion tokens/s (completion tokens of
the step / step seconds, median), the median CPU seconds per step of the run's own process (less
sensitive to other load than wall time; the workbench's math-verify workers are other processes),
the workbench's phases (perf/sample_s, score_s, learn_s), the run's whole wall time (process start to
exit: start-up, the warm-up step and any compiling included) and /proc/loadavg before and after; then
the ratio of the medians over the pairs.

``--device cuda`` puts both learners on the GPU (TRL: ``use_cpu=False``); the peak GPU memory of each
run (``torch.cuda.max_memory_allocated``) is then printed too. ``--model qwen2-0.5b`` replaces the tiny
Llama by Qwen2.5-0.5B's architecture (hidden 896, 24 layers, 14 heads / 2 KV heads, MLP 4864, vocabulary
151,936, tied embeddings: 494M parameters), randomly initialised: for throughput only. The character
tokenizer stays; sampled ids beyond it decode to nothing, so every completion runs to the token limit.
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

PROMPTS_PER_STEP, GROUP_SIZE, MAX_NEW_TOKENS = 16, 8, 32  # the defaults of --prompts and --max-new-tokens
LR, CLIP, GRAD_CLIP = 1e-4, 0.2, 1.0
TASK_FILE = "task.jsonl"
# The workbench's sides: config sections merged over the shared settings.
WORKBENCH_SIDES = {
    "workbench": {},  # the defaults
    "workbench-reference": {"sampler": {"decode": "generate"}, "learner": {"forward": "full"}},  # reference paths
    "workbench-overlap": {
        "reward": {"overlap": True}
    },  # scoring beside the learner's forward (a CPU's default: in turn)
    "workbench-compiled": {"sampler": {"compile": True}},  # compiles in the warm-up step
    "workbench-2-verifiers": {"reward": {"workers": 2}},  # math-verify in two processes while the step waits
}
SIDES = ("trl", *WORKBENCH_SIDES)


# ---------------------------------------------------------------- the shared model directory
def qwen2_half_billion(tokenizer):
    """Qwen2.5-0.5B's published architecture (its config.json), random weights, in float32."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def build_model_dir(directory: Path, model_name: str = "tiny") -> Path:
    """The untrained model and its tokenizer (``save_pretrained``) plus the JSONL task."""
    from workbench.config import TinyModelConfig
    from workbench.models.tiny import init_tiny_model
    from workbench.models.tokenizer import build_char_tokenizer

    if (directory / "config.json").is_file() and (directory / TASK_FILE).is_file():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_char_tokenizer()
    if model_name == "qwen2-0.5b":
        model = qwen2_half_billion(tokenizer)
    else:
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
def workbench_config(
    directory: Path,
    steps: int,
    side: str,
    device: str = "cpu",
    prompts: int = PROMPTS_PER_STEP,
    max_new_tokens: int = MAX_NEW_TOKENS,
):
    """The run config of a workbench side: the issue's settings, then the side's overrides."""
    from workbench.config import RunConfig, deep_merge

    return RunConfig.model_validate(
        deep_merge(
            {
                "seed": 0,
                "model": {"path": str(directory)},
                "task": {"name": "jsonl", "path": str(directory / TASK_FILE), "eval_size": 8},
                "sampler": {"max_new_tokens": max_new_tokens, "temperature": 1.0},
                "learner": {"lr": LR, "grad_clip": GRAD_CLIP, "device": device},
                "rollout": {
                    "prompts_per_step": prompts,
                    "group_size": GROUP_SIZE,
                    "steps": steps + 1,
                    "eval_every": steps + 1,
                    "eval_size": 8,
                },
                "algorithm": {"preset": "grpo", "agg_mode": "token-mean"},
            },
            WORKBENCH_SIDES[side],
        )
    )


def run_workbench(directory: Path, steps: int, side: str, device: str, prompts: int, max_new_tokens: int) -> dict:
    from workbench.health import HealthMonitor
    from workbench.train.loop import train

    cfg = workbench_config(directory, steps, side, device, prompts, max_new_tokens)

    class Rows:
        def __init__(self) -> None:
            self.rows: list[dict] = []
            self.cpu: list[float] = []  # process CPU time at each step's end

        def log_metrics(self, metrics, step):
            if "perf/step_s" in metrics:
                self.rows.append(metrics)
                self.cpu.append(time.process_time())

    sink = Rows()
    train(cfg, sink, HealthMonitor.from_config(cfg.health))
    timed = sink.rows[1:]  # step 0 warms up
    return {
        "step_s": [r["perf/step_s"] for r in timed],
        "cpu_s": [b - a for a, b in zip(sink.cpu, sink.cpu[1:])],  # step k's end to step k+1's end
        "completion_tokens": [r["perf/sample_tokens"] for r in timed],
        "phases": {name: [r[f"perf/{name}_s"] for r in timed] for name in ("sample", "score", "learn")},
    }


def run_trl(directory: Path, steps: int, device: str, prompts: int, max_new_tokens: int) -> dict:
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
            self.cpu: list[float] = []
            self.started = self.cpu_started = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self.started, self.cpu_started = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.started)
            self.cpu.append(time.process_time() - self.cpu_started)

    tokenizer = AutoTokenizer.from_pretrained(directory, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(directory, dtype="float32")
    batch = prompts * GROUP_SIZE
    args = GRPOConfig(
        output_dir=str(directory / "trl-out"),
        use_cpu=device == "cpu",
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=GROUP_SIZE,
        num_iterations=1,
        max_completion_length=max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        epsilon=CLIP,
        loss_type="dapo",
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_grad_norm=GRAD_CLIP,
        max_steps=steps + 1,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_vllm=False,
        seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    timer = StepTimes()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=correct,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[timer],
    )
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "completions/mean_length" in entry]
    lengths = [entry["completions/mean_length"] * batch for entry in logs]
    return {"step_s": timer.seconds[1:], "cpu_s": timer.cpu[1:], "completion_tokens": lengths[1:], "phases": {}}


def child(side: str, args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    shape = (args.device, args.prompts, args.max_new_tokens)
    if side == "trl":
        result = run_trl(args.dir, args.steps, *shape)
    else:
        result = run_workbench(args.dir, args.steps, side, *shape)
    result["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else None
    print("RESULT " + json.dumps(result))


# ---------------------------------------------------------------- the driver
def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def one_run(python: str, side: str, args) -> dict:
    before = loadavg()
    cmd = [
        python,
        __file__,
        "--child",
        side,
        "--dir",
        str(args.dir),
        "--steps",
        str(args.steps),
        "--threads",
        str(args.threads),
        "--device",
        args.device,
        "--prompts",
        str(args.prompts),
        "--max-new-tokens",
        str(args.max_new_tokens),
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="false")
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - started
    after = loadavg()
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        sys.exit(f"{side} run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(lines[-1][len("RESULT ") :])
    per_step = [tokens / seconds for tokens, seconds in zip(result["completion_tokens"], result["step_s"], strict=True)]
    return {
        "side": side,
        "s_per_step": statistics.median(result["step_s"]),
        "tokens_per_s": statistics.median(per_step),
        "completion_tokens": statistics.median(result["completion_tokens"]),
        "cpu_s": statistics.median(result["cpu_s"]),
        "phases": {k: statistics.median(v) for k, v in result["phases"].items()},
        "steps": len(result["step_s"]),
        "wall_s": wall,
        "peak_gib": result.get("peak_gib"),
        "load_before": before,
        "load_after": after,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per run (one warm-up step more)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=Path.home() / ".cache" / "rl-workbench" / "bench-vs-trl")
    parser.add_argument("--trl-python", default="/work/main/.venv-trl/bin/python")
    parser.add_argument(
        "--sides", default="workbench,trl", help=f"comma-separated, run in this order each pair: {', '.join(SIDES)}"
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where both learners run")
    parser.add_argument(
        "--model",
        choices=("tiny", "qwen2-0.5b"),
        default="tiny",
        help="tiny: the 1.06M Llama; qwen2-0.5b: Qwen2.5-0.5B's architecture, random weights",
    )
    parser.add_argument("--prompts", type=int, default=PROMPTS_PER_STEP, help="prompts per step (x 8 completions)")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args)
        return
    sides = args.sides.split(",")
    if not sides or any(side not in SIDES for side in sides) or "workbench" not in sides or "trl" not in sides:
        sys.exit(f"--sides: {args.sides!r} must list workbench and trl (and optionally any of {', '.join(SIDES)})")

    build_model_dir(args.dir, args.model)
    print(
        f"model {args.model} in {args.dir}: {model_parameters(args.dir) / 1e6:.2f}M parameters; {args.threads} torch "
        f"threads; device {args.device}; {args.prompts} prompts x {GROUP_SIZE}, {args.max_new_tokens} new tokens; "
        f"sides {sides}; CPUs allowed: {sorted(os.sched_getaffinity(0))}"
    )
    print(
        f"{'pair':>4} {'side':<19} {'s/step':>7} {'tok/s':>7} {'cpu s':>6} {'tokens':>6} {'sample':>7} {'score':>6} "
        f"{'learn':>6} {'run s':>6} {'peak GiB':>8}  loadavg before -> after"
    )
    runs = []
    for pair in range(args.pairs):
        for side in sides:
            run = one_run(args.trl_python if side == "trl" else sys.executable, side, args)
            runs.append(run)
            phases = run["phases"]
            cells = " ".join(
                f"{phases[k]:>{w}.3f}" if k in phases else " " * (w - 1) + "-"
                for k, w in (("sample", 7), ("score", 6), ("learn", 6))
            )
            print(
                f"{pair:>4} {side:<19} {run['s_per_step']:>7.3f} {run['tokens_per_s']:>7.0f} {run['cpu_s']:>6.2f} "
                f"{run['completion_tokens']:>6.0f} {cells} {run['wall_s']:>6.0f} "
                f"{'-' if run['peak_gib'] is None else format(run['peak_gib'], '.2f'):>8}  "
                f"{run['load_before']} -> {run['load_after']}",
                flush=True,
            )
    if not runs:
        return
    medians = {side: statistics.median(r["tokens_per_s"] for r in runs if r["side"] == side) for side in sides}
    cpu = {side: statistics.median(r["cpu_s"] for r in runs if r["side"] == side) for side in sides}
    print("median completion tokens/s per RL step: " + ", ".join(f"{s} {v:.0f}" for s, v in medians.items()))
    for side in sides:
        if side != "trl":
            print(
                f"ratio {side} / trl: {medians[side] / medians['trl']:.2f} (tokens/s); "
                f"{cpu['trl'] / cpu[side]:.2f} (process CPU s/step, trl / {side})"
            )


if __name__ == "__main__":
    main()
