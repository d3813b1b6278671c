"""Running a search: workers on one shared Optuna storage, in this process, in N local processes,
or on any number of machines (each running ``workbench tune`` with the same ``--storage``).

Storage. ``sqlite:///optuna.db`` in the working directory by default; ``postgresql://...`` for
several machines; a file path (or ``journal:PATH``) for Optuna's JournalStorage on one machine or a
shared filesystem. URL handling and the heartbeat come from :mod:`workbench.execution.worker`
(RDBStorage's own heartbeat; a heartbeat added to JournalStorage).

The Optuna study is named ``<study>:search``. Creating it is atomic in every storage, so exactly
one worker initialises it: it opens the MLflow search run (``workbench.role=search``), records its
id and the objectives in the study's user attributes, enqueues the fixed trials (``enqueue:``) and
marks the study ready; the others wait until it is. Re-invoking loads the same study and goes on
(the sampler sees every earlier trial). The sampler and the pruner are not stored with a study, so
every worker builds them from the study file.

Budget. ``n_trials`` counts COMPLETE and PRUNED trials, across invocations and workers. A worker
starts a trial only while COMPLETE + PRUNED + RUNNING < n_trials (or a trial is WAITING); when two
workers start one for the last slot at once, the later-numbered trial finds the budget taken and
ends FAIL without running anything (``workbench.outcome=over_budget``). While the budget is covered
by trials running elsewhere, a worker waits: one of them may be lost and come back as a retry.
``timeout`` (per invocation): no trial starts after it.

Confirmation. With ``search.confirm``, once the budget is used (all trials done), the invoking
process re-runs the best trials and the baseline on the confirmation seeds
(:mod:`workbench.search.confirm`); runs already recorded are not repeated, so invoking ``tune``
again after an interrupted confirmation finishes it.

Killed workers. Every running trial sends Optuna heartbeats; a trial whose worker stopped sending
them for ``grace_period`` seconds is failed by whichever worker notices first (Optuna's
``fail_stale_trials``), its RUNNING MLflow runs are marked FAILED with the reason, and Optuna's
``RetryHeartbeatStaleTrialCallback`` enqueues a retry with the same parameters (up to
``max_retries``; the retry's ``workbench.retry_of`` names the lost trial). Ctrl-C/SIGTERM ends the
running run KILLED and its trial FAIL (replaced by a new trial on the next invocation).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import signal
import socket
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from workbench.execution.interrupts import interrupt_once
from workbench.execution.threads import threads_per_run
from workbench.models import model_dir
from workbench.search import history
from workbench.search.confirm import run_confirmation
from workbench.search.objective import (
    OUTCOME,
    OVER_BUDGET,
    WORKER,
    OverBudget,
    SearchContext,
    TrialFailed,
    TrialObjective,
)
from workbench.search.schema import CategoricalParam
from workbench.search.spec import SearchSpec
from workbench.tracking.redact import guard_output, redact_config, redact_text
from workbench.tracking.store import get_or_create_experiment, resolve_tracking_uri

DEFAULT_STORAGE_FILE = "optuna.db"
KIND_ATTR = "workbench.kind"
KIND = "search"
PARENT = "workbench.search_run_id"
OBJECTIVES = "workbench.objectives"
FINGERPRINT = "workbench.fingerprint"
READY = "workbench.ready"
STOP_GRACE_S = 30.0


def default_storage() -> str:
    """``sqlite:///<cwd>/optuna.db``."""
    return f"sqlite:///{Path(DEFAULT_STORAGE_FILE).resolve()}"


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _quiet_optuna() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # workers print their own one-line reports
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")


@dataclass
class TuneOptions:
    heartbeat_interval: int = 30
    grace_period: int | None = None  # default 2 x heartbeat_interval (Optuna's default)
    max_retries: int = 3  # retries of a trial whose worker was lost
    max_consecutive_failures: int = 3  # a worker stops after this many FAILED trials in a row
    poll_s: float | None = None  # default min(heartbeat_interval, 2)
    log: Callable[[str], None] = print

    def grace(self) -> int:
        return self.grace_period if self.grace_period is not None else 2 * self.heartbeat_interval

    def picklable(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "log"}


