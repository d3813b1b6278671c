"""One policy update on a batch of scored rollouts: the PPO-style inner loop.

Composes registered units by name (estimator, IS correction, policy loss, aggregation);
knows no paper. ``epochs × minibatches`` optimizer steps per batch; with a single step the
forward that computes the loss also provides the "old" logprobs (ratio exactly 1).
"""

from __future__ import annotations

from collections import defaultdict

import torch

from workbench.algorithms import compute_policy_loss, importance_weights
from workbench.batch import Rollouts
from workbench.config import AlgorithmConfig
from workbench.metrics.compute import masked_mean, mismatch_metrics
from workbench.train.learner import TorchLearner


def policy_update(learner: TorchLearner, rollouts: Rollouts, advantages: torch.Tensor, algo: AlgorithmConfig,
                  temperature: float, generator: torch.Generator) -> dict[str, float]:
    """Update the learner on ``rollouts``; returns the step's learner-side metrics."""
    mask = rollouts.mask  # [B, T]
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
    metrics |= mismatch_metrics(old_logp, rollouts.sampler_logp, mask)
    is_weights = None
    if algo.correction is not None:
        is_weights, is_metrics = importance_weights(algo.correction, old_logp, rollouts.sampler_logp, mask,
                                                    cap=algo.correction_cap)
        metrics |= is_metrics

    sums: dict[str, float] = defaultdict(float)
    updates = 0
    for _ in range(algo.epochs):
        order = torch.randperm(n, generator=generator)
        for rows in order.chunk(algo.minibatches):  # fewer chunks if minibatches > B
            if not single:
                logp, _ = learner.logprobs(rollouts, rows, temperature, with_entropy=False)
            sel = slice(None) if single else rows
            loss, loss_metrics = compute_policy_loss(
                algo.loss, logp, old_logp[sel], advantages[sel], mask[sel],
                clip_low=algo.clip_low, clip_high=algo.clip_high, dual_clip=algo.dual_clip,
                agg_mode=algo.agg_mode, norm_constant=algo.norm_constant,
                is_weights=None if is_weights is None else is_weights[sel],
            )
            grad_norm = learner.optimizer_step(loss)
            for key, value in loss_metrics.items():
                sums[key] += value
            sums["loss/policy"] += float(loss.detach())
            sums["grad/norm"] += grad_norm
            updates += 1
    metrics |= {key: value / updates for key, value in sums.items()}  # means over the optimizer steps
    metrics["train/optimizer_steps"] = float(updates)
    return metrics
