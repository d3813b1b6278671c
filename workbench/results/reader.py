"""Read a study back from MLflow into tidy pandas frames, fast.

    from workbench.results.reader import load_study_frames

    history, runs = load_study_frames("grpo-vs-dr-grpo")           # default store
    history, runs = load_study_frames("grpo-vs-dr-grpo", metrics=["eval/accuracy", "reward/mean"])

Output (the input contract of :mod:`workbench.compare`):
* ``history``: one row per logged point, columns ``run_id, variant, seed, step, metric, value``
  (``step`` int64, ``value`` float64). A step logged twice for a metric keeps the value with the
  latest timestamp. NaN points are NaN; ``±inf`` points (which the writer stores as ``±1e308``
  because MLflow's stores reject infinities) are read back as ``±inf``. Sorted by run (in
  ``runs`` order), metric, step.
* ``runs``: one row per child run of the study (tag ``workbench.role=run``; the study's parent
  run and Optuna trials are not included), columns ``run_id, run_name, variant, arm, seed,
  status, health, health_reasons, run_key, stopped_early, start_time, end_time, artifact_uri``
  and then the run's params with their dotted keys (``learner.lr``, ...), numeric where every
  value parses as a number, ``None`` for the string ``"None"``. Sorted by variant (first-start
  order), arm (first-start order), seed, start time.

  ``arm`` is the comparison unit, one per (variant, grid point) (:mod:`workbench.compare.arms`):
  the ``workbench.arm`` tag if the run has one, else its run name (the study label, e.g.
  ``dapo/lr=3e-05/seed=1``) without the trailing ``/seed=N``, when that name starts with the
  variant and ends with the run's own seed; else (runs logged otherwise) the variant.

How it is fast (measured with MLflow 3.17 on 120k points): a database store (``sqlite:``,
``postgresql:``, ``mysql:``, ``mssql:``) is read with a handful of SQL queries on MLflow's own
``runs``/``tags``/``params``/``metrics`` tables (0.5 s, against ~20 s for one
``get_metric_history`` per run and metric through a server); a tracking server
(``http(s)://``) is read with ``search_runs`` plus the ``metrics/get-history-bulk`` REST
endpoint, one request per metric key per 100 runs (never one per run per metric).

Cache: the history of a run in a terminal state (``FINISHED``, ``FAILED``, ``KILLED``) cannot
change, so it is kept on disk after the first read, as ``<cache_dir>/<store>/<run_id>.parquet``
with a ``.json`` sidecar recording the run's status and end time and which metric keys are
complete. A later load reads only what is missing (new runs, running runs, metric keys not read
before); a run whose status or end time changed is read again. ``cache_dir`` defaults to
``$WORKBENCH_HISTORY_CACHE`` or ``./.workbench/cache``; ``cache_dir=False`` turns it off.
``health.json`` and ``mismatch.json`` artifacts of terminal runs are cached the same way
(:meth:`StudyReader.health_reports`, :meth:`StudyReader.mismatch_records`).

Per-problem eval results (the ``eval/problems.csv.gz`` artifact of each run)::

    from workbench.results.reader import load_problem_results

    problems = load_problem_results("grpo-vs-dr-grpo")   # run_id, step, problem_id, correct, length, truncated

are read from the run's artifacts (a local folder directly; a tracking server's through MLflow's
artifact download), not cached; a run without the artifact has no rows.

The parts live in :mod:`workbench.results.readers`, one module each: the :class:`RunReader`
protocol, its SQL and REST backends, the cache and the frame assembly; this module puts them
together (:class:`StudyReader`) and keeps the names callers import.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pandas as pd

from workbench.errors import did_you_mean
from workbench.results.readers import reader_for
from workbench.results.readers.cache import HistoryCache, default_cache_dir
from workbench.results.readers.frames import (
    EMPTY_RUN,
    HISTORY_COLUMNS,
    RUN_COLUMNS,
    assemble_history,
    clean_points,
    empty_points,
    end_time_ms,
    runs_frame,
    split_runs,
)
from workbench.results.readers.protocol import TERMINAL_STATUSES, RunReader, StudyNotFound
from workbench.safe_io import parse_json
from workbench.tracking.artifacts import (
    MISMATCH_ARTIFACT,
    PASS_AT_K_COLUMNS,
    PROBLEM_COLUMNS,
    PROBLEMS_ARTIFACT,
    decode_mismatch_records,
    decode_problem_rows,
    empty_problem_rows,
)
from workbench.tracking.redact import redact_uri
from workbench.tracking.store import resolve_tracking_uri

__all__ = [
    "HISTORY_COLUMNS",
    "RUN_COLUMNS",
    "LoadStats",
    "MismatchRecords",
    "StudyFrames",
    "StudyNotFound",
    "StudyReader",
    "load_problem_results",
    "load_study_frames",
]


@dataclass
class LoadStats:
    """What one load did: which runs' histories came from the store and which from the cache."""

    backend: str
    runs: int = 0
    fetched_runs: list[str] = field(default_factory=list)  # runs whose metrics were read from the store
    cached_runs: list[str] = field(default_factory=list)  # runs served entirely from the cache
    points_fetched: int = 0
    points: int = 0
    requests: int = 0  # store round trips for metric history (SQL queries or HTTP requests)
    seconds: float = 0.0

    def summary(self) -> str:
        return (
            f"{self.runs} runs, {self.points:,} points in {self.seconds:.2f} s "
            f"({len(self.fetched_runs)} runs read from the {self.backend} store, "
            f"{len(self.cached_runs)} from the cache)"
        )


