"""One RL step, the algorithm path, and the collaborators it runs on:

    sample G completions per prompt -> score -> (batch filter: refill) -> advantages -> TrainBatch
    -> the learner's update -> sync the weights to the sampler -> the step's metrics

Scoring may overlap the update (``reward.overlap``; by default when the learner is on a GPU): the verifier
scores on a background thread while the learner runs its forward, which needs no reward, and the update
waits for the rewards where its loss needs the advantages (``PendingBatch``). The same numbers, sooner
where the forward leaves CPU cores free for the verifier's processes.

It composes registered units by name from the run config and never names a paper. Timing goes
through the run's one stopwatch (``perf/*``); the update's algorithm sections are timed by it too.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from workbench.algorithms import compute_advantages, kl_penalty
from workbench.algorithms.filters import BATCH_FILTERS, TOKEN_FILTERS, filter_input
from workbench.batch import PendingBatch, PendingScores, ScoredRollouts, TrainBatch, concat, select
from workbench.config import RunConfig
from workbench.health import HealthMonitor
from workbench.metrics.compute import rollout_metrics
from workbench.metrics.mismatch import mismatch_record
from workbench.metrics.names import (
    BATCH_FILTERED_FRAC,
    BATCH_SAMPLING_ROUNDS,
    OFFPOLICY_STALENESS_MAX,
    OFFPOLICY_STALENESS_MEAN,
    PERF_ALGORITHM_S,
    PERF_HEALTH_S,
    PERF_LEARN_S,
    PERF_LEARN_TOKENS_PER_S,
    PERF_LEARNER_WAIT_S,
    PERF_SAMPLE_S,
    PERF_SAMPLE_TOKENS,
    PERF_SAMPLE_TOKENS_PER_S,
    PERF_SAMPLER_WAIT_S,
    PERF_SCORE_S,
    PERF_STEP_S,
)
from workbench.metrics.reflection import OAT_ZERO_KEYWORDS, reflection_metrics
from workbench.models import load_policy, model_dir
from workbench.models.priming import stage_metrics
from workbench.reward import AnswerVerifier
from workbench.reward._worker import ANSWER_SCORERS
from workbench.reward.rollouts import score_rollouts
from workbench.rollout import build_sampler
from workbench.rollout.base import Sampler
from workbench.rollout.prompts import PromptFormat, resolve_prompt_format
from workbench.rollout.weights import plain_copy
from workbench.tasks import Problem, Task, build_task
from workbench.tasks.curation import PromptOrder
from workbench.tracking.rollouts import RolloutRecorder
from workbench.train.data import prepare_prompts
from workbench.train.learner import ReferencePolicy, build_learner, reference_policy, resolve_device
from workbench.train.learner_protocol import Learner, OldLogprobObserver
from workbench.train.pipeline import LockedSampler, StalePipeline, split_threads
from workbench.train.pipeline import sampling_seed as pipeline_seed
from workbench.train.step0_gate import check_step0
from workbench.train.stopwatch import Stopwatch


@dataclass(kw_only=True)
class RunParts:
    """A run's collaborators, built once by ``open_run_parts`` and used by every step."""

    task: Task
    eval_set: list[Problem]
    sampler: Sampler
    verifier: AnswerVerifier
    learner: Learner  # a backend inside its wrappers (build_learner)
    reference: ReferencePolicy | None  # the frozen initial policy, only with KL
    shaping: list[tuple[str, float, dict[str, Any]]]  # reward shaping specs (cfg.reward.specs())
    monitor: HealthMonitor
    rng: random.Random  # which training prompts are drawn
    prompts: PromptOrder  # each step's prompts (data.order over the curated pool; by default the task's draws)
    start_metrics: dict[str, float]  # logged at step 0: the cold start's (cold_start/*) and the data step's (data/*)
    data_record: dict[str, Any]  # the data step's pass rates, histogram and schedule (the run's data.json)
    generator: torch.Generator  # minibatch order
    watch: Stopwatch  # every perf/* timing, the update's "algorithm" sections too
    scoring: ThreadPoolExecutor | None = None  # scores in the background (reward.overlap); None: in turn
    control: tuple[str, dict[str, Any]] | None = None  # reward.control: a spurious reward in place of correctness
    reflection_words: tuple[str, ...] = ()  # behaviour/reflection_rate's keywords; () = not logged
    mismatch_records: list[dict[str, Any]] = field(default_factory=list)  # health.mismatch_record_every steps
    prompt_format: PromptFormat = field(default_factory=PromptFormat)  # how the sampler renders a prompt
    rollout_log: RolloutRecorder | None = None  # every completion kept (rollouts/ artifacts); None: not kept
    pipeline: StalePipeline | None = None  # rollout.staleness >= 1: the sampler thread; None: sampled in turn


