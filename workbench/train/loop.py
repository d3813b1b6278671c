"""The RL training loop, readable top to bottom.

    sample G completions per prompt -> score with math-verify -> advantages -> policy update
    -> sync weights to the sampler -> canonical metrics -> health rules -> MLflow

It composes registered units by name from the run config and never names a paper.
"""

from __future__ import annotations

import random
import time
from contextlib import closing
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Protocol

import torch

from workbench.algorithms import compute_advantages, kl_penalty
from workbench.algorithms.filters import BATCH_FILTERS, TOKEN_FILTERS, filter_input
from workbench.batch import ScoredRollouts, TrainBatch, concat, select
from workbench.config import RunConfig
from workbench.health import HealthMonitor
from workbench.metrics.compute import rollout_metrics
from workbench.models import load_policy
from workbench.reward import AnswerVerifier
from workbench.reward.rollouts import score_rollouts
from workbench.rollout import build_sampler
from workbench.tasks import build_task
from workbench.train.checkpoint import RunCheckpoints, capture
from workbench.train.evaluate import evaluate
from workbench.train.learner import ReferencePolicy, build_learner


class StepSink(Protocol):
    """Where per-step results go (MLflow tracker, progress bar)."""

    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...


@dataclass(frozen=True)
class StopReason:
    """Why a run ended before its last step: a failing health rule, or its ``on_step`` callback."""

    reason: str  # e.g. "health: non_finite@2", "pruned by optuna at step 3"


@dataclass
class TrainResult:
    steps_done: int
    stop: StopReason | None = None  # None: every step ran
    eval_history: list[tuple[int, float]] = field(default_factory=list)  # (step, eval/accuracy)
    samples: list[dict] = field(default_factory=list)  # completions shown at eval steps
    last_metrics: dict[str, float] = field(default_factory=dict)

    @property
    def stopped_early(self) -> bool:
        return self.stop is not None


def train(cfg: RunConfig, sink: StepSink, monitor: HealthMonitor,
          on_step: Callable[[int, dict[str, float]], StopReason | None] | None = None,
          checkpoints: RunCheckpoints | None = None) -> TrainResult:
    """Train ``cfg``, logging every step to ``sink``. ``on_step(step, metrics)`` runs after each step
    is logged; a ``StopReason`` it returns ends the run there, as a failing health rule does."""
    torch.manual_seed(cfg.seed)
    rng = random.Random(f"train-{cfg.seed}")
    generator = torch.Generator().manual_seed(cfg.seed)
    roll = cfg.rollout

    task = build_task(cfg.task)
    eval_set = task.eval_problems()[: roll.eval_size]
    model, tokenizer = load_policy(cfg.model, cfg.task)
    learner = build_learner(model, cfg)  # learner.backend: torch | deepspeed, in the wrappers the run needs
    with learner.gathered_model() as full:  # a vLLM engine copies the weights: ZeRO-3 must gather them first
        sampler = build_sampler(cfg, full, tokenizer, cfg.model.prompt_template)
    reference = ReferencePolicy(learner.policy_copy()) if cfg.algorithm.kl_coef > 0 else None  # no KL, no copy
    shaping = cfg.reward.specs()
    result = TrainResult(steps_done=0)
    history: list[tuple[int, dict[str, float]]] = []  # every step's logged metrics, kept in checkpoints

    # closing(): the sampler's engine is released however the run ends
    with (AnswerVerifier(timeout_s=cfg.reward.timeout_s, workers=cfg.reward.workers) as verifier, closing(sampler),
          closing(learner)):
        if checkpoints is not None and checkpoints.latest_step() is not None:  # an earlier attempt failed: resume
            state = checkpoints.restore(learner, rng, generator)  # weights, optimizer, RNG states, its steps
            with learner.gathered_model() as full:  # ZeRO-3 partitions the weights elsewhere
                sampler.sync_weights(full)
            for step, metrics in state.history:  # replay the earlier steps, so this run's record is whole
                monitor.observe(step, metrics)
                sink.log_metrics(metrics, step)
                result.last_metrics |= metrics
            history, result.samples, result.steps_done = state.history, state.samples, state.steps_done
            result.eval_history = [(step, m["eval/accuracy"]) for step, m in history if "eval/accuracy" in m]
        for step in range(result.steps_done, roll.steps + 1):
            metrics: dict[str, float] = {}
            if step % roll.eval_every == 0 or step == roll.steps:  # before this step's update
                eval_metrics, samples = evaluate(sampler, verifier, eval_set, roll, seed=cfg.seed, step=step)
                metrics |= eval_metrics
                result.eval_history.append((step, eval_metrics["eval/accuracy"]))
                result.samples += samples
            if step < roll.steps:
                metrics |= rl_step(cfg, step, task, rng, generator, sampler, verifier, learner, reference, shaping)
                result.steps_done = step + 1
            health_start = time.perf_counter()
            metrics |= monitor.observe(step, metrics).as_metrics()
            metrics["perf/health_s"] = time.perf_counter() - health_start
            sink.log_metrics(metrics, step)
            history.append((step, metrics))
            result.last_metrics |= metrics
            if checkpoints is not None and step < roll.steps and checkpoints.due(step + 1):
                checkpoints.save(learner, capture(step + 1, rng, generator, history, result.samples))
            result.stop = None if on_step is None else on_step(step, metrics)  # e.g. Optuna pruning
            if result.stop is None and monitor.should_stop:
                result.stop = StopReason(f"health: {monitor.reasons}")
            if result.stop is not None:
                break
    return result


