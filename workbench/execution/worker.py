"""``workbench worker``: any number of processes on any number of machines execute one study.

Coordination is an Optuna study in a shared Optuna storage (PostgreSQL for several machines;
an sqlite file or a JournalStorage file on one machine or a shared filesystem). Each run of the
study is one *enqueued trial* whose user attributes carry the run (``workbench.run_key``, label,
variant, seed and the full resolved run config, so a trial is self-describing). MLflow (one
tracking server) records the runs exactly as ``workbench run`` does.

A worker:
1. creates the Optuna study, or loads it. Creation is atomic in every storage, so exactly one
   worker initialises: it opens the MLflow parent run, stores its id in the study's user
   attributes, enqueues one trial per run not yet FINISHED in MLflow, and marks the study ready.
   The others wait until it is ready (an initialiser that died is taken over after
   ``INIT_TIMEOUT_S``), then enqueue only the runs that have no live trial (WAITING, RUNNING,
   COMPLETE): a second worker, or a later one, does not enqueue again; a later one does
   re-enqueue runs whose trials all failed (resume).
2. loops: fail stale trials (also every ``poll_s`` in a background thread, :class:`StaleTrialWatch`,
   so that a lost worker is noticed, its MLflow run marked FAILED and its retry enqueued while
   every survivor is busy with a run; the retry itself starts when a worker is free); if a trial
   is WAITING, ``study.optimize(n_trials=1)`` pops it (Optuna hands a WAITING trial to exactly
   one worker) and runs it; else, if trials are still RUNNING elsewhere, waits (one of them may
   come back as a retry); else looks once more after a poll and exits. Each round reads the
   study afresh (Optuna's per-process trial cache can miss another worker's late-committed
   trial) and re-enqueues any run whose hand-over was lost: its last trial failed by a lost or
   stopped worker that died before enqueueing the retry.

Exactly once. A trial's run executes only if the trial is the lowest-numbered *live* trial of
its ``run_key`` (the rare duplicates from concurrent enqueues or retries are PRUNED with
``workbench.outcome=duplicate``), and only if MLflow has no FINISHED run of that key.
States only move forward (WAITING -> RUNNING -> COMPLETE/FAIL/PRUNED), so two live executions
of one key cannot both pass that check.

A killed worker. Every running trial has Optuna's heartbeat (``heartbeat_interval``); a trial
whose heartbeat is older than ``grace_period`` is failed by whichever worker sees it first
(Optuna's ``fail_stale_trials``, atomic per trial), which then marks the lost MLflow run FAILED
and enqueues a retry of the run (``workbench.lost`` counts these; at most ``max_retries``).
RDBStorage has the heartbeat built in; for JournalStorage, :class:`JournalHeartbeatStorage`
adds it (a timestamp system attribute, compared with the local clock: keep the machines'
clocks in sync). A worker stopped by Ctrl-C or SIGTERM ends its run KILLED and, once its trial is
failed, enqueues the run again for the others. A run that fails by itself (an exception: FAILED in
MLflow) is a FAIL trial and is not retried until a worker is started again.

Optuna trial state <-> MLflow: COMPLETE = FINISHED (value: final eval accuracy), FAIL = FAILED,
KILLED or lost; PRUNED = nothing ran (duplicate, or an idle ``ask`` that found the queue empty).
"""

from __future__ import annotations

import math
import os
import random
import socket
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

from workbench.config import RunConfig
from workbench.execution.lock import study_lock
from workbench.execution.plan import study_experiment, study_tracking_uri
from workbench.execution.run import RunOutcome, execute_run, preflight
from workbench.execution.study import StudyContext, open_study
from workbench.metrics.names import EVAL_ACCURACY
from workbench.study import RunSpec, Study
from workbench.tracking.redact import redact_uri
from workbench.tracking.store import get_or_create_experiment, resolve_tracking_uri
from workbench.tracking.study_runs import finished_runs, mark_orphaned_runs
from workbench.tracking.writer import release_interrupted_statements, resend_spills

