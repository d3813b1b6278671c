"""The RL training loop, readable top to bottom.

    eval (every ``eval_every`` steps) -> one RL step (``workbench.train.step.rl_step``: sample,
    score, advantages, update, sync) -> health rules -> the sink (MLflow) -> checkpoint -> stop?

It composes registered units by name from the run config and never names a paper.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from workbench.config import RunConfig
from workbench.health import HealthMonitor
from workbench.metrics.names import EVAL_ACCURACY
from workbench.tracking.rollouts import RolloutRecorder
from workbench.train.checkpoint import RunCheckpoints, capture
from workbench.train.evaluate import ProblemResults, evaluate
from workbench.train.step import RunParts, health_metrics, open_run_parts, prompt_state, rl_step

log = logging.getLogger("workbench.train")


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
    problems: ProblemResults = field(default_factory=ProblemResults)  # every eval step's per-problem rows
    last_metrics: dict[str, float] = field(default_factory=dict)
    data_record: dict = field(default_factory=dict)  # the data step's pass rates and schedule (data.json)
    mismatch_records: list[dict] = field(default_factory=list)  # histogram + worst tokens (mismatch.json)
    rollouts: dict = field(default_factory=dict)  # the rollout log's manifest (rollouts/manifest.json); {}: none
    latest_completions: list[dict] = field(default_factory=list)  # the last eval's and train step's completions
    adapter_files: dict[str, bytes] = field(default_factory=dict)  # LoRA: the final adapters' save_pretrained files

    @property
    def stopped_early(self) -> bool:
        return self.stop is not None


def train(
    cfg: RunConfig,
    sink: StepSink,
    monitor: HealthMonitor,
    on_step: Callable[[int, dict[str, float]], StopReason | None] | None = None,
    checkpoints: RunCheckpoints | None = None,
    on_eval: Callable[[int, ProblemResults], None] | None = None,
    rollout_log: Callable[[RunParts], RolloutRecorder] | None = None,
) -> TrainResult:
    """Train ``cfg``, logging every step to ``sink``. ``on_step(step, metrics)`` runs after each step
    is logged; a ``StopReason`` it returns ends the run there, as a failing health rule does.
    ``on_eval(step, problems)`` receives each eval's per-problem results (in eval-set order) before
    that step's ``on_step`` (e.g. Optuna's Wilcoxon pruner, which pairs trials by problem).
    ``rollout_log(parts)`` builds the recorder that keeps every completion (``rollouts/`` artifacts,
    :mod:`workbench.tracking.rollouts`); it is closed (its last chunk and manifest written) when the loop ends."""
    roll = cfg.rollout
    with open_run_parts(cfg, monitor) as parts:
        parts.rollout_log = None if rollout_log is None else rollout_log(parts)
        log = parts.rollout_log
        result, history = (
            TrainResult(steps_done=0, data_record=parts.data_record),
            [],
        )  # history: every step's logged metrics, kept in checkpoints
        if checkpoints is not None and checkpoints.latest_step() is not None:  # an earlier attempt failed: resume
            result, history = resume(checkpoints, parts, sink)
        for step in range(result.steps_done, roll.steps + 1):
            metrics: dict[str, float] = dict(parts.start_metrics) if step == 0 else {}
            if step % roll.eval_every == 0 or step == roll.steps:  # before this step's update
                eval_metrics, samples, problems = evaluate(
                    parts.sampler,
                    parts.verifier,
                    parts.eval_set,
                    roll,
                    seed=cfg.seed,
                    step=step,
                    reflection_words=parts.reflection_words,
                    on_scored=None if log is None else eval_recorder(log, step),
                )
                metrics |= eval_metrics
                result.eval_history.append((step, eval_metrics[EVAL_ACCURACY]))
                result.samples += samples
                result.problems.extend(problems)
                if on_eval is not None:
                    on_eval(step, problems)
            if step < roll.steps:
                metrics |= rl_step(cfg, step, parts)
                result.steps_done = step + 1
            metrics |= health_metrics(step, metrics, parts)
            sink.log_metrics(metrics, step)
            history.append((step, metrics))
            result.last_metrics |= metrics
            if log is not None:
                log.end_step(step)
            if checkpoints is not None and step < roll.steps and checkpoints.due(step + 1):
                if log is not None:  # a resume replays the rows of the steps before it from this run's chunks
                    log.flush()
                rng, queue, pipeline = parts.rng, parts.prompts.queue_state(), None
                if parts.pipeline is not None:  # the prompt RNG and queue as they were before the next step's draws
                    (rng_state, queue), versions = parts.pipeline.state(step + 1, lambda: prompt_state(parts))
                    rng = random.Random()
                    rng.setstate(rng_state)
                    pipeline = {"versions": versions}
                checkpoints.save(
                    parts.learner,
                    capture(step + 1, rng, parts.generator, history, result.samples, result.problems, queue),
                    pipeline=pipeline,
                )
            result.stop = None if on_step is None else on_step(step, metrics)  # e.g. Optuna pruning
            if result.stop is None and monitor.should_stop:
                result.stop = StopReason(f"health: {monitor.reasons}")
            if result.stop is not None:
                break
        result.mismatch_records = parts.mismatch_records
        if log is not None:
            result.rollouts, result.latest_completions = log.close(), log.latest_table()
        if parts.learner.adapters is not None:  # LoRA: the trained adapters, loadable onto the base model
            result.adapter_files = parts.learner.adapters.files()
    return result


def eval_recorder(log: RolloutRecorder, step: int) -> Callable:
    """``evaluate``'s ``on_scored`` for this eval step: its completions into the rollout log."""
    return lambda scored, ids, per_problem: log.record_eval(step, scored, ids, per_problem)