@dataclass
class WorkerReport:
    worker: str
    trials: list[tuple[int, str]] = field(default_factory=list)  # (number, outcome) run by this worker
    stopped: str = ""  # budget | timeout | failures | tracking (MLflow lost) | grid


class SearchError(ValueError):
    """A problem with the storage or the Optuna study that the user must fix (exit code 2)."""


class SearchWorker:
    """One worker of a search: connects to the shared Optuna study, then runs trials until done."""

    def __init__(
        self,
        spec: SearchSpec,
        storage_url: str,
        options: TuneOptions | None = None,
        index: int = 0,
        progress_factory: Callable | None = None,
        announce: bool = True,
    ) -> None:
        self.spec = spec
        self.announce = announce  # say once (not in every local worker) that the definition changed
        self.storage_url = storage_url
        self.opt = options or TuneOptions()
        self.index = index
        self.id = worker_id()
        self.progress_factory = progress_factory
        self.ostudy = None
        self.ctx: SearchContext | None = None
        self.created = False
        self._retry = None

    # -------------------------------------------------------------------------------- set-up
    def open_storage(self):
        from optuna.storages import RetryHeartbeatStaleTrialCallback

        from workbench.execution.worker import WorkerError, open_storage  # deferred: torch, transformers

        _quiet_optuna()
        self._retry = RetryHeartbeatStaleTrialCallback(max_retry=self.opt.max_retries)
        try:
            return open_storage(
                self.storage_url,
                heartbeat_interval=self.opt.heartbeat_interval,
                grace_period=self.opt.grace_period,
                on_stale=self._on_stale,
            )
        except WorkerError as error:
            raise SearchError(str(error)) from None

    def connect(self) -> None:
        import optuna

        from workbench.execution.worker import describe_storage  # deferred: torch, transformers

        storage = self.open_storage()
        sampler, pruner = self.spec.make_sampler(self.index), self.spec.make_pruner()
        name = self.spec.optuna_name
        try:
            self.ostudy = optuna.create_study(
                storage=storage, study_name=name, directions=self.spec.directions, sampler=sampler, pruner=pruner
            )
            self.created = True
        except optuna.exceptions.DuplicatedStudyError:
            self.ostudy = optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)
        except Exception as error:  # noqa: BLE001 - e.g. the database refused the connection
            raise SearchError(
                f"cannot use Optuna storage {describe_storage(self.storage_url)}: "
                f"{type(error).__name__}: {str(error).splitlines()[0]}"
            ) from None
        if self.created:
            self._initialise()
        else:
            self._wait_until_ready()
            if self.ostudy.trials:  # a seeded sampler must not replay the points of the first invocation
                self.ostudy.sampler = self.spec.make_sampler(self.index, resumed_at=len(self.ostudy.trials))
        attrs = self.ostudy.user_attrs
        where = describe_storage(self.storage_url)
        if attrs.get(KIND_ATTR) != KIND:
            raise SearchError(f"Optuna study {name!r} in {where} is not a workbench search")
        stored = [d.name.lower() for d in self.ostudy.directions]
        if stored != self.spec.directions or attrs.get(OBJECTIVES) != self.spec.objective_names():
            raise SearchError(
                f"the search {name!r} in {where} optimises {attrs.get(OBJECTIVES)} ({', '.join(stored)}); this "
                f"study now asks for {self.spec.objective_names()} ({', '.join(self.spec.directions)}). Values of "
                f"different objectives cannot be compared: use another --storage, or delete the old search "
                f"(optuna delete-study --study-name '{name}' --storage ...)"
            )
        if not self.created and attrs.get(FINGERPRINT) != self.spec.fingerprint() and self.announce:
            self.opt.log(
                f"note: the search definition changed since search {name!r} started; its "
                f"{len(self.ostudy.trials)} earlier trials stay and the sampler learns from them"
            )
        self._open_mlflow(attrs[PARENT])

    def _initialise(self) -> None:
        import json

        from mlflow import MlflowClient

        from workbench.execution.worker import describe_storage  # deferred: torch, transformers

        uri = resolve_tracking_uri(self.spec.layered.get("tracking", {}).get("uri"))
        client = MlflowClient(uri)
        experiment_id = get_or_create_experiment(client, self.spec.experiment, uri)
        run = client.create_run(
            experiment_id,
            run_name=f"search:{self.spec.study.name}",
            tags={
                "workbench.role": "search",
                "workbench.study": self.spec.study.name,
                "workbench.variant": self.spec.variant,
                "workbench.search": self.spec.optuna_name,
                "workbench.storage": describe_storage(self.storage_url),
            },
        )
        parent = run.info.run_id
        if self.spec.study.source and Path(self.spec.study.source).exists():
            client.log_text(parent, redact_text(Path(self.spec.study.source).read_text()), "study.yaml")
        client.log_text(
            parent,
            json.dumps(
                {
                    "search": self.spec.config.model_dump(mode="json"),
                    "variant": self.spec.variant,
                    "seeds": self.spec.seeds,
                    "n_trials": self.spec.n_trials,
                    "base_config": redact_config(self.spec.layered),
                },
                indent=2,
                default=str,
            ),
            "search.json",
        )
        self.ostudy.set_user_attr(KIND_ATTR, KIND)
        self.ostudy.set_user_attr(PARENT, parent)
        self.ostudy.set_user_attr(OBJECTIVES, self.spec.objective_names())
        self.ostudy.set_user_attr(FINGERPRINT, self.spec.fingerprint())
        for fixed in self.spec.config.enqueue:
            self.ostudy.enqueue_trial(dict(fixed), user_attrs={"workbench.enqueued": True})
        self._guarded("write the search's saved views", history.publish_views, client, experiment_id, parent, self.spec)
        self.ostudy.set_user_attr(READY, True)

    def _guarded(self, what: str, call: Callable, *args) -> None:
        """MLflow views and history metrics are a convenience: the search is recorded in Optuna."""
        try:
            call(*args)
        except Exception as error:  # noqa: BLE001 - e.g. the tracking server hiccuped
            self.opt.log(f"[{self.id}] could not {what}: {type(error).__name__}: {error}")

    def _wait_until_ready(self) -> None:
        from workbench.execution.worker import wait_for_creator  # deferred: torch, transformers

        wait_for_creator(
            self.ostudy,
            owned=lambda attrs: attrs.get(KIND_ATTR) in (None, KIND),
            take_over=self._initialise,
            log=self.opt.log,
            what=f"search {self.spec.optuna_name!r}",
        )

    def _open_mlflow(self, parent_run_id: str) -> None:
        from mlflow import MlflowClient

        uri = resolve_tracking_uri(self.spec.layered.get("tracking", {}).get("uri"))
        client = MlflowClient(uri)
        experiment_id = get_or_create_experiment(client, self.spec.experiment, uri)
        self.ctx = SearchContext(uri, experiment_id, parent_run_id, client)

    def set_search_run_status(self, status: str) -> None:
        try:
            if status == "RUNNING":
                self.ctx.client.update_run(self.ctx.parent_run_id, status="RUNNING")
            else:
                self.ctx.client.set_terminated(self.ctx.parent_run_id, status=status)
        except Exception as error:  # noqa: BLE001 - the search itself is recorded in Optuna
            self.opt.log(f"could not set the MLflow search run's status to {status}: {error}")

    # ---------------------------------------------------------------------------------- loop
    def counts(self) -> dict[str, int]:
        return trial_counts(self.ostudy.get_trials(deepcopy=False))

    def loop(self, deadline: float | None = None, max_trials: int | None = None) -> WorkerReport:
        """Run trials until the budget is used, ``deadline`` (``time.time()``) passes, too many
        trials fail in a row, or (``max_trials``: a Ray task runs one) this worker ran that many."""
        import optuna

        report = WorkerReport(self.id)
        objective = TrialObjective(self.spec, self.ctx, self.id, self.opt.log, self.progress_factory)
        poll = self.opt.poll_s if self.opt.poll_s is not None else min(self.opt.heartbeat_interval, 2)
        n = self.spec.n_trials
        failures = 0
        while True:
            optuna.storages.fail_stale_trials(self.ostudy)
            c = self.counts()
            if n is not None and c["done"] >= n:
                report.stopped = "budget"
                break
            if deadline is not None and time.time() >= deadline:
                report.stopped = "timeout"
                break
            if n is not None and c["done"] + c["RUNNING"] >= n and not c["WAITING"]:
                time.sleep(poll)  # the last trials run elsewhere; one may be lost and come back as a retry
                continue
            self.ostudy.optimize(objective, n_trials=1, catch=(TrialFailed, OverBudget), gc_after_trial=False)
            report.trials.append((objective.last_number, objective.last_outcome))
            if objective.last_outcome in ("COMPLETE", "PRUNED"):  # trial_value/best_value by trial number
                self._guarded(
                    "log the optimisation history",
                    history.log_trial,
                    self.ctx.client,
                    self.ctx.parent_run_id,
                    self.ostudy.get_trials(deepcopy=False),
                    self.spec,
                    objective.last_number,
                )
            if objective.tracking_lost:  # every later trial would wait out the outage deadline again
                self.opt.log(
                    f"[{self.id}] stopping: MLflow unreachable past tracking.outage_deadline_s; trial "
                    f"{objective.last_number}'s values are enqueued again: run tune again once it is back"
                )
                report.stopped = "tracking"
                break
            if objective.last_outcome == "FAILED":
                failures += 1
                if failures >= self.opt.max_consecutive_failures:
                    self.opt.log(
                        f"[{self.id}] stopping: {failures} trials in a row failed (see their "
                        f"workbench.error; fix the cause and run tune again to go on)"
                    )
                    report.stopped = "failures"
                    break
            elif objective.last_outcome in ("COMPLETE", "PRUNED"):
                failures = 0
            if max_trials is not None and len(report.trials) >= max_trials:
                break
        return report

    # ------------------------------------------------------------------------ lost workers
    def _on_stale(self, study, trial) -> None:
        """Called (once, by one worker) for a trial whose worker stopped sending heartbeats."""
        who = trial.user_attrs.get(WORKER, "a worker")
        reason = f"{who} was lost (no heartbeat for {self.opt.grace()} s) while running trial {trial.number}"
        if self.ctx is not None:
            try:
                query = (
                    f"tags.`workbench.search` = '{self.spec.optuna_name}' and "
                    f"tags.`workbench.trial` = '{trial.number}' and attributes.status = 'RUNNING'"
                )
                for run in self.ctx.client.search_runs([self.ctx.experiment_id], query):
                    self.ctx.client.set_tag(run.info.run_id, "workbench.error", reason[:500])
                    self.ctx.client.set_tag(run.info.run_id, "workbench.trial_state", "FAIL")
                    self.ctx.client.set_terminated(run.info.run_id, status="FAILED")
            except Exception as error:  # noqa: BLE001 - the retry matters more than the bookkeeping
                self.opt.log(f"[{self.id}] could not mark trial {trial.number}'s MLflow runs FAILED: {error}")
        retries = len(trial.system_attrs.get("retry_history", [])) + 1
        if self._retry is not None:
            self._retry(study, trial)
        if retries <= self.opt.max_retries:
            self.opt.log(
                f"[{self.id}] {reason}; its parameters are enqueued again (retry {retries}/{self.opt.max_retries})"
            )
        else:
            self.opt.log(f"[{self.id}] {reason}; not retried (max_retries={self.opt.max_retries} used up)")


