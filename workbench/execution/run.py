"""Execute one run: validate, open its MLflow run, train, and always close it with a status.

A crash marks the run FAILED with its traceback as ``error.txt``; Ctrl-C marks it KILLED;
a health stop is a normal FINISHED run tagged ``workbench.stopped_early``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass

from workbench.config import RunConfig
from workbench.engine.trl_mapping import grpo_config_kwargs
from workbench.execution.interrupts import raise_if_stop_requested
from workbench.execution.run_progress import RunProgress
from workbench.health import HealthMonitor
from workbench.metrics.catalogue import unlogged_by_config
from workbench.metrics.final import final_eval_value
from workbench.models import inspect_model_dir, token_count_over
from workbench.models.tiny_context import TINY_MAX_POSITIONS
from workbench.models.tokenizer import build_char_tokenizer
from workbench.results.rollouts import earlier_attempt_rollouts
from workbench.rollout.prompts import PromptFormat, resolve_prompt_format
from workbench.study.expand import arm_of_label
from workbench.tasks import build_task
from workbench.tasks.jsonl import read_numbered_problems
from workbench.tasks.priming import WorkedSolutions
from workbench.tracking.artifacts import ADAPTER_ARTIFACT, MISMATCH_ARTIFACT, PROBLEMS_ARTIFACT
from workbench.tracking.redact import redact_config
from workbench.tracking.rollouts import TABLE_ARTIFACT, RolloutRecorder
from workbench.tracking.store import resolve_tracking_uri
from workbench.tracking.writer import (
    OutagePolicy,
    RunTracker,
    StoreWriteFailed,
    TrackingOutage,
    interrupted_inside,
    release_interrupted_statements,
    resend_spills,
    store_write_failure,
)
from workbench.train.checkpoint import RunCheckpoints
from workbench.train.loop import StopReason, train
from workbench.train.rank_env import check_multi_rank

log = logging.getLogger("workbench.execution")


class StopRun(Exception):
    """Raised from an ``on_step`` callback to end a run early on purpose (e.g. Optuna pruning).

    The run is closed FINISHED with ``workbench.stopped_early=true`` and the reason as a tag:
    a deliberate stop is a result, not a crash.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class RunOutcome:
    label: str
    variant: str
    seed: int
    run_key: str
    status: str  # FINISHED | FAILED | KILLED | SKIPPED | REUSED (copied from another study: reused_from)
    run_id: str | None = None
    eval_first: float = math.nan
    eval_last: float = math.nan
    eval_final: float = math.nan  # final eval/accuracy, as compare defines it (workbench.metrics.final)
    health: str = "-"
    steps: int = 0
    error: str = ""
    tracking_lost: bool = False  # MLflow stayed unreachable past tracking.outage_deadline_s
    reused_from: str = ""  # a REUSED run's source, in words: "study NAME (run ID8)"

    @property
    def error_line(self) -> str:
        """The error's first line, whole up to 500 characters: what a run's FAILED line in the terminal
        says (the traceback is the run's ``error.txt``). A one-line error such as the step-0 gate's names
        its cause at the end, so it is not cut at a terminal's width."""
        first = self.error.strip().splitlines()[0] if self.error.strip() else ""
        return first if len(first) <= 500 else first[:499] + "…"


def eval_endpoints(eval_history: Sequence[tuple[int, float]]) -> tuple[float, float, float]:
    """First, last and final ``eval/accuracy`` of a run's ``(step, accuracy)`` evals: final as
    ``compare``'s ``final_eval_accuracy`` (:func:`workbench.metrics.final.final_eval_value`), so
    ``run`` and ``compare`` print the same number for a run. NaN for what is not there."""
    if not eval_history:
        return math.nan, math.nan, math.nan
    steps, values = zip(*eval_history, strict=True)
    return float(values[0]), float(values[-1]), final_eval_value(steps, values)


class PreflightError(ValueError):
    """A schema-valid config that cannot run (missing file, bad data, unavailable device, ...):
    one line naming the setting and the file, raised before any MLflow run is opened."""


def preflight(cfg: RunConfig) -> None:
    """Checks that need the filesystem, the model directory or the data, done before anything
    is written to MLflow. Every failure is a one-line ``PreflightError``."""
    try:
        _preflight(cfg)
    except PreflightError:
        raise
    except (OSError, ValueError, ImportError) as error:  # FileNotFoundError, ModuleNotFoundError, bad data
        raise PreflightError(" ".join(str(error).split())) from None


