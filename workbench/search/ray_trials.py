"""``workbench tune --executor ray``: a search's trials as Ray tasks.

The search is the same Optuna study in the same storage as a local ``tune`` (the driver creates or
joins it, :mod:`workbench.search.worker`); only where trials execute changes. Each Ray task is a
:class:`~workbench.search.worker.SearchWorker` that runs exactly one trial (``loop(max_trials=1)``)
and returns; the driver keeps ``--workers`` such tasks in flight while the budget has room, each
with the resources of its runs (:func:`workbench.execution.ray_executor.run_resources`). The task
samples, runs, reports and prunes through the storage as a local worker does, so pruning works
unchanged. A task whose Ray worker dies is not retried by Ray: its trial's heartbeat stops, and
the stale-trial rule of the storage fails it and enqueues its parameters again (``max_retries``),
for the next task to pick up, as with a lost local worker.

Ctrl-C on the driver cancels the tasks (their runs end KILLED and their trials FAIL, as in a
local worker), then the driver re-raises; ``tune`` again continues the search. The tasks' log
lines come back to the driver through the inbox actor.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from workbench.execution.interrupts import stopping_on
from workbench.execution.ray_executor import (
    STOP_GRACE_S,
    RayOptions,
    connect,
    forwarded_env,
    run_resources,
    start_inbox,
)
from workbench.search.spec import SearchSpec
from workbench.search.worker import SearchWorker, TuneOptions, WorkerReport, _any_config, _prebuild_model

POLL_S = 0.5


@dataclass
class TrialJob:
    spec: SearchSpec
    storage_url: str
    options: dict  # TuneOptions.picklable()
    index: int  # seeds the sampler (distinct per task)
    threads: int
    deadline: float | None
    cwd: str
    env: dict[str, str]


def ray_trial_task(job: TrialJob, inbox) -> WorkerReport:
    """Body of one trial's Ray task: join the search, run one trial, report. A cancel is remembered
    (:mod:`workbench.execution.interrupts`): one Python swallows still stops the run at its next step."""
    with stopping_on(signal.SIGINT):
        return _ray_trial_task(job, inbox)


def _ray_trial_task(job: TrialJob, inbox) -> WorkerReport:
    os.environ.update(job.env)
    if os.path.isdir(job.cwd):
        os.chdir(job.cwd)
    import torch
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(job.threads)
    hf_logging.disable_progress_bar()

    def log(line: str) -> None:
        inbox.put.remote("log", line)

    worker = SearchWorker(job.spec, job.storage_url, TuneOptions(**job.options, log=log), job.index, announce=False)
    try:
        worker.connect()
        return worker.loop(job.deadline, max_trials=1)
    except KeyboardInterrupt:  # cancelled by the driver's Ctrl-C: the run ended KILLED, the trial FAIL
        return WorkerReport(worker.id, stopped="interrupted")


def trials_on_ray(ray_options: RayOptions, workers: int) -> Callable[[SearchWorker, float | None], str]:
    """``run_search``'s ``run_trials`` for Ray: connects now (``RayUnavailable`` before the search is touched)."""
    connect(ray_options.address)

    def run_trials(coordinator: SearchWorker, deadline: float | None) -> str:
        return run_trials_on_ray(coordinator, workers, deadline, ray_options)

    return run_trials


def run_trials_on_ray(coordinator: SearchWorker, workers: int, deadline: float | None, ray_options: RayOptions) -> str:
    """Keep ``workers`` trial tasks in flight until the budget is used, the deadline passes or
    ``max_consecutive_failures`` trials in a row failed; returns why it stopped (``WorkerReport.stopped``)."""
    import optuna

    ray = connect(ray_options.address)
    from ray.exceptions import RayError  # deferred: ray

    spec, storage_url, options = coordinator.spec, coordinator.storage_url, coordinator.opt

    _prebuild_model(spec)
    inbox = start_inbox(ray)
    resources = run_resources(_any_config(spec), ray_options)
    remote = ray.remote(ray_trial_task).options(**resources, max_retries=0, name=f"workbench-trial {spec.optuna_name}")
    env = forwarded_env() | {"MLFLOW_TRACKING_URI": coordinator.ctx.tracking_uri}

    def make_job(index: int) -> TrialJob:
        return TrialJob(
            spec,
            storage_url,
            options.picklable(),
            index,
            max(1, int(resources["num_cpus"])),
            deadline,
            os.getcwd(),
            env,
        )

    in_flight: dict = {}
    launched, failures, stopped = 0, 0, ""
    options.log(f"trials as Ray tasks, {workers} at a time")
    try:
        while True:
            optuna.storages.fail_stale_trials(coordinator.ostudy)  # a lost task's trial comes back as a retry
            counts = coordinator.counts()
            room = spec.n_trials is None or counts["done"] + len(in_flight) < spec.n_trials or counts["WAITING"]
            timed_out = deadline is not None and time.time() >= deadline
            while not stopped and not timed_out and room and len(in_flight) < workers:
                launched += 1
                in_flight[remote.remote(make_job(launched), inbox)] = launched
                room = spec.n_trials is None or counts["done"] + len(in_flight) < spec.n_trials
            if not in_flight:
                return stopped or ("timeout" if timed_out else "budget")
            ready, _ = ray.wait(list(in_flight), num_returns=len(in_flight), timeout=POLL_S)
            try:
                lines = ray.get(inbox.take.remote())
            except RayError:  # the inbox's node died: Ray restarts it; only log lines are lost
                lines = []
            for _, line in lines:
                options.log(line)
            for ref in ready:
                number = in_flight.pop(ref)
                try:
                    report: WorkerReport = ray.get(ref)
                except RayError as error:  # its worker died: the trial's heartbeat stops; the storage retries it
                    options.log(f"trial task {number}: {type(error).__name__}: {' '.join(str(error).split())[:200]}")
                    continue
                outcomes = [outcome for _, outcome in report.trials]
                if report.stopped in ("tracking", "failures"):
                    stopped = report.stopped
                if "FAILED" in outcomes:
                    failures += 1
                elif "COMPLETE" in outcomes or "PRUNED" in outcomes:
                    failures = 0
                if failures >= options.max_consecutive_failures:
                    options.log(
                        f"stopping: {failures} trials in a row failed (see their workbench.error; fix the "
                        f"cause and run tune again to go on)"
                    )
                    stopped = "failures"
    except KeyboardInterrupt:
        _cancel(ray, in_flight)
        raise


def _cancel(ray, in_flight: dict) -> None:
    """Ctrl-C: each task gets KeyboardInterrupt (its run ends KILLED, its trial FAIL); the rest are forced."""
    for ref in in_flight:
        ray.cancel(ref)
    try:
        ray.wait(list(in_flight), num_returns=len(in_flight), timeout=STOP_GRACE_S)
    except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
        pass
    for ref in in_flight:
        ray.cancel(ref, force=True)
