"""Peak memory of one learner update at a large vocabulary, where the logits dominate.

    python benchmarks/bench_learner_memory.py [--rows 16] [--tokens 64] [--vocab 151936] [--repeats 2]
        [--temperatures 1.0,0.7]

On an H200 (docs/engines.md, "Measured on a GPU") the workbench's update of a 0.5B model with
Qwen's 151,936-token vocabulary peaked at 50.4 GiB against TRL's 32.4 GiB: at 64 rows x ~130
positions one float32 ``[rows, positions, vocabulary]`` tensor is 5 GB, and the update held several
(the model's logits, their concatenation, the temperature-scaled copy, the saved log-softmax, the
entropy's softmax). This measures the same thing on the CPU, where it can be repeated: a 2-layer Llama
whose vocabulary is Qwen's (hidden 64, so nearly every byte is logits), ``--rows`` sampled completions
of ``--tokens`` new tokens, one ``TorchLearner.update`` (GRPO; at temperature 1, and at 0.7, where the
logits are scaled, a copy), in a fresh process per measurement. Printed: the peak resident memory of the update above
the process's resident memory just before it (``ru_maxrss``), in units of one logits tensor
(rows x positions x vocabulary x 4 bytes), for the lean and the full forward.

    python benchmarks/bench_learner_memory.py --lora [--sizes tiny,large] [--ranks 1,8,32] [--repeats 2]
        [--updates 3]

LoRA (``learner.lora``) against full fine-tuning, where the weights and AdamW's state matter rather than the
logits: a Llama with the character vocabulary, ``tiny`` (the built-in model's shape: hidden 128, 4 layers,
MLP 512) and ``large`` (hidden 512, 8 layers, MLP 2048: ~34 M parameters), 16 sampled completions of 32 new
tokens, ``--updates`` GRPO updates (``TorchLearner.update``, fp32, one thread) after one warm-up update, in a
fresh process per measurement, the variants alternating (full, r1, r8, r32, full, ...) so that a change of
machine load spreads over all of them. Printed: trainable parameters, the bytes of the weights, of the
gradients and of AdamW's state (counted from the tensors), the peak resident memory of the learner (building
it and its updates: ``ru_maxrss`` above the process's resident memory after its imports) and the median
update time. The table in docs/engines.md ("LoRA: memory and step time") is this output.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = "child"


def measure(rows: int, tokens: int, vocab: int, forward: str, temperature: float) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from workbench.batch import TrainBatch
    from workbench.config import AlgorithmConfig, LearnerConfig, SamplerConfig
    from workbench.models.tokenizer import build_char_tokenizer
    from workbench.rollout.hf import HFSampler
    from workbench.tasks import Problem
    from workbench.train.learner import TorchLearner

    torch.manual_seed(0)
    tok = build_char_tokenizer()
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        pad_token_id=tok.pad_token_id,
        eos_token_id=10**9,
        bos_token_id=None,
        tie_word_embeddings=True,
    )  # no EOS: full length
    model = LlamaForCausalLM(config)
    learner = TorchLearner(model, LearnerConfig(forward=forward, device="cpu"))
    sampler = HFSampler(learner.model, tok, SamplerConfig(max_new_tokens=tokens))
    problems = [Problem(prompt=f"What is {i}+{i}?", answer=str(2 * i)) for i in range(rows // 8)]
    rollouts = sampler.generate(problems, 8, temperature=temperature, seed=0)
    batch = TrainBatch.of(rollouts, torch.randn(rollouts.mask.shape[0], generator=torch.Generator().manual_seed(1)))
    positions = rollouts.mask.shape[1]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    learner.update(batch, AlgorithmConfig(preset="grpo"), temperature, torch.Generator().manual_seed(0))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    logits_bytes = rollouts.mask.shape[0] * positions * vocab * 4
    return {
        "rise_bytes": peak - before,
        "logits_bytes": logits_bytes,
        "rows": rollouts.mask.shape[0],
        "positions": positions,
    }


LORA_SIZES = {  # name -> (hidden, layers, MLP width, heads)
    "tiny": (128, 4, 512, 4),  # the built-in model's default shape (workbench/config.py TinyModelConfig)
    "large": (512, 8, 2048, 8),
}


def measure_lora(size: str, rank: int, updates: int) -> dict:
    """One learner (rank 0: full fine-tuning) on the ``size`` model: its bytes, peak memory and update time."""
    import time

    import peft  # noqa: F401 - imported before the baseline in every variant, full fine-tuning too
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from workbench.batch import TrainBatch
    from workbench.config import AlgorithmConfig, LearnerConfig, LoraConfig, SamplerConfig
    from workbench.models.tokenizer import build_char_tokenizer
    from workbench.rollout.hf import HFSampler
    from workbench.tasks import Problem
    from workbench.train.learner import TorchLearner

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tok = build_char_tokenizer()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    hidden, layers, mlp, heads = LORA_SIZES[size]
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=mlp,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        pad_token_id=tok.pad_token_id,
        eos_token_id=10**9,
        bos_token_id=None,
        tie_word_embeddings=True,
    )  # no EOS: full length
    lora = None if rank == 0 else LoraConfig(rank=rank, alpha=2.0 * rank)
    learner = TorchLearner(LlamaForCausalLM(config), LearnerConfig(device="cpu", lora=lora))
    sampler = HFSampler(learner.model, tok, SamplerConfig(max_new_tokens=32))
    problems = [Problem(prompt=f"What is {i}+{i}?", answer=str(2 * i)) for i in range(2)]
    rollouts = sampler.generate(problems, 8, temperature=1.0, seed=0)
    batch = TrainBatch.of(rollouts, torch.randn(rollouts.mask.shape[0], generator=torch.Generator().manual_seed(1)))
    algo = AlgorithmConfig(preset="grpo")
    seconds = []
    for k in range(updates + 1):  # the first is a warm-up: AdamW allocates its state there
        start = time.perf_counter()
        learner.update(batch, algo, 1.0, torch.Generator().manual_seed(k))
        seconds.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    params = list(learner.model.parameters())
    trained = [p for p in params if p.requires_grad]
    optimizer_bytes = sum(
        t.numel() * t.element_size()
        for state in learner.optimizer.state.values()
        for t in state.values()
        if torch.is_tensor(t)
    )
    return {
        "size": size,
        "rank": rank,
        "params": sum(p.numel() for p in params),
        "trainable": sum(p.numel() for p in trained),
        "weight_bytes": sum(p.numel() * p.element_size() for p in params),
        "grad_bytes": sum(p.numel() * p.element_size() for p in trained),  # a gradient per trained weight
        "optimizer_bytes": optimizer_bytes,
        "peak_rise_bytes": peak - base,
        "update_s": statistics.median(seconds[1:]),
    }


def lora_table(sizes: list[str], ranks: list[int], repeats: int, updates: int) -> None:
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(
        f"LoRA vs full fine-tuning: 16 completions x 32 new tokens, {updates} updates after a warm-up, fp32, "
        f"1 thread; load {load}"
    )
    results: dict[tuple[str, int], list[dict]] = {}
    for _ in range(repeats):
        for size in sizes:
            for rank in [0, *ranks]:  # alternating: full, r1, r8, ..., then again
                out = subprocess.run(
                    [sys.executable, __file__, "--lora-child", size, "--rank", str(rank), "--updates", str(updates)],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                results.setdefault((size, rank), []).append(json.loads(out.split("RESULT ", 1)[1]))
    print(
        "| model | learner | trainable params | weights MB | grads MB | AdamW state MB | peak RSS rise MB "
        "| update s (median) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (size, rank), runs in results.items():
        first = runs[0]
        rise = statistics.median(r["peak_rise_bytes"] for r in runs) / 1e6
        seconds = statistics.median(r["update_s"] for r in runs)
        label = "full" if rank == 0 else f"LoRA r{rank}"
        rises = ", ".join(f"{r['peak_rise_bytes'] / 1e6:.0f}" for r in runs)
        times = ", ".join(f"{r['update_s']:.2f}" for r in runs)
        print(
            f"| {size} ({first['params'] / 1e6:.1f} M) | {label} | {first['trainable']:,} "
            f"({first['trainable'] / first['params']:.2%}) | {first['weight_bytes'] / 1e6:.1f} "
            f"| {first['grad_bytes'] / 1e6:.1f} | {first['optimizer_bytes'] / 1e6:.1f} | {rise:.0f} "
            f"({rises}) | {seconds:.2f} ({times}) |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lora", action="store_true", help="the LoRA vs full fine-tuning table instead")
    parser.add_argument("--sizes", default="tiny,large")
    parser.add_argument("--ranks", default="1,8,32")
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--lora-child", choices=tuple(LORA_SIZES), help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=16, help="completions (a multiple of 8: groups of 8)")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--forwards", default="lean,full")
    parser.add_argument("--temperatures", default="1.0,0.7")
    parser.add_argument("--temperature", type=float, default=1.0, help=argparse.SUPPRESS)
    parser.add_argument(f"--{CHILD}", choices=("lean", "full"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.lora_child:
        print("RESULT " + json.dumps(measure_lora(args.lora_child, args.rank, args.updates)))
        return
    if args.lora:
        lora_table(args.sizes.split(","), [int(r) for r in args.ranks.split(",")], args.repeats, args.updates)
        return
    if args.child:
        print("RESULT " + json.dumps(measure(args.rows, args.tokens, args.vocab, args.child, args.temperature)))
        return
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"{args.rows} rows x {args.tokens} new tokens, vocabulary {args.vocab:,}; load {load}")
    print(f"{'forward':<8} {'T':>4} {'peak rise GB':>12} {'logits tensors':>15}  runs")
    for forward in args.forwards.split(","):
        for temperature in args.temperatures.split(","):
            runs = []
            for _ in range(args.repeats):
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        f"--{CHILD}",
                        forward,
                        "--rows",
                        str(args.rows),
                        "--tokens",
                        str(args.tokens),
                        "--vocab",
                        str(args.vocab),
                        "--temperature",
                        temperature,
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                runs.append(json.loads(out.split("RESULT ", 1)[1]))
            rise = statistics.median(r["rise_bytes"] for r in runs)
            unit = runs[0]["logits_bytes"]
            print(
                f"{forward:<8} {temperature:>4} {rise / 1e9:>12.2f} {rise / unit:>15.1f}  "
                + ", ".join(f"{r['rise_bytes'] / unit:.1f}" for r in runs),
                flush=True,
            )


if __name__ == "__main__":
    main()