def trial_counts(trials) -> dict[str, int]:
    """Trials by state, plus ``done`` (COMPLETE + PRUNED) and ``over_budget`` (FAIL without a run)."""
    out = {"COMPLETE": 0, "PRUNED": 0, "FAIL": 0, "RUNNING": 0, "WAITING": 0, "over_budget": 0}
    for t in trials:
        out[t.state.name] = out.get(t.state.name, 0) + 1
        if t.state.name == "FAIL" and t.user_attrs.get(OUTCOME) == OVER_BUDGET:
            out["over_budget"] += 1
    out["done"] = out["COMPLETE"] + out["PRUNED"]
    return out


# ------------------------------------------------------------------------------ local workers
@dataclass
class SearchResult:
    name: str
    n_trials: int | None
    counts: dict[str, int]
    reports: list[WorkerReport] = field(default_factory=list)  # in-process workers only
    worker_exits: list[str] = field(default_factory=list)  # abnormal exits of worker processes
    stopped: str = ""  # budget | timeout | failures | grid | incomplete
    confirm_runs: int = 0  # confirmation runs started by this invocation (search.confirm)

    @property
    def complete(self) -> bool:
        return self.n_trials is None or self.counts["done"] >= self.n_trials


def confirms(spec: SearchSpec, result: SearchResult) -> bool:
    """Whether the trials just run are followed by the confirmation (``search.confirm``): once the
    budget is used. A search with ``n_trials`` stopped by its ``timeout`` first is not (``tune``
    again continues it); a search whose only budget is ``timeout`` is confirmed when it passes."""
    return spec.config.confirm is not None and result.complete and result.stopped in ("", "budget", "timeout")


