"""One policy update on a ``TrainBatch``: the PPO-style inner loop.

Composes registered units by name (estimator, IS correction, policy loss, aggregation);
knows no paper. ``epochs × minibatches`` optimizer steps per batch; with a single step the
forward that computes the loss also provides the "old" logprobs (ratio exactly 1).

``learner.micro_batch_size`` splits a minibatch into micro-batches whose gradients are
accumulated before its one optimizer step. Each micro-batch loss is weighted by its share of
the minibatch loss (``micro_shares``), so the accumulated gradient is the minibatch gradient for
every aggregation mode, and the logged metrics keep their meaning (means over the minibatch).

The learner may be any backend inside any wrappers (``workbench.train.wrappers``): this module
neither knows nor asks. The algorithm's own computations (importance weights, the loss of some rows)
run inside ``section("algorithm")``, which the run times (``perf/algorithm_s``) from outside.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from workbench.algorithms import aggregate_loss, compute_policy_loss, importance_weights, kl_penalty
from workbench.batch import PendingBatch, Rollouts, TrainBatch
from workbench.config import AlgorithmConfig
from workbench.metrics.compute import masked_mean_float
from workbench.metrics.mismatch import mismatch_metrics
from workbench.metrics.names import (
    ENTROPY_MEAN,
    GRAD_NORM,
    KL_REF,
    LOSS_POLICY,
    POLICY_RATIO_MAX,
    TRAIN_OPTIMIZER_STEPS,
)
from workbench.train.learner_protocol import Learner, OldLogprobObserver, Section, no_section


def rows_loss(
    algo: AlgorithmConfig,
    batch: TrainBatch,
    rows: torch.Tensor | slice,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    is_weights: torch.Tensor | None,
    share: tuple[float, float] | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """(loss, policy metrics) of the sequences ``rows`` (``logp`` is theirs), reduced over them: the policy
    loss plus ``kl_coef ·`` the KL loss when KL is in the loss. ``share`` weights the (policy, KL) parts
    by this micro-batch's share of the minibatch loss (``micro_shares``)."""
    loss_mask = batch.loss_mask[rows]
    policy, policy_metrics = compute_policy_loss(
        algo.loss,
        logp,
        old_logp[rows],
        batch.advantages[rows],
        loss_mask,
        agg_mode=algo.agg_mode,
        norm_constant=algo.norm_constant,
        is_weights=None if is_weights is None else is_weights[rows],
        **algo.loss_kwargs(),
    )
    kl = None
    if batch.ref_logp is not None and algo.kl_in == "loss":
        kl = aggregate_loss(
            kl_penalty(logp, batch.ref_logp[rows], algo.kl_estimator),
            loss_mask,
            algo.agg_mode,
            norm_constant=algo.norm_constant,
        )
    if share is not None:  # this micro-batch's part of the minibatch loss
        policy = share[0] * policy
        kl = None if kl is None else share[1] * kl
    return (policy if kl is None else policy + algo.kl_coef * kl), policy_metrics


def policy_update(
    learner: Learner,
    batch: TrainBatch | PendingBatch,
    algo: AlgorithmConfig,
    temperature: float,
    generator: torch.Generator,
    section: Section = no_section,
    observe_old_logp: OldLogprobObserver | None = None,
) -> dict[str, float]:
    """Update the learner on ``batch``; returns the step's learner-side metrics.

    ``batch.loss_mask`` selects the tokens that carry gradient; ``batch.ref_logp`` adds
    ``kl_coef · KL(π ‖ π_ref)`` to the loss, aggregated like the policy loss. A ``PendingBatch`` (rewards
    still being scored) is waited for after the "old" forward, which needs no reward. The algorithm's
    own computations, apart from the learner's passes, run inside ``section("algorithm")``.
    """
    if isinstance(batch, TrainBatch):  # a batch built elsewhere (a test's, on the CPU); the run's is there already
        batch = batch.to(learner.device)
    rollouts, loss_mask, ref_logp = batch.rollouts, batch.loss_mask, batch.ref_logp
    mask = rollouts.mask  # [B, T] every response token: metrics see them all
    n = mask.shape[0]
    micro = learner.cfg.micro_batch_size
    # One optimizer step over the whole batch in one pass: the loss's forward is also the "old" policy's.
    single = algo.epochs * algo.minibatches == 1 and (micro is None or micro >= n)
    # Learner logprobs before any update: the "old" policy, and the side of the mismatch metrics.
    if single:
        logp, entropy = learner.logprobs(rollouts, slice(None), temperature)
        old_logp = logp.detach()
    else:
        old_logp, entropy = no_grad_logprobs(learner, rollouts, temperature, micro)
    if observe_old_logp is not None:
        observe_old_logp(old_logp)
    metrics = {ENTROPY_MEAN: masked_mean_float(entropy, mask)}
    if ref_logp is not None:
        metrics[KL_REF] = masked_mean_float(kl_penalty(old_logp, ref_logp, algo.kl_estimator), mask)
    # Logged whatever the correction: the raw ratios, against the bounds a correction would apply.
    metrics |= mismatch_metrics(old_logp, rollouts.sampler_logp, mask, entropy=entropy, cap=algo.correction_cap)
    is_weights = None
    if algo.correction is not None:
        with section("algorithm"):
            is_weights, is_metrics = importance_weights(
                algo.correction, old_logp, rollouts.sampler_logp, mask, cap=algo.correction_cap
            )
        metrics |= is_metrics
    batch = batch.ready()  # the loss needs the advantages: here a PendingBatch waits for its rewards

    sums: dict[str, float] = defaultdict(float)
    updates = 0
    for _ in range(algo.epochs):
        order = torch.randperm(n, generator=generator)
        for rows in order.chunk(algo.minibatches):  # fewer chunks if minibatches > B
            parts = [rows] if micro is None else list(rows.split(micro))
            shares = micro_shares(algo, loss_mask[rows], [len(p) for p in parts]) if len(parts) > 1 else None
            minibatch = MinibatchMetrics(loss_mask[rows])
            for k, part in enumerate(parts):
                if not single:
                    logp, _ = learner.logprobs(rollouts, part, temperature, with_entropy=False)
                sel = slice(None) if single else part
                with section("algorithm"):
                    loss, loss_metrics = rows_loss(
                        algo, batch, sel, logp, old_logp, is_weights, None if shares is None else shares[k]
                    )
                learner.backward(loss)
                minibatch.add(loss_mask[sel], float(loss.detach()), loss_metrics)
            grad_norm = learner.step()
            for key, value in minibatch.means().items():
                sums[key] += value
            sums[GRAD_NORM] += grad_norm
            updates += 1
    metrics |= {key: value / updates for key, value in sums.items()}  # means over the optimizer steps
    metrics[TRAIN_OPTIMIZER_STEPS] = float(updates)
    if learner.adapters is not None:  # LoRA: the adapters' size and how far they moved the policy
        metrics |= learner.adapters.metrics()
    return metrics


