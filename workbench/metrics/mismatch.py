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

from typing import Any

import torch
import torch.nn.functional as F  # pad

MAX_LOG_RATIO = 20.0  # Δ is clamped to ± this before exp (the algorithms' convention, verl's SAFETY_BOUND)
TAIL_BAND = (0.9, 1.1)  # TRL #6789: 7.5% of tokens outside it while the mean ratio looked fine
QUANTILES = (0.01, 0.05, 0.5, 0.95, 0.99)

# Histogram of Δ: symmetric log-spaced edges, so both the bf16 bulk (|Δ| ~ 1e-3) and a stale-weights
# tail (|Δ| ~ 1) get bins; the outer bins are open (everything beyond ±1 nat, everything within ±1e-6).
HIST_MAGNITUDES = tuple(10.0 ** (k / 2) for k in range(-12, 1))  # 1e-6 … 1, half-decades
HIST_EDGES = tuple([-m for m in reversed(HIST_MAGNITUDES)] + list(HIST_MAGNITUDES))
WORST_TOKENS = 10


def _log_ratio(learner_logp: torch.Tensor, sampler_logp: torch.Tensor) -> torch.Tensor:
    return (learner_logp.detach().double() - sampler_logp.detach().double()).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


def mismatch_metrics(learner_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor, *,
                     entropy: torch.Tensor | None = None, cap: float | None = None) -> dict[str, float]:
    """The step's ``mismatch/*`` scalars (docs/metrics.md) on the response tokens of ``mask`` ``[B, T]``.

    ``entropy`` ``[B, T]`` (the learner's, same tokens) adds ``mismatch/kl_ent_ratio``; ``cap`` (the
    correction's upper bound C, lower bound 1/C as verl's default) adds the fractions of raw ratios
    outside [1/C, C]. Computed in float64: a 1e-8 fp32 disagreement is not lost to float32 rounding in
    the sums. An all-padding batch logs nothing (no tokens, no mismatch to report).
    """
    on = mask.bool()
    if not bool(on.any()):
        return {}
    # Everything below works on the N response tokens as flat float64 vectors (few, cheap kernels).
    rows = on.nonzero(as_tuple=True)[0]  # [N] the sequence of each token
    learner, sampler = learner_logp.detach()[on].double(), sampler_logp.detach()[on].double()  # [N]
    delta = (learner - sampler).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)  # [N] Δ
    tokens = delta.exp()  # [N] raw ratio ρ
    prob_diff = (learner.exp() - sampler.exp()).abs()  # [N]
    k3 = tokens - 1 - delta  # [N] ≥ 0
    n = tokens.numel()
    mean_rho = tokens.mean()
    per_seq = torch.zeros(3, on.shape[0], dtype=delta.dtype, device=delta.device)  # [3, B] Σ Δ, Σ logp
    per_seq.index_add_(1, rows, torch.stack([delta, learner, sampler]))
    counts = on.sum(-1)  # [B]
    seq_on = counts > 0  # [B] sequences with at least one response token
    seq_delta = per_seq[0, seq_on]  # [S] log of the sequence IS weight Π ρ_t
    seq_learner = per_seq[1, seq_on] / counts[seq_on]  # [S] mean token logp
    seq_sampler = per_seq[2, seq_on] / counts[seq_on]
    log_ppl_diff = seq_sampler - seq_learner  # [S] log(ppl_learner / ppl_sampler) per sequence
    quantiles = torch.quantile(tokens, torch.tensor(QUANTILES, dtype=tokens.dtype, device=tokens.device))
    abs_delta = delta.abs()
    second = (tokens ** 2).mean()
    lo, hi = TAIL_BAND
    values: dict[str, torch.Tensor] = {  # 0-d tensors, moved to Python floats in one transfer below
        "mismatch/prob_abs_diff_mean": prob_diff.mean(),
        "mismatch/prob_abs_diff_max": prob_diff.max(),
        "mismatch/kl": k3.mean(),
        "mismatch/kl_k1": -delta.mean(),  # k1 of KL(π_sampler ‖ π_learner): E_sampler[−Δ]
        "mismatch/log_ratio_abs_mean": abs_delta.mean(),
        "mismatch/log_ratio_abs_max": abs_delta.max(),
        "mismatch/is_ratio_mean": mean_rho,
        # population std (verl's rollout_is_std of the raw weights: E[ρ²] − E[ρ]²)
        "mismatch/is_ratio_std": tokens.std(correction=0) if n > 1 else mean_rho * 0,
        "mismatch/is_ratio_min": tokens.min(),
        "mismatch/is_ratio_max": tokens.max(),
        **{f"mismatch/is_ratio_p{round(q * 100)}": v for q, v in zip(QUANTILES, quantiles)},
        "mismatch/is_ratio_tail_frac": ((tokens < lo) | (tokens > hi)).double().mean(),
        # Kish's effective sample size of the raw token weights, normalised: (Σρ)² / (N Σρ²) ∈ (0, 1]
        "mismatch/ess": mean_rho ** 2 / second,
        "mismatch/chi2_token": second - 1,
        "mismatch/chi2_seq": (2 * seq_delta.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)).exp().mean() - 1,
        "mismatch/seq_log_ratio_mean": seq_delta.mean(),
        "mismatch/seq_log_ratio_std": seq_delta.std(correction=0),
        "mismatch/seq_log_ratio_min": seq_delta.min(),
        "mismatch/seq_log_ratio_max": seq_delta.max(),
        "mismatch/learner_ppl": (-seq_learner).exp().mean(),
        "mismatch/sampler_ppl": (-seq_sampler).exp().mean(),
        "mismatch/log_ppl_diff": log_ppl_diff.mean(),
        "mismatch/ppl_ratio": log_ppl_diff.exp().mean(),
        "mismatch/token_mult_prob_error": abs_delta.exp().mean(),
    }
    if cap is not None:
        values["mismatch/is_ratio_above_cap_frac"] = (tokens > cap).double().mean()
        values["mismatch/is_ratio_below_cap_frac"] = (tokens < 1 / cap).double().mean()
    if entropy is not None:
        values["entropy"] = entropy.detach()[on].double().mean()
    metrics = dict(zip(values, torch.stack(list(values.values())).tolist()))
    mean_entropy = metrics.pop("entropy", 0.0)
    if mean_entropy > 0:  # a greedy (zero-entropy) batch has no ratio to report
        metrics["mismatch/kl_ent_ratio"] = metrics["mismatch/kl"] / mean_entropy
    return metrics


def repetition_frac(completion_ids: torch.Tensor, mask: torch.Tensor, *, max_period: int = 4,
                    repeats: int = 4) -> float:
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


def mismatch_record(learner_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor,
                    completion_ids: torch.Tensor, *, worst: int = WORST_TOKENS) -> dict[str, Any]:
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
    worst_tokens = [{
        "sequence": int(rows[i]), "position": int(cols[i]), "token_id": int(completion_ids[rows[i], cols[i]]),
        "learner_logp": float(learner_logp[rows[i], cols[i]]), "sampler_logp": float(sampler_logp[rows[i], cols[i]]),
        "log_ratio": float(values[i]),
    } for i in order.tolist()]
    return {"edges": list(HIST_EDGES), "counts": counts.tolist(), "tokens": int(values.numel()),
            "worst_tokens": worst_tokens}