KEY = "workbench.run_key"
LABEL = "workbench.label"
VARIANT = "workbench.variant"
SEED = "workbench.seed"
CONFIG = "workbench.config"
LOST = "workbench.lost"  # how many workers died running this run before this trial
RETRY_OF = "workbench.retry_of"
WORKER = "workbench.worker"
OUTCOME = "workbench.outcome"
MLFLOW_RUN = "workbench.mlflow_run_id"
IDENTITY = (KEY, LABEL, VARIANT, SEED, CONFIG)  # what a retry copies

STUDY_KIND = "workbench.kind"
KIND = "study-runs"
PARENT = "workbench.parent_run_id"
READY = "workbench.ready"
HEARTBEAT_ATTR = "workbench:heartbeat"

INIT_TIMEOUT_S = 120.0
RDB_OPEN_ATTEMPTS = 5


class WorkerError(ValueError):
    """A problem with the storage or the Optuna study that the user must fix (exit code 2)."""


class RunFailed(Exception):
    """The run ended FAILED (or KILLED) in MLflow: its trial is FAIL."""


# ------------------------------------------------------------------------------------ storage
def _heartbeat_base():
    from optuna.storages._heartbeat import BaseHeartbeat  # the extension point RDBStorage uses

    return BaseHeartbeat


def _journal_heartbeat_class():
    from optuna.storages import JournalStorage
    from optuna.trial import TrialState

    class JournalHeartbeatStorage(JournalStorage, _heartbeat_base()):
        """JournalStorage plus Optuna's heartbeat protocol (which only RDBStorage implements)."""

        def __init__(
            self, backend, *, heartbeat_interval: int, grace_period: int | None, on_stale: Callable | None
        ) -> None:
            super().__init__(backend)
            self.heartbeat_interval = heartbeat_interval
            self.grace_period = grace_period
            self.on_stale = on_stale

        def record_heartbeat(self, trial_id: int) -> None:
            try:
                self.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time())
            except Exception:  # noqa: BLE001 - the trial was failed meanwhile: nothing to keep alive
                pass

        def _get_stale_trial_ids(self, study_id: int) -> list[int]:
            grace = self.grace_period if self.grace_period is not None else 2 * self.heartbeat_interval
            now = time.time()
            return [
                t._trial_id
                for t in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
                if now - t.system_attrs.get(HEARTBEAT_ATTR, now) > grace
            ]

        def get_heartbeat_interval(self) -> int | None:
            return self.heartbeat_interval

        def get_heartbeat_stale_trial_callback(self):
            return self.on_stale

    return JournalHeartbeatStorage


def wait_for_creator(
    ostudy,
    *,
    owned: Callable[[dict], bool],
    take_over: Callable[[], None],
    log: Callable[[str], None],
    what: str,
    timeout_s: float = INIT_TIMEOUT_S,
) -> None:
    """Wait until the worker that created ``ostudy`` marks it READY; take its setup over if it died midway.

    Setup (parent MLflow run, queue) is written by whichever worker created the Optuna study; the
    others wait. ``owned(user_attrs)`` is False for a same-named study of another kind, which is
    left for the caller to report rather than set up over.
    """
    deadline = time.monotonic() + timeout_s
    while not ostudy.user_attrs.get(READY):
        if time.monotonic() > deadline:
            if owned(ostudy.user_attrs):
                log(f"the worker that created {what} did not finish setting it up in {timeout_s:.0f} s: taking over")
                take_over()
            return
        time.sleep(0.5)


def describe_storage(url: str) -> str:
    """The storage URL without its password or password-like query parameters, for messages."""

    return redact_uri(url)