def _preflight(cfg: RunConfig) -> None:
    check_device(cfg.learner.device)
    check_priming_data(cfg)  # before the model directory: the data file is named by this run's config alone
    tokenizer, positions = _model_context(cfg)
    task = build_task(cfg.task)  # a missing/malformed JSONL file fails here, with its line number
    check_engines(cfg)
    check_compiler(cfg)
    check_multi_rank(cfg.learner)  # several processes (WORLD_SIZE > 1): DeepSpeed ZeRO 0-2 only
    # a chat template that is missing or cannot prompt for generation is refused here, naming the setting
    prompt = resolve_prompt_format(cfg.model, tokenizer, cfg.model.path)
    check_problems_fit(cfg, task, tokenizer, positions, prompt)


def check_priming_data(cfg: RunConfig) -> None:
    """``data.prime.path`` (the SFT stage for ``model.path``) exists and every line has a ``solution``."""
    prime = cfg.data.prime
    if prime is None or prime.path is None:
        return
    try:
        WorkedSolutions(prime.path)
    except (OSError, ValueError) as error:
        raise PreflightError(f"data.prime.path: {' '.join(str(error).split())}") from None


def check_compiler(cfg: RunConfig) -> None:
    """``sampler.compile`` builds C++ (a CPU) or Triton launchers (a GPU) with the machine's C/C++ compiler:
    without one, say so now rather than fail the run at its first decode."""
    compilers = [name for name in (os.environ.get("CXX"), "g++", "clang++") if name]
    if cfg.sampler.compile and not any(shutil.which(name) for name in compilers):
        raise PreflightError(
            "sampler.compile needs a C++ compiler for torch.compile (g++ or clang++, or $CXX) and "
            "none is on PATH: install one (Debian: build-essential) or unset sampler.compile"
        )