def overlaps_scoring(cfg: RunConfig) -> bool:
    """Whether the run scores while the learner's forward runs: as ``reward.overlap`` says, or unset, when
    the learner is on a GPU (a CPU learner's forward takes the cores the verifier would use); never with a
    batch filter, which must see the rewards before it knows the batch."""
    if cfg.algorithm.batch_filter is not None:
        return False
    if cfg.reward.overlap is None:
        return resolve_device(cfg.learner.device) != "cpu"
    return cfg.reward.overlap


@contextmanager
def open_run_parts(cfg: RunConfig, monitor: HealthMonitor) -> Iterator[RunParts]:
    """Build the run's collaborators; the verifier's workers, the sampler's engine and the learner
    (several ranks: the followers' run) are released however the run ends."""
    torch.manual_seed(cfg.seed)
    rng = random.Random(f"train-{cfg.seed}")
    generator = torch.Generator().manual_seed(cfg.seed)
    task = build_task(cfg.task)
    eval_set = task.eval_problems()[: cfg.rollout.eval_size]
    model, tokenizer = load_policy(cfg.model, cfg.task, prime=cfg.data.prime)
    directory = model_dir(cfg.model, cfg.task, progress=False, prime=cfg.data.prime)  # built by load_policy
    learner = build_learner(model, cfg)  # learner.backend: torch | deepspeed, in the wrappers the run needs
    prompt_format = resolve_prompt_format(cfg.model, tokenizer, cfg.model.path)
    with learner.gathered_model() as full:  # a vLLM engine copies the weights: ZeRO-3 must gather them first
        # rollout.staleness >= 1: a second sampler (same backend) over weights of its own, on its own thread.
        # Copied before the first sampler is built: a vLLM build runs a forward of ``full`` (its probe), after
        # which ZeRO-3's hooks have partitioned the weights again, gather or not.
        stale_weights = plain_copy(full) if cfg.rollout.staleness else None
        sampler = build_sampler(cfg, full, tokenizer, prompt_format)
    stale_sampler = None
    if stale_weights is not None:
        with ExitStack() as on_failure:  # a second engine that fails to start takes the first one down too
            on_failure.callback(sampler.close)
            stale_sampler = build_sampler(cfg, stale_weights, tokenizer, prompt_format)
            on_failure.pop_all()
    rng_lock = threading.Lock()
    if stale_sampler is not None:  # evals and pipelined batches both seed the global torch RNG: one at a time
        sampler = LockedSampler(sampler, rng_lock, lock_sync=cfg.sampler.backend == "vllm")
    reference = reference_policy(learner) if cfg.algorithm.kl_coef > 0 else None  # no KL, no copy (LoRA: none at all)
    with ExitStack() as stack:
        verifier = stack.enter_context(
            AnswerVerifier(
                timeout_s=cfg.reward.timeout_s,
                workers=cfg.reward.workers,
                scorer=ANSWER_SCORERS[cfg.task.answer_format],
            )
        )
        stack.enter_context(closing(sampler))
        stack.enter_context(closing(learner))
        # Closed first: a scoring still running (the run failed mid-step) ends before its verifier stops.
        scoring = (
            stack.enter_context(ThreadPoolExecutor(1, thread_name_prefix="workbench-scoring"))
            if overlaps_scoring(cfg)
            else None
        )
        # on the initial policy, before any update: curation measures the model RL starts from
        prompts, data_metrics, data_record = prepare_prompts(cfg, task, sampler, verifier, rng, directory)
        pipeline = None
        if stale_sampler is not None:
            assert stale_weights is not None
            pipeline = stack.enter_context(open_pipeline(cfg, stale_sampler, stale_weights, learner, rng_lock))
        yield RunParts(
            pipeline=pipeline,
            task=task,
            eval_set=eval_set,
            sampler=sampler,
            verifier=verifier,
            learner=learner,
            reference=reference,
            shaping=cfg.reward.specs(),
            monitor=monitor,
            rng=rng,
            prompts=prompts,
            start_metrics=stage_metrics(directory) | data_metrics,
            data_record=data_record,
            generator=generator,
            watch=Stopwatch(),
            scoring=scoring,
            prompt_format=prompt_format,
            control=cfg.reward.control_spec(),
            reflection_words=reflection_words(cfg),
        )


