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
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys

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
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, pad_token_id=tok.pad_token_id,
                         eos_token_id=10**9, bos_token_id=None, tie_word_embeddings=True)  # no EOS: full length
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
    return {"rise_bytes": peak - before, "logits_bytes": logits_bytes, "rows": rollouts.mask.shape[0],
            "positions": positions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16, help="completions (a multiple of 8: groups of 8)")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--forwards", default="lean,full")
    parser.add_argument("--temperatures", default="1.0,0.7")
    parser.add_argument("--temperature", type=float, default=1.0, help=argparse.SUPPRESS)
    parser.add_argument(f"--{CHILD}", choices=("lean", "full"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(measure(args.rows, args.tokens, args.vocab, args.child, args.temperature)))
        return
    print(f"{args.rows} rows x {args.tokens} new tokens, vocabulary {args.vocab:,}; "
          f"load {open('/proc/loadavg').read().split()[:3]}")  # noqa: SIM115 - one read of /proc, closed when collected
    print(f"{'forward':<8} {'T':>4} {'peak rise GB':>12} {'logits tensors':>15}  runs")
    for forward in args.forwards.split(","):
        for temperature in args.temperatures.split(","):
            runs = []
            for _ in range(args.repeats):
                out = subprocess.run([sys.executable, __file__, f"--{CHILD}", forward, "--rows", str(args.rows),
                                      "--tokens", str(args.tokens), "--vocab", str(args.vocab),
                                      "--temperature", temperature], capture_output=True, text=True, check=True).stdout
                runs.append(json.loads(out.split("RESULT ", 1)[1]))
            rise = statistics.median(r["rise_bytes"] for r in runs)
            unit = runs[0]["logits_bytes"]
            print(f"{forward:<8} {temperature:>4} {rise / 1e9:>12.2f} {rise / unit:>15.1f}  "
                  + ", ".join(f"{r['rise_bytes'] / unit:.1f}" for r in runs), flush=True)


if __name__ == "__main__":
    main()
