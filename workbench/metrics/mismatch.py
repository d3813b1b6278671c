"""The mismatch flight recorder: every sampler/learner diagnostic the leading frameworks log, in one
vocabulary, computed once per step from the sampled tokens' two logprobs (no extra forward pass).

Notation: on each response token, ``Δ = log π_learner − log π_sampler`` (the learner before the update)
and the raw importance ratio ``ρ = exp(Δ)`` (Δ clamped to ±20 first, as everywhere in the workbench).
"Raw" means before any correction: these numbers are logged whatever ``algorithm.correction`` is, and a
correction only changes what is *applied* (``mismatch/is_weight_mean``, ``mismatch/is_clipped_frac``).

Where a peer logs the same quantity the definition here is the peer's, and a parity test checks it:
verl ``trainer/ppo/rollout_corr_helper.py`` (``compute_offpolicy_metrics``, ``compute_is_metrics``;
docs/algo/rollout_corr.md): χ², k1/k3 KL, perplexities, ESS, ratio bounds; NeMo-RL
``ClippedPGLossFn`` (``token_mult_prob_error = mean exp|Δ|``); prime-rl (``kl_ent_ratio``: mismatch KL
÷ entropy); slime (``repetition_frac``: responses caught in a loop).

``mismatch_record`` is the per-step artifact behind the scalars: a histogram of Δ in fixed bins and the
step's worst tokens (where the two engines disagree most), for the health dashboard.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # pad

from workbench.metrics.names import (
    MISMATCH_CHI2_SEQ,
    MISMATCH_CHI2_TOKEN,
    MISMATCH_ESS,
    MISMATCH_IS_RATIO_ABOVE_CAP_FRAC,
    MISMATCH_IS_RATIO_BELOW_CAP_FRAC,
    MISMATCH_IS_RATIO_MAX,
    MISMATCH_IS_RATIO_MEAN,
    MISMATCH_IS_RATIO_MIN,
    MISMATCH_IS_RATIO_P1,
    MISMATCH_IS_RATIO_P5,
    MISMATCH_IS_RATIO_P50,
    MISMATCH_IS_RATIO_P95,
    MISMATCH_IS_RATIO_P99,
    MISMATCH_IS_RATIO_STD,
    MISMATCH_IS_RATIO_TAIL_FRAC,
    MISMATCH_KL,
    MISMATCH_KL_ENT_RATIO,
    MISMATCH_KL_K1,
    MISMATCH_LEARNER_PPL,
    MISMATCH_LOG_PPL_DIFF,
    MISMATCH_LOG_RATIO_ABS_MAX,
    MISMATCH_LOG_RATIO_ABS_MEAN,
    MISMATCH_PPL_RATIO,
    MISMATCH_PROB_ABS_DIFF_MAX,
    MISMATCH_PROB_ABS_DIFF_MEAN,
    MISMATCH_SAMPLER_PPL,
    MISMATCH_SEQ_LOG_RATIO_MAX,
    MISMATCH_SEQ_LOG_RATIO_MEAN,
    MISMATCH_SEQ_LOG_RATIO_MIN,
    MISMATCH_SEQ_LOG_RATIO_STD,
    MISMATCH_TOKEN_MULT_PROB_ERROR,
)

MAX_LOG_RATIO = 20.0  # Δ is clamped to ± this before exp (the algorithms' convention, verl's SAFETY_BOUND)
TAIL_BAND = (0.9, 1.1)  # TRL #6789: 7.5% of tokens outside it while the mean ratio looked fine
QUANTILE_METRICS = {
    0.01: MISMATCH_IS_RATIO_P1,
    0.05: MISMATCH_IS_RATIO_P5,
    0.5: MISMATCH_IS_RATIO_P50,
    0.95: MISMATCH_IS_RATIO_P95,
    0.99: MISMATCH_IS_RATIO_P99,
}
QUANTILES = tuple(QUANTILE_METRICS)

# Histogram of Δ: symmetric log-spaced edges, so both the bf16 bulk (|Δ| ~ 1e-3) and a stale-weights
# tail (|Δ| ~ 1) get bins; the outer bins are open (everything beyond ±1 nat, everything within ±1e-6).
HIST_MAGNITUDES = tuple(10.0 ** (k / 2) for k in range(-12, 1))  # 1e-6 … 1, half-decades
HIST_EDGES = tuple([-m for m in reversed(HIST_MAGNITUDES)] + list(HIST_MAGNITUDES))
WORST_TOKENS = 10


def _log_ratio(learner_logp: torch.Tensor, sampler_logp: torch.Tensor) -> torch.Tensor:
    return (learner_logp.detach().double() - sampler_logp.detach().double()).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


def mismatch_metrics(
    learner_logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    entropy: torch.Tensor | None = None,
    cap: float | None = None,
) -> dict[str, float]:
    """The step's ``mismatch/*`` scalars (docs/metrics.md) on the response tokens of ``mask`` ``[B, T]``.

    ``entropy`` ``[B, T]`` (the learner's, same tokens) adds ``mismatch/kl_ent_ratio``; ``cap`` (the
    correction's upper bound C, lower bound 1/C as verl's default) adds the fractions of raw ratios
    outside [1/C, C]. Computed in float64: a 1e-8 fp32 disagreement is not lost to float32 rounding in
    the sums. An all-padding batch logs nothing (no tokens, no mismatch to report).

    Cost (benchmarks/bench_mismatch.py): on a step's few thousand tokens each kernel here costs its
    dispatch, not its arithmetic, so the numbers come from as few kernels as give the same bits: the
    response tokens and the sequences that have some are found once each (one ``nonzero`` each, then
    ``index_select``, not a boolean index per vector); the means are sums finished in one kernel per
    count (:func:`_means`); the quantiles are picked, not sorted (:func:`_linear_quantiles`); everything
    reaches Python in one transfer, where the few 0-d steps left (ESS, χ² − 1, k1) are the same IEEE
    operations. ``benchmarks/bench_mismatch.py`` has the timings; tests/test_mismatch_metrics.py the values.
    """
    on = mask.bool()
    index = on.reshape(-1).nonzero().squeeze(1)  # [N] flat positions of the response tokens
    n = index.numel()
    if n == 0:
        return {}
    rows = index.div(on.shape[-1], rounding_mode="floor")  # [N] the sequence of each token
    # Everything below works on the N response tokens as flat float64 vectors.
    learner, sampler = _select(learner_logp, index), _select(sampler_logp, index)  # [N] each
    delta = (learner - sampler).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)  # [N] Δ
    tokens = delta.exp()  # [N] raw ratio ρ
    prob_diff = (learner.exp() - sampler.exp()).abs()  # [N]
    abs_delta = delta.abs()
    per_seq = torch.zeros(3, on.shape[0], dtype=delta.dtype, device=delta.device)  # [3, B] Σ Δ, Σ logp
    per_seq.index_add_(1, rows, torch.stack([delta, learner, sampler]))
    counts = on.sum(-1)  # [B]
    seq_index = (counts > 0).nonzero().squeeze(1)  # [S] sequences with at least one response token
    seq_sums, seq_counts = per_seq.index_select(1, seq_index), counts.index_select(0, seq_index)
    seq_delta = seq_sums[0]  # [S] log of the sequence IS weight Π ρ_t
    seq_learner = seq_sums[1] / seq_counts  # [S] mean token logp
    seq_sampler = seq_sums[2] / seq_counts
    log_ppl_diff = seq_sampler - seq_learner  # [S] log(ppl_learner / ppl_sampler) per sequence
    lo, hi = TAIL_BAND
    token_sums = {  # Σ over the N tokens, divided by N together below: the token means
        "prob_diff": prob_diff.sum(),
        "k3": (tokens - 1 - delta).sum(),
        "delta": delta.sum(),
        "abs_delta": abs_delta.sum(),
        "rho": tokens.sum(),
        "rho2": (tokens**2).sum(),
        "mult": abs_delta.exp().sum(),
        # fractions: exact integer counts (as the old mean of 0/1 float64 values summed them), divided by N too
        "tail": ((tokens < lo) | (tokens > hi)).sum(),
        **({} if cap is None else {"above": (tokens > cap).sum(), "below": (tokens < 1 / cap).sum()}),
        **({} if entropy is None else {"entropy": _select(entropy, index).sum()}),
    }
    sequence_sums = {  # Σ over the S sequences, divided by S together below: the sequence means
        "delta": seq_delta.sum(),
        "rho2": (2 * seq_delta.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)).exp().sum(),
        "learner_ppl": (-seq_learner).exp().sum(),
        "sampler_ppl": (-seq_sampler).exp().sum(),
        "log_ppl_diff": log_ppl_diff.sum(),
        "ppl_ratio": log_ppl_diff.exp().sum(),
    }
    rho_min, rho_max = torch.aminmax(tokens)
    seq_min, seq_max = torch.aminmax(seq_delta)
    others = {  # population stds (verl's rollout_is_std of the raw weights: E[ρ²] − E[ρ]²), extremes, quantiles
        "rho_std": tokens.std(correction=0),
        "seq_std": seq_delta.std(correction=0),
        "rho_min": rho_min,
        "rho_max": rho_max,
        "seq_min": seq_min,
        "seq_max": seq_max,
        "prob_diff_max": prob_diff.max(),
        "abs_delta_max": abs_delta.max(),
    }
    flat = torch.cat(
        [
            _means(token_sums, n),
            _means(sequence_sums, seq_index.numel()),  # one transfer
            torch.stack(list(others.values())),
            _linear_quantiles(tokens, rho_max),
        ]
    ).tolist()
    mean = dict(zip(token_sums, flat))
    seq_mean = dict(zip(sequence_sums, flat[len(token_sums) :]))
    other = dict(
        zip([*others, *(f"p{round(q * 100)}" for q in QUANTILES)], flat[len(token_sums) + len(sequence_sums) :])
    )
    mean_rho, second = mean["rho"], mean["rho2"]
    metrics = {
        MISMATCH_PROB_ABS_DIFF_MEAN: mean["prob_diff"],
        MISMATCH_PROB_ABS_DIFF_MAX: other["prob_diff_max"],
        MISMATCH_KL: mean["k3"],  # k3 = ρ − 1 − Δ ≥ 0
        MISMATCH_KL_K1: -mean["delta"],  # k1 of KL(π_sampler ‖ π_learner): E_sampler[−Δ]
        MISMATCH_LOG_RATIO_ABS_MEAN: mean["abs_delta"],
        MISMATCH_LOG_RATIO_ABS_MAX: other["abs_delta_max"],
        MISMATCH_IS_RATIO_MEAN: mean_rho,
        MISMATCH_IS_RATIO_STD: other["rho_std"] if n > 1 else mean_rho * 0,
        MISMATCH_IS_RATIO_MIN: other["rho_min"],
        MISMATCH_IS_RATIO_MAX: other["rho_max"],
        **{name: other[f"p{round(q * 100)}"] for q, name in QUANTILE_METRICS.items()},
        MISMATCH_IS_RATIO_TAIL_FRAC: mean["tail"],
        # Kish's effective sample size of the raw token weights, normalised: (Σρ)² / (N Σρ²) ∈ (0, 1]
        MISMATCH_ESS: mean_rho * mean_rho / second,  # x * x: what Tensor ** 2 computes
        MISMATCH_CHI2_TOKEN: second - 1,
        MISMATCH_CHI2_SEQ: seq_mean["rho2"] - 1,
        MISMATCH_SEQ_LOG_RATIO_MEAN: seq_mean["delta"],
        MISMATCH_SEQ_LOG_RATIO_STD: other["seq_std"],
        MISMATCH_SEQ_LOG_RATIO_MIN: other["seq_min"],
        MISMATCH_SEQ_LOG_RATIO_MAX: other["seq_max"],
        MISMATCH_LEARNER_PPL: seq_mean["learner_ppl"],
        MISMATCH_SAMPLER_PPL: seq_mean["sampler_ppl"],
        MISMATCH_LOG_PPL_DIFF: seq_mean["log_ppl_diff"],
        MISMATCH_PPL_RATIO: seq_mean["ppl_ratio"],
        MISMATCH_TOKEN_MULT_PROB_ERROR: mean["mult"],
    }
    if cap is not None:
        metrics[MISMATCH_IS_RATIO_ABOVE_CAP_FRAC] = mean["above"]
        metrics[MISMATCH_IS_RATIO_BELOW_CAP_FRAC] = mean["below"]
    mean_entropy = mean.get("entropy", 0.0)
    if mean_entropy > 0:  # a greedy (zero-entropy) batch has no ratio to report
        metrics[MISMATCH_KL_ENT_RATIO] = metrics[MISMATCH_KL] / mean_entropy
    return metrics


def _means(sums: dict[str, torch.Tensor], count: int) -> torch.Tensor:
    """``Tensor.mean`` of each summed vector, bit for bit, from its sum: on the CPU ``mean`` divides the
    sum by the count; its CUDA kernel multiplies the sum by 1/count (ATen ``mean_out`` / ``MeanOps``)."""
    stacked = torch.stack(list(sums.values()))  # a count (integer sum) becomes float64 exactly
    return stacked / count if stacked.device.type == "cpu" else stacked * (1.0 / count)


def _select(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``values[mask]`` in float64, for the flat positions ``index`` of the mask's true entries: the same
    numbers as boolean indexing, without a ``nonzero`` per call."""
    return values.detach().reshape(-1).index_select(0, index).double()