def check_device(device: str) -> None:
    """An explicit CUDA device must exist here (``auto`` falls back to the CPU)."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise PreflightError(f"learner.device={device!r}, but torch sees no CUDA device here (use auto or cpu)")
        index = torch.device(device).index
        if index is not None and index >= torch.cuda.device_count():
            raise PreflightError(
                f"learner.device={device!r}, but this machine has {torch.cuda.device_count()} CUDA device(s)"
            )


def _model_context(cfg: RunConfig):
    """(tokenizer, max positions) of the policy, from the model directory or the built-in tiny model."""
    from pathlib import Path

    if cfg.model.path is not None:
        return inspect_model_dir(Path(cfg.model.path).expanduser())

    return build_char_tokenizer(), TINY_MAX_POSITIONS


TRAIN_PROBES = 256  # generated tasks: training prompts sampled to check lengths (their length is bounded by the config)


def check_problems_fit(
    cfg: RunConfig, task, tokenizer, positions: int | None, prompt: PromptFormat | None = None
) -> None:
    """Every prompt (after the template, and the chat template when there is one) plus ``sampler.max_new_tokens``
    fits the model's positions; with the built-in tiny model, every JSONL training line has the ``solution`` its
    cold-start SFT needs."""
    import random
    from pathlib import Path

    prompt = prompt or PromptFormat(template=cfg.model.template_text)
    budget_new = cfg.sampler.max_new_tokens
    if positions is not None and budget_new >= positions:
        raise PreflightError(
            f"sampler.max_new_tokens={budget_new} leaves no room for a prompt: the model has {positions} positions"
        )
    if cfg.task.name == "jsonl":
        files = [cfg.task.path] + ([cfg.task.eval_path] if cfg.task.eval_path else [])
        numbered = [(f"{name}:{line}", p) for name in files for line, p in read_numbered_problems(Path(name))]
        if cfg.model.builtin is not None:
            lacking = [(where, p) for where, p in numbered if p.solution is None and where.startswith(f"{files[0]}:")]
            if lacking:
                raise PreflightError(
                    f"{lacking[0][0]}: no 'solution' (the built-in tiny model warms up by SFT on worked solutions; "
                    f"{len(lacking)} line(s) of task.path lack one): add 'solution' to every line or use model.path"
                )
    else:
        numbered = [("eval problem", p) for p in task.eval_problems()]
        numbered += [("train problem", p) for p in task.sample_train(TRAIN_PROBES, random.Random(0))]
    if positions is None:
        return
    for where, problem in numbered:
        text = prompt.render(problem.prompt)
        over = token_count_over(tokenizer, text, positions - budget_new - 1)  # 1: a BOS the tokenizer may add
        if over is not None:
            raise PreflightError(
                f"{where}: the prompt has {over} tokens; with sampler.max_new_tokens={budget_new} it exceeds the "
                f"model's {positions} positions"
            )
        if cfg.model.builtin is not None and problem.solution is not None:
            over = token_count_over(tokenizer, text + problem.solution, positions - 1)
            if over is not None:
                raise PreflightError(
                    f"{where}: prompt + solution have {over} tokens; the tiny model's "
                    f"cold-start SFT needs them within {positions} positions"
                )


ENGINE_HINT = (
    "install the `gpu` extra on a CUDA machine (pip install 'rl-workbench[gpu]'), or run "
    "`make engines` on a CPU and use .venv-engines (docs/engines.md)"
)


def check_engines(cfg: RunConfig) -> None:
    """A missing vLLM/DeepSpeed is reported now, not after the model is built and warmed up."""
    import importlib.util

    needed = {
        "sampler.backend=vllm": "vllm" if cfg.sampler.backend == "vllm" else None,
        "learner.backend=deepspeed": "deepspeed" if cfg.learner.backend == "deepspeed" else None,
    }
    for setting, module in needed.items():
        if module and importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"{setting} needs {module}, which is not installed: {ENGINE_HINT}")
    if cfg.engine == "trl":
        for module in ("trl", "datasets"):
            if importlib.util.find_spec(module) is None:
                raise ModuleNotFoundError(f"engine=trl needs {module}, which is not installed: {TRL_HINT}")
        grpo_config_kwargs(cfg)  # a setting TRL cannot express (a config built in code, not through a study)


TRL_HINT = "pip install 'rl-workbench[trl]', or run `make trl` and use .venv-trl (docs/trl-engine.md)"


def run_tags(study: str, variant: str, cfg: RunConfig, role: str = "run", label: str | None = None) -> dict[str, str]:
    arm = {} if label is None else {"workbench.arm": arm_of_label(label)}  # variant + grid point
    # a TRL run says so, and which canonical metrics it cannot measure (never logged, never zero)
    engine = (
        {}
        if cfg.engine == "workbench"
        else {"workbench.engine": cfg.engine, "workbench.unavailable_metrics": ",".join(sorted(_unlogged(cfg)))}
    )
    return (
        arm
        | engine
        | {
            "workbench.role": role,
            "workbench.study": study,
            "workbench.variant": variant,
            "workbench.seed": str(cfg.seed),
            "workbench.run_key": cfg.run_key(),
            "workbench.algorithm.preset": cfg.algorithm.preset,
        }
        | ({} if cfg.reward.control is None else {"reward/control": cfg.reward.control})
    )  # a control arm says so


def _unlogged(cfg: RunConfig) -> dict[str, str]:
    """Metric -> why this run never logs it (a rule watching one is not applicable)."""
    if cfg.engine == "trl":
        from workbench.execution.trl_engine import trl_unlogged  # deferred: transformers

        return trl_unlogged(cfg)
    return unlogged_by_config(cfg.flat())


def execute_run(
    cfg: RunConfig,
    *,
    study: str,
    variant: str,
    label: str,
    parent_run_id: str | None = None,
    progress: RunProgress | None = None,
    on_step=None,
    role: str = "run",
    extra_tags: dict[str, str] | None = None,
    on_eval=None,
) -> RunOutcome:
    """Run ``cfg`` as one MLflow run. ``on_step(step, metrics)`` is called after each step and
    may raise ``StopRun`` to end the run early (recorded as a deliberate stop); ``on_eval(step,
    problems)`` gets each eval's per-problem results just before (:func:`workbench.train.loop.train`).
    A stop request whose KeyboardInterrupt Python lost (:mod:`workbench.execution.interrupts`) is
    raised here before the run opens and after every step."""
    raise_if_stop_requested()
    preflight(cfg)
    outcome = RunOutcome(label=label, variant=variant, seed=cfg.seed, run_key=cfg.run_key(), status="RUNNING")
    tracking_uri = resolve_tracking_uri(cfg.tracking.uri)
    # learner.checkpoint_every: an earlier FAILED/KILLED attempt of this run_key left a checkpoint to resume from
    checkpoints = RunCheckpoints.for_run(outcome.run_key, cfg.learner.checkpoint_every, tracking_uri)
    resumed = None if checkpoints is None else checkpoints.latest_step()
    if cfg.engine == "trl":  # TRL's own checkpoints, under the same run key's directory
        from workbench.execution.trl_engine import resumed_step  # deferred: transformers

        resumed = resumed_step(checkpoints)
    resume_tags = {} if resumed is None else {"workbench.resumed_from_step": str(resumed)}  # first step run here
    outage = OutagePolicy(deadline_s=cfg.tracking.outage_deadline_s)
    tracker = RunTracker(
        tracking_uri,
        cfg.tracking.experiment or study,
        label,
        run_tags(study, variant, cfg, role, label) | resume_tags | (extra_tags or {}),
        parent_run_id=parent_run_id,
        outage=outage,
    )
    try:
        resend_spills(tracking_uri, outcome.run_key, outage)  # what an earlier attempt could not send
        outcome.run_id = tracker.start()
    except TrackingOutage as error:  # nothing opened in MLflow: nothing to close or spill
        outcome.status, outcome.error, outcome.tracking_lost = "FAILED", f"TrackingOutage: {error}", True
        return outcome
    monitor = HealthMonitor.from_config(cfg.health, unlogged=_unlogged(cfg))
    bar = progress or RunProgress(enabled=False)
    made: list[RolloutRecorder] = []  # the run's rollout log, once train() has built it

    def step_hook(step: int, metrics: dict[str, float]) -> StopReason | None:
        raise_if_stop_requested()
        bar.on_step(step, metrics)
        try:
            if on_step is not None:
                on_step(step, metrics)
        except StopRun as stop:  # a deliberate stop: the loop ends the run and returns what was done
            return StopReason(stop.reason)
        return None

    try:  # from here on, every exit closes the MLflow run with a status
        tracker.log_params(redact_config(cfg.flat()))  # a tracking.uri's password is never stored
        tracker.log_dict(redact_config(cfg.model_dump(mode="json")), "config.yaml")
        bar.start_run(label, cfg.rollout.steps)
        earlier = None if resumed is None else _earlier_rollouts(tracking_uri, outcome, resumed)
        trainer = train
        if cfg.engine == "trl":  # TRL's GRPOTrainer in place of the RL loop; the same run around it
            from workbench.execution.trl_engine import train_trl as trainer  # deferred: trl
        result = trainer(
            cfg,
            tracker,
            monitor,
            on_step=step_hook,
            checkpoints=checkpoints,
            on_eval=on_eval,
            rollout_log=rollout_recorder(cfg, tracker, made, earlier),
        )
    except BaseException as error:  # noqa: BLE001 - every exit path must close the MLflow run
        _close_rollouts(made, tracker, error)
        return _close_failed(tracker, monitor, bar, outcome, error)
    stop_reason = "" if result.stop is None else result.stop.reason
    try:
        tracker.set_tags(
            monitor.tags()
            | {"workbench.stopped_early": str(bool(stop_reason)).lower(), "workbench.stop_reason": stop_reason}
            | rollouts_tag(result.rollouts)
        )
        tracker.log_text(monitor.report_json(), "health.json")
        tracker.log_table(result.samples, "samples.json")
        tracker.log_table(result.latest_completions, TABLE_ARTIFACT)  # MLflow's run page shows it as a table
        if result.data_record:
            tracker.log_dict(result.data_record, "data.json")
        if result.mismatch_records:
            tracker.log_text(json.dumps(result.mismatch_records), MISMATCH_ARTIFACT)
        if len(result.problems):
            tracker.log_bytes(result.problems.to_csv_gz(), PROBLEMS_ARTIFACT)
        for name, data in result.adapter_files.items():  # LoRA: the adapters, loadable onto the base
            tracker.log_bytes(data, f"{ADAPTER_ARTIFACT}/{name}")
        tracker.finish("FINISHED")
    except BaseException as error:  # noqa: BLE001 - e.g. MLflow lost at the very end: FAILED, resumable
        return _close_failed(tracker, monitor, bar, outcome, error)
    if checkpoints is not None:  # they exist to resume an unfinished run
        checkpoints.clear()
    outcome.status = "FINISHED"
    outcome.health = monitor.run_label
    outcome.steps = result.steps_done
    outcome.eval_first, outcome.eval_last, outcome.eval_final = eval_endpoints(result.eval_history)
    bar.end_run(label, f"{outcome.health}")
    return outcome


def rollout_recorder(cfg: RunConfig, tracker: RunTracker, made: list | None = None, earlier=None):
    """The factory :func:`workbench.train.loop.train` calls for the run's rollout log: every completion
    written to ``tracker``'s run as ``rollouts/`` parquet chunks within ``tracking.rollouts_budget_mb``
    (:mod:`workbench.tracking.rollouts`); None with a zero budget. The recorder is appended to ``made``;
    ``earlier`` (a resumed run: the rows its earlier attempt stored before the resume step) is written first."""
    if cfg.tracking.rollouts_budget_mb <= 0:
        return None
    roll = cfg.rollout
    eval_steps = [s for s in range(roll.steps + 1) if s % roll.eval_every == 0 or s == roll.steps]

    def build(parts) -> RolloutRecorder:
        recorder = RolloutRecorder(
            tracker.log_bytes,
            budget_bytes=int(cfg.tracking.rollouts_budget_mb * 1e6),
            steps=roll.steps,
            eval_steps=eval_steps,
            render=parts.prompt_format.render,
            flush_every=tracker.flush_every,
        )
        if earlier is not None and len(earlier):
            recorder.replay(earlier)
        if made is not None:
            made.append(recorder)
        return recorder

    return build


def _earlier_rollouts(tracking_uri: str, outcome: RunOutcome, resumed: int):
    """The rows of the steps before ``resumed`` that this run's earlier attempt stored; a chunk that cannot be
    read costs the resumed run those rows (its manifest then counts fewer), never the run itself."""
    try:
        return earlier_attempt_rollouts(tracking_uri, outcome.run_id, outcome.run_key, resumed)
    except (ValueError, OSError) as error:
        log.warning("run %s resumes without the earlier attempt's completions: %s", outcome.label, error)
        return None


def _close_rollouts(made: list[RolloutRecorder], tracker: RunTracker, error: BaseException) -> None:
    """A run that failed or was stopped keeps the completions it sampled: its rollout log's last chunk and
    manifest are written, unless MLflow is what failed (then nothing more is tried). Never raises."""
    if not made or tracker.unreachable or isinstance(error, (TrackingOutage, StoreWriteFailed)):
        return
    try:
        tracker.set_tags(rollouts_tag(made[0].close()))
    except Exception as closing:
        log.debug("could not write the rollout log of a failed run", exc_info=closing)


def rollouts_tag(manifest: dict) -> dict[str, str]:
    """``workbench.rollouts``: ``all`` when every completion was kept, else what was (the manifest's counts)."""
    if not manifest:
        return {}
    rows, dropped = sum(manifest["rows"].values()), sum(manifest["dropped"].values())
    return {
        "workbench.rollouts": "all"
        if not dropped
        else f"{rows} of {rows + dropped} completions (tracking.rollouts_budget_mb; rollouts/manifest.json)"
    }


def _close_failed(
    tracker: RunTracker, monitor: HealthMonitor, bar, outcome: RunOutcome, error: BaseException
) -> RunOutcome:
    """End the MLflow run KILLED (Ctrl-C, re-raised) or FAILED. With MLflow unreachable past the
    deadline, the unsent metrics and the status go to the run's spill instead (re-sent on resume)."""
    killed = isinstance(error, KeyboardInterrupt)
    if interrupted_inside(error):
        release_interrupted_statements(error)
    outcome.status = "KILLED" if killed else "FAILED"
    outcome.error = f"{type(error).__name__}: {error}"
    if isinstance(error, StoreWriteFailed):  # the run is marked FAILED with this line already
        pass
    elif isinstance(error, TrackingOutage) or tracker.unreachable:
        outcome.tracking_lost = True
        tracker.spill(outcome.run_key, outcome.status, error)
    else:
        try:
            tracker.set_tags(monitor.tags())
            tracker.finish(outcome.status, error=None if killed else error)
        except TrackingOutage as lost:  # MLflow went away while the run was being closed
            outcome.tracking_lost = True
            tracker.spill(outcome.run_key, outcome.status, lost)
        except StoreWriteFailed as failed:  # metrics could not be written (disk full): say that, on one line
            outcome.error = str(failed)
        except Exception as closing:  # e.g. error.txt on a full disk: the cause, not a traceback
            cause = store_write_failure(closing)
            if cause is None:
                raise
            outcome.error = f"{outcome.error} (and the store could not record it: {cause})"
    bar.end_run(outcome.label, outcome.status, "" if killed else outcome.error_line)
    if killed:
        raise error
    return outcome