def open_storage(
    url: str, *, heartbeat_interval: int, grace_period: int | None = None, on_stale: Callable | None = None
):
    """An Optuna storage with the heartbeat on.

    ``url``: an SQLAlchemy URL (``postgresql://user:pw@host/db``, ``sqlite:///optuna.db``) for
    RDBStorage, or a file path (optionally ``journal:PATH``) for a JournalStorage log file.
    """
    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if "://" in url:
        engine_kwargs: dict = {"pool_pre_ping": True}
        if url.startswith("sqlite"):
            engine_kwargs = {"connect_args": {"timeout": 60}}  # several processes share the file
        for attempt in range(RDB_OPEN_ATTEMPTS):
            try:
                return optuna.storages.RDBStorage(
                    url,
                    engine_kwargs=engine_kwargs,
                    heartbeat_interval=heartbeat_interval,
                    grace_period=grace_period,
                    heartbeat_stale_trial_callback=on_stale,
                )
            except ImportError as error:  # no driver: trying again will not help
                raise WorkerError(
                    f"cannot open Optuna storage {describe_storage(url)}: {error} "
                    f"(for postgresql:// URLs: pip install 'psycopg[binary]')"
                ) from None
            except Exception as error:  # noqa: BLE001 - bad URL, server unreachable, or a race:
                # workers started together on an empty database all create Optuna's tables, and
                # PostgreSQL rejects the concurrent CREATEs of all but one; the next try finds them.
                from sqlalchemy.exc import ArgumentError  # a malformed URL: no point in retrying

                if attempt == RDB_OPEN_ATTEMPTS - 1 or isinstance(error, ArgumentError):
                    raise WorkerError(
                        f"cannot open Optuna storage {describe_storage(url)}: "
                        f"{type(error).__name__}: {str(error).splitlines()[0]}"
                    ) from None
                time.sleep(0.5 + random.random() * (attempt + 1))
    path = url.removeprefix("journal:")
    from optuna.storages.journal import JournalFileBackend

    try:
        backend = JournalFileBackend(path)
    except OSError as error:
        raise WorkerError(f"cannot open journal storage {path}: {error}") from None
    return _journal_heartbeat_class()(
        backend, heartbeat_interval=heartbeat_interval, grace_period=grace_period, on_stale=on_stale
    )


# ------------------------------------------------------------------------------------- worker
@dataclass
class WorkerReport:
    study: str
    worker: str
    outcomes: list[RunOutcome] = field(default_factory=list)  # the runs this worker executed
    total: int = 0  # runs in the study (union of every worker's plan)
    finished: int = 0
    failed: list[str] = field(default_factory=list)  # labels of runs without a FINISHED run
    tracking_lost: str = ""  # why this worker stopped early: MLflow unreachable past the outage deadline


@dataclass
class WorkerOptions:
    heartbeat_interval: int = 30
    grace_period: int | None = None  # default: 2 x heartbeat_interval (Optuna's default)
    max_retries: int = 3  # re-runs after a worker died running the run
    poll_s: float | None = None  # default: min(heartbeat_interval, 5)
    log: Callable[[str], None] = print  # one line per event; the CLI prefixes the time


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def trial_attrs(spec: RunSpec) -> dict:
    return {
        KEY: spec.run_key,
        LABEL: spec.label,
        VARIANT: spec.variant,
        SEED: spec.seed,
        CONFIG: spec.config.model_dump(mode="json"),
    }


