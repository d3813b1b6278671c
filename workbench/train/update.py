"""One policy update on a batch of scored rollouts: the PPO-style inner loop.

Composes registered units by name (estimator, IS correction, policy loss, aggregation);
knows no paper. ``epochs × minibatches`` optimizer steps per batch; with a single step the
forward that computes the loss also provides the "old" logprobs (ratio exactly 1).
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch

from workbench.algorithms import aggregate_loss, compute_policy_loss, importance_weights, kl_penalty
from workbench.batch import Rollouts
from workbench.config import AlgorithmConfig
from workbench.metrics.compute import masked_mean, mismatch_metrics
from workbench.train.learner import TorchLearner


def policy_update(learner: TorchLearner, rollouts: Rollouts, advantages: torch.Tensor, algo: AlgorithmConfig,
                  temperature: float, generator: torch.Generator, *, loss_mask: torch.Tensor | None = None,
                  ref_logp: torch.Tensor | None = None) -> dict[str, float]:
    """Update the learner on ``rollouts``; returns the step's learner-side metrics.

    ``loss_mask`` (default: the response mask) selects the tokens that carry gradient;
    ``ref_logp`` adds ``kl_coef · KL(π ‖ π_ref)`` to the loss, aggregated like the policy loss.
    """
    mask = rollouts.mask  # [B, T] every response token: metrics see them all
    loss_mask = mask if loss_mask is None else loss_mask  # [B, T] tokens that carry gradient
    n = mask.shape[0]
    single = algo.epochs * algo.minibatches == 1
    # Learner logprobs before any update: the "old" policy, and the side of the mismatch metrics.
    if single:
        logp, entropy = learner.logprobs(rollouts, slice(None), temperature)
        old_logp = logp.detach()
    else:
        with torch.no_grad():
            old_logp, entropy = learner.logprobs(rollouts, slice(None), temperature)
    metrics = {"entropy/mean": masked_mean(entropy, mask)}
    if ref_logp is not None:
        metrics["kl/ref"] = masked_mean(kl_penalty(old_logp, ref_logp, algo.kl_estimator), mask)
    metrics |= mismatch_metrics(old_logp, rollouts.sampler_logp, mask)
    is_weights = None
    algo_s = 0.0  # time inside the registered algorithm units (benchmarked against learner time)
    if algo.correction is not None:
        t0 = time.perf_counter()
        is_weights, is_metrics = importance_weights(algo.correction, old_logp, rollouts.sampler_logp, mask,
                                                    cap=algo.correction_cap)
        algo_s += time.perf_counter() - t0
        metrics |= is_metrics

    sums: dict[str, float] = defaultdict(float)
    updates = 0
    for _ in range(algo.epochs):
        order = torch.randperm(n, generator=generator)
        for rows in order.chunk(algo.minibatches):  # fewer chunks if minibatches > B
            if not single:
                logp, _ = learner.logprobs(rollouts, rows, temperature, with_entropy=False)
            sel = slice(None) if single else rows
            t0 = time.perf_counter()
            loss, loss_metrics = compute_policy_loss(
                algo.loss, logp, old_logp[sel], advantages[sel], loss_mask[sel],
                clip_low=algo.clip_low, clip_high=algo.clip_high, dual_clip=algo.dual_clip,
                agg_mode=algo.agg_mode, norm_constant=algo.norm_constant,
                is_weights=None if is_weights is None else is_weights[sel],
            )
            if ref_logp is not None and algo.kl_in == "loss":
                kl = kl_penalty(logp, ref_logp[sel], algo.kl_estimator)  # [b, T]
                loss = loss + algo.kl_coef * aggregate_loss(kl, loss_mask[sel], algo.agg_mode,
                                                            norm_constant=algo.norm_constant)
            algo_s += time.perf_counter() - t0
            grad_norm = learner.optimizer_step(loss)
            for key, value in loss_metrics.items():
                sums[key] += value
            sums["loss/policy"] += float(loss.detach())
            sums["grad/norm"] += grad_norm
            updates += 1
    metrics |= {key: value / updates for key, value in sums.items()}  # means over the optimizer steps
    metrics["train/optimizer_steps"] = float(updates)
    metrics["perf/algorithm_s"] = algo_s
    return metrics