@dataclass
class StudyFrames:
    """A loaded study: ``history`` and ``runs`` frames (module docstring) plus load statistics."""

    study: str
    experiment_id: str
    history: pd.DataFrame
    runs: pd.DataFrame
    stats: LoadStats

    def __iter__(self):  # history, runs = frames
        return iter((self.history, self.runs))


# --------------------------------------------------------------------------------------------
# The reader
# --------------------------------------------------------------------------------------------


class StudyReader:
    """Reads studies from one MLflow store. See the module docstring."""

    def __init__(
        self,
        tracking_uri: str | None = None,
        *,
        cache_dir: str | os.PathLike[str] | bool | None = None,
        **backend_kwargs: Any,
    ) -> None:
        self.tracking_uri = tracking_uri or resolve_tracking_uri()
        self.backend: RunReader = reader_for(self.tracking_uri, **backend_kwargs)
        if cache_dir is False:
            root = None
        elif cache_dir is None or cache_dir is True:
            root = default_cache_dir()
        else:
            root = Path(cache_dir).resolve()
        self.cache = HistoryCache(root, self.tracking_uri)

    # ---- lookup ------------------------------------------------------------------------------

    def experiment_id(self, study: str) -> str:
        eid = self.backend.experiment_id(study)
        if eid is None:
            names = self.backend.experiment_names()
            hint = did_you_mean(study, names)
            known = ", ".join(sorted(n for n in names if n != "Default")) or "none"

            raise StudyNotFound(f"no study {study!r} in {redact_uri(self.tracking_uri)}{hint} (studies: {known})")
        return eid

    def has_study(self, study: str) -> bool:
        return self.backend.experiment_id(study) is not None

    def run_info(self, run_id: str) -> dict[str, Any] | None:
        """``{run_id, experiment_id, experiment, role, artifact_uri}`` of any run, or None."""
        return self.backend.run_info(run_id)

    def parent_run_id(self, study: str) -> str | None:
        """The study's parent run (tag ``workbench.role=study``), or None."""
        return self.backend.parent_run_id(self.experiment_id(study))

    # ---- runs and history --------------------------------------------------------------------

    def load_runs(self, study: str, *, role: str = "run") -> tuple[str, pd.DataFrame]:
        eid = self.experiment_id(study)
        rows, tags, params = self.backend.runs(eid, role)
        return eid, runs_frame(rows, tags, params)

    def load(
        self,
        study: str,
        metrics: Iterable[str] | None = None,
        *,
        run_ids: Iterable[str] | None = None,
        role: str = "run",
    ) -> StudyFrames:
        """Frames of the study's child runs (``run_ids``: only those); ``metrics``: only those keys."""
        t0 = time.perf_counter()
        eid, runs = self.load_runs(study, role=role)
        if run_ids is not None:
            wanted = set(run_ids)
            runs = runs[runs["run_id"].isin(wanted)].reset_index(drop=True)
        stats = LoadStats(self.backend.name, runs=len(runs))
        requests0 = self.backend.requests
        want = None if metrics is None else set(metrics)

        cached: dict[str, pd.DataFrame] = {}
        partial: dict[str, tuple[pd.DataFrame, set[str], set[str]]] = {}
        to_fetch: list[str] = []
        for rid, status, end in zip(runs["run_id"], runs["status"], runs["end_time"], strict=True):
            hit = self.cache.get(rid, status, end_time_ms(end))
            if hit is None:
                to_fetch.append(rid)
                continue
            frame, keys, available = hit
            missing = (available if want is None else available & want) - keys
            if missing:
                partial[rid] = hit
                to_fetch.append(rid)
            else:
                cached[rid] = frame
        available_keys = self.backend.metric_keys([r for r in to_fetch if r not in partial])
        for rid, (_, _, available) in partial.items():
            available_keys[rid] = available
        info = runs.set_index("run_id")
        frozen = [r for r in to_fetch if info.at[r, "status"] in TERMINAL_STATUSES]
        live = [r for r in to_fetch if info.at[r, "status"] not in TERMINAL_STATUSES]
        parts = [self.backend.history(ids, want, frozen=f) for ids, f in ((frozen, True), (live, False)) if ids]
        fetched = clean_points(pd.concat(parts, ignore_index=True) if parts else empty_points())
        stats.fetched_runs = list(to_fetch)
        stats.cached_runs = list(cached)
        stats.points_fetched = len(fetched)

        by_run = split_runs(fetched)
        for rid in to_fetch:
            new = by_run.get(rid, EMPTY_RUN)
            available = available_keys.get(rid, set())
            got = available if want is None else available & want
            if rid in partial:
                old, keys, _ = partial[rid]
                new = pd.concat([old[~old["metric"].isin(got)], new], ignore_index=True)
                new = new.sort_values(["metric", "step"], kind="stable", ignore_index=True)
                got = keys | got
            cached[rid] = new
            self.cache.put(rid, info.at[rid, "status"], end_time_ms(info.at[rid, "end_time"]), new, got, available)

        history = assemble_history(runs, cached, want)
        stats.points = len(history)
        stats.requests = self.backend.requests - requests0
        stats.seconds = time.perf_counter() - t0
        return StudyFrames(study, eid, history, runs, stats)

    # ---- artifacts ---------------------------------------------------------------------------

    def read_artifact_bytes(self, run_id: str, artifact_uri: str | None, path: str) -> bytes | None:
        """One artifact file's bytes (None if absent): read directly for a local artifact store,
        downloaded otherwise (a tracking server's artifacts included)."""
        if artifact_uri and artifact_uri.startswith("file:"):
            local = Path(unquote(urlparse(artifact_uri).path)) / path
            try:
                return local.read_bytes()
            except OSError:
                return None
        import tempfile

        import mlflow
        from mlflow.exceptions import MlflowException

        with tempfile.TemporaryDirectory() as tmp:
            try:
                local = mlflow.artifacts.download_artifacts(
                    run_id=run_id, artifact_path=path, dst_path=tmp, tracking_uri=self.tracking_uri
                )
                return Path(local).read_bytes()
            except (MlflowException, OSError):
                return None

    def read_artifact_text(self, run_id: str, artifact_uri: str | None, path: str) -> str | None:
        """One artifact file as text (None if absent or not UTF-8)."""
        data = self.read_artifact_bytes(run_id, artifact_uri, path)
        try:
            return None if data is None else data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def problem_results(self, runs: pd.DataFrame) -> pd.DataFrame:
        """Per-problem eval results of ``runs`` (rows of a ``runs`` frame: ``run_id`` and
        ``artifact_uri``), long: ``run_id, step, problem_id, correct, length, truncated``, one row
        per run, eval step and held-out problem (the ``eval/problems.csv.gz`` artifact,
        :mod:`workbench.tracking.artifacts`). A run without the artifact (logged before it existed,
        imported, failed before its end) or with an unreadable one has no rows: never an error.
        Read in parallel; ``frame.attrs["unreadable"]`` lists runs whose artifact did not parse."""
        todo = list(zip(runs["run_id"], runs["artifact_uri"], strict=True))

        def read(item: tuple[str, str | None]) -> pd.DataFrame | None:
            data = self.read_artifact_bytes(item[0], item[1], PROBLEMS_ARTIFACT)
            return None if data is None else decode_problem_rows(data)

        frames, unreadable = [], []
        if todo:
            with ThreadPoolExecutor(max_workers=min(8, len(todo))) as pool:
                futures = [(rid, pool.submit(read, (rid, art))) for rid, art in todo]
                for rid, future in futures:
                    try:
                        frame = future.result()
                    except ValueError:  # not the artifact's format: said in attrs, not raised
                        unreadable.append(rid)
                        continue
                    if frame is not None and len(frame):
                        frames.append(frame.assign(run_id=rid))
        empty = empty_problem_rows().assign(run_id=pd.Series([], dtype="string"))
        out = pd.concat(frames, ignore_index=True) if frames else empty
        extra = [c for c in PASS_AT_K_COLUMNS if c in out.columns]  # with rollout.eval_samples > 1 (NaN elsewhere)
        out = out[["run_id", *PROBLEM_COLUMNS, *extra]].astype({"run_id": "string"})
        out.attrs["unreadable"] = unreadable
        return out

    def health_reports(self, runs: pd.DataFrame, artifact: str = "health.json") -> dict[str, dict[str, Any] | None]:
        """``run_id -> health.json`` (None where the run logged none, or an unparsable one), read in parallel,
        cached for terminal runs."""
        return {
            rid: None if isinstance(report, ValueError) else report
            for rid, report in self._json_artifacts(runs, artifact).items()
        }

    def mismatch_records(self, runs: pd.DataFrame) -> MismatchRecords:
        """Each run's ``mismatch.json`` records (:func:`workbench.tracking.artifacts.decode_mismatch_records`:
        histogram of the sampler/learner log-ratio and worst tokens, every ``health.mismatch_record_every``
        steps), read in parallel and cached for terminal runs like ``health.json``. A run without the artifact
        (the record off, an imported run, a run from before it existed) is in neither map; one whose artifact
        does not parse or is not the format is in ``unreadable``, with the reason: never an error."""
        out = MismatchRecords({}, {})
        for rid, data in self._json_artifacts(runs, MISMATCH_ARTIFACT).items():
            try:
                if isinstance(data, ValueError):
                    raise data
                if data is not None:
                    out.records[rid] = decode_mismatch_records(data)
            except ValueError as error:
                out.unreadable[rid] = str(error)
        return out

    def _json_artifacts(self, runs: pd.DataFrame, artifact: str) -> dict[str, Any]:
        """``run_id -> parsed JSON artifact``: None where the run has none, a ``ValueError`` where it does not
        parse. Read in parallel; terminal runs' are kept in the cache (``HistoryCache.put_json``), except an
        unparsable one, which is read again next time."""
        out: dict[str, Any] = {}
        todo = []
        for rid, status, end, art in zip(
            runs["run_id"], runs["status"], runs["end_time"], runs["artifact_uri"], strict=True
        ):
            hit, data = self.cache.get_json(artifact, rid, status, end_time_ms(end))
            if hit:
                out[rid] = data
            else:
                todo.append((rid, status, end_time_ms(end), art))

        def read(item):
            rid, _, _, art = item
            text = self.read_artifact_text(rid, art, artifact)
            try:
                return parse_json(text, artifact) if text else None
            except ValueError as error:  # not JSON, or nested too deeply: one line naming the artifact
                return error

        if todo:
            with ThreadPoolExecutor(max_workers=min(8, len(todo))) as pool:
                for item, data in zip(todo, pool.map(read, todo), strict=True):
                    out[item[0]] = data
                    if not isinstance(data, ValueError):
                        self.cache.put_json(artifact, item[0], item[1], item[2], data)
        return {rid: out[rid] for rid in runs["run_id"]}


