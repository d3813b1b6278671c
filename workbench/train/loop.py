"""The RL training loop, readable top to bottom.

    sample G completions per prompt -> score with math-verify -> advantages -> policy update
    -> sync weights to the sampler -> canonical metrics -> health rules -> MLflow

It composes registered units by name from the run config and never names a paper.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Protocol

import torch

from workbench.algorithms import compute_advantages
from workbench.config import RunConfig
from workbench.health import HealthMonitor
from workbench.metrics.compute import rollout_metrics
from workbench.models import load_policy
from workbench.reward import AnswerVerifier
from workbench.reward.rollouts import score_rollouts
from workbench.rollout.hf import HFSampler
from workbench.tasks import build_task
from workbench.train.evaluate import evaluate
from workbench.train.learner import TorchLearner
from workbench.train.update import policy_update


class StepSink(Protocol):
    """Where per-step results go (MLflow tracker, progress bar)."""

    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...


@dataclass
class TrainResult:
    steps_done: int
    stopped_early: bool
    eval_history: list[tuple[int, float]] = field(default_factory=list)  # (step, eval/accuracy)
    samples: list[dict] = field(default_factory=list)  # completions shown at eval steps
    last_metrics: dict[str, float] = field(default_factory=dict)


def train(cfg: RunConfig, sink: StepSink, monitor: HealthMonitor, on_step=None) -> TrainResult:
    torch.manual_seed(cfg.seed)
    rng = random.Random(f"train-{cfg.seed}")
    generator = torch.Generator().manual_seed(cfg.seed)
    roll = cfg.rollout

    task = build_task(cfg.task)
    eval_set = task.eval_problems()[: roll.eval_size]
    model, tokenizer = load_policy(cfg.model, cfg.task)
    learner = TorchLearner(model, cfg.learner)
    sampler = HFSampler(learner.model, tokenizer, cfg.sampler, cfg.model.prompt_template)
    shaping = cfg.reward.specs()
    result = TrainResult(steps_done=0, stopped_early=False)

    with AnswerVerifier(timeout_s=cfg.reward.timeout_s, workers=cfg.reward.workers) as verifier:
        for step in range(roll.steps + 1):
            metrics: dict[str, float] = {}
            if step % roll.eval_every == 0 or step == roll.steps:  # before this step's update
                eval_metrics, samples = evaluate(sampler, verifier, eval_set, roll, seed=cfg.seed, step=step)
                metrics |= eval_metrics
                result.eval_history.append((step, eval_metrics["eval/accuracy"]))
                result.samples += samples
            if step < roll.steps:
                metrics |= rl_step(cfg, step, task, rng, generator, sampler, verifier, learner, shaping)
                result.steps_done = step + 1
            metrics |= monitor.observe(step, metrics).as_metrics()
            sink.log_metrics(metrics, step)
            result.last_metrics |= metrics
            if on_step is not None:
                on_step(step, metrics)
            if monitor.should_stop:
                result.stopped_early = True
                break
    return result


def rl_step(cfg: RunConfig, step: int, task, rng: random.Random, generator: torch.Generator, sampler,
            verifier, learner: TorchLearner, shaping) -> dict[str, float]:
    """One RL step: sample, score, estimate advantages, update, sync. Returns its metrics."""
    start = time.perf_counter()
    roll, temperature = cfg.rollout, cfg.sampler.temperature
    problems = task.sample_train(roll.prompts_per_step, rng)
    rollouts = sampler.generate(problems, roll.group_size, temperature=temperature,
                                seed=cfg.seed * 1_000_003 + step)
    scored = score_rollouts(verifier, rollouts, shaping)
    advantages = compute_advantages(cfg.algorithm.estimator, scored.rewards, rollouts.group_ids)  # [B]

    learn_start = time.perf_counter()
    metrics = policy_update(learner, rollouts.to(learner.device), advantages.to(learner.device), cfg.algorithm,
                            temperature, generator)
    sampler.sync_weights(learner.model)
    learn_s = time.perf_counter() - learn_start

    metrics |= rollout_metrics(scored)
    generated = float(rollouts.lengths.sum())
    learned = float(rollouts.attention_mask.sum()) * cfg.algorithm.epochs
    metrics |= {
        "perf/step_s": time.perf_counter() - start,
        "perf/sample_s": rollouts.sample_seconds,
        "perf/score_s": scored.score_seconds,
        "perf/learn_s": learn_s,
        "perf/sample_tokens_per_s": generated / max(rollouts.sample_seconds, 1e-9),
        "perf/learn_tokens_per_s": learned / max(learn_s, 1e-9),
        "perf/sample_tokens": generated,
    }
    return metrics