def _linear_quantiles(values: torch.Tensor, largest: torch.Tensor) -> torch.Tensor:
    """``torch.quantile(values, QUANTILES)`` (linear interpolation), bit for bit: the same steps (rank
    r = q·(N−1) in float64, the order statistics at ⌊r⌋ and ⌈r⌉, ``lerp`` by r − ⌊r⌋), with the order
    statistics found by :func:`_order_statistics`. ``largest``: ``values.max()``; NaN there (a NaN
    anywhere) makes every quantile NaN, as in ``torch.quantile``."""
    n = values.numel()
    ranks = [q * (n - 1) for q in QUANTILES]  # Python floats: the same IEEE products as on a float64 tensor
    below = [math.floor(r) for r in ranks]
    ends = _order_statistics(values, below + [math.ceil(r) for r in ranks])  # [2 × 5]
    weights = torch.tensor([r - b for r, b in zip(ranks, below)], dtype=values.dtype, device=values.device)
    quantiles = ends[: len(ranks)].lerp(ends[len(ranks) :], weights)
    return torch.where(largest.isnan(), largest, quantiles)


def _order_statistics(values: torch.Tensor, ranks: list[int]) -> torch.Tensor:
    """``values.sort().values[ranks]``. On the CPU by selection (numpy's introselect, ``np.partition``):
    a step's ratios arrive unsorted and new each step, and a full sort of them mispredicts its branches:
    ~150 µs for 2,500 tokens on one core (~31 µs re-sorting one tensor over and over, which is what a naive
    timing loop measures), against ~40 µs to select the 10 order statistics. On a GPU the sort is cheap."""
    if values.device.type != "cpu":
        return values.sort().values.index_select(0, torch.tensor(ranks, device=values.device))
    wanted = sorted(set(ranks))
    chosen = np.partition(values.numpy(), wanted)  # a copy; NaN sorts last, as in torch.sort
    return torch.from_numpy(chosen[ranks])


