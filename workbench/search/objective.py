"""One Optuna trial = one real run per seed, on the same run machinery as ``workbench run``.

For each seed the trial's config (the search variant + the sampled values) runs through
:func:`workbench.execution.run.execute_run` as an MLflow child of the search run (``workbench.role=trial``,
``workbench.trial=<number>``). After every eval step the first objective's running value is
reported to Optuna (``trial.report``) at the trial's *learner step* (seed ``k`` of ``S``-step runs
reports step ``k*S + s``), and ``trial.should_prune()`` ends the run with
``StopRun("pruned by optuna at step s")``. A run stopped by a failing health rule ends the trial
PRUNED too, its reason (``health: ...``) kept as the trial's ``workbench.prune_reason`` user
attribute and as the MLflow tag of the same name. A trial's value is the mean over its seeds of each
objective's per-run summary.

What learning did, not where it started. Step 0 is measured before any update: its eval is the
untrained policy (the same for every trial of a search), its sampled batch too. A trial that
collapses from there would keep its step-0 value as its best intermediate value, and the median
and percentile pruners, which compare a trial's *best* value so far, would never prune it; a
``max``/``mean`` summary would score it its untrained value. So the values of step 0 are logged to
MLflow like every other, but neither reported to the pruner nor counted in an objective's or a
constraint's summary (``last``/``max``/``min``/``mean``); a metric logged at step 0 only is
summarised by that value (there is nothing else). ``search.include_step0: true`` counts them again.

Several seeds. The value reported at eval step ``s`` of seed ``k`` (learner step ``k*S + s``) is
the mean of the running objective at step ``s`` over the seeds run so far (seeds ``0..k``), so
pruning decisions after the first seed no longer rest on it alone; every trial of a search runs
the same seeds in the same order, so the pruner compares means of equally many seeds at each
learner step. How many seeds each intermediate value averages is the trial's
``workbench.intermediate_seeds`` user attribute (``{learner step: number of seeds}``).

Trial user attributes (all ``workbench.*``): ``worker`` (host:pid), ``outcome`` (COMPLETE, PRUNED,
FAILED, over_budget), ``prune_reason``, ``pruned_by`` (optuna | health), ``learner_steps`` (RL
steps the trial used, all seeds), ``mlflow_run_ids``, ``values_by_seed``, ``intermediate_seeds``,
``error``, ``retry_of``, ``start_value`` (the first objective's metric at step 0, mean over the seeds
that logged it: where the trial started, so that a search can say whether any trial gained).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workbench.config import RunConfig
from workbench.metrics.names import (
    ACCURACY_TRAIN,
    BATCH_SAMPLING_ROUNDS,
    EVAL_ACCURACY,
    HEALTH_STATUS,
    PERF_SAMPLE_TOKENS,
    PERF_STEP_S,
)
from workbench.search.spec import SearchSpec

WORKER = "workbench.worker"
OUTCOME = "workbench.outcome"
PRUNE_REASON = "workbench.prune_reason"
PRUNED_BY = "workbench.pruned_by"
STEPS = "workbench.learner_steps"
RUNS = "workbench.mlflow_run_ids"
BY_SEED = "workbench.values_by_seed"
ERROR = "workbench.error"
RETRY_OF = "workbench.retry_of"
INTERMEDIATE_SEEDS = "workbench.intermediate_seeds"
START = "workbench.start_value"  # the first objective's metric at step 0 (the untrained policy), seed mean
OVER_BUDGET = "over_budget"


class TrialFailed(Exception):
    """A trial that could not produce a value (a run crashed, an invalid sampled config): FAIL."""


class OverBudget(Exception):
    """Started after the budget was already taken by other workers' trials: FAIL, nothing ran."""