@contextmanager
def open_pipeline(
    cfg: RunConfig, sampler: Sampler, weights: torch.nn.Module, learner: Learner, lock: threading.Lock
) -> Iterator[StalePipeline]:
    """The sampler thread of ``rollout.staleness >= 1`` (``sampler`` built over ``weights``), holding the initial
    policy as version 0. Torch's (process-wide) thread count is halved while both sides run, and restored when
    the pipeline closes."""
    threads = torch.get_num_threads()  # the run's, from the idle CPUs (workbench/execution/threads.py)
    torch.set_num_threads(split_threads(threads))
    pipeline = StalePipeline(
        sampler,
        weights,
        staleness=cfg.rollout.staleness,
        steps=cfg.rollout.steps,
        group_size=cfg.rollout.group_size,
        temperature=cfg.sampler.temperature,
        run_seed=cfg.seed,
        lock=lock,
        threads=split_threads(threads),
    )
    try:
        with learner.gathered_model() as full:
            pipeline.publish(0, full)
        yield pipeline
    finally:
        pipeline.close()
        sampler.close()
        torch.set_num_threads(threads)


def reflection_words(cfg: RunConfig) -> tuple[str, ...]:
    """The keywords of the run's reflection rates: ``rollout.reflection_words``, unset oat-zero's 11; none (not
    logged) on the built-in tiny model, whose character-level arithmetic completions hold no words."""
    if cfg.model.builtin is not None:
        return ()
    words = cfg.rollout.reflection_words
    return OAT_ZERO_KEYWORDS if words is None else tuple(words)


def rl_step(cfg: RunConfig, step: int, parts: RunParts) -> dict[str, float]:
    """One RL step: sample, score, estimate advantages, update, sync. Returns its metrics."""
    watch = parts.watch
    watch.lap()  # this step's sections only
    with watch("step"):
        sampled, scored, kept, metrics = collect_batch(cfg, step, parts)
        batch = train_batch(cfg, step, scored, parts)
        with watch("learn"):
            record = look_before_update(cfg, step, batch.rollouts, parts, metrics.get(OFFPOLICY_STALENESS_MAX))
            metrics |= parts.learner.update(
                batch, cfg.algorithm, cfg.sampler.temperature, parts.generator, section=watch, observe_old_logp=record
            )
            with parts.learner.gathered_model() as full:  # ZeRO-3: the sampler needs whole weights
                if parts.pipeline is not None:  # version step + 1: before the sync, whose vLLM probe forward
                    parts.pipeline.publish(step + 1, full)  # leaves ZeRO-3's weights partitioned again
                parts.sampler.sync_weights(full)
                if parts.pipeline is not None:  # the request that samples with it
                    ask_ahead(cfg, step + 1, parts)
        sampled = sampled.ready()  # scored by now: the update needed the rewards
        metrics |= rollout_metrics(sampled)  # over everything sampled, not only what was kept
        if parts.rollout_log is not None:  # every completion, with the update's advantages
            parts.rollout_log.record_train(step, sampled, batch.ready().advantages.cpu(), kept)
        if parts.reflection_words:  # ≤ 1% of a step (docs/metrics.md)
            metrics |= reflection_metrics(sampled.rollouts.texts, sampled.correct.tolist(), parts.reflection_words)
        metrics |= parts.prompts.step_metrics(step, sampled.rollouts.problems)
    return metrics | perf_metrics(watch.lap(), sampled, batch.ready(), cfg.algorithm.epochs)


def look_before_update(
    cfg: RunConfig, step: int, rollouts, parts: RunParts, staleness: float | None = None
) -> OldLogprobObserver | None:
    """At step 0 the gate: the learner re-scores the batch (one no-grad forward, once per run) and the run
    stops if the sampler disagrees beyond the precisions' bound. Every ``health.mismatch_record_every`` steps,
    the mismatch record (histogram, worst tokens): returned as the update's observer of its "old" logprobs,
    which it computes anyway, so the record costs no forward. Greedy sampling has no logprobs to compare.
    With ``rollout.staleness`` the record also says how many versions behind the batch's sampler was."""
    every = cfg.health.mismatch_record_every
    gate = step == 0 and cfg.health.step0_gate
    record = every > 0 and step % every == 0
    if cfg.sampler.temperature == 0 or not (gate or record):
        return None
    if gate:
        check_step0(
            parts.learner,
            rollouts,
            cfg.sampler.temperature,
            sampler=cfg.sampler.backend,
            sampler_dtype=cfg.sampler.dtype,
            learner_dtype=cfg.learner.dtype,
        )
    if not record:
        return None

    def observe(old_logp: torch.Tensor) -> None:
        lag = {} if staleness is None else {"staleness": int(staleness)}  # versions behind: part of the mismatch
        parts.mismatch_records.append(
            {"step": step}
            | lag
            | mismatch_record(
                old_logp.detach().cpu(), rollouts.sampler_logp.cpu(), rollouts.mask.cpu(), rollouts.completion_ids.cpu()
            )
        )

    return observe


