"""``engine: trl``: one run as a real ``trl.GRPOTrainer`` run, in place of the workbench's RL loop.

Same model directory (the built-in tiny model is built and saved with ``save_pretrained`` first), the task's
training problems rendered by the workbench's prompt format as the train dataset, the workbench's verifier as
the reward function, the ``GRPOConfig`` that :mod:`workbench.engine.trl_mapping` builds from the run's settings,
and :class:`~workbench.execution.trl_callback.WorkbenchCallback` for the canonical metrics, the health rules and
the workbench's eval on the same eval problems (so ``compare`` reads ``eval/accuracy`` as for a native run).
:func:`workbench.execution.run.execute_run` opens and closes the MLflow run either way.

TRL is imported here only, when a run needs it (``make trl`` / the ``trl`` extra).
"""

from __future__ import annotations

import logging
import math
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from workbench.config import RunConfig
from workbench.engine.trl_mapping import grpo_config_kwargs, optimizer_steps_per_rl_step
from workbench.execution.trl_callback import ENGINE_PREFIX, WorkbenchCallback, unavailable_metrics
from workbench.health import HealthMonitor
from workbench.metrics import names
from workbench.metrics.catalogue import unlogged_by_config
from workbench.models import model_dir
from workbench.models.directory import NO_REMOTE_CODE, load_tokenizer
from workbench.reward import AnswerVerifier
from workbench.reward._worker import ANSWER_SCORERS
from workbench.rollout.prompts import resolve_prompt_format
from workbench.tasks import Problem, build_task
from workbench.tracking.rollouts import RolloutRecorder
from workbench.train.checkpoint import RunCheckpoints
from workbench.train.evaluate import ProblemResults, evaluate
from workbench.train.loop import StopReason, TrainResult, eval_recorder
from workbench.train.step import reflection_words

REWARD_NAME = "workbench_verifier"  # TRL logs rewards/<this>/mean and /std (kept as source/...)
log = logging.getLogger("workbench.execution")


def trl_unlogged(cfg: RunConfig) -> dict[str, str]:
    """Metric -> why this ``engine: trl`` run never logs it: the config's own reasons and TRL's."""
    return unlogged_by_config(cfg.flat()) | unavailable_metrics(with_eval=True, beta=cfg.algorithm.kl_coef)


@dataclass
class SampledBatch:
    """One generation batch as the reward function saw it, in TRL's order (a prompt's completions in a row)."""

    step: int  # the workbench step: TRL's optimizer steps so far // optimizer steps per workbench step
    problems: list[Problem]
    texts: list[str]
    lengths: list[int]  # completion tokens, EOS included (TRL's completion_ids)
    truncated: list[bool]  # no EOS/pad at the end: TRL's is_truncated
    correct: list[bool]  # the verifier's judgement
    rewards: list[float]  # what the reward function returned (1.0 for a correct completion, else 0.0)


