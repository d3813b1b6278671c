"""Unbiased pass@k from ``n`` sampled answers per problem (Chen et al. 2021, "Evaluating Large Language
Models Trained on Code", arXiv:2107.03374, §2.1, eq. 1).

For a problem with ``c`` correct answers among ``n`` samples, the probability that ``k`` answers drawn
without replacement from those ``n`` contain at least one correct one is

    pass@k = 1 − C(n−c, k) / C(n, k)            (1 when n − c < k: every k-subset holds a correct one)

and its mean over problems is an unbiased estimate of the model's pass@k. The ratio of binomials is
computed as the product ``∏_{i=n−c+1}^{n} (1 − k/i)`` (Chen et al.'s numerically stable form): each
factor lies in [0, 1], so no factorial overflows and the relative error is at most ``c`` roundings
(``c ≤ n ≤ MAX_EVAL_SAMPLES``; in float64 ≤ 256 · 2⁻⁵³ ≈ 3e-14).

verl PR #7240's case: 1 correct of 4 samples gives pass@4 = 1 − C(3,4)/C(4,4) = 1 − 0 = 1.0 (a
bootstrapped best@4, which resamples with replacement, reads 0.684 = 1 − (3/4)⁴).
"""

from __future__ import annotations

from collections.abc import Sequence

from workbench.metrics.names import EVAL_MEAN_AT_N

MAX_EVAL_SAMPLES = 256  # rollout.eval_samples cap: k runs up to 256 = 2⁸, nine pass@k metrics


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for ``c`` correct of ``n`` samples, ``1 <= k <= n``; ``ValueError`` otherwise."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    miss = 1.0  # C(n−c, k) / C(n, k) as a product of c factors in [0, 1]
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def ks_for(n: int) -> list[int]:
    """The k logged for ``n`` samples: 1, 2, 4, … up to ``n`` (powers of two)."""
    if n < 1:
        raise ValueError(f"eval samples must be >= 1, got {n}")
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    return ks


def pass_at_k_metric(k: int) -> str:
    """``eval/pass_at_k``: MLflow metric names may not contain '@' (letters, digits, ``_-. :/`` only)."""
    return f"eval/pass_at_{k}"


# Every name that can be logged, for the metric catalogue.
PASS_AT_K_METRICS: tuple[str, ...] = tuple(pass_at_k_metric(k) for k in ks_for(MAX_EVAL_SAMPLES))


def pass_at_k_metrics(n: int, n_correct: Sequence[int]) -> dict[str, float]:
    """``eval/pass_at_k`` for k = 1, 2, 4, … ≤ ``n`` and ``eval/mean_at_n`` (the fraction of all ``n`` × problems
    answers judged correct; equal to pass@1), averaged over problems with ``n_correct`` correct each."""
    if not n_correct:
        raise ValueError("pass@k needs at least one problem")
    m = len(n_correct)
    out = {pass_at_k_metric(k): sum(pass_at_k(n, c, k) for c in n_correct) / m for k in ks_for(n)}
    out[EVAL_MEAN_AT_N] = sum(n_correct) / (n * m)
    return out