def _child_main(
    spec: SearchSpec,
    storage_url: str,
    options: dict,
    index: int,
    threads: int,
    tracking_uri: str,
    deadline: float | None,
) -> None:
    """Entry point of a local worker process (spawned)."""
    signal.signal(signal.SIGINT, interrupt_once)
    signal.signal(signal.SIGTERM, interrupt_once)  # SIGTERM stops like Ctrl-C: the run ends KILLED
    os.environ["MLFLOW_TRACKING_URI"] = tracking_uri
    guard_output([storage_url])  # this process prints too: its passwords masked like the parent's
    import torch
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(threads)
    hf_logging.disable_progress_bar()

    def log(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

    worker = SearchWorker(spec, storage_url, TuneOptions(**options, log=log), index, announce=False)
    try:
        worker.connect()
        report = worker.loop(deadline)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except SearchError as error:
        print(f"error: {error}", flush=True)
        raise SystemExit(2) from None
    raise SystemExit({"failures": 3, "tracking": 4}.get(report.stopped, 0))


def _describe_exit(code: int | None) -> str:
    from workbench.execution.pool import describe_exit  # deferred: torch, transformers

    return describe_exit(code).replace("run process", "worker process")


def run_search(
    spec: SearchSpec,
    storage_url: str | None = None,
    *,
    workers: int = 1,
    options: TuneOptions | None = None,
    progress_factory: Callable | None = None,
    run_trials: Callable | None = None,
) -> SearchResult:
    """Run (or continue) the search: ``workers`` = 1 runs trials in this process, N > 1 in N
    spawned processes; ``run_trials(coordinator, deadline) -> stopped`` runs them elsewhere instead
    (:func:`workbench.search.ray_trials.trials_on_ray`: as Ray tasks). Returns when the budget is
    used, the timeout passed, or every worker stopped.

    Raises ``SearchError`` (bad storage, a different search under the same name) before any trial,
    and ``KeyboardInterrupt`` after a clean stop (running runs KILLED, their trials FAIL).
    """
    from workbench.execution.run import preflight  # deferred: torch, transformers

    options = options or TuneOptions()
    storage_url = storage_url or default_storage()
    preflight(_any_config(spec))  # a missing model path or data file fails here, before any trial
    coordinator = SearchWorker(spec, storage_url, options, 0, progress_factory)
    coordinator.connect()  # creates or joins the study; its children only load it
    deadline = time.time() + spec.timeout if spec.timeout else None
    result = SearchResult(spec.optuna_name, spec.n_trials, coordinator.counts())
    coordinator.set_search_run_status("RUNNING")
    status = "FINISHED"
    try:
        if run_trials is not None:
            result.stopped = run_trials(coordinator, deadline)
        elif workers <= 1:
            report = coordinator.loop(deadline)
            result.reports.append(report)
            result.stopped = report.stopped
        else:
            result.worker_exits = _run_processes(spec, storage_url, options, workers, coordinator.ctx, deadline)
        result.counts = coordinator.counts()
        if confirms(spec, result):
            result.confirm_runs = run_confirmation(
                coordinator.ostudy, spec, coordinator.ctx, options.log, progress_factory
            )
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        result.counts = coordinator.counts()
        if not result.stopped:
            if result.complete:
                result.stopped = "budget"
            elif deadline is not None and time.time() >= deadline:
                result.stopped = "timeout"
            else:
                result.stopped = "incomplete"
        if status == "FINISHED" and result.stopped in ("failures", "tracking", "incomplete"):
            status = "FAILED"
        coordinator.set_search_run_status(status)
    return result


def _any_config(spec: SearchSpec):
    """A config with every parameter at a valid value (for the preflight filesystem checks)."""
    values = {name: (p.choices[0] if isinstance(p, CategoricalParam) else p.low) for name, p in spec.params.items()}
    return spec.trial_config(values, spec.seeds[0])


def _run_processes(
    spec: SearchSpec, storage_url: str, options: TuneOptions, workers: int, ctx, deadline: float | None
) -> list[str]:
    _prebuild_model(spec)
    context = mp.get_context("spawn")
    threads = threads_per_run(workers)
    procs = []
    for index in range(workers):
        proc = context.Process(
            target=_child_main,
            name=f"workbench-tune-{index}",
            args=(spec, storage_url, options.picklable(), index, threads, ctx.tracking_uri, deadline),
        )
        proc.start()
        procs.append(proc)
    options.log(f"{workers} worker processes: {', '.join(str(p.pid) for p in procs)}")
    exits: list[str] = []
    try:
        pending = list(procs)
        while pending:
            for proc in list(pending):
                proc.join(timeout=0.5)
                if proc.exitcode is not None:
                    pending.remove(proc)
                    if proc.exitcode != 0:
                        line = f"worker {proc.pid}: {_describe_exit(proc.exitcode)}"
                        if proc.exitcode == 3:
                            line = f"worker {proc.pid} stopped: too many failed trials in a row"
                        elif proc.exitcode == 4:
                            line = f"worker {proc.pid} stopped: MLflow unreachable past the outage deadline"
                        exits.append(line)
                        options.log(line + ("; the other workers go on" if pending else ""))
    except KeyboardInterrupt:
        for proc in procs:
            if proc.exitcode is None:
                os.kill(proc.pid, signal.SIGTERM)
        stop_by = time.monotonic() + STOP_GRACE_S
        for proc in procs:
            proc.join(timeout=max(0.1, stop_by - time.monotonic()))
            if proc.exitcode is None:
                proc.kill()
                proc.join(timeout=10)
        raise
    return exits


def _prebuild_model(spec: SearchSpec) -> None:
    """Build the tiny model once, here, before N workers would all wait on its lock."""
    if spec.params and any(name.startswith(("model.", "task.")) for name in spec.params):
        return  # each trial may need its own model
    cfg = _any_config(spec)
    if cfg.model.builtin is not None:
        model_dir(cfg.model, cfg.task, progress=False, prime=cfg.data.prime)


def finished_fraction(counts: dict[str, int], n_trials: int | None) -> str:
    if n_trials is None:
        return f"{counts['done']} trials"
    return f"{counts['done']}/{n_trials} trials"
