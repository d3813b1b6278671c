"""Batched MLflow writer for one run: params, buffered metrics, artifacts, terminal status.

Metrics are buffered and sent with ``log_batch`` (≤1000 per call) every ``flush_every``
steps, so tracking stays a small fraction of step time (see benchmarks/bench_sanity.py).

MLflow outages. Every call to MLflow goes through :func:`call_with_retries`: a call that fails
because the store is unreachable is retried with exponential backoff, each wait announced on
stderr and in the log (``MLflow unreachable at <uri>, retrying in Ns (k/N)…``), until
``tracking.outage_deadline_s`` has passed since the outage began; then :class:`TrackingOutage` is
raised. Buffered metrics leave the buffer only once MLflow has accepted them. A run that loses
MLflow for good writes its unsent metrics and its final status to a JSONL *spill*
(:func:`spill_path`, next to the checkpoints); executing the run again re-sends the spill first
(:func:`resend_spills`), so no logged point is lost or sent twice.
"""

from __future__ import annotations

import errno
import gc
import json
import logging
import math
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from workbench.tracking.redact import redact_text, redact_uri
from workbench.tracking.store import checkpoint_root, ensure_store, get_or_create_experiment

MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
MAX_PARAM_LEN = 6000

DEFAULT_OUTAGE_DEADLINE_S = 300.0
# MLflow's own HTTP retries (7 tries, backoff factor 2: ~4 min per failed call, timeout 120 s) would
# hide an outage inside one call; bounded here so that a failed call takes seconds and the loop
# below decides, visibly, how long to keep trying. A user's own setting of these variables wins.
MLFLOW_HTTP_BOUNDS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}
UNSENT_DIR = "unsent"
#: Metric points kept in memory while the store cannot write (a full disk): ~100 bytes each, so
#: ~20 MB; beyond it the oldest are dropped and counted as lost.
MAX_UNSENT_POINTS = 200_000
#: How a store says it cannot write: SQLite on ENOSPC ("database or disk is full") and on EFBIG
#: or another failed write ("disk I/O error"), the OS's own words for a file store's artifacts.
STORE_WRITE_FAILURES = (
    "database or disk is full",
    "disk I/O error",
    "No space left on device",
    "File too large",
    "Disk quota exceeded",
)

log = logging.getLogger("workbench.tracking")
log.addHandler(logging.NullHandler())  # the line goes to stderr once (below), and to the log if one is set up


class TrackingOutage(RuntimeError):
    """MLflow stayed unreachable for longer than the outage deadline."""


class StoreWriteFailed(RuntimeError):
    """The store could not write some of a run's metrics until its end (e.g. a full disk); the
    message is the one line that says so, with the counts."""