def verifier_reward(
    verifier: AnswerVerifier,
    group_size: int,
    on_batch: Callable[[SampledBatch], None] | None = None,
    *,
    per_step: int = 1,
    stop_ids: frozenset[int] = frozenset(),
):
    """The workbench's verifier as a TRL reward function: 1 for a correct completion, else 0 (the native
    correctness term), and the batch's accuracy, correct/incorrect lengths and share of verifications that ran
    out of time (scored 0) through TRL's ``log_metric``.
    ``on_batch`` receives every scored batch (the run's rollout log); ``stop_ids``: the EOS and pad ids that
    end a completion that was not truncated; ``per_step``: TRL optimizer steps per workbench step."""

    def workbench_verifier(
        prompts, completions, completion_ids, answer, log_metric=None, question=None, trainer_state=None, **_: Any
    ) -> list[float]:
        results = verifier.score(list(completions), list(answer))
        correct = [float(r.correct) for r in results]
        if on_batch is not None and question is not None and trainer_state is not None:
            on_batch(
                SampledBatch(
                    step=trainer_state.global_step // per_step,
                    problems=[Problem(prompt=q, answer=a) for q, a in zip(question, answer, strict=True)],
                    texts=list(completions),
                    lengths=[len(ids) for ids in completion_ids],
                    truncated=[not ids or ids[-1] not in stop_ids for ids in completion_ids],
                    correct=[bool(r.correct) for r in results],
                    rewards=correct,
                )
            )
        if log_metric is not None:
            lengths = [len(ids) for ids in completion_ids]
            right = [n for n, c in zip(lengths, correct, strict=True) if c]
            wrong = [n for n, c in zip(lengths, correct, strict=True) if not c]
            groups = [
                correct[i : i + group_size] for i in range(0, len(correct), group_size)
            ]  # TRL repeats a prompt G times in a row
            log_metric(f"{ENGINE_PREFIX}accuracy/train", sum(correct) / len(correct))
            log_metric(f"{ENGINE_PREFIX}length/correct_mean", sum(right) / len(right) if right else math.nan)
            log_metric(f"{ENGINE_PREFIX}length/incorrect_mean", sum(wrong) / len(wrong) if wrong else math.nan)
            log_metric(f"{ENGINE_PREFIX}batch/all_correct_frac", sum(all(g) for g in groups) / len(groups))
            log_metric(f"{ENGINE_PREFIX}batch/all_wrong_frac", sum(not any(g) for g in groups) / len(groups))
            log_metric(
                f"{ENGINE_PREFIX}{names.REWARD_VERIFY_TIMEOUT_FRAC}", sum(r.timed_out for r in results) / len(results)
            )
        return correct

    workbench_verifier.__name__ = REWARD_NAME
    return workbench_verifier


def train_trl(
    cfg: RunConfig,
    sink,
    monitor: HealthMonitor,
    on_step=None,
    checkpoints: RunCheckpoints | None = None,
    on_eval=None,
    work_dir: Path | None = None,
    rollout_log: Callable[[Any], RolloutRecorder] | None = None,
) -> TrainResult:
    """Train ``cfg`` with TRL's ``GRPOTrainer``, logging every step to ``sink`` (as :func:`workbench.train.loop.train`).

    ``rollout_log(parts)``: as the native loop's, the recorder of every completion (``rollouts/``): the eval's
    from the workbench's eval, the train steps' as the reward function saw them with the advantages TRL computed.

    ``checkpoints``: with ``learner.checkpoint_every``, TRL saves its own checkpoints (weights, optimizer, RNG,
    trainer state) under the run key's checkpoint directory and an executed-again run resumes from the latest."""
    import torch
    from datasets import Dataset

    torch.manual_seed(cfg.seed)
    task = build_task(cfg.task)
    eval_set = task.eval_problems()[: cfg.rollout.eval_size]
    directory = model_dir(cfg.model, cfg.task, progress=False, prime=cfg.data.prime)
    tokenizer = load_tokenizer(directory, padding_side="left")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    prompt_format = resolve_prompt_format(cfg.model, tokenizer, cfg.model.path)
    roll = cfg.rollout
    problems = task.sample_train(roll.prompts_per_step * roll.steps, random.Random(f"train-{cfg.seed}"))
    dataset = Dataset.from_dict(  # question: the problem as posed (a stored completion's prompt id is its digest)
        {
            "prompt": [prompt_format.render(p.prompt) for p in problems],
            "answer": [p.answer for p in problems],
            "question": [p.prompt for p in problems],
        }
    )
    out = trl_output_dir(checkpoints, work_dir)
    recorder = None if rollout_log is None else rollout_log(SimpleNamespace(prompt_format=prompt_format))
    try:
        return _train(
            cfg,
            sink,
            monitor,
            on_step,
            checkpoints,
            on_eval,
            out,
            directory,
            tokenizer,
            prompt_format,
            dataset,
            eval_set,
            recorder,
        )
    finally:
        if checkpoints is None and work_dir is None:  # a scratch directory: TRL's files are of no further use
            shutil.rmtree(out, ignore_errors=True)