def rl_step(cfg: RunConfig, step: int, task, rng: random.Random, generator: torch.Generator, sampler,
            verifier, learner, reference: ReferencePolicy | None, shaping) -> dict[str, float]:
    """One RL step: sample, score, estimate advantages, update, sync. Returns its metrics."""
    start = time.perf_counter()
    algo, temperature = cfg.algorithm, cfg.sampler.temperature
    sampled, batch, metrics = collect_batch(cfg, step, task, rng, sampler, verifier, shaping)
    rollouts = batch.rollouts.to(learner.device)
    loss_mask = rollouts.mask
    for name in algo.token_filters:
        loss_mask = TOKEN_FILTERS.get(name)(loss_mask, rollouts.truncated)
    rewards = batch.rewards.to(learner.device)  # [B]
    ref_logp = None if reference is None else reference.logprobs(rollouts, temperature)  # [B, T]
    if ref_logp is not None and algo.kl_in == "reward":  # KL as a per-sequence reward penalty
        with torch.no_grad():
            logp, _ = learner.logprobs(rollouts, slice(None), temperature, with_entropy=False)
        seq_kl = (kl_penalty(logp, ref_logp, algo.kl_estimator) * rollouts.mask).sum(-1)  # [B]
        rewards = rewards - algo.kl_coef * seq_kl
    t0 = time.perf_counter()
    advantages = compute_advantages(algo.estimator, rewards, rollouts.group_ids, mask=rollouts.mask,
                                    **algo.estimator_params)  # [B]
    advantage_s = time.perf_counter() - t0

    learn_start = time.perf_counter()
    metrics |= learner.update(TrainBatch(step, rollouts, advantages, loss_mask, ref_logp), algo, temperature,
                              generator)
    with learner.gathered_model() as full:  # ZeRO-3: the sampler needs whole weights
        sampler.sync_weights(full)
    learn_s = time.perf_counter() - learn_start

    metrics["perf/algorithm_s"] += advantage_s
    metrics |= rollout_metrics(sampled)  # over everything sampled, not only what was kept
    generated = float(sampled.rollouts.lengths.sum())
    learned = float(rollouts.attention_mask.sum()) * algo.epochs
    metrics |= {
        "perf/step_s": time.perf_counter() - start,
        "perf/sample_s": sampled.rollouts.sample_seconds,
        "perf/score_s": sampled.score_seconds,
        "perf/learn_s": learn_s,
        "perf/sample_tokens_per_s": generated / max(sampled.rollouts.sample_seconds, 1e-9),
        "perf/learn_tokens_per_s": learned / max(learn_s, 1e-9),
        "perf/sample_tokens": generated,
    }
    return metrics


def collect_batch(cfg: RunConfig, step: int, task, rng: random.Random, sampler, verifier,
                  shaping) -> tuple[ScoredRollouts, ScoredRollouts, dict[str, float]]:
    """Sample and score ``prompts_per_step`` groups; with a batch filter, refill dropped groups.

    Returns (everything sampled, the training batch, batch metrics). Without a filter both
    are the same single round. With one, rounds continue until the batch is full or
    ``max_sampling_rounds`` is reached; a batch left with no group keeps the last round whole
    (its advantages are all zero, so the update is a no-op rather than a crash).
    """
    algo, roll = cfg.algorithm, cfg.rollout
    keep_group = None if algo.batch_filter is None else BATCH_FILTERS.get(algo.batch_filter)
    rounds, kept, groups_kept = [], [], 0
    for round_ in range(algo.max_sampling_rounds if keep_group else 1):
        problems = task.sample_train(roll.prompts_per_step, rng)
        rollouts = sampler.generate(problems, roll.group_size, temperature=cfg.sampler.temperature,
                                    seed=(cfg.seed * 1_000_003 + step) * 101 + round_)
        scored = score_rollouts(verifier, rollouts, shaping)
        rounds.append(scored)
        if keep_group is None:
            return scored, scored, {}
        keep = keep_group(filter_input(algo.filter_on, scored.rewards, scored.correct),
                          rollouts.group_ids)  # [B] bool, whole groups
        kept.append(select(scored, keep))
        groups_kept += int(keep.sum()) // roll.group_size
        if groups_kept >= roll.prompts_per_step:
            break
    sampled = concat(rounds)
    batch = concat([k for k in kept if len(k.rewards)]) if groups_kept else rounds[-1]
    limit = roll.prompts_per_step * roll.group_size
    if len(batch.rewards) > limit:  # the last round overshot: keep whole groups up to the batch size
        batch = select(batch, torch.arange(len(batch.rewards)) < limit)
    n_sampled = len(rounds) * roll.prompts_per_step
    metrics = {"batch/filtered_frac": 1 - groups_kept / n_sampled, "batch/sampling_rounds": float(len(rounds))}
    return sampled, batch, metrics