def train_batch(
    cfg: RunConfig, step: int, scored: ScoredRollouts | PendingScores, parts: RunParts
) -> TrainBatch | PendingBatch:
    """The update's input: the kept rollouts on the learner's device, their advantages (KL in the reward
    when asked), the token filters' loss mask and the reference logprobs. While ``scored`` is still being
    scored, a ``PendingBatch``: everything but the advantages now, those when the update asks."""
    algo, temperature, learner = cfg.algorithm, cfg.sampler.temperature, parts.learner
    rollouts = scored.rollouts.to(learner.device)
    loss_mask = rollouts.mask
    for name in algo.token_filters:
        loss_mask = TOKEN_FILTERS.get(name)(loss_mask, rollouts.truncated)
    ref_logp = None if parts.reference is None else parts.reference.logprobs(rollouts, temperature)  # [B, T]
    seq_kl = None
    if ref_logp is not None and algo.kl_in == "reward":  # KL as a per-sequence reward penalty
        with torch.no_grad():
            logp, _ = learner.logprobs(rollouts, slice(None), temperature, with_entropy=False)
        seq_kl = (kl_penalty(logp, ref_logp, algo.kl_estimator) * rollouts.mask).sum(-1)  # [B]

    def complete() -> TrainBatch:
        rewards = scored.ready().rewards.to(learner.device)  # [B]; waits if the scoring is still running
        if seq_kl is not None:
            rewards = rewards - algo.kl_coef * seq_kl
        with parts.watch("algorithm"):
            advantages = compute_advantages(
                algo.estimator, rewards, rollouts.group_ids, mask=rollouts.mask, **algo.estimator_params
            )  # [B]
        return TrainBatch(step, rollouts, advantages, loss_mask, ref_logp)

    return (
        complete()
        if isinstance(scored, ScoredRollouts)
        else PendingBatch(step, rollouts, loss_mask, ref_logp, complete)
    )


def perf_metrics(
    seconds: dict[str, float], sampled: ScoredRollouts, batch: TrainBatch, epochs: int
) -> dict[str, float]:
    """The step's ``perf/*`` metrics from its stopwatch sections (every sampling and scoring round)."""
    generated = float(sampled.rollouts.lengths.sum())
    learned = float(batch.rollouts.attention_mask.sum()) * epochs
    return {
        PERF_ALGORITHM_S: seconds["algorithm"],
        PERF_STEP_S: seconds["step"],
        PERF_SAMPLE_S: seconds["sample"],
        PERF_SCORE_S: seconds["score"],
        PERF_LEARN_S: seconds["learn"],
        PERF_SAMPLE_TOKENS_PER_S: generated / max(seconds["sample"], 1e-9),
        PERF_LEARN_TOKENS_PER_S: learned / max(seconds["learn"], 1e-9),
        PERF_SAMPLE_TOKENS: generated,
    }


def health_metrics(step: int, metrics: dict[str, float], parts: RunParts) -> dict[str, float]:
    """The health rules' verdict on this step's metrics, and the time they took (``perf/health_s``)."""
    parts.watch.lap()
    with parts.watch("health"):
        verdict = parts.monitor.observe(step, metrics).as_metrics()
    return verdict | {PERF_HEALTH_S: parts.watch.lap()["health"]}


def timed_scoring(rollouts, parts: RunParts, seed: int) -> ScoredRollouts:
    """The rollouts' rewards, timed into ``perf/score_s`` (on the scoring thread when it overlaps); ``seed``:
    the batch's sampling seed, which a drawing reward control (``reward.control: random``) uses."""
    with parts.watch("score"):
        return score_rollouts(parts.verifier, rollouts, parts.shaping, control=parts.control, seed=seed)


