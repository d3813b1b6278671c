"""Tiny synthetic metric streams for the health tests.

A stream is a list of ``(step, metrics)`` pairs. ``healthy`` is a plausible run where nothing is
wrong; ``make`` builds a constant healthy baseline and replaces chosen metrics by per-step
functions (return ``None`` to leave the metric out at that step).

Every stream carries every catalogued metric at every step, with a value in the
``healthy_range`` that workbench/metrics/catalogue.py declares for it, so a new rule on any
catalogued metric is evaluated on them, and a failure planted in them, without editing this file.
The metrics today's rules read are modelled by hand on top (trends, binomial noise, the
incorrect/correct length ratio).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

from workbench.metrics.catalogue import CATALOGUE

Stream = list[tuple[int, dict[str, Any]]]


def catalogue_step(rng: random.Random) -> dict[str, float]:
    """One healthy step of every catalogued metric, each uniform over its ``healthy_range``."""
    return {m.name: rng.uniform(*m.healthy_range) for m in CATALOGUE}


def _catalogue_rng(seed: int) -> random.Random:
    # A generator of its own, so the hand-modelled metrics draw the same numbers however many
    # metrics the catalogue holds.
    return random.Random(f"catalogue/{seed}")


# Healthy, constant values for every catalogued metric: the middle of its healthy range, except
# the values the hand-computed cases of test_rules.py start from.
BASE: dict[str, float] = {
    **{m.name: sum(m.healthy_range) / 2 for m in CATALOGUE},
    "entropy/mean": 1.0,
    "length/truncated_frac": 0.05,
    "length/correct_mean": 20.0,
    "length/incorrect_mean": 20.0,
    "reward/mean": 0.5,
    "batch/zero_std_frac": 0.3,
    "mismatch/prob_abs_diff_max": 0.2,
    "mismatch/kl": 0.001,
    "clip/frac": 0.05,
    "kl/ref": 0.02,
    "loss/policy": 0.01,
    "grad/norm": 1.0,
    "perf/step_s": 0.5,
}


def make(n: int, **series: Callable[[int], float | None]) -> Stream:
    """``n`` steps of ``BASE`` with the named metrics replaced by ``f(step)``.

    Keyword names use ``__`` for ``/``: ``make(30, entropy__mean=lambda s: ...)``.
    """
    out: Stream = []
    for step in range(n):
        m: dict[str, Any] = dict(BASE)
        for key, f in series.items():
            name = key.replace("__", "/")
            v = f(step)
            if v is None:
                m.pop(name, None)
            else:
                m[name] = v
        out.append((step, m))
    return out


def step_change(before: float, after: float, at: int) -> Callable[[int], float]:
    """``before`` for steps < ``at``, ``after`` from ``at`` on."""
    return lambda s: before if s < at else after


def spike(base: float, value: float, at: int) -> Callable[[int], float]:
    """``base`` everywhere except ``value`` at step ``at``."""
    return lambda s: value if s == at else base


def healthy(n: int = 80, seed: int = 0) -> Stream:
    """A noisy but healthy run: reward and entropy drift up slowly, everything else in range."""
    rng, fill = random.Random(seed), _catalogue_rng(seed)
    out: Stream = []
    for s in range(n):
        correct_len = 20.0 + 0.05 * s + rng.uniform(-1, 1)
        out.append(
            (
                s,
                {
                    **catalogue_step(fill),
                    "entropy/mean": 0.8 + 0.002 * s + rng.uniform(-0.05, 0.05),
                    "length/mean": correct_len + 1.0,
                    "length/truncated_frac": rng.uniform(0.0, 0.1),
                    "length/correct_mean": correct_len,
                    "length/incorrect_mean": correct_len * rng.uniform(1.0, 1.3),
                    "reward/mean": min(0.3 + 0.005 * s + rng.uniform(-0.05, 0.05), 1.0),
                    "accuracy/train": 0.3 + 0.005 * s,
                    "batch/zero_std_frac": rng.uniform(0.2, 0.5),
                    "mismatch/prob_abs_diff_max": rng.uniform(0.0, 0.4),
                    "mismatch/prob_abs_diff_mean": rng.uniform(0.0, 0.01),
                    "mismatch/kl": rng.uniform(0.0, 0.005),
                    "clip/frac": rng.uniform(0.0, 0.1),
                    "kl/ref": rng.uniform(0.0, 0.1),
                    "loss/policy": rng.uniform(-0.1, 0.1),
                    "grad/norm": rng.uniform(0.5, 2.0),
                    "perf/step_s": 0.4,
                },
            )
        )
    return out


def with_value(stream: Stream, step: int, key: str, value: Any) -> Stream:
    """A copy of ``stream`` with ``metrics[key] = value`` at ``step``."""
    return [(s, {**m, key: value} if s == step else dict(m)) for s, m in stream]


def nan_stream(n: int = 10, at: int = 5) -> Stream:
    return make(n, loss__policy=spike(0.01, math.nan, at))


# --- healthy noisy runs and planted failures, for the false-alarm simulations -------------------
#
# Noise levels are those of a small real run (16 prompts x 8 completions = 128 samples per step):
# binomial fractions over 128 completions or 16 groups, reward/mean with prompt-to-prompt spread
# (sd 0.08), entropy and lengths +-5%. Every catalogued metric is present at every step.
COMPLETIONS, GROUPS = 128, 16
HEALTHY_KINDS = ("flat", "improving")


def _binomial_frac(rng: random.Random, n: int, p: float) -> float:
    return sum(rng.random() < p for _ in range(n)) / n


def noisy_healthy(kind: str, n: int = 100, seed: int = 0) -> Stream:
    """A healthy run with step-to-step noise: ``flat`` (every level constant) or ``improving``.

    ``improving`` is a run that learns slowly: reward 0.3 -> 0.8, entropy 1.0 -> 0.6 (a healthy
    decline), lengths 20 -> 40 tokens with the incorrect/correct ratio easing 1.7 -> 1.5,
    more all-correct groups (zero-std 0.2 -> 0.5), KL to the reference 0.01 -> 0.3.
    Both keep the incorrect/correct length ratio above the default ``max_ratio`` 1.5 most of the
    time: a stable gap is not GRPO's growing length bias, so only a trend test stays quiet.
    """
    if kind not in HEALTHY_KINDS:
        raise ValueError(f"kind must be one of {HEALTHY_KINDS}, got {kind!r}")
    rng, fill = random.Random(seed), _catalogue_rng(seed)
    out: Stream = []
    for s in range(n):
        u = s / max(n - 1, 1) if kind == "improving" else 0.0  # training progress 0 -> 1
        correct_len = (20.0 + 20.0 * u) * (1 + rng.gauss(0, 0.05))
        ratio = (1.6 if kind == "flat" else 1.7 - 0.2 * u) + rng.gauss(0, 0.05)
        reward = min(max(0.5 + rng.gauss(0, 0.08) if kind == "flat" else 0.3 + 0.5 * u + rng.gauss(0, 0.08), 0.0), 1.0)
        out.append(
            (
                s,
                {
                    **catalogue_step(fill),
                    "entropy/mean": (0.9 if kind == "flat" else 1.0 - 0.4 * u) * (1 + rng.gauss(0, 0.05)),
                    "length/mean": correct_len * 1.3,
                    "length/correct_mean": correct_len,
                    "length/incorrect_mean": correct_len * ratio,
                    "length/truncated_frac": _binomial_frac(rng, COMPLETIONS, 0.05),
                    "reward/mean": reward,
                    "accuracy/train": reward,
                    "batch/zero_std_frac": _binomial_frac(rng, GROUPS, 0.3 if kind == "flat" else 0.2 + 0.3 * u),
                    "mismatch/prob_abs_diff_max": rng.uniform(0.0, 0.4),
                    "mismatch/prob_abs_diff_mean": rng.uniform(0.0, 0.01),
                    "mismatch/kl": rng.uniform(0.0, 0.005),
                    "clip/frac": max(0.0, 0.05 + rng.gauss(0, 0.02)),
                    "kl/ref": abs((0.05 if kind == "flat" else 0.01 + 0.29 * u) + rng.gauss(0, 0.02)),
                    "loss/policy": rng.gauss(0, 0.05),
                    "grad/norm": rng.uniform(0.5, 2.0),
                    "perf/step_s": 0.4,
                },
            )
        )
    return out


def plant(stream: Stream, at: int, key: str, value: Callable[[int, float], float]) -> Stream:
    """A copy of ``stream`` with ``metrics[key] = value(step - at, old)`` from step ``at`` on."""
    return [(s, {**m, key: value(s - at, m[key])} if s >= at else dict(m)) for s, m in stream]
