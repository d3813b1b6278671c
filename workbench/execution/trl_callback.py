"""``WorkbenchCallback``: the workbench's canonical metrics, MLflow layout and health rules inside TRL's trainer.

In your own TRL script (docs/trl-engine.md has a runnable one)::

    from workbench.execution.trl_callback import WorkbenchCallback

    trainer = GRPOTrainer(..., args=GRPOConfig(..., logging_steps=1), callbacks=[
        WorkbenchCallback(study="my-study", variant="dapo", seed=0)])
    trainer.train()

Every time TRL logs, its names are converted to the canonical metrics by the TRL importer's adapter (one mapping:
``workbench/importers/trl.py``; what it does not map is kept as ``source/<name>``), the health rules
(:class:`~workbench.health.HealthMonitor`) judge the step, the metrics go to MLflow, and a failing rule sets
``control.should_training_stop``: the run ends FINISHED with ``workbench.stopped_early=true`` and
``workbench.stop_reason=health: ...``, as a native run stopped by its rules. Canonical metrics TRL does not
measure are listed in the tag ``workbench.unavailable_metrics`` and never logged (a rule watching one is "not
applicable", not "ok").

With ``engine: trl`` (:mod:`workbench.execution.trl_engine`) the same callback runs inside a workbench run, whose
MLflow run :func:`workbench.execution.run.execute_run` opens and closes; standalone, the callback opens one run of
the study's layout itself (a parent ``workbench.role=study`` run holding ``study.yaml``, a child run per
trainer) so ``workbench health`` and ``workbench compare STUDY`` read it. Standalone with
``GRPOConfig(log_completions=True)``, the completion files TRL writes go to the run's ``rollouts/`` log, each step
once, as ``workbench import trl`` stores them (:mod:`workbench.execution.trl_completions`); without it, the run's
tag ``workbench.rollouts`` says why it has none.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from transformers import TrainerCallback

from workbench.config import TrackingConfig
from workbench.execution.trl_completions import NO_LOG_COMPLETIONS, CompletionFiles
from workbench.health import HealthConfig, HealthMonitor
from workbench.importers.adapters import ADAPTERS, SOURCE_PREFIX
from workbench.metrics import names
from workbench.metrics.catalogue import BY_NAME
from workbench.metrics.passk import PASS_AT_K_METRICS
from workbench.metrics.reflection import REFLECTION_METRICS
from workbench.tracking.rollouts import TABLE_ARTIFACT, RolloutRecorder

__all__ = ["ENGINE_PREFIX", "WorkbenchCallback", "step_metrics", "unavailable_metrics"]

#: A reward function logs canonical metrics through TRL's ``log_metric`` under this prefix (TRL has no name for
#: them): the callback strips it. ``workbench.execution.trl_engine``'s verifier reward logs these six.
ENGINE_PREFIX = "workbench/"
ENGINE_MEASURED = (
    names.ACCURACY_TRAIN,
    names.LENGTH_CORRECT_MEAN,
    names.LENGTH_INCORRECT_MEAN,
    names.BATCH_ALL_CORRECT_FRAC,
    names.BATCH_ALL_WRONG_FRAC,
    names.REWARD_VERIFY_TIMEOUT_FRAC,
)
EVAL_MEASURED = (
    names.EVAL_ACCURACY,
    names.EVAL_LENGTH_MEAN,
    names.EVAL_N_PROBLEMS,
    names.EVAL_VERIFY_TIMEOUT_FRAC,
    *PASS_AT_K_METRICS,
    names.EVAL_MEAN_AT_N,
    *REFLECTION_METRICS["eval"],
)
UNAVAILABLE_TAG = "workbench.unavailable_metrics"
NOT_MEASURED = "not measured by TRL's GRPOTrainer (engine: trl)"
# TRL's sampling/* metrics exist only with use_vllm and its IS correction: without vLLM TRL samples with the
# training model itself, so there is no sampler/learner mismatch to measure.
NO_MISMATCH = "TRL samples with the training model (no vLLM): no sampler/learner mismatch"


def unavailable_metrics(*, with_eval: bool, beta: float) -> dict[str, str]:
    """Canonical metric -> why a TRL run does not log it. ``with_eval``: an ``engine: trl`` run, whose verifier
    reward logs ``ENGINE_MEASURED`` and whose eval the workbench runs; ``beta``: TRL logs ``kl`` only when non-zero."""
    adapter = ADAPTERS.get("trl")
    measured = {m.canonical for m in adapter.mappings if m.canonical} | {names.HEALTH_STATUS}
    measured |= set(EVAL_MEASURED) | set(ENGINE_MEASURED) if with_eval else set()
    out = {name: NOT_MEASURED for name in BY_NAME if name not in measured}
    out |= {name: NO_MISMATCH for name in BY_NAME if name.startswith("mismatch/")}
    if beta == 0:
        out[names.KL_REF] = "beta = 0 (no reference model)"
    return out


def trl_metrics(logs: Mapping[str, Any]) -> dict[str, float]:
    """One TRL log entry -> canonical names (the importer's adapter; ``workbench/...`` names stripped), every
    number kept; TRL's end-of-training summary (``train_runtime``, ...) is not a step."""
    own = {k[len(ENGINE_PREFIX) :]: float(v) for k, v in logs.items() if k.startswith(ENGINE_PREFIX) and v is not None}
    rest = {
        k: v
        for k, v in logs.items()
        if not k.startswith(ENGINE_PREFIX) and isinstance(v, (int, float, type(None))) and not isinstance(v, bool)
    }
    return ADAPTERS.get("trl").convert_step(rest) | own


# TRL counters that run on across the whole training: a step keeps their last value.
CUMULATIVE = frozenset({SOURCE_PREFIX + "epoch", SOURCE_PREFIX + "num_tokens"})


def step_metrics(logs: list[dict[str, float]]) -> dict[str, float]:
    """A workbench step's metrics from its TRL logs, one per optimizer step (each already canonical), reduced as the
    native loop defines them (workbench/train/update.py): a per-update value (clip fractions, loss, grad norm,
    entropy, KL: TRL measures them on each minibatch) is the mean over the step's updates; ``perf/step_s`` adds the
    updates' times up (the step's wall time); a ``…max`` / ``…min`` is the extreme over them; a cumulative counter
    keeps its last value. A metric of the generation (reward, lengths) is logged by one update only: kept as is.
    A NaN stays a NaN (the ``non_finite`` rule reads it)."""
    values: dict[str, list[float]] = {}
    for log in logs:
        for key, value in log.items():
            values.setdefault(key, []).append(value)
    out: dict[str, float] = {}
    for key, xs in values.items():
        if key == names.PERF_STEP_S:
            out[key] = math.fsum(xs)
        elif key in CUMULATIVE:
            out[key] = xs[-1]
        elif key.endswith(("max", "_min", "/min")):  # (max() and min() would skip a NaN that is not first)
            out[key] = math.nan if any(math.isnan(x) for x in xs) else max(xs) if key.endswith("max") else min(xs)
        else:
            out[key] = math.fsum(xs) / len(xs)
    return out


class WorkbenchCallback(TrainerCallback):
    """The health rules, canonical metrics and the study's MLflow layout for a ``GRPOTrainer`` (module docstring).

    Standalone: ``WorkbenchCallback(study=..., variant=..., seed=...)``; ``health`` a preset name, a dict or a
    :class:`~workbench.health.HealthConfig` (default: the default preset); ``tracking_uri`` as ``workbench``'s
    (``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``). ``evaluate(step) -> metrics`` (optional) runs before
    the update of every ``eval_every``-th step and after the last. ``rollouts_budget_mb`` (default
    ``tracking.rollouts_budget_mb``'s): the size budget of the run's ``rollouts/`` log, kept from TRL's completion
    files when ``GRPOConfig(log_completions=True)``.

    One workbench step is one generation batch: ``steps_per_generation x num_iterations / gradient_accumulation``
    TRL optimizer steps (read from the trainer's arguments); its metrics are those logs reduced by
    :func:`step_metrics` (the mean over the step's updates, as the native loop logs them).
    """

    def __init__(
        self,
        study: str | None = None,
        variant: str | None = None,
        seed: int | None = None,
        *,
        tracking_uri: str | None = None,
        health: HealthConfig | Mapping[str, Any] | str | None = None,
        evaluate: Callable[[int], dict[str, float]] | None = None,
        eval_every: int | None = None,
        rollouts_budget_mb: float | None = None,
    ) -> None:
        self.study, self.variant, self.seed = study, variant, seed
        self.rollouts_budget_mb = rollouts_budget_mb
        self.tracking_uri, self.health = tracking_uri, health
        self.evaluate, self.eval_every = evaluate, eval_every
        self.sink: Any = None  # log_metrics(metrics, step): a RunTracker
        self.monitor: HealthMonitor | None = None
        self.on_step: Callable[[int, dict[str, float]], Any] | None = None  # a StopReason (or None) ends the run
        self.owns_run = True
        self.unavailable: dict[str, str] = {}
        self.per_step = 1  # TRL optimizer steps per workbench step
        self.history: list[tuple[int, dict[str, float]]] = []
        self.stop_reason = ""
        self.steps_done = 0
        self._pending: dict[str, float] = {}  # the step's own metrics (eval), beside its TRL logs
        self._step_logs: list[dict[str, float]] = []  # the step's TRL logs so far, one per optimizer step
        self._last_step = -1
        self.on_checkpoint: Callable[[str], None] | None = None  # engine: trl saves its record next to TRL's
        self.completions: CompletionFiles | None = None  # standalone with log_completions: TRL's files -> rollouts/
        self.rollouts_tag = ""  # standalone: the run's workbench.rollouts tag

    @classmethod
    def inside_run(
        cls,
        sink,
        monitor: HealthMonitor,
        *,
        per_step: int,
        unavailable: dict[str, str],
        evaluate: Callable[[int], dict[str, float]] | None,
        eval_every: int,
        on_step: Callable[[int, dict[str, float]], Any] | None = None,
    ) -> WorkbenchCallback:
        """The callback of an ``engine: trl`` run: the run's tracker and monitor, its eval and ``on_step`` hook."""
        callback = cls(evaluate=evaluate, eval_every=eval_every)
        callback.sink, callback.monitor, callback.on_step, callback.owns_run = sink, monitor, on_step, False
        callback.per_step, callback.unavailable = per_step, unavailable
        return callback

    # -- TrainerCallback events ---------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        if self.owns_run:
            self.per_step = max(
                1, (args.steps_per_generation or 1) * args.num_iterations // max(1, args.gradient_accumulation_steps)
            )
            self._open_run(args, kwargs.get("model"))
            self._open_rollouts(args, state)
        return control

    def on_step_begin(self, args, state, control, **kwargs):
        global_step = state.global_step
        if global_step % self.per_step == 0:  # the first optimizer step of a workbench step: eval before its update
            self._eval_before(global_step // self.per_step)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.completions is not None:  # TRL has written the files of the logs before this one
            self.completions.collect()
            if logs and any(k.startswith("eval_") for k in logs):
                self.completions.eval_logged(state.global_step)
            elif logs and "train_runtime" not in logs and state.global_step > 0:
                self.completions.train_logged(state.global_step, logs)
        if not logs or "train_runtime" in logs or state.global_step == 0:
            return control
        step = (state.global_step - 1) // self.per_step
        self._step_logs.append(trl_metrics(logs))
        if state.global_step % self.per_step == 0:
            self._finish_step(step, control)
        return control

    def on_save(self, args, state, control, **kwargs):
        if self.on_checkpoint is not None:  # TRL has just written output_dir/checkpoint-<global_step>
            self.on_checkpoint(f"{args.output_dir}/checkpoint-{state.global_step}")
        return control

    def resume_at(self, history: list[tuple[int, dict[str, float]]]) -> None:
        """Continue after the steps of ``history`` (replayed to the monitor and the sink by the caller)."""
        self.history = list(history)
        if history:
            self._last_step = history[-1][0]
            self.steps_done = self._last_step + 1

    def on_train_end(self, args, state, control, **kwargs):
        if not self.stop_reason and self._last_step >= 0:  # as the native loop: the last step is an eval only
            final = self._last_step + 1
            if self.evaluate is not None:
                self._pending |= self.evaluate(final)
                self._finish_step(final, control, update=False)
        if self.owns_run:
            self._close_run()
        return control

    # -- one step ---------------------------------------------------------------------------------------------
    def _eval_before(self, step: int) -> None:
        if self.evaluate is not None and self.eval_every and step % self.eval_every == 0:
            self._pending |= self.evaluate(step)

    def _finish_step(self, step: int, control, update: bool = True) -> None:
        assert self.monitor is not None
        metrics = step_metrics(self._step_logs) | self._pending
        self._step_logs, self._pending = [], {}
        metrics |= self.monitor.observe(step, metrics).as_metrics()
        self.sink.log_metrics(metrics, step)
        self.history.append((step, metrics))
        self._last_step = step
        if update:
            self.steps_done = step + 1
        stop = None if self.on_step is None else self.on_step(step, metrics)
        if stop is not None:
            self.stop_reason = stop.reason
        elif self.monitor.should_stop:
            self.stop_reason = f"health: {self.monitor.reasons}"
        if self.stop_reason:
            control.should_training_stop = True

    # -- standalone: the run this callback opens and closes -----------------------------------------------------
    def _open_run(self, args, model) -> None:
        from workbench.tracking.store import resolve_tracking_uri  # deferred: mlflow, for standalone use only
        from workbench.tracking.writer import RunTracker  # deferred: mlflow, for standalone use only

        if not (self.study and self.variant is not None and self.seed is not None):
            raise ValueError("WorkbenchCallback needs study=, variant= and seed= (or runs inside engine: trl)")
        uri = resolve_tracking_uri(self.tracking_uri)
        params = {k: v for k, v in args.to_dict().items() if k not in RUN_LOCAL_ARGS}
        name = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
        identity = json.dumps({"trl": params, "model": name, "seed": self.seed}, sort_keys=True, default=str)
        run_key = hashlib.sha256(identity.encode()).hexdigest()[:16]
        self.unavailable = unavailable_metrics(with_eval=self.evaluate is not None, beta=float(args.beta))
        self.monitor = HealthMonitor.from_config(self.health, unlogged=self.unavailable)
        parent = _study_parent(uri, self.study, self.variant)
        tags = {
            "workbench.role": "run",
            "workbench.study": self.study,
            "workbench.variant": self.variant,
            "workbench.arm": self.variant,
            "workbench.seed": str(self.seed),
            "workbench.run_key": run_key,
            "workbench.engine": "trl",
            UNAVAILABLE_TAG: ",".join(sorted(self.unavailable)),
        }
        self.sink = RunTracker(uri, self.study, f"{self.variant}/seed={self.seed}", tags, parent_run_id=parent)
        self.sink.start()
        self.sink.log_params({f"trl.{k}": v for k, v in params.items()} | {"seed": self.seed, "engine": "trl"})

    def _open_rollouts(self, args, state) -> None:
        """The standalone run's rollout log: TRL's completion files, when it writes them."""
        budget = self.rollouts_budget_mb
        if budget is None:
            budget = TrackingConfig().rollouts_budget_mb
        if not getattr(args, "log_completions", False):
            self.rollouts_tag = NO_LOG_COMPLETIONS
        elif budget <= 0:
            self.rollouts_tag = "none: rollouts_budget_mb=0"
        else:
            recorder = RolloutRecorder(
                self.sink.log_bytes,
                budget_bytes=int(budget * 1e6),
                steps=-(-state.max_steps // self.per_step),
                eval_steps=(),
                render=str,  # not used: TRL's files hold the prompts as it fed them
                flush_every=self.sink.flush_every,
            )
            self.completions = CompletionFiles(recorder, args.output_dir, self.per_step)

    def _close_run(self) -> None:
        assert self.monitor is not None
        if self.completions is not None:
            _, self.rollouts_tag = self.completions.close(self.steps_done)
            self.sink.log_table(self.completions.recorder.latest_table(), TABLE_ARTIFACT)
        self.sink.set_tags(finish_tags(self.monitor, self.stop_reason) | {"workbench.rollouts": self.rollouts_tag})
        self.sink.log_text(self.monitor.report_json(), "health.json")
        self.sink.finish("FINISHED")


# GRPOConfig arguments that say where a run writes, not what it computes: out of the standalone run key
RUN_LOCAL_ARGS = frozenset(
    {
        "output_dir",
        "logging_dir",
        "run_name",
        "hub_model_id",
        "hub_token",
        "push_to_hub",
        "resume_from_checkpoint",
        "report_to",
        "disable_tqdm",
        "logging_first_step",
        "overwrite_output_dir",
        "trackio_space_id",
        "project",
    }
)


def finish_tags(monitor: HealthMonitor, stop_reason: str) -> dict[str, str]:
    """The tags a run ends with, native or TRL: its health, and whether and why it stopped early."""
    return monitor.tags() | {
        "workbench.stopped_early": str(bool(stop_reason)).lower(),
        "workbench.stop_reason": stop_reason,
    }


def _study_parent(uri: str, study: str, variant: str) -> str:
    """The study's parent run (``workbench.role=study``), created on first use; its ``study.yaml`` names every
    variant seen so far (the first one is compare's baseline)."""
    from mlflow import MlflowClient

    from workbench.tracking.store import get_or_create_experiment  # deferred: mlflow, for standalone use only

    client = MlflowClient(uri)
    experiment = get_or_create_experiment(client, study, uri)
    found = client.search_runs([experiment], "tags.`workbench.role` = 'study'", max_results=1)
    if found:
        run_id = found[0].info.run_id
        try:
            document = yaml.safe_load(Path(client.download_artifacts(run_id, "study.yaml")).read_text()) or {}
        except Exception:  # noqa: BLE001 - no study.yaml yet (a first run that crashed): a fresh one is written
            document = {}
    else:
        run_id = client.create_run(
            experiment,
            run_name=f"study:{study}",
            tags={"workbench.role": "study", "workbench.study": study, "workbench.engine": "trl"},
        ).info.run_id
        client.set_terminated(run_id, "FINISHED")
        document = {}
    variants = dict(document.get("variants") or {})
    if variant not in variants:
        variants[variant] = {}
        first = next(iter(variants))
        document = {
            "name": study,
            "engine": "trl",
            "variants": variants,
            "compare": {"baseline": first, "metrics": ["final:reward/mean", "final:length/mean", "final:entropy/mean"]},
        }
        client.log_text(run_id, yaml.safe_dump(document, sort_keys=False), "study.yaml")
    return run_id