def _train(
    cfg: RunConfig,
    sink,
    monitor: HealthMonitor,
    on_step,
    checkpoints: RunCheckpoints | None,
    on_eval,
    out: Path,
    directory: Path,
    tokenizer,
    prompt_format,
    dataset,
    eval_set,
    recorder: RolloutRecorder | None,
) -> TrainResult:
    import torch
    from transformers import AutoModelForCausalLM, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    roll = cfg.rollout
    args = GRPOConfig(output_dir=str(out), run_name=f"seed={cfg.seed}", **grpo_config_kwargs(cfg))
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, **NO_REMOTE_CODE)
    result = TrainResult(steps_done=0)
    with AnswerVerifier(
        timeout_s=cfg.reward.timeout_s, workers=cfg.reward.workers, scorer=ANSWER_SCORERS[cfg.task.answer_format]
    ) as verifier:
        sampler = None

        def run_eval(step: int) -> dict[str, float]:
            nonlocal sampler
            from workbench.rollout.hf import HFSampler  # deferred: built at the first eval only

            if sampler is None:  # the training model itself (float32 both): the eval sees its current weights
                sampler = HFSampler(model, tokenizer, cfg.sampler, prompt_format)
            was_training = model.training
            model.eval()
            try:
                metrics, samples, rows = evaluate(
                    sampler,
                    verifier,
                    eval_set,
                    roll,
                    seed=cfg.seed,
                    step=step,
                    reflection_words=reflection_words(cfg),
                    on_scored=None if recorder is None else eval_recorder(recorder, step),
                )
            finally:
                model.train(was_training)
            result.eval_history.append((step, metrics[names.EVAL_ACCURACY]))
            result.samples += samples
            result.problems.extend(rows)
            if on_eval is not None:
                on_eval(step, rows)
            return metrics

        per_step = optimizer_steps_per_rl_step(cfg)
        sampled: list[SampledBatch] = []
        trainer: Any = None

        def step_done(step: int, metrics: dict[str, float]):
            if recorder is not None:  # the step's completions, then the chunk rule as the native loop's
                while sampled and sampled[0].step <= step:
                    record_train(recorder, sampled.pop(0), trainer, roll.group_size)
                recorder.end_step(step)
            return None if on_step is None else on_step(step, metrics)

        callback = WorkbenchCallback.inside_run(
            sink,
            monitor,
            per_step=per_step,
            unavailable=trl_unlogged(cfg),
            evaluate=run_eval,
            eval_every=roll.eval_every,
            on_step=step_done,
        )
        stop_ids = frozenset(i for i in (tokenizer.eos_token_id, tokenizer.pad_token_id) if i is not None)
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[
                verifier_reward(verifier, roll.group_size, sampled.append, per_step=per_step, stop_ids=stop_ids)
            ],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[callback],
        )
        trainer.remove_callback(PrinterCallback)  # TRL's stdout print of every log: the run's progress bar says it

        def on_checkpoint(path: str) -> None:
            if recorder is not None:  # a resume replays the rows of the steps before it from this run's chunks
                recorder.flush()
            save_record(Path(path), callback, result)

        callback.on_checkpoint = on_checkpoint
        resume = latest_checkpoint(out) if checkpoints is not None else None
        if resume is not None:
            replay(callback, resume, monitor, sink, result)
        trainer.train(resume_from_checkpoint=None if resume is None else str(resume))
    if recorder is not None:
        result.rollouts, result.latest_completions = recorder.close(), recorder.latest_table()
    result.steps_done = callback.steps_done
    result.stop = StopReason(callback.stop_reason) if callback.stop_reason else None
    for _, metrics in callback.history:
        result.last_metrics |= metrics
    return result


