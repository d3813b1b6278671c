"""Local process pool for ``workbench run --parallel N``: every run in its own spawned process.

A run's process reports through its own pipe (not a shared queue, whose lock a process killed
mid-write would hold forever): ``start``/``step`` messages feed the study progress display and
one ``result`` message carries its :class:`~workbench.execution.run.RunOutcome`.
A process that exits without a result (segfault, OOM kill, ``kill -9``) has its MLflow run marked
FAILED with the exit code, and the other runs go on.

Children use ``spawn`` (never ``fork``: the parent has torch threads), get
``torch.set_num_threads(cores // N)`` and treat SIGTERM like Ctrl-C: the run ends KILLED. On
Ctrl-C in the parent, nothing new is launched, every child is asked to stop (SIGTERM; a terminal's
Ctrl-C has usually reached them already), given ``STOP_GRACE_S`` to close its run, then killed.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from workbench.execution.interrupts import noting_ctrl_c, stop_requested, stopping_on
from workbench.execution.job import RunJob, execute_job, progress_metrics
from workbench.execution.run import RunOutcome, run_tags
from workbench.execution.threads import threads_per_run
from workbench.study import RunSpec
from workbench.tracking.redact import redact_text
from workbench.tracking.study_runs import mark_orphaned_runs
from workbench.tracking.writer import RunTracker, release_interrupted_statements

STOP_GRACE_S = 30.0  # how long stopping children get to mark their runs KILLED before SIGKILL
POLL_S = 0.2


# ------------------------------------------------------------------------------------ child side
class _PipeReporter:
    """The ``RunProgress`` interface ``execute_run`` drives, forwarded to the parent."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def start_run(self, label: str, steps: int) -> None:
        self.conn.send(("start", steps))

    def on_step(self, step: int, metrics: dict[str, float]) -> None:
        self.conn.send(("step", step, progress_metrics(metrics)))

    def end_run(self, label: str, status: str, detail: str = "") -> None:
        pass  # the parent ends the line when the result arrives


def child_main(job: RunJob, conn: Connection) -> None:
    """Entry point of a run's process (spawned)."""
    with stopping_on(signal.SIGINT, signal.SIGTERM):
        conn.send(("result", execute_job(job, _PipeReporter(conn))))
        conn.close()


# ----------------------------------------------------------------------------------- parent side
@dataclass
class _Child:
    proc: mp.process.BaseProcess
    spec: RunSpec
    conn: Connection  # the parent's (reading) end of the child's pipe


def describe_exit(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory? killed by the OOM killer or by hand)" if -code == signal.SIGKILL else ""
        return f"run process died with exit code {code}: {name}{hint}"
    return f"run process died with exit code {code} without reporting a result"