def repetition_frac(
    completion_ids: torch.Tensor, mask: torch.Tensor, *, max_period: int = 4, repeats: int = 4
) -> float:
    """Fraction of responses caught in a decoding loop: some n-gram (n ≤ ``max_period`` tokens) repeated
    back to back ``repeats`` times or more (e.g. "7 7 7 7", "1 2 1 2 1 2 1 2").

    slime logs ``repetition_frac`` (responses that repeat); the definition here is the workbench's
    own, on token ids. A period-n loop repeated r times means ``id[t] == id[t+n]`` for (r−1)·n
    consecutive positions: a window of that width full of matches (prefix sums find it for every start).
    """
    ids, on = completion_ids, mask.bool()  # [B, T]
    looping = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    for n in range(1, max_period + 1):
        width = (repeats - 1) * n
        if ids.shape[1] < n + width:
            break
        same = (ids[:, n:] == ids[:, :-n]) & on[:, n:] & on[:, :-n]  # [B, T-n]
        ran = F.pad(same.long().cumsum(-1), (1, 0))  # [B, T-n+1] integer prefix sums: exact
        looping |= ((ran[:, width:] - ran[:, :-width]) == width).any(-1)  # a full window of matches
    return float(looping.double().mean()) if ids.shape[0] else 0.0