def store_write_failure(error: BaseException) -> str | None:
    """The cause, in a few words, when ``error`` (or one in its chain) says the store cannot write
    (disk full, file too large, a failed write), else None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if getattr(current, "errno", None) in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            return os.strerror(current.errno)  # type: ignore[attr-defined]  # errno tested just above with getattr
        text = str(current)
        for phrase in STORE_WRITE_FAILURES:
            if phrase in text:
                return phrase
        current = current.__cause__ or current.__context__
    return None


class _StoreErrorsToLog(logging.Filter):
    """MLflow's SQL store logs every database error with its traceback before raising it (~60
    lines each, on the terminal); the error reaches the caller anyway, so the traceback goes to
    the ``workbench.tracking`` log (the run's log, where one is set up) instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info:
            log.debug("%s", record.getMessage(), exc_info=record.exc_info)
            return False
        if record.exc_text:  # the redaction (tracking/redact.py) formatted the traceback already, in every CLI
            log.debug("%s\n%s", record.getMessage(), record.exc_text)
            return False
        return True


def route_store_tracebacks_to_log() -> None:
    logger = logging.getLogger("mlflow.store.db.utils")
    if not any(isinstance(f, _StoreErrorsToLog) for f in logger.filters):
        logger.addFilter(_StoreErrorsToLog())


def bound_mlflow_http_retries() -> None:
    for name, value in MLFLOW_HTTP_BOUNDS.items():
        os.environ.setdefault(name, value)


def is_unreachable(error: BaseException) -> bool:
    """True for failures that say the store could not be reached (worth retrying), not that it
    refused the request (a bad request fails the same way every time)."""
    text = str(error)
    if type(error).__name__ in ("ConnectionError", "Timeout", "ConnectTimeout", "ReadTimeout"):
        return True
    if "API request to " in text and "failed with" in text:  # mlflow.utils.rest_utils: connection refused, timeout,
        return True  # retries exhausted on 429/5xx
    return "database is locked" in text or "TEMPORARILY_UNAVAILABLE" in text


def interrupted_inside(error: BaseException) -> bool:
    """True when a ``KeyboardInterrupt`` is in ``error``'s chain. A Ctrl-C that lands inside a SQLite
    call makes SQLAlchemy roll back or commit while handling it; when that fails too ("database is
    locked"), the interrupt survives only as the new error's context, and retrying the "outage"
    would keep an interrupted run alive for the whole outage deadline."""
    return any(isinstance(e, KeyboardInterrupt) for e in exception_chain(error))


def exception_chain(error: BaseException) -> list[BaseException]:
    """``error`` and every exception it was raised from or while handling (each once)."""
    seen: dict[int, BaseException] = {}
    stack: list[BaseException | None] = [error]
    while stack:
        current = stack.pop()
        if current is not None and id(current) not in seen:
            seen[id(current)] = current
            stack += [current.__cause__, current.__context__]
    return list(seen.values())


def release_interrupted_statements(error: BaseException) -> None:
    """Let go of the SQLite statement a Ctrl-C cut short, before this process writes to the store again.

    An interrupt that lands inside a SQLite call leaves its statement un-finalized, reachable only from
    the frames of the interrupt's traceback (a reference cycle). Until the garbage collector gets to it,
    the statement keeps its lock on the database file, and the next write of this very process -- the one
    that marks the run KILLED -- waits out MLflow's 20 s busy timeout and fails "database is locked"
    (measured, SIGINT at random points of a log_batch/set_tag loop: 3 of 40 loops before, 0 of 40 with
    this). Clearing the locals of ``error``'s finished frames (its chain too) and collecting releases it;
    the traceback's file and line information stays for error.txt."""
    for current in exception_chain(error):
        traceback.clear_frames(current.__traceback__)  # frames still executing are skipped
    gc.collect()


def _warn(line: str) -> None:
    print(f"warning: {line}", file=sys.stderr, flush=True)
    log.warning(line)


@dataclass
class OutagePolicy:
    """How long to keep trying an unreachable MLflow: waits of ``first_wait_s`` doubling up to
    ``max_wait_s``, until ``deadline_s`` after the first failure."""

    deadline_s: float = DEFAULT_OUTAGE_DEADLINE_S
    first_wait_s: float = 1.0
    max_wait_s: float = 30.0
    warn: Callable[[str], None] = _warn

    def waits(self) -> list[float]:
        """The planned waits: their sum is the deadline (the last one shortened to fit)."""
        out, total, wait = [], 0.0, self.first_wait_s
        while total < self.deadline_s:
            step = min(wait, self.deadline_s - total)
            out.append(step)
            total += step
            wait = min(wait * 2, self.max_wait_s)
        return out


def call_with_retries(fn: Callable, *args, policy: OutagePolicy, uri: str, what: str, **kwargs):
    """``fn(*args, **kwargs)``, retried while MLflow is unreachable; raises :class:`TrackingOutage`
    once ``policy.deadline_s`` has passed since the first failure. Other errors pass through."""
    started = None
    plan = policy.waits()
    attempt = 0
    while True:
        try:
            return fn(*args, **kwargs)
        except Exception as error:  # sorted below: only "unreachable" is retried
            if interrupted_inside(error):  # Ctrl-C mid-call, masked by the store's own cleanup error
                raise KeyboardInterrupt from error
            if not is_unreachable(error):
                raise
            now = time.monotonic()
            started = now if started is None else started
            left = policy.deadline_s - (now - started)  # calls take time too: the clock, not the plan, decides
            if left <= 0 or attempt >= len(plan):
                raise TrackingOutage(
                    f"MLflow unreachable at {redact_uri(uri)} for {now - started:.0f} s "
                    f"(tracking.outage_deadline_s={policy.deadline_s:g}) during {what}: "
                    f"{redact_text(str(error).splitlines()[0])[:300]}"
                ) from None
            wait = min(plan[attempt], left)
            attempt += 1
            policy.warn(
                f"MLflow unreachable at {redact_uri(uri)}, retrying in {round(wait, 1):g}s ({attempt}/{len(plan)})…"
            )
            time.sleep(wait)


def spill_dir(tracking_uri: str) -> Path:
    return checkpoint_root(tracking_uri) / UNSENT_DIR


def spill_path(tracking_uri: str, run_key: str, run_id: str) -> Path:
    return spill_dir(tracking_uri) / f"{run_key}.{run_id}.jsonl"


def resend_spills(tracking_uri: str, run_key: str, policy: OutagePolicy | None = None) -> int:
    """Send what earlier attempts of ``run_key`` could not (metrics, then their final status) to
    their own MLflow runs, and remove each spill once sent. Returns the metric points sent."""
    from mlflow import MlflowClient

    policy = policy or OutagePolicy()
    client = MlflowClient(tracking_uri)
    sent = 0
    for path in sorted(spill_dir(tracking_uri).glob(f"{run_key}.*.jsonl")):
        try:
            sent += _resend_spill(client, path, tracking_uri, policy)
        except TrackingOutage:
            raise
        except Exception as error:  # noqa: BLE001 - refused (e.g. its run was deleted): kept aside, said once
            rejected = path.with_suffix(".rejected")
            path.rename(rejected)
            policy.warn(
                f"could not re-send {path.name} ({type(error).__name__}: "
                f"{redact_text(str(error).splitlines()[0])[:200]}); "
                f"kept as {rejected}"
            )
    return sent


def _resend_spill(client, path: Path, tracking_uri: str, policy: OutagePolicy) -> int:
    """Re-sending is idempotent: MLflow keeps one row per identical (key, value, timestamp, step)."""
    from mlflow.entities import Metric

    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    run_id = path.name.split(".")[1]
    metrics = [Metric(r["key"], r["value"], r["timestamp"], r["step"]) for r in records if r["kind"] == "metric"]
    for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
        call_with_retries(
            client.log_batch,
            run_id,
            metrics=metrics[i : i + MAX_METRICS_PER_BATCH],
            policy=policy,
            uri=tracking_uri,
            what="re-sending spilled metrics",
        )
    for r in records:
        if r["kind"] != "end":
            continue
        call_with_retries(
            client.set_tag,
            run_id,
            "workbench.error",
            r["error"][:500],  # the real reason
            policy=policy,
            uri=tracking_uri,
            what="closing a spilled run",
        )
        if client.get_run(run_id).info.status == "RUNNING":
            call_with_retries(
                client.set_terminated,
                run_id,
                status=r["status"],
                end_time=r["end_time"],
                policy=policy,
                uri=tracking_uri,
                what="closing a spilled run",
            )
    call_with_retries(
        client.set_tag,
        run_id,
        "workbench.spill_resent",
        str(len(metrics)),
        policy=policy,
        uri=tracking_uri,
        what="re-sending spilled metrics",
    )
    path.unlink()
    return len(metrics)


class RunTracker:
    """One MLflow run. ``start()`` creates it; ``finish(status)`` ends it (FINISHED/FAILED/KILLED)."""

    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        run_name: str,
        tags: dict[str, str],
        parent_run_id: str | None = None,
        flush_every: int = 10,
        outage: OutagePolicy | None = None,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.run_name = run_name
        self.tags = dict(tags)
        self.parent_run_id = parent_run_id
        self.flush_every = flush_every
        self.run_id: str | None = None
        self.client = None
        self._buffer: list = []
        self._steps_since_flush = 0
        self.seconds = 0.0  # time spent logging metrics (per-step cost), for the overhead benchmark
        self.start_seconds = 0.0
        self.outage = outage or OutagePolicy()
        self.unreachable = False  # set once an outage outlasted the deadline: later calls try once
        self.write_failure: str | None = None  # why the store cannot write metrics now (disk full)
        self.lost_points = 0  # points dropped beyond MAX_UNSENT_POINTS while it could not
        bound_mlflow_http_retries()
        route_store_tracebacks_to_log()

    def _call(self, fn: Callable, *args, what: str, **kwargs):
        policy = self.outage
        if self.unreachable:  # the deadline is spent: one try each, no more waiting
            policy = OutagePolicy(deadline_s=0.0, warn=policy.warn)
        try:
            return call_with_retries(fn, *args, policy=policy, uri=self.tracking_uri, what=what, **kwargs)
        except TrackingOutage:
            self.unreachable = True
            raise

    def start(self) -> str:
        from mlflow import MlflowClient

        t0 = time.perf_counter()

        ensure_store(self.tracking_uri)
        self.client = MlflowClient(self.tracking_uri)
        experiment_id = self._call(
            get_or_create_experiment, self.client, self.experiment, self.tracking_uri, what="opening the experiment"
        )
        tags = dict(self.tags)
        if self.parent_run_id:
            tags["mlflow.parentRunId"] = self.parent_run_id
        run = self._call(
            self.client.create_run, experiment_id, run_name=self.run_name, tags=tags, what="creating the run"
        )
        self.run_id = run.info.run_id
        self.start_seconds = time.perf_counter() - t0  # one-off (store creation), kept apart from per-step cost
        return self.run_id

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, _param_text(v)) for k, v in sorted(params.items())]
        for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self._call(
                self.client.log_batch, self.run_id, params=items[i : i + MAX_PARAMS_PER_BATCH], what="logging params"
            )

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        t0 = time.perf_counter()
        self._buffer_metrics(metrics, step, Metric)
        self.seconds += time.perf_counter() - t0
        if self._steps_since_flush >= self.flush_every or len(self._buffer) >= MAX_METRICS_PER_BATCH:
            self.flush()  # counts its own time

    def _buffer_metrics(self, metrics: dict[str, float], step: int, Metric) -> None:
        ts = int(time.time() * 1000)
        for key, value in metrics.items():
            self._buffer.append(Metric(key, store_value(value), ts, step))
        self._steps_since_flush += 1

    def flush(self) -> None:
        t0 = time.perf_counter()
        self._steps_since_flush = 0
        while self._buffer:
            chunk = self._buffer[:MAX_METRICS_PER_BATCH]
            try:
                self._call(self.client.log_batch, self.run_id, metrics=chunk, what="logging metrics")
            except Exception as error:  # sorted: only "the store cannot write" is held
                cause = store_write_failure(error)
                if cause is None:
                    raise
                self._hold(cause, error)
                break
            del self._buffer[: len(chunk)]  # only once MLflow has them: an outage loses nothing
        else:
            if self.write_failure is not None and not self.lost_points:
                self.outage.warn(f"metrics are written to {redact_uri(self.tracking_uri)} again; none lost")
                self.write_failure = None
        self.seconds += time.perf_counter() - t0

    def _hold(self, cause: str, error: BaseException) -> None:
        """The store cannot write (disk full): keep the points for the next flush, up to
        ``MAX_UNSENT_POINTS`` (the oldest beyond it are dropped and counted); say so once, on one
        line; the traceback goes to the log."""
        log.debug("store cannot write metrics of run %s", self.run_id, exc_info=error)
        if self.write_failure is None:
            self.outage.warn(
                f"cannot write metrics to {redact_uri(self.tracking_uri)} ({cause}); keeping up to "
                f"{MAX_UNSENT_POINTS:,} points in memory and retrying at each flush"
            )
        self.write_failure = cause
        excess = len(self._buffer) - MAX_UNSENT_POINTS
        if excess > 0:
            del self._buffer[:excess]
            self.lost_points += excess

    def write_failure_line(self) -> str:
        return (
            f"the store could not write this run's metrics ({self.write_failure}): {len(self._buffer):,} "
            f"point(s) unsent, {self.lost_points:,} lost beyond the in-memory bound of {MAX_UNSENT_POINTS:,}"
        )

    def set_tags(self, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self._call(self.client.set_tag, self.run_id, key, str(value), what="setting tags")

    def log_text(self, text: str, artifact_file: str) -> None:
        self._call(self.client.log_text, self.run_id, text, artifact_file, what=f"logging {artifact_file}")

    def log_dict(self, data: Any, artifact_file: str) -> None:
        if artifact_file.endswith((".yaml", ".yml")):
            self.log_text(yaml.safe_dump(data, sort_keys=False), artifact_file)
        else:
            self.log_text(json.dumps(data, indent=2, default=str), artifact_file)

    def log_table(self, rows: list[dict[str, Any]], artifact_file: str) -> None:
        import pandas as pd

        if rows:
            self._call(
                self.client.log_table,
                self.run_id,
                data=pd.DataFrame(rows),
                artifact_file=artifact_file,
                what=f"logging {artifact_file}",
            )

    def log_bytes(self, data: bytes, artifact_file: str) -> None:
        """One binary artifact (e.g. ``eval/problems.csv.gz``) at ``artifact_file``."""
        folder, _, name = artifact_file.rpartition("/")
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / name
            local.write_bytes(data)
            self._call(
                self.client.log_artifact, self.run_id, str(local), folder or None, what=f"logging {artifact_file}"
            )

    def log_artifact_dir(self, files: dict[str, str]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            for name, text in files.items():
                (Path(tmp) / name).write_text(text)
            self._call(self.client.log_artifacts, self.run_id, tmp, what="logging artifacts")

    def finish(self, status: str = "FINISHED", error: BaseException | None = None) -> None:
        """Flush and end the run; on failure the traceback is kept as ``error.txt``."""
        if self.run_id is None:
            return
        try:
            self.flush()
        finally:
            if self.write_failure is not None:  # points could not be written: FAILED, the cause on one line
                self._end_unwritten(self.write_failure_line())
            if error is not None:
                # a connection error quotes its URI: no password reaches the store (tracking/redact.py)
                text = redact_text("".join(traceback.format_exception(type(error), error, error.__traceback__)))
                self.log_text(text, "error.txt")
                self._call(
                    self.client.set_tag,
                    self.run_id,
                    "workbench.error",
                    redact_text(f"{type(error).__name__}: {error}")[:500],
                    what="recording the error",
                )
            self._call(self.client.set_terminated, self.run_id, status=status, what="ending the run")

    def _end_unwritten(self, line: str) -> None:
        """Mark the run FAILED with ``line`` as ``workbench.error`` (each write tried once: the
        disk may still be full), then raise :class:`StoreWriteFailed`."""
        for fn, args in (
            (self.client.set_tag, (self.run_id, "workbench.error", line[:500])),
            (self.client.set_terminated, (self.run_id, "FAILED")),
        ):
            try:
                fn(*args)
            except Exception as error:  # the message below says it all; traceback to the log
                log.debug("could not record the write failure of run %s", self.run_id, exc_info=error)
        raise StoreWriteFailed(line)

    def spill(self, run_key: str, status: str, error: BaseException | None = None) -> Path | None:
        """MLflow is gone: write the unsent metrics and the final status to this run's spill
        (re-sent by :func:`resend_spills` when the run is executed again), then try once to end
        the run. Never raises for MLflow; returns the spill's path (None if the run never opened)."""
        if self.run_id is None:
            return None
        path = spill_path(self.tracking_uri, run_key, self.run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        reason = "" if error is None else f"{type(error).__name__}: {error}"
        lines = [
            json.dumps({"kind": "metric", "key": m.key, "value": m.value, "timestamp": m.timestamp, "step": m.step})
            for m in self._buffer
        ]
        lines.append(
            json.dumps({"kind": "end", "status": status, "error": reason, "end_time": int(time.time() * 1000)})
        )
        with path.open("a") as f:  # a second spill of the same run (rare) appends
            f.write("\n".join(lines) + "\n")
        self._buffer.clear()
        self.unreachable = True
        try:  # the server may be back already: then the run is FAILED now, not only on resume
            self._call(self.client.set_tag, self.run_id, "workbench.error", reason[:500], what="recording the error")
            self._call(self.client.set_terminated, self.run_id, status=status, what="ending the run")
        except Exception:  # noqa: BLE001 - recorded in the spill; resend_spills ends the run
            pass
        self.outage.warn(
            f"MLflow run {self.run_id} ended {status}; {len(lines) - 1} unsent metric point(s) "
            f"kept in {path} (sent when the run is executed again)"
        )
        return path


def store_value(value: float) -> float:
    """A metric value as the workbench sends it to MLflow: NaN kept, ±inf as ±1e308 (MLflow's sqlite
    store rejects infinities in some versions; the health rules saw the raw value). tracking/bulk.py
    applies the same rule to whole columns."""
    value = float(value)
    if math.isfinite(value) or math.isnan(value):
        return value
    return math.copysign(1e308, value)


def _param_text(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (list, tuple, dict)) else str(value)
    return text[:MAX_PARAM_LEN]