def resume(
    checkpoints: RunCheckpoints, parts: RunParts, sink: StepSink
) -> tuple[TrainResult, list[tuple[int, dict[str, float]]]]:
    """Continue from the latest checkpoint: weights, optimizer, RNG states; the earlier steps are replayed
    to the health monitor and the sink, so this run's record is whole. Returns the result so far and
    the logged history."""
    state = checkpoints.restore(parts.learner, parts.rng, parts.generator)
    if state.prompt_queue is not None:
        parts.prompts.set_queue_state(state.prompt_queue)
    elif parts.prompts.pool is not None and parts.prompts.order != "sampled":  # a pass in progress was not kept
        log.warning(
            "%s: the checkpoint predates saving the prompt order's queue: data.order=%s starts a fresh pass at "
            "step %d, so the resumed steps may train on other prompts than an uninterrupted run",
            checkpoints.directory,
            parts.prompts.order,
            state.steps_done,
        )
    with parts.learner.gathered_model() as full:  # ZeRO-3 partitions the weights elsewhere
        parts.sampler.sync_weights(full)
    if parts.pipeline is not None:  # the snapshots the next steps sample with
        saved = checkpoints.restore_pipeline()
        if saved is None:
            raise RuntimeError(
                f"{checkpoints.directory}: a checkpoint of a rollout.staleness run without its pipeline state"
            )
        parts.pipeline.restore(state.steps_done, saved)
    # rows of evals that run again from here on are dropped, so no (step, problem) is recorded twice
    problems = ProblemResults(**state.problems).before(state.steps_done) if state.problems else ProblemResults()
    result = TrainResult(
        steps_done=state.steps_done, samples=state.samples, problems=problems, data_record=parts.data_record
    )
    for step, metrics in state.history:
        parts.monitor.observe(step, metrics)
        sink.log_metrics(metrics, step)
        result.last_metrics |= metrics
    result.eval_history = [(step, m[EVAL_ACCURACY]) for step, m in state.history if EVAL_ACCURACY in m]
    return result, state.history
