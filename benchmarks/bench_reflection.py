"""Overhead of the reflection-word rates (workbench.metrics.reflection) per RL step.

    PYTHONPATH=. python benchmarks/bench_reflection.py

Times ``reflection_metrics`` on a step's batch of decoded completions (prompts_per_step × group_size = 128,
the default shape) at several completion lengths, median of repeats, with the 11 default keywords; the
figure in docs/metrics.md divides it by a step's wall time."""

from __future__ import annotations

import random
import statistics
import time

from workbench.metrics.reflection import OAT_ZERO_KEYWORDS, reflection_metrics

WORDS = ("so", "the", "answer", "is", "let", "me", "compute", "12", "+", "5", "=", "17", "wait", "check", "then")


def batch(n: int, chars: int, seed: int = 0) -> tuple[list[str], list[bool]]:
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < chars:
            words.append(rng.choice(WORDS))
        texts.append(" ".join(words)[:chars])
    return texts, [rng.random() < 0.5 for _ in range(n)]


def main() -> None:
    for chars in (256, 1024, 4096):
        texts, correct = batch(128, chars)
        times = []
        for _ in range(21):
            start = time.perf_counter()
            reflection_metrics(texts, correct, OAT_ZERO_KEYWORDS)
            times.append(time.perf_counter() - start)
        print(f"128 completions x {chars} chars: median {statistics.median(times) * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