def collect_batch(
    cfg: RunConfig, step: int, parts: RunParts
) -> tuple[ScoredRollouts | PendingScores, ScoredRollouts | PendingScores, torch.Tensor | None, dict[str, float]]:
    """Sample and score ``prompts_per_step`` groups; with a batch filter, refill dropped groups.

    Returns (everything sampled, the training batch, the batch's rows as indices into everything sampled
    (None: the same rows), batch metrics). Without a filter both are the same single round, still being
    scored in the background when the run overlaps scoring.
    With one, rounds continue until the batch is full or ``max_sampling_rounds`` is reached; a batch
    left with no group keeps the last round whole (its advantages are all zero, so the update is a
    no-op rather than a crash).
    """
    algo, roll = cfg.algorithm, cfg.rollout
    if parts.pipeline is not None:
        return pipelined_batch(cfg, step, parts)
    keep_group = None if algo.batch_filter is None else BATCH_FILTERS.get(algo.batch_filter)
    rounds, kept, groups_kept = [], [], 0
    kept_rows, offset = [], 0
    for round_ in range(algo.max_sampling_rounds if keep_group else 1):
        problems = parts.prompts.draw(step, roll.prompts_per_step)
        seed = pipeline_seed(cfg.seed, step) + round_
        with parts.watch("sample"):
            rollouts = parts.sampler.generate(problems, roll.group_size, temperature=cfg.sampler.temperature, seed=seed)
        if parts.scoring is not None:  # no filter: nothing here needs the rewards
            pending = PendingScores(rollouts, parts.scoring.submit(timed_scoring, rollouts, parts, seed))
            return pending, pending, None, {}
        scored = timed_scoring(rollouts, parts, seed)
        rounds.append(scored)
        if keep_group is None:
            return scored, scored, None, {}
        keep = keep_group(
            filter_input(algo.filter_on, scored.rewards, scored.correct), rollouts.group_ids
        )  # [B] bool, whole groups
        kept.append(select(scored, keep))
        kept_rows.append(keep.nonzero().squeeze(-1) + offset)  # [K] rows of everything sampled
        offset += len(keep)
        groups_kept += int(keep.sum()) // roll.group_size
        if groups_kept >= roll.prompts_per_step:
            break
    sampled = concat(rounds)
    batch = concat([k for k in kept if len(k.rewards)]) if groups_kept else rounds[-1]
    rows = torch.cat(kept_rows) if groups_kept else torch.arange(offset - len(rounds[-1].rewards), offset)
    limit = roll.prompts_per_step * roll.group_size
    if len(batch.rewards) > limit:  # the last round overshot: keep whole groups up to the batch size
        batch = select(batch, torch.arange(len(batch.rewards)) < limit)
        rows = rows[:limit]
    n_sampled = len(rounds) * roll.prompts_per_step
    metrics = {BATCH_FILTERED_FRAC: 1 - groups_kept / n_sampled, BATCH_SAMPLING_ROUNDS: float(len(rounds))}
    return sampled, batch, rows, metrics


def ask_ahead(cfg: RunConfig, step: int, parts: RunParts) -> None:
    """Request the pipelined batches up to step ``step + k`` (those whose version exists by step ``step``);
    their prompts are drawn here, on the main thread, in step order."""
    assert parts.pipeline is not None
    draw = parts.prompts.draw
    parts.pipeline.ask(
        step + cfg.rollout.staleness, lambda s: draw(s, cfg.rollout.prompts_per_step), lambda: prompt_state(parts)
    )


def prompt_state(parts: RunParts) -> tuple[Any, dict[str, Any]]:
    """All that decides the next prompts drawn: the prompt RNG's state and the prompt order's pass in progress."""
    return parts.rng.getstate(), parts.prompts.queue_state()


def pipelined_batch(
    cfg: RunConfig, step: int, parts: RunParts
) -> tuple[ScoredRollouts | PendingScores, ScoredRollouts | PendingScores, None, dict[str, float]]:
    """Step ``step``'s batch from the sampler thread (sampled by version ``max(0, step - k)``), scored here as
    ``collect_batch`` scores a batch without a filter; with the ``offpolicy/*`` and wait metrics."""
    assert parts.pipeline is not None
    ask_ahead(cfg, step, parts)  # the first step, or the first after a resume
    sampled, learner_wait, sampler_wait = parts.pipeline.take(step)
    parts.watch.add("sample", sampled.sample_s)  # timed on the sampler thread
    lag = float(step - sampled.version)
    metrics = {
        OFFPOLICY_STALENESS_MEAN: lag,
        OFFPOLICY_STALENESS_MAX: lag,
        PERF_LEARNER_WAIT_S: learner_wait,
        PERF_SAMPLER_WAIT_S: sampler_wait,
    }
    seed = pipeline_seed(cfg.seed, step)
    if parts.scoring is not None:
        pending = PendingScores(sampled.rollouts, parts.scoring.submit(timed_scoring, sampled.rollouts, parts, seed))
        return pending, pending, None, metrics
    scored = timed_scoring(sampled.rollouts, parts, seed)
    return scored, scored, None, metrics