def record_train(recorder: RolloutRecorder, batch: SampledBatch, trainer, group_size: int) -> None:
    """One step's completions into the rollout log, with TRL's advantages: the trainer keeps the last generation
    batch's rewards and advantages (``GRPOTrainer._logs``, TRL 1.16, read-only here); they pair with ``batch``
    when its rewards are the batch's, else the advantages are stored as unknown (NaN) and the log says why."""
    n = len(batch.texts)
    logs = getattr(trainer, "_logs", None) or {}
    advantages = list(logs.get("advantages", ()))
    logged = list((logs.get("rewards") or {}).get(REWARD_NAME, ()))
    if len(advantages) != n or logged != batch.rewards:
        log.warning("TRL's advantages of step %d could not be paired with its completions: stored as NaN", batch.step)
        advantages = [math.nan] * n
    # mask_truncated_completions zeroes a truncated completion's loss mask: it does not enter the update
    masked = bool(trainer.args.mask_truncated_completions)
    recorder.record_train_rows(
        batch.step,
        batch.problems,
        batch.texts,
        rewards=batch.rewards,
        correct=batch.correct,
        lengths=batch.lengths,
        truncated=batch.truncated,
        advantages=advantages,
        kept=[not (masked and t) for t in batch.truncated],
        group_size=group_size,
    )


def trl_output_dir(checkpoints: RunCheckpoints | None, work_dir: Path | None) -> Path:
    """Where TRL writes: the run key's checkpoint directory when the run checkpoints (so an executed-again run
    finds them), else a scratch directory removed after the run."""
    import tempfile

    if checkpoints is not None:
        path = checkpoints.directory / "trl"
    elif work_dir is not None:
        path = work_dir
    else:
        path = Path(tempfile.mkdtemp(prefix="workbench-trl-"))
    path.mkdir(parents=True, exist_ok=True)
    return path


HISTORY_FILE = "workbench_history.json"  # the workbench's record of the steps a TRL checkpoint holds


def latest_checkpoint(out: Path) -> Path | None:
    """TRL's latest complete ``checkpoint-N`` under ``out``: its trainer state and the workbench's record both
    written (a crash between the two leaves a checkpoint that is not resumed from), or None."""
    found = [
        (int(p.name.split("-")[1]), p)
        for p in out.glob("checkpoint-*")
        if p.name.split("-")[1].isdigit() and (p / "trainer_state.json").is_file() and (p / HISTORY_FILE).is_file()
    ]
    return max(found)[1] if found else None


def resumed_step(checkpoints: RunCheckpoints | None) -> int | None:
    """The first RL step an executed-again ``engine: trl`` run trains (its latest TRL checkpoint's), or None."""
    import json

    if checkpoints is None:
        return None
    latest = latest_checkpoint(checkpoints.directory / "trl")
    return None if latest is None else json.loads((latest / HISTORY_FILE).read_text())["steps_done"]


def save_record(checkpoint: Path, callback: WorkbenchCallback, result: TrainResult) -> None:
    """Next to TRL's checkpoint: the steps logged so far, the eval history and the per-problem rows, written
    atomically (a resume replays them, so each step is logged once in the resumed run)."""
    import json
    import os

    record = {
        "steps_done": callback.steps_done,
        "history": callback.history,
        "eval_history": result.eval_history,
        "samples": result.samples,
        "problems": {k: list(v) for k, v in vars(result.problems).items()},
    }
    tmp = checkpoint / f".{HISTORY_FILE}.tmp"
    tmp.write_text(json.dumps(record))
    os.replace(tmp, checkpoint / HISTORY_FILE)


def replay(callback: WorkbenchCallback, checkpoint: Path, monitor: HealthMonitor, sink, result: TrainResult) -> None:
    """Before a resume: the steps the earlier attempt logged up to the checkpoint, replayed to the health monitor
    and the sink from the record saved next to TRL's checkpoint, so the run's record is whole."""
    import json

    state = json.loads((checkpoint / HISTORY_FILE).read_text())
    history = [(int(step), metrics) for step, metrics in state["history"]]
    for step, metrics in history:
        monitor.observe(step, {k: v for k, v in metrics.items() if k != names.HEALTH_STATUS})
        sink.log_metrics(metrics, step)
    callback.resume_at(history)
    done = callback.steps_done
    # the eval at `done` runs again after the resume: its rows are not kept twice
    result.eval_history = [(int(s), float(a)) for s, a in state["eval_history"] if int(s) < done]
    result.samples = [row for row in state["samples"] if row.get("step", 0) < done]
    result.problems = ProblemResults(**state["problems"]).before(done)