def mismatch_record(
    learner_logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    mask: torch.Tensor,
    completion_ids: torch.Tensor,
    *,
    worst: int = WORST_TOKENS,
) -> dict[str, Any]:
    """The step's mismatch artifact: counts of Δ per histogram bin (``HIST_EDGES``; the first and last
    bins are open), and the ``worst`` tokens by |Δ| with their sequence, position, token id and both
    logprobs: *where* the engines disagree, which one scalar cannot show (NeMo-RL #1288)."""
    on = mask.bool()
    delta = _log_ratio(learner_logp, sampler_logp)
    values = delta[on]
    edges = torch.tensor(HIST_EDGES, dtype=values.dtype, device=values.device)
    counts = torch.bincount(torch.bucketize(values, edges), minlength=len(HIST_EDGES) + 1)
    rows, cols = on.nonzero(as_tuple=True)
    order = values.abs().argsort(descending=True)[:worst]
    worst_tokens = [
        {
            "sequence": int(rows[i]),
            "position": int(cols[i]),
            "token_id": int(completion_ids[rows[i], cols[i]]),
            "learner_logp": float(learner_logp[rows[i], cols[i]]),
            "sampler_logp": float(sampler_logp[rows[i], cols[i]]),
            "log_ratio": float(values[i]),
        }
        for i in order.tolist()
    ]
    return {
        "edges": list(HIST_EDGES),
        "counts": counts.tolist(),
        "tokens": int(values.numel()),
        "worst_tokens": worst_tokens,
    }