class Worker:
    def __init__(
        self,
        study: Study,
        specs: list[RunSpec],
        storage_url: str,
        options: WorkerOptions,
        progress_factory: Callable | None = None,
    ) -> None:
        self.study = study
        self.specs = specs
        self.storage_url = storage_url
        self.opt = options
        self.id = worker_id()
        self.progress_factory = progress_factory
        self.report = WorkerReport(study.name, self.id)
        self._lost_trial = None  # the trial whose run lost MLflow (the worker stops after it)
        self.ctx: StudyContext | None = None
        self.client = None
        self.ostudy = None
        self._storage = None
        self._interrupted_trial = None  # the trial whose run a Ctrl-C/SIGTERM stopped
        self._current_trial = None  # the trial optimize() last handed to this worker

    # ----------------------------------------------------------------------- set-up
    def connect(self) -> None:
        import optuna
        from transformers.utils import logging as hf_logging

        optuna.logging.set_verbosity(optuna.logging.ERROR)  # this module reports what happens
        hf_logging.disable_progress_bar()  # no weight-loading bars between the worker's lines
        storage = open_storage(
            self.storage_url,
            heartbeat_interval=self.opt.heartbeat_interval,
            grace_period=self.opt.grace_period,
            on_stale=self._on_stale,
        )
        self._storage = storage
        name = self.study.name
        try:
            self.ostudy = optuna.create_study(storage=storage, study_name=name, direction="maximize")
            created = True
        except optuna.exceptions.DuplicatedStudyError:
            self.ostudy = optuna.load_study(study_name=name, storage=storage)
            created = False
        except Exception as error:  # noqa: BLE001 - e.g. the database refused the connection
            raise WorkerError(
                f"cannot use Optuna storage {describe_storage(self.storage_url)}: "
                f"{type(error).__name__}: {str(error).splitlines()[0]}"
            ) from None
        if created:
            self._initialise()
        else:
            self._wait_until_ready()
        attrs = self.ostudy.user_attrs
        if attrs.get(STUDY_KIND) != KIND:
            raise WorkerError(
                f"Optuna study {name!r} in {describe_storage(self.storage_url)} is not a workbench "
                f"study of runs (another tool's study of the same name?)"
            )
        self._open_mlflow(attrs[PARENT])
        self._enqueue_missing()

    def _initialise(self) -> None:
        ctx = open_study(self.study, self.specs)
        self.ostudy.set_user_attr(STUDY_KIND, KIND)
        self.ostudy.set_user_attr(PARENT, ctx.parent_run_id)
        self._open_mlflow(ctx.parent_run_id)
        self._enqueue_missing()
        self.ostudy.set_user_attr(READY, True)

    def _wait_until_ready(self) -> None:
        def owned(attrs: dict) -> bool:  # an unmarked study with trials is another tool's
            return attrs.get(STUDY_KIND) in (None, KIND) and (STUDY_KIND in attrs or not self.ostudy.trials)

        wait_for_creator(
            self.ostudy, owned=owned, take_over=self._initialise, log=self.opt.log, what=f"study {self.study.name!r}"
        )

    def _open_mlflow(self, parent_run_id: str) -> None:
        from mlflow import MlflowClient

        uri = resolve_tracking_uri(self.specs[0].config.tracking.uri if self.specs else None)
        self.client = MlflowClient(uri)
        experiment_id = get_or_create_experiment(self.client, study_experiment(self.study, self.specs), uri)
        self.ctx = StudyContext(self.study, uri, experiment_id, parent_run_id)

    def _enqueue_missing(self) -> None:
        from optuna.trial import TrialState

        live = (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE)
        queued = {t.user_attrs.get(KEY) for t in self.ostudy.get_trials(deepcopy=False, states=live)}
        done = finished_runs(self.client, self.ctx.experiment_id)
        added = 0
        for spec in self.specs:
            if spec.run_key not in queued and spec.run_key not in done:
                self.ostudy.enqueue_trial({}, user_attrs=trial_attrs(spec))
                added += 1
        if added:
            self.opt.log(f"enqueued {added} run(s) of study {self.study.name}")
            self.client.update_run(self.ctx.parent_run_id, status="RUNNING")

    # ------------------------------------------------------------------------- loop
    def loop(self) -> WorkerReport:
        poll = self.opt.poll_s if self.opt.poll_s is not None else min(self.opt.heartbeat_interval, 5)
        with StaleTrialWatch(self.ostudy, poll):
            return self._loop(poll)

    def _loop(self, poll: float) -> WorkerReport:
        import optuna
        from optuna.trial import TrialState

        settled_once = False
        while True:
            self._reload()
            optuna.storages.fail_stale_trials(self.ostudy)
            self._requeue_orphans()
            open_trials = self.ostudy.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))
            if any(t.state == TrialState.WAITING for t in open_trials):
                settled_once = False
                self._interrupted_trial = self._current_trial = None
                try:
                    self.ostudy.optimize(self._objective, n_trials=1, catch=(RunFailed,))
                except ValueError:
                    if not self._own_trial_failed_as_stale():
                        raise
                except KeyboardInterrupt:
                    # Stopped by hand: the run ended KILLED and optimize() has failed its trial; only
                    # now (a live trial would make the retry a "duplicate") hand the run to the others.
                    trial = self._interrupted_trial
                    if trial is not None:
                        self._enqueue_retry(trial, lost=int(trial.user_attrs.get(LOST, 0)))
                        self.opt.log(
                            f"[{self.id}] {trial.user_attrs.get(LABEL)} KILLED; enqueued again for the other workers"
                        )
                    raise
                if self.report.tracking_lost:  # the next run would only wait out the deadline again
                    trial = self._lost_trial
                    self._enqueue_retry(trial, lost=int(trial.user_attrs.get(LOST, 0)))  # not a lost worker
                    self.opt.log(f"[{self.id}] {trial.user_attrs.get(LABEL)} lost MLflow; enqueued again")
                    return self._finish()
            elif any(KEY in t.user_attrs for t in open_trials):
                settled_once = False
                time.sleep(poll)  # runs in progress elsewhere; a lost one comes back as a retry
            elif not settled_once:
                # Nothing open: look once more after a poll, so that a retry another worker is
                # enqueueing right now (its insert not yet committed) is not missed.
                settled_once = True
                time.sleep(poll)
            else:
                break
        return self._finish()

    def _reload(self) -> None:
        """Look at the study afresh. Optuna caches an RDB study's trials per process and re-reads
        only those above the highest finished trial id it has seen; PostgreSQL can commit trial
        ids out of order (another worker's enqueue still in flight while a later trial finishes),
        so a long-lived cache can miss a WAITING trial for good. A new cache reads every trial."""
        import optuna

        if isinstance(self._storage, optuna.storages.RDBStorage):
            self.ostudy = optuna.load_study(study_name=self.study.name, storage=self._storage)

    def _requeue_orphans(self) -> None:
        """Enqueue a retry of any run left with no live trial by a worker that was lost or
        stopped before it could hand the run on (its trial FAIL with no outcome, or KILLED, and
        no retry): e.g. a worker killed between failing a stale trial and enqueueing its retry.
        A retry enqueued at the same moment by another worker is a duplicate, pruned unrun."""
        from optuna.trial import TrialState

        by_key: dict[str, list] = {}
        for t in self.ostudy.get_trials(deepcopy=False):
            if KEY in t.user_attrs and t.user_attrs.get(OUTCOME) not in ("duplicate", "idle"):
                by_key.setdefault(t.user_attrs[KEY], []).append(t)
        done = None
        for key, trials in by_key.items():
            if any(t.state in (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE) for t in trials):
                continue
            last = max(trials, key=lambda t: t.number)
            outcome = last.user_attrs.get(OUTCOME)
            if last.state != TrialState.FAIL or outcome not in (None, "KILLED"):
                continue  # a run that failed by itself is not retried (see the module docstring)
            lost = int(last.user_attrs.get(LOST, 0)) + (outcome is None)
            if lost > self.opt.max_retries:
                continue
            if done is None:
                done = finished_runs(self.client, self.ctx.experiment_id)
            if key in done:
                continue
            if outcome is None:  # as the stale callback would have: its MLflow run FAILED, "was lost"
                mark_orphaned_runs(self.client, self.ctx.experiment_id, [key], reason=self._lost_reason(last))
            self._enqueue_retry(last, lost=lost)
            self.opt.log(
                f"[{self.id}] {last.user_attrs.get(LABEL, key)}: trial {last.number} ended "
                f"{'KILLED' if outcome else 'lost'} and was not retried; enqueued a retry"
            )

    def _finish(self) -> WorkerReport:
        from optuna.trial import TrialState

        self._reload()
        best: dict[str, tuple[str, bool]] = {}
        for t in self.ostudy.get_trials(deepcopy=False):
            key = t.user_attrs.get(KEY)
            if key:
                ok = best.get(key, ("", False))[1] or t.state == TrialState.COMPLETE
                best[key] = (t.user_attrs.get(LABEL, key), ok)
        # MLflow lost: Optuna's record alone (a run FINISHED by `workbench run` counts as not finished)
        done = {} if self.report.tracking_lost else finished_runs(self.client, self.ctx.experiment_id)
        for spec in self.specs:  # finished before any worker ran (e.g. by `workbench run`)
            best.setdefault(spec.run_key, (spec.label, False))
        self.report.total = len(best)
        self.report.failed = sorted(label for key, (label, ok) in best.items() if not ok and key not in done)
        self.report.finished = self.report.total - len(self.report.failed)
        if not self.report.tracking_lost:  # else the next worker's start sets it RUNNING and closes it
            self.client.set_terminated(self.ctx.parent_run_id, status="FINISHED")
        return self.report

    # -------------------------------------------------------------------- one trial
    def _own_trial_failed_as_stale(self) -> bool:
        """Optuna refuses to tell a trial that is no longer RUNNING. That happens when this worker's heartbeat
        starved past the grace period (an overloaded machine) and a stale-trial watch failed the trial while
        its run went on. Nothing is lost: the run's MLflow record is what counts, and the retry the watch
        enqueued finds the run FINISHED (skipped) or resumes it, so each run still finishes once."""
        from optuna.trial import TrialState

        trial = self._current_trial
        if trial is None:
            return False
        now = [t.state for t in self.ostudy.get_trials(deepcopy=False) if t.number == trial.number]
        if not now or now[0] == TrialState.RUNNING:
            return False
        self.opt.log(
            f"[{self.id}] trial {trial.number} ({trial.user_attrs.get(LABEL)}) was failed as stale while "
            f"it ran (heartbeat late by over the grace period: an overloaded machine?); its run is "
            f"recorded in MLflow and its retry will find it"
        )
        return True

    def _objective(self, trial) -> float:
        self._current_trial = trial
        try:
            return self._run_trial(trial)
        except KeyboardInterrupt:  # wherever it lands, loop() hands the run to the other workers
            if KEY in trial.user_attrs:
                self._interrupted_trial = trial
            raise

    def _run_trial(self, trial) -> float:
        import optuna
        from optuna.trial import TrialState

        attrs = trial.user_attrs
        key = attrs.get(KEY)
        if key is None:  # the queue emptied between our look and ask(): Optuna made a fresh trial
            trial.set_user_attr(OUTCOME, "idle")
            raise optuna.TrialPruned("no queued run")
        live = (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE)
        earlier = [
            t.number
            for t in self.ostudy.get_trials(deepcopy=False, states=live)
            if t.user_attrs.get(KEY) == key and t.number < trial.number
        ]
        if earlier:
            trial.set_user_attr(OUTCOME, "duplicate")
            raise optuna.TrialPruned(f"duplicate of trial {earlier[0]}")
        done = finished_runs(self.client, self.ctx.experiment_id)
        if key in done:
            trial.set_user_attr(OUTCOME, "skipped")
            trial.set_user_attr(MLFLOW_RUN, done[key].info.run_id)
            return _value(done[key].data.metrics.get(EVAL_ACCURACY, math.nan))

        cfg = RunConfig.model_validate(attrs[CONFIG])
        if cfg.run_key() != key:
            raise RunFailed(
                f"trial {trial.number}: its config hashes to {cfg.run_key()}, not {key} "
                f"(workers run different workbench versions?)"
            )
        label, variant = attrs[LABEL], attrs[VARIANT]
        trial.set_user_attr(WORKER, self.id)
        resend_spills(self.ctx.tracking_uri, key)  # what an earlier attempt's MLflow outage kept back
        mark_orphaned_runs(self.client, self.ctx.experiment_id, [key])  # a lost earlier attempt, if any
        self.opt.log(f"[{self.id}] trial {trial.number}: run {label} ({key})")
        started = time.monotonic()
        bar = self.progress_factory(label) if self.progress_factory else None
        try:
            outcome = execute_run(
                cfg,
                study=self.study.name,
                variant=variant,
                label=label,
                parent_run_id=self.ctx.parent_run_id,
                progress=bar,
            )
        except KeyboardInterrupt as interrupt:  # stopped by hand: the run is KILLED; loop() hands it to the others
            release_interrupted_statements(interrupt)
            trial.set_user_attr(OUTCOME, "KILLED")
            # (if the interrupt came while its MLflow run was being opened, that run is still RUNNING)
            mark_orphaned_runs(self.client, self.ctx.experiment_id, [key], reason="interrupted", status="KILLED")
            raise
        except Exception as error:  # failed before training started: this run fails, not the worker
            mark_orphaned_runs(self.client, self.ctx.experiment_id, [key], reason=f"{type(error).__name__}: {error}")
            trial.set_user_attr(OUTCOME, "FAILED")
            self.opt.log(f"[{self.id}] {label} FAILED: {type(error).__name__}: {error}")
            raise RunFailed(f"{type(error).__name__}: {error}") from error
        self.report.outcomes.append(outcome)
        if outcome.tracking_lost:
            self.report.tracking_lost, self._lost_trial = outcome.error, trial
        trial.set_user_attr(OUTCOME, outcome.status)
        if outcome.run_id:
            trial.set_user_attr(MLFLOW_RUN, outcome.run_id)
        took = time.monotonic() - started
        self.opt.log(
            f"[{self.id}] {label} {outcome.status} in {took:.0f} s"
            + (f": {outcome.error[:200]}" if outcome.error else "")
        )
        if outcome.status != "FINISHED":
            raise RunFailed(outcome.error or outcome.status)
        return _value(outcome.eval_last)

    def _enqueue_retry(self, trial, *, lost: int) -> None:
        attrs = {k: trial.user_attrs[k] for k in IDENTITY if k in trial.user_attrs}
        self.ostudy.enqueue_trial({}, user_attrs=attrs | {LOST: lost, RETRY_OF: trial.number})

    def _lost_reason(self, trial) -> str:
        who = trial.user_attrs.get(WORKER, "a worker")
        grace = self.opt.grace_period if self.opt.grace_period is not None else 2 * self.opt.heartbeat_interval
        return f"{who} was lost (no heartbeat for {grace} s) while running trial {trial.number}"

    def _on_stale(self, study, trial) -> None:
        """Called (once, by one worker) for a trial whose worker stopped sending heartbeats."""
        key = trial.user_attrs.get(KEY)
        if key is None:
            return
        label = trial.user_attrs.get(LABEL, key)
        reason = self._lost_reason(trial)
        if self.client is not None:
            mark_orphaned_runs(self.client, self.ctx.experiment_id, [key], reason=reason)
        lost = int(trial.user_attrs.get(LOST, 0)) + 1
        if lost > self.opt.max_retries:
            self.opt.log(
                f"[{self.id}] {label}: {reason}; not retried: {lost} workers were lost running it "
                f"(max_retries={self.opt.max_retries})"
            )
            return
        self._enqueue_retry(trial, lost=lost)
        self.opt.log(f"[{self.id}] {label}: {reason}; enqueued a retry")