# ----------------------------------------------------------------------------------- summaries
class RunSummary:
    """A run's step metrics as they arrive, reduced to the numbers objectives ask for."""

    def __init__(self, cfg: RunConfig, include_step0: bool = False) -> None:
        self.completions_per_round = cfg.rollout.prompts_per_step * cfg.rollout.group_size
        self.include_step0 = include_step0
        self.values: dict[str, list[float]] = {}  # after the first update (all steps with include_step0)
        self.start: dict[str, float] = {}  # step 0: before any update (the untrained policy)
        self.tokens = 0.0
        self.correct = 0.0
        self.steps = 0

    def observe(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            value = float(value)
            if not math.isfinite(value):
                continue
            if step == 0:
                self.start[key] = value
                if not self.include_step0:
                    continue
            self.values.setdefault(key, []).append(value)
        if PERF_STEP_S in metrics:  # an RL step (sample + update) happened at this step
            self.steps = step + 1
        if PERF_SAMPLE_TOKENS in metrics:
            self.tokens += float(metrics[PERF_SAMPLE_TOKENS])
        if ACCURACY_TRAIN in metrics:
            rounds = float(metrics.get(BATCH_SAMPLING_ROUNDS, 1.0))
            self.correct += float(metrics[ACCURACY_TRAIN]) * self.completions_per_round * rounds

    def value(self, metric: str, summary: str = "last") -> float:
        if metric == "summary/tokens_per_correct":
            if self.correct > 0:
                return self.tokens / self.correct
            return math.inf if self.tokens > 0 else math.nan
        if metric == "summary/learner_steps":
            return float(self.steps)
        values = self.values.get(metric)
        if not values:  # logged at step 0 only (or not at all): that value is all there is
            return self.start.get(metric, math.nan)
        if summary == "last":
            return values[-1]
        if summary == "max":
            return max(values)
        if summary == "min":
            return min(values)
        return math.fsum(values) / len(values)


@dataclass
class SearchContext:
    """Where a search's trials are tracked."""

    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    client: Any = field(repr=False, default=None)


@dataclass
class SeedResult:
    run_id: str | None
    steps: int
    values: list[float] = field(default_factory=list)  # per objective
    constraints: list[float] = field(default_factory=list)  # per constraint
    start: float | None = None  # the first objective's metric at step 0, if logged there
    prune_reason: str = ""
    pruned_by: str = ""
    error: str = ""
    tracking_lost: bool = False  # MLflow unreachable past the outage deadline (not the trial's fault)


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


class TrialObjective:
    """The function ``study.optimize`` calls: runs every seed of one trial."""

    def __init__(
        self,
        spec: SearchSpec,
        ctx: SearchContext,
        worker_id: str,
        log: Callable[[str], None] = print,
        progress_factory: Callable | None = None,
    ) -> None:
        self.spec = spec
        self.ctx = ctx
        self.worker_id = worker_id
        self.log = log
        self.progress_factory = progress_factory
        self.last_outcome = ""  # how the last call ended: COMPLETE | PRUNED | FAILED | over_budget
        self.last_number = -1
        self.tracking_lost = False  # a run lost MLflow: the worker stops (every later trial would wait too)

    # ------------------------------------------------------------------------------ call
    def __call__(self, trial):
        self.last_outcome, self.last_number = "FAILED", trial.number
        self._check_budget(trial)
        values = self.spec.suggest(trial)
        trial.set_user_attr(WORKER, self.worker_id)
        retry_of = trial.storage.get_trial_system_attrs(trial._trial_id).get("failed_trial")
        if retry_of is not None:  # Optuna's retry of a trial whose worker was lost
            trial.set_user_attr(RETRY_OF, retry_of)
        retry_of = trial.user_attrs.get(RETRY_OF)  # ... or of one interrupted by Ctrl-C
        shown = ", ".join(f"{k}={_fmt(v)}" for k, v in values.items())
        self.log(
            f"[{self.worker_id}] trial {trial.number} started: {shown}"
            + (f" (retry of trial {retry_of})" if retry_of is not None else "")
        )
        try:
            runs, by_seed, constraint_values, steps, started = self._run_seeds(trial, values)
        except KeyboardInterrupt:  # stopped by hand: the next invocation runs these values first
            try:
                trial.study.enqueue_trial(values, user_attrs={RETRY_OF: trial.number})
                trial.set_user_attr(OUTCOME, "KILLED")
            except Exception:  # noqa: BLE001 - a second interrupt or a gone storage: just stop
                pass
            raise

        means = []
        for i, objective in enumerate(self.spec.objectives):
            column = [result[i] for result in by_seed.values()]
            if any(v is None for v in column):
                missing = [s for s, r in by_seed.items() if r[i] is None]
                self._tag_runs(runs, {"workbench.trial_state": "FAIL"})
                self._fail(
                    trial,
                    f"objective {objective.metric} has no finite value in the run(s) of seed(s) "
                    f"{', '.join(missing)} (was it logged?)",
                )
            means.append(math.fsum(column) / len(column))
        self._set_constraints(trial, constraint_values)
        trial.set_user_attr(OUTCOME, "COMPLETE")
        self._tag_runs(runs, {"workbench.trial_state": "COMPLETE", "workbench.trial_values": json.dumps(means)})
        self.last_outcome = "COMPLETE"
        shown = ", ".join(f"{name}={v:.4g}" for name, v in zip(self.spec.objective_names(), means, strict=True))
        self.log(
            f"[{self.worker_id}] trial {trial.number} COMPLETE: {shown} ({steps} learner steps, "
            f"{time.monotonic() - started:.0f} s)"
        )
        return means[0] if len(means) == 1 else means

    def _run_seeds(self, trial, values: dict[str, Any]):
        """Every seed of the trial in turn; raises TrialPruned/TrialFailed as soon as one says so."""
        import optuna

        started = time.monotonic()
        self._evals_reported = 0  # per-problem pruning: evals reported so far, over this trial's seeds
        runs: list[str] = []
        by_seed: dict[str, list[float | None]] = {}
        constraint_values: list[list[float]] = []
        curves: list[dict[int, float]] = []  # per seed run: eval step -> its running objective value
        reported_seeds: dict[str, int] = {}  # learner step -> seeds its intermediate value averages
        starts: list[float] = []  # per seed: the first objective's metric at step 0
        steps = 0
        for index, seed in enumerate(self.spec.seeds):
            try:
                cfg = self.spec.trial_config(values, seed)
            except ValueError as err:
                self._fail(trial, str(err))
            result = self._run_seed(trial, cfg, index, seed, steps, values, curves, reported_seeds)
            steps += result.steps
            if result.run_id:
                runs.append(result.run_id)
            trial.set_user_attr(STEPS, steps)
            trial.set_user_attr(RUNS, runs)
            if result.tracking_lost:  # the values are not at fault: the next invocation runs them first
                self.tracking_lost = True
                trial.study.enqueue_trial(values, user_attrs={RETRY_OF: trial.number})
                self._fail(trial, f"seed {seed}: {result.error}")
            if result.error:
                self._tag_runs(runs, {"workbench.trial_state": "FAIL"})
                self._fail(trial, f"seed {seed}: {result.error}")
            if result.prune_reason:
                trial.set_user_attr(PRUNE_REASON, result.prune_reason)
                trial.set_user_attr(PRUNED_BY, result.pruned_by)
                trial.set_user_attr(OUTCOME, "PRUNED")
                self._tag_runs(runs, {"workbench.trial_state": "PRUNED", PRUNE_REASON: result.prune_reason[:500]})
                self.last_outcome = "PRUNED"
                self.log(
                    f"[{self.worker_id}] trial {trial.number} PRUNED after {steps} learner steps "
                    f"({time.monotonic() - started:.0f} s): {result.prune_reason}"
                )
                raise optuna.TrialPruned(result.prune_reason)
            by_seed[str(seed)] = [_finite_or_none(v) for v in result.values]
            constraint_values.append(result.constraints)
            if result.start is not None:
                starts.append(result.start)
                trial.set_user_attr(START, math.fsum(starts) / len(starts))
        trial.set_user_attr(BY_SEED, by_seed)
        return runs, by_seed, constraint_values, steps, started

    # ------------------------------------------------------------------------- one seed
    def _run_seed(
        self,
        trial,
        cfg: RunConfig,
        index: int,
        seed: int,
        offset: int,
        values: dict[str, Any],
        earlier: list[dict[int, float]],
        reported_seeds: dict[str, int],
    ) -> SeedResult:
        """One seed's run; ``earlier`` holds the running objective of the seeds run before it (by
        eval step), and this seed's curve is appended to it."""
        from workbench.execution.run import StopRun, execute_run  # deferred: torch, transformers

        spec = self.spec
        summary = RunSummary(cfg, include_step0=spec.config.include_step0)
        pruned: list[str] = []
        first = spec.objectives[0]
        health_stops = cfg.health.on_fail == "stop"
        curve: dict[int, float] = {}
        earlier.append(curve)
        evals: dict[int, Any] = {}  # per-problem pruning: eval step -> its ProblemResults

        def on_eval(step: int, problems) -> None:
            evals[step] = problems

        start: list[float] = []

        def on_step(step: int, metrics: dict[str, float]) -> None:
            summary.observe(step, metrics)
            if (
                step == 0
                and isinstance(metrics.get(first.metric), (int, float))
                and math.isfinite(metrics[first.metric])
            ):
                start.append(float(metrics[first.metric]))
            if spec.multi_objective or EVAL_ACCURACY not in metrics:  # report at eval steps only
                return
            if step == 0 and (index > 0 or not spec.config.include_step0):
                return  # the untrained policy: nothing learnt yet (and the same for every trial)
            value = summary.value(first.metric, first.summary)
            if spec.per_problem_pruning:
                self._report_problems(trial, evals.pop(step, None))
            elif math.isfinite(value):
                curve[step] = value
                # the running mean over the seeds run so far at this eval step (this one included)
                at_step = [c[step] for c in earlier if step in c]
                trial.report(math.fsum(at_step) / len(at_step), offset + step)
                reported_seeds[str(offset + step)] = len(at_step)
                trial.set_user_attr(INTERMEDIATE_SEEDS, reported_seeds)
            if health_stops and metrics.get(HEALTH_STATUS, 0.0) >= 2:
                return  # a failing health rule ends this run right after this step; its reason wins
            if spec.pruning and trial.should_prune():
                reason = f"pruned by optuna at step {step}"
                pruned.append(reason)
                raise StopRun(reason)

        label = f"trial-{trial.number}/seed={seed}"
        tags = {
            "workbench.trial": str(trial.number),
            "workbench.search": spec.optuna_name,
            "workbench.search_params": json.dumps(values, default=str)[:5000],
        }
        bar = self.progress_factory(label) if self.progress_factory else None
        try:
            outcome = execute_run(
                cfg,
                study=spec.study.name,
                variant=spec.variant,
                label=label,
                parent_run_id=self.ctx.parent_run_id,
                progress=bar,
                on_step=on_step,
                role="trial",
                extra_tags=tags,
                on_eval=on_eval if spec.per_problem_pruning else None,
            )
        except Exception as error:  # noqa: BLE001 - e.g. preflight: the trial fails, the worker goes on
            return SeedResult(None, 0, error=f"{type(error).__name__}: {error}")
        result = SeedResult(
            outcome.run_id, outcome.steps, tracking_lost=outcome.tracking_lost, start=start[0] if start else None
        )
        if outcome.status != "FINISHED":
            result.error = outcome.error or outcome.status
            return result
        result.values = [summary.value(o.metric, o.summary) for o in spec.objectives]
        result.constraints = [summary.value(c.metric, c.summary) for c in spec.config.constraints]
        self._log_summaries(outcome.run_id, summary)
        if pruned:
            result.prune_reason, result.pruned_by = pruned[0], "optuna"
            return result
        run_tags = self.ctx.client.get_run(outcome.run_id).data.tags if outcome.run_id else {}
        if run_tags.get("workbench.stopped_early") == "true":
            reason = run_tags.get("workbench.stop_reason", "")
            if reason.startswith("health"):
                result.prune_reason, result.pruned_by = reason, "health"
        return result

    # -------------------------------------------------------------------------- helpers
    def _report_problems(self, trial, problems) -> None:
        """Wilcoxon pruning: one value per eval problem (1 if solved), at step ``e * n + i`` for the
        trial's ``e``-th reported eval (over its seeds, in order) and the problem's index ``i`` in
        the eval set. Every trial runs the same seeds, evals and eval set (the schema refuses a
        search over them), so equal steps are the same problem at the same point of training, and
        Optuna's WilcoxonPruner pairs the trial with the best one on exactly those."""
        if problems is None or not len(problems):
            return
        n = len(problems)
        for i, correct in enumerate(problems.correct):
            trial.report(float(correct), self._evals_reported * n + i)
        self._evals_reported += 1

    def _check_budget(self, trial) -> None:
        """Trials are counted in number order: this one runs only if fewer than ``n_trials`` trials
        before it are COMPLETE, PRUNED or RUNNING (two workers may both start one for the last slot)."""
        from optuna.trial import TrialState

        n = self.spec.n_trials
        if n is None:
            return
        live = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
        ahead = sum(1 for t in trial.study.get_trials(deepcopy=False, states=live) if t.number < trial.number)
        if ahead >= n:
            trial.set_user_attr(OUTCOME, OVER_BUDGET)
            self.last_outcome = OVER_BUDGET
            raise OverBudget(f"trial {trial.number}: the budget of {n} trials is taken by earlier trials")

    def _fail(self, trial, message: str) -> None:
        trial.set_user_attr(ERROR, message[:2000])
        trial.set_user_attr(OUTCOME, "FAILED")
        self.last_outcome = "FAILED"
        self.log(f"[{self.worker_id}] trial {trial.number} FAILED: {message[:300]}")
        raise TrialFailed(message)

    def _set_constraints(self, trial, per_seed: list[list[float]]) -> None:
        """``Trial.set_constraint`` per bound (feasible when <= 0), on the mean over seeds; a metric
        the runs never logged counts as infeasible."""
        for i, con in enumerate(self.spec.config.constraints):
            values = [row[i] for row in per_seed if math.isfinite(row[i])]
            mean = math.fsum(values) / len(values) if values else math.inf
            if con.max is not None:
                trial.set_constraint(f"{con.metric}<={con.max:g}", min(mean - con.max, 1e300))
            if con.min is not None:
                trial.set_constraint(f"{con.metric}>={con.min:g}", min(con.min - mean, 1e300) if values else 1e300)

    def _log_summaries(self, run_id: str | None, summary: RunSummary) -> None:
        """Derived run-level metrics an objective or constraint uses, logged to the run."""
        if not run_id:
            return
        wanted = {o.metric for o in self.spec.objectives} | {c.metric for c in self.spec.config.constraints}
        for name in sorted(m for m in wanted if m.startswith("summary/")):
            value = summary.value(name)
            if not math.isnan(value):
                value = value if math.isfinite(value) else math.copysign(1e308, value)
                self.ctx.client.log_metric(run_id, name, value)

    def _tag_runs(self, run_ids: list[str], tags: dict[str, str]) -> None:
        for run_id in run_ids:
            for key, value in tags.items():
                try:
                    self.ctx.client.set_tag(run_id, key, value)
                except Exception:  # noqa: BLE001 - tags are a convenience; the Optuna study has the facts
                    pass


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