class _Pool:
    def __init__(self, ctx, specs: list[RunSpec], parallel: int, progress) -> None:
        self.ctx = ctx
        self.mp = mp.get_context("spawn")
        self.pending = deque(specs)
        self.parallel = parallel
        self.threads = threads_per_run(parallel)
        self.progress = progress
        self.running: dict[str, _Child] = {}
        self.results: dict[str, RunOutcome] = {}
        self.stopping = False
        self.interrupted = False  # a Ctrl-C reached this process, whatever became of its KeyboardInterrupt

    # -------------------------------------------------------------------------------- loop
    def run(self) -> dict[str, RunOutcome]:
        with noting_ctrl_c(self):
            try:
                while self.pending or self.running:
                    while self.pending and len(self.running) < self.parallel:
                        self._launch(self.pending.popleft())
                    self._drain(POLL_S)
                    self._reap()
                    self._stop_if_interrupted()
                self._stop_if_interrupted()  # a Ctrl-C during the last round
            except KeyboardInterrupt as interrupt:
                release_interrupted_statements(interrupt)
                self._stop()
                raise
        return self.results

    def _stop_if_interrupted(self) -> None:
        """Re-raise a Ctrl-C (or a SIGTERM, where `run` handles it) whose KeyboardInterrupt was lost inside a
        store call."""
        if self.interrupted or stop_requested():
            raise KeyboardInterrupt

    def _launch(self, spec: RunSpec) -> None:
        job = RunJob(spec, self.ctx.study.name, self.ctx.parent_run_id, self.ctx.tracking_uri, self.threads)
        reader, writer = self.mp.Pipe(duplex=False)
        proc = self.mp.Process(target=child_main, args=(job, writer), name=f"workbench-run {spec.label}")
        proc.start()
        writer.close()  # the child holds the writing end now: EOF here once it is gone
        self.running[spec.run_key] = _Child(proc, spec, reader)

    def _drain(self, timeout: float) -> None:
        """Handle every message waiting (waiting up to ``timeout`` for the first)."""
        by_conn = {child.conn: key for key, child in self.running.items() if not child.conn.closed}
        sentinels = [child.proc.sentinel for child in self.running.values()]  # wake up when one exits
        for conn in wait([*by_conn, *sentinels], timeout=timeout):
            if conn not in by_conn:
                continue
            try:
                while conn.poll():
                    self._handle(by_conn[conn], conn.recv())
            except (EOFError, OSError):  # the child exited (or died): nothing more will come
                conn.close()

    def _handle(self, key: str, message) -> None:
        kind = message[0]
        label = self.running[key].spec.label
        if kind == "start":
            self.progress.run_started(label, message[1])
        elif kind == "step":
            self.progress.run_step(label, message[1], message[2])
        elif kind == "result":
            outcome: RunOutcome = message[1]
            self.results[key] = outcome
            if outcome.tracking_lost:  # MLflow gone past the deadline: runs started now would only wait it out
                self.pending.clear()
            if outcome.status != "FINISHED":  # interrupted while opening its MLflow run: close it
                close_left_running(self.ctx, key, outcome)
            detail = f"health {outcome.health}" if outcome.status == "FINISHED" else outcome.error_line
            self.progress.run_ended(label, outcome.status, detail)

    def _reap(self) -> None:
        for key, child in list(self.running.items()):
            if child.proc.exitcode is None:
                continue
            if key not in self.results:
                self._drain(0.5)  # a result written just before exit may still be in the pipe
            child.proc.join()
            child.conn.close()
            del self.running[key]
            if key not in self.results:
                self._lost(child, "KILLED" if self.stopping else "FAILED", describe_exit(child.proc.exitcode))

    def _lost(self, child: _Child, status: str, reason: str) -> None:
        """A child gone without a result: close (or create) its MLflow run with the reason."""
        spec = child.spec
        outcome = RunOutcome(spec.label, spec.variant, spec.seed, spec.run_key, status, error=reason)
        try:
            outcome.run_id = record_lost_run(self.ctx, spec, status, reason)
        except Exception as error:  # noqa: BLE001 - the study goes on; the summary says what happened
            outcome.error += f" (and MLflow could not be updated: {error})"
        self.results[spec.run_key] = outcome
        self.progress.run_ended(spec.label, status, reason[:100])

    # -------------------------------------------------------------------------------- Ctrl-C
    def _stop(self) -> None:
        self.stopping = True
        self.pending.clear()
        try:
            for child in self.running.values():
                if child.proc.exitcode is None:
                    os.kill(child.proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_S
            while self.running and time.monotonic() < deadline:
                self._drain(POLL_S)
                self._reap()
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
            pass
        for child in self.running.values():
            if child.proc.exitcode is None:
                child.proc.kill()
        for key, child in list(self.running.items()):
            child.proc.join(timeout=10)
            child.conn.close()
            del self.running[key]
            if key not in self.results:
                self._lost(child, "KILLED", "stopped by Ctrl-C (killed after the grace period)")


def close_left_running(ctx, key: str, outcome: RunOutcome) -> None:
    """A run can end (Ctrl-C, an error) between creating its MLflow run and the point from which
    ``execute_run`` closes it: whatever it left RUNNING gets the outcome's status."""
    from mlflow import MlflowClient

    try:
        mark_orphaned_runs(
            MlflowClient(ctx.tracking_uri),
            ctx.experiment_id,
            [key],
            reason=outcome.error or outcome.status,
            status=outcome.status,
        )
    except Exception:  # noqa: BLE001 - best effort; a later run of the study closes it too
        pass


def record_lost_run(ctx, spec: RunSpec, status: str, reason: str) -> str | None:
    """Mark the RUNNING MLflow run of ``spec`` ``status`` with ``reason``; if the process died
    before it created one, create it, so that the failure is visible in MLflow."""
    from mlflow import MlflowClient

    client = MlflowClient(ctx.tracking_uri)
    closed = mark_orphaned_runs(client, ctx.experiment_id, [spec.run_key], reason=reason, status=status)
    if closed:
        return closed[0]
    experiment = spec.config.tracking.experiment or ctx.study.name
    tags = run_tags(ctx.study.name, spec.variant, spec.config, label=spec.label)
    tracker = RunTracker(ctx.tracking_uri, experiment, spec.label, tags, parent_run_id=ctx.parent_run_id)
    run_id = tracker.start()
    tracker.set_tags({"workbench.error": redact_text(reason)[:500]})
    tracker.finish(status)
    return run_id


def run_pool(ctx, specs: list[RunSpec], *, parallel: int, progress) -> dict[str, RunOutcome]:
    """Run ``specs`` ``parallel`` at a time, each in its own process; run_key -> outcome."""
    return _Pool(ctx, specs, parallel, progress).run()
