"""The matrix-multiply floor of one RL step at ``bench_vs_trl.py``'s settings: how fast can a step be?

    python benchmarks/step_floor.py [--threads 2] [--repeats 5] [--prompt-len 22] [--completion-len 32]

A step's linear layers are unavoidable arithmetic: every sampled token goes once through every weight
matrix of the model while decoding, and every trained token position goes through them once forward
and twice backward (the input's and the weight's gradient). This times exactly those ``torch.mm``
calls, with the step's shapes and ``--threads`` threads, and nothing else: no attention, norms,
softmax, sampling, scoring, optimizer or Python around them. So the figure is a lower bound on the
step's wall time for a side that does that much work; real steps add the rest.

Two work plans are timed:
- ``workbench``: each distinct prompt prefilled once (n·P positions), then B rows decoded for
  ``--completion-len`` tokens; the learner's forward over n·P + B·T positions (``learner.forward: lean``).
- ``prompt per row`` (what ``generate(num_return_sequences=G)`` and a padded learner batch do, as TRL
  does): B·P prefill positions and a learner over B·(P + T) positions.

The last line divides a measured step time (``--measured-step``, e.g. TRL's median s/step from
``bench_vs_trl.py``) by the workbench floor: the speed-up over that step that no implementation of the
workbench's work plan can exceed on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_vs_trl import GROUP_SIZE, MAX_NEW_TOKENS, PROMPTS_PER_STEP, build_model_dir


def linear_shapes(model) -> list[tuple[int, int]]:
    """(in, out) of every linear map a token goes through: the layers' projections and the LM head."""
    return [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear)]


def time_mms(calls: list[tuple[int, int, int]], repeats: int) -> float:
    """Median seconds of one pass over ``calls`` = [(rows, inner, cols)], each a fresh ``torch.mm``."""
    operands = [(torch.randn(m, k), torch.randn(k, n)) for m, k, n in calls]
    for a, b in operands[: min(len(operands), 8)]:  # warm the BLAS up
        torch.mm(a, b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for a, b in operands:
            torch.mm(a, b)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def plan(shapes, *, prefill_rows: int, decode_rows: int, decode_steps: int, learn_rows: int):
    """The step's matmuls, grouped: sample (prefill + one per decoded token) and learn (fwd + 2 bwd)."""
    prefill = [(prefill_rows, k, n) for k, n in shapes]
    decode = [(decode_rows, k, n) for k, n in shapes] * (decode_steps - 1)  # the first token comes from the prefill
    forward = [(learn_rows, k, n) for k, n in shapes]
    backward = [(learn_rows, n, k) for k, n in shapes] + [(n, learn_rows, k) for k, n in shapes]
    return {"sample": prefill + decode, "learn": forward + backward}


def flops(calls) -> float:
    return sum(2.0 * m * k * n for m, k, n in calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompt-len", type=int, default=22, help="padded prompt tokens (bench_vs_trl's prompts: 22)")
    parser.add_argument(
        "--completion-len",
        type=int,
        default=MAX_NEW_TOKENS,
        help="decoded tokens per row (an untrained model runs to the cap)",
    )
    parser.add_argument("--measured-step", type=float, default=None, help="a measured s/step to compare with")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench-vs-trl"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(build_model_dir(args.dir), dtype=torch.float32)
    shapes = linear_shapes(model)
    n, rows, p, t = PROMPTS_PER_STEP, PROMPTS_PER_STEP * GROUP_SIZE, args.prompt_len, args.completion_len
    plans = {
        "workbench": plan(shapes, prefill_rows=n * p, decode_rows=rows, decode_steps=t, learn_rows=n * p + rows * t),
        "prompt per row": plan(
            shapes, prefill_rows=rows * p, decode_rows=rows, decode_steps=t, learn_rows=rows * (p + t)
        ),
    }
    print(
        f"{sum(k * n for k, n in shapes) / 1e6:.2f}M linear weights, {len(shapes)} linear maps; {rows} rows "
        f"({n} prompts x {GROUP_SIZE}), prompt {p} + completion {t} tokens; {args.threads} torch threads"
    )
    print(f"{'work plan':<15} {'part':<7} {'matmuls':>8} {'GFLOP':>7} {'floor s':>8} {'GFLOP/s':>8}")
    floors = {}
    for name, parts in plans.items():
        total = 0.0
        for part, calls in parts.items():
            seconds = time_mms(calls, args.repeats)
            total += seconds
            print(
                f"{name:<15} {part:<7} {len(calls):>8} {flops(calls) / 1e9:>7.2f} {seconds:>8.3f} "
                f"{flops(calls) / seconds / 1e9:>8.1f}"
            )
        floors[name] = total
        print(f"{name:<15} {'step':<7} {'':>8} {'':>7} {total:>8.3f}")
    if args.measured_step:
        print(
            f"a {args.measured_step:.3f} s step / the workbench's floor {floors['workbench']:.3f} s = "
            f"{args.measured_step / floors['workbench']:.2f}x: the most the workbench's plan can gain over it here"
        )


if __name__ == "__main__":
    main()