@torch.no_grad()
def no_grad_logprobs(
    learner: Learner, rollouts: Rollouts, temperature: float, micro: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprobs and entropy ``[B, T]`` of the whole batch, ``micro`` sequences per forward."""
    n = rollouts.mask.shape[0]
    if micro is None or micro >= n:
        return learner.logprobs(rollouts, slice(None), temperature)
    pieces = [learner.logprobs(rollouts, rows, temperature) for rows in torch.arange(n).split(micro)]
    return torch.cat([p[0] for p in pieces]), torch.cat([p[1] for p in pieces])


def micro_shares(algo: AlgorithmConfig, loss_mask: torch.Tensor, sizes: list[int]) -> list[tuple[float, float]]:
    """(policy, KL) weight of each micro-batch: minibatch loss = Σ_k w_k · loss(micro-batch k).

    ``loss_mask`` ``[b, T]`` is the minibatch's, its rows in micro-batch order (``sizes`` rows each).
    Every registered reduction is a sum of per-sequence terms divided by a normaliser that depends
    only on the mask (token count, non-empty sequences, sequences, a constant), so
    ``w_k = normaliser(micro-batch k) / normaliser(minibatch)``. The weights are read off the
    registered reductions themselves rather than tabulated per mode: reduce a loss of one on micro-batch
    k's sequences (zero elsewhere) over the minibatch, and over micro-batch k alone; the ratio is w_k.
    The policy side goes through ``compute_policy_loss`` (a loss may fix its own reduction), at ratio 1
    with advantage 1 on micro-batch k (every registered loss is then the same constant c·A per token,
    c = 1 for the clipped ones; c cancels in the ratio) and 0 elsewhere.
    A micro-batch with no loss tokens has loss 0 and weight 0.
    """
    loss_mask = loss_mask.cpu()  # a few float64 reductions of the mask: on the CPU, whatever the learner's device
    offsets = torch.tensor([0, *sizes]).cumsum(0).tolist()
    # logp = old_logp = -1: ratio 1 and |loss| = c·|A| per token for every loss; float64 keeps the ratios exact
    minus_one = -torch.ones(loss_mask.shape, dtype=torch.float64)

    def policy_value(adv: torch.Tensor, mask: torch.Tensor) -> float:
        rows = mask.shape[0]
        value, _ = compute_policy_loss(
            algo.loss,
            minus_one[:rows],
            minus_one[:rows],
            adv,
            mask,
            agg_mode=algo.agg_mode,
            norm_constant=algo.norm_constant,
            **algo.loss_kwargs(),
        )
        return float(value)

    def kl_value(weight: torch.Tensor, mask: torch.Tensor) -> float:
        unit = weight[:, None].expand(mask.shape).to(minus_one.dtype)  # [rows, T]
        return float(aggregate_loss(unit, mask, algo.agg_mode, norm_constant=algo.norm_constant))

    shares = []
    for k in range(len(sizes)):
        lo, hi = offsets[k], offsets[k + 1]
        inside = torch.zeros(loss_mask.shape[0], dtype=torch.float64)
        inside[lo:hi] = 1.0  # [b] 1 on micro-batch k
        alone = torch.ones(hi - lo, dtype=torch.float64)
        pairs = (
            (policy_value(inside, loss_mask), policy_value(alone, loss_mask[lo:hi])),
            (kl_value(inside, loss_mask), kl_value(alone, loss_mask[lo:hi])),
        )
        shares.append(tuple(whole / part if part != 0 else 0.0 for whole, part in pairs))
    return shares


class MinibatchMetrics:
    """Combines micro-batch metrics into the minibatch's: losses add up (they are already weighted);
    the policy metrics are token means over the loss mask, so they combine weighted by token count
    (``policy/ratio_max`` by max)."""

    def __init__(self, loss_mask: torch.Tensor) -> None:
        self.tokens = max(int(loss_mask.bool().sum()), 1)
        self.loss = 0.0
        self.sums: dict[str, float] = defaultdict(float)

    def add(self, loss_mask: torch.Tensor, loss: float, policy_metrics: dict[str, float]) -> None:
        self.loss += loss
        weight = int(loss_mask.bool().sum()) / self.tokens
        for key, value in policy_metrics.items():
            if key == POLICY_RATIO_MAX:
                self.sums[key] = max(self.sums.get(key, value), value)
            else:
                self.sums[key] += weight * value

    def means(self) -> dict[str, float]:
        return {**self.sums, LOSS_POLICY: self.loss}
