"""What the mismatch flight recorder costs per RL step, against the step itself.

    python benchmarks/bench_mismatch.py [--repeats 50] [--threads 2] [--measured-step 0.56]

Times, alternating on/off in one sitting (medians), at bench_vs_trl.py's batch (16 prompts × 8, 32 new
tokens):
- ``off``: the three mismatch numbers the workbench logged before (|Δp| mean and max, k3 KL);
- ``on``: ``mismatch_metrics`` (every mismatch/* scalar, quantiles included) + ``repetition_frac``;
- the mismatch record (histogram + worst tokens), every ``health.mismatch_record_every`` steps, divided by
  that cadence. It reads the logprobs the update computes before its optimizer step, so it runs no learner
  forward of its own (it did until the record became the update's observer: ``--with-old-forward`` adds
  that forward's cost, on the workbench's tiny model, for comparison).

The last column divides each by ``--measured-step`` (the median perf/step_s of the demo run: 0.52–0.57 s
in the README; pass your own). Every metric is computed from tensors the step already holds: no other
forward pass.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from workbench.metrics.mismatch import mismatch_metrics, mismatch_record, repetition_frac

B, T = 16 * 8, 32


def old_mismatch(learner_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """The three numbers logged before the flight recorder (the baseline: 'off')."""
    diff = (learner_logp.exp() - sampler_logp.exp()).abs()
    log_ratio = (learner_logp - sampler_logp).clamp(-20, 20)
    k3 = log_ratio.exp() - 1 - log_ratio
    on = mask.bool()
    return {
        "a": float((diff * mask).sum() / mask.sum()),
        "b": float(diff[on].max()),
        "c": float((k3 * mask).sum() / mask.sum()),
    }


def batch(seed: int):
    gen = torch.Generator().manual_seed(seed)
    sampler = -torch.rand(B, T, generator=gen) * 3
    learner = sampler + 0.01 * torch.randn(B, T, generator=gen)  # a bf16-sized mismatch
    lengths = torch.randint(8, T + 1, (B,), generator=gen)
    mask = (torch.arange(T)[None] < lengths[:, None]).float()
    ids = torch.randint(0, 40, (B, T), generator=gen)
    entropy = torch.rand(B, T, generator=gen)
    return learner, sampler, mask, ids, entropy


def seconds(fn, repeats: int) -> list[float]:
    out = []
    for k in range(repeats):
        start = time.perf_counter()
        fn(k)
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--measured-step", type=float, default=0.56, help="median perf/step_s (s) to compare with")
    parser.add_argument("--record-every", type=int, default=100)
    parser.add_argument(
        "--with-old-forward",
        action="store_true",
        help="also time the no-grad forward the record ran before it read the update's logprobs",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    batches = [batch(k) for k in range(8)]

    def off(k):
        learner, sampler, mask, _, _ = batches[k % 8]
        old_mismatch(learner, sampler, mask)

    def on(k):
        learner, sampler, mask, ids, entropy = batches[k % 8]
        mismatch_metrics(learner, sampler, mask, entropy=entropy, cap=2.0)
        repetition_frac(ids, mask)

    def record(k):
        learner, sampler, mask, ids, _ = batches[k % 8]
        mismatch_record(learner, sampler, mask, ids)

    for fn in (off, on, record):  # warm-up
        seconds(fn, 3)
    offs, ons = [], []
    for _ in range(args.repeats):  # alternating, so load swings hit both alike
        offs += seconds(off, 1)
        ons += seconds(on, 1)
    records = seconds(record, args.repeats)
    rows = [
        ("mismatch metrics off (3 numbers)", statistics.median(offs)),
        ("mismatch metrics on (all + repetition_frac)", statistics.median(ons)),
        ("on − off", statistics.median(ons) - statistics.median(offs)),
        (f"record (histogram + worst tokens) / {args.record_every}", statistics.median(records) / args.record_every),
    ]
    total = rows[2][1] + rows[3][1]
    print(
        f"batch {B}×{T} tokens, {args.threads} threads, {args.repeats} alternating repeats, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    print(f"| what | median ms per step | % of a {args.measured_step:.2f} s step |")
    print("|---|---|---|")
    extra = []
    if args.with_old_forward:
        forward = tiny_forward_seconds(max(5, args.repeats // 10))
        extra = [(f"(before: the record's own learner forward / {args.record_every})", forward / args.record_every)]
    for name, s in rows + [("added per step (on − off + record)", total)] + extra:
        print(f"| {name} | {1000 * s:.3f} | {100 * s / args.measured_step:.3f}% |")


def tiny_forward_seconds(repeats: int) -> float:
    """One no-grad forward of the workbench's tiny model over the batch's B × (22 + T) positions."""
    from workbench.config import TinyModelConfig  # deferred: model building
    from workbench.models.tiny import init_tiny_model  # deferred: transformers

    model = init_tiny_model(TinyModelConfig(), 40, 0, 1).eval()
    ids = torch.randint(2, 40, (B, 22 + T))
    with torch.no_grad():
        model(ids)
        times = seconds(lambda _: model(ids), repeats)
    return statistics.median(times)


if __name__ == "__main__":
    main()