class StaleTrialWatch:
    """Fails stale trials every ``interval_s`` in a daemon thread while the worker runs a trial
    (Optuna's ``fail_stale_trials`` is atomic per trial: the main loop's own calls and other
    workers' never fail one twice, and the stale callback runs once per trial)."""

    def __init__(self, ostudy, interval_s: float) -> None:
        self.ostudy = ostudy
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="workbench-stale-trials", daemon=True)

    def _run(self) -> None:
        import optuna

        while not self._stop.wait(self.interval_s):
            try:
                optuna.storages.fail_stale_trials(self.ostudy)
            except Exception:  # noqa: BLE001 - storage briefly unavailable: the next round (or the loop) retries
                pass

    def __enter__(self) -> StaleTrialWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def _value(x: float) -> float:
    """Optuna fails a trial whose value is NaN: a finished run without an eval counts 0."""
    return float(x) if x is not None and math.isfinite(x) else 0.0


def run_worker(
    study: Study,
    specs: list[RunSpec],
    storage_url: str,
    options: WorkerOptions | None = None,
    progress_factory: Callable | None = None,
) -> WorkerReport:
    """Join (or start) the distributed execution of ``study``; return when no run is left."""
    for spec in specs:  # a worker that cannot run the study fails before touching anything shared
        preflight(spec.config)

    worker = Worker(study, specs, storage_url, options or WorkerOptions(), progress_factory)
    # shared: workers run together; a `workbench run` of the study on this machine is refused meanwhile
    with study_lock(study_tracking_uri(specs), study_experiment(study, specs), shared=True, command="workbench worker"):
        worker.connect()
        return worker.loop()