@dataclass
class MismatchRecords:
    """Runs' ``mismatch.json`` artifacts (:meth:`StudyReader.mismatch_records`)."""

    records: dict[str, list[dict[str, Any]]]  # run_id -> its records, in step order
    unreadable: dict[str, str]  # run_id -> why its artifact could not be read
    """Runs in neither map logged no artifact."""


def load_study_frames(
    study_name: str,
    tracking_uri: str | None = None,
    metrics: Iterable[str] | None = None,
    *,
    cache_dir: str | os.PathLike[str] | bool | None = None,
    run_ids: Iterable[str] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(history, runs)`` of every child run of the study ``study_name`` (its experiment).

    ``metrics``: only these metric keys (default all). See the module docstring for the columns,
    the fast paths and the cache.
    """
    frames = StudyReader(tracking_uri, cache_dir=cache_dir).load(study_name, metrics, run_ids=run_ids)
    return frames.history, frames.runs


def load_problem_results(
    study_name: str, tracking_uri: str | None = None, *, run_ids: Iterable[str] | None = None
) -> pd.DataFrame:
    """Per-problem eval results of every child run of ``study_name`` (``run_ids``: only those):
    ``run_id, step, problem_id, correct, length, truncated`` (:meth:`StudyReader.problem_results`);
    join ``runs`` on ``run_id`` for variant, arm and seed."""
    reader = StudyReader(tracking_uri, cache_dir=False)
    _, runs = reader.load_runs(study_name)
    if run_ids is not None:
        runs = runs[runs["run_id"].isin(set(run_ids))]
    return reader.problem_results(runs)
