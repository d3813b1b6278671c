"""Read a study back from MLflow into tidy pandas frames, fast.

    from workbench.tracking.reader import load_study_frames

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
``health.json`` artifacts of terminal runs are cached the same way (:meth:`StudyReader.health_reports`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pandas as pd

from workbench.errors import did_you_mean
from workbench.tracking.store import resolve_tracking_uri

__all__ = [
    "HISTORY_COLUMNS",
    "RUN_COLUMNS",
    "TERMINAL_STATUSES",
    "LoadStats",
    "StudyFrames",
    "StudyNotFound",
    "StudyReader",
    "load_study_frames",
]

HISTORY_COLUMNS: tuple[str, ...] = ("run_id", "variant", "seed", "step", "metric", "value")
RUN_COLUMNS: tuple[str, ...] = (
    "run_id", "run_name", "variant", "arm", "seed", "status", "health", "health_reasons", "run_key",
    "stopped_early", "start_time", "end_time", "artifact_uri",
)
#: Statuses after which MLflow run data no longer changes: their histories are cached.
TERMINAL_STATUSES: frozenset[str] = frozenset({"FINISHED", "FAILED", "KILLED"})
ROLE_TAG = "workbench.role"
#: tag -> runs column
_TAG_COLUMNS = {
    "workbench.variant": "variant",
    "workbench.arm": "arm",
    "workbench.seed": "seed",
    "workbench.health": "health",
    "workbench.health_reasons": "health_reasons",
    "workbench.run_key": "run_key",
    "workbench.stopped_early": "stopped_early",
}
#: A study label's seed suffix (workbench.study: ``<variant>[/<key>=<value>...]/seed=<int>``).
_SEED_SUFFIX = re.compile(r"/seed=(-?\d+)$")
_INF_STORED = 1e308  # RunTracker writes ±inf as ±1e308 (MLflow stores reject infinities)
_SQL_CHUNK = 500  # bound parameters per IN list (sqlite's old limit is 999)
_CACHE_VERSION = 1


class StudyNotFound(LookupError):
    """No experiment (or run) of that name in the store; the message says what exists."""


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
        return (f"{self.runs} runs, {self.points:,} points in {self.seconds:.2f} s "
                f"({len(self.fetched_runs)} runs read from the {self.backend} store, "
                f"{len(self.cached_runs)} from the cache)")


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
# Backends: where runs and histories come from
# --------------------------------------------------------------------------------------------

class _SqlBackend:
    """MLflow's tables read directly (any SQLAlchemy database MLflow supports)."""

    name = "sql"

    def __init__(self, uri: str) -> None:
        import sqlalchemy as sa

        self.uri = uri
        if uri.startswith("sqlite:///"):
            path = Path(uri.removeprefix("sqlite:///"))
            if not path.exists():
                raise StudyNotFound(f"no MLflow store at {path} (run a study first, or pass the tracking URI)")
            # read-only: never create or migrate a store just to look at it
            self.engine = sa.create_engine("sqlite://", creator=lambda: _sqlite_ro(path))
        else:
            self.engine = sa.create_engine(uri)
        self.requests = 0

    def _query(self, sql: str, params: dict[str, Any] | None = None, expanding: Sequence[str] = ()) -> pd.DataFrame:
        import sqlalchemy as sa

        stmt = sa.text(sql)
        if expanding:
            stmt = stmt.bindparams(*(sa.bindparam(n, expanding=True) for n in expanding))
        self.requests += 1
        with self.engine.connect() as conn:
            result = conn.execute(stmt, params or {})
            columns = list(result.keys())
            # plain DBAPI tuples: pandas probing SQLAlchemy Row objects costs ~10 us per row
            rows = result.cursor.fetchall() if result.cursor is not None else []
        if not rows:
            return pd.DataFrame(columns=columns)
        return pd.DataFrame(dict(zip(columns, (list(c) for c in zip(*rows)), strict=True)))

    def _query_chunked(self, sql: str, ids: Sequence[str], params: dict[str, Any] | None = None,
                       expanding: Sequence[str] = ()) -> pd.DataFrame:
        parts = [self._query(sql, {**(params or {}), "ids": list(ids[i:i + _SQL_CHUNK])}, ("ids", *expanding))
                 for i in range(0, len(ids), _SQL_CHUNK)]
        parts = [p for p in parts if len(p)]
        return pd.concat(parts, ignore_index=True) if parts else _empty_like(sql)

    def experiment_names(self) -> list[str]:
        df = self._query("SELECT name FROM experiments WHERE lifecycle_stage = 'active'")
        return df["name"].tolist()

    def experiment_id(self, name: str) -> str | None:
        df = self._query("SELECT * FROM experiments WHERE name = :name AND lifecycle_stage = 'active'", {"name": name})
        if len(df) > 1 and "workspace" in df.columns:
            df = df[df["workspace"] == os.environ.get("MLFLOW_WORKSPACE", "default")]
        return None if df.empty else str(df["experiment_id"].iloc[0])

    def run_info(self, run_id: str) -> dict[str, Any] | None:
        df = self._query(
            "SELECT r.run_uuid, r.experiment_id, r.artifact_uri, e.name AS experiment, t.value AS role FROM runs r "
            "JOIN experiments e ON e.experiment_id = r.experiment_id "
            "LEFT JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = :role_tag WHERE r.run_uuid = :id",
            {"id": run_id, "role_tag": ROLE_TAG})
        if df.empty:
            return None
        row = df.iloc[0]
        return {"run_id": run_id, "experiment_id": str(row["experiment_id"]), "experiment": row["experiment"],
                "role": row["role"], "artifact_uri": row["artifact_uri"]}

    def runs(self, experiment_id: str, role: str) -> tuple[pd.DataFrame, dict[str, dict[str, str]],
                                                           dict[str, dict[str, str]]]:
        """Run rows (run_id, run_name, status, start_time, end_time, artifact_uri), tags and params by run."""
        base = ("SELECT r.run_uuid FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
                "AND t.key = :role_tag AND t.value = :role "
                "WHERE r.experiment_id = :eid AND r.lifecycle_stage = 'active'")
        p = {"role_tag": ROLE_TAG, "role": role, "eid": int(experiment_id)}
        rows = self._query(
            "SELECT run_uuid AS run_id, name AS run_name, status, start_time, end_time, artifact_uri "
            f"FROM runs WHERE run_uuid IN ({base})", p)
        tags = self._query(f"SELECT run_uuid, key, value FROM tags WHERE run_uuid IN ({base})", p)
        params = self._query(f"SELECT run_uuid, key, value FROM params WHERE run_uuid IN ({base})", p)
        return rows, _group_kv(tags), _group_kv(params)

    def metric_keys(self, run_ids: Sequence[str]) -> dict[str, set[str]]:
        if not run_ids:
            return {}
        df = self._query_chunked("SELECT run_uuid, key FROM latest_metrics WHERE run_uuid IN :ids", run_ids)
        out: dict[str, set[str]] = {r: set() for r in run_ids}
        for rid, key in zip(df["run_uuid"], df["key"], strict=True):
            out[rid].add(key)
        return out

    def history(self, run_ids: Sequence[str], keys: Iterable[str] | None, *, frozen: bool = False) -> pd.DataFrame:
        """Points ``run_id, metric, step, value, timestamp`` (NaN restored from ``is_nan``).

        ``frozen``: the runs are in a terminal state, so their points cannot change between two
        queries: then the strings are not fetched per point (the slow part of reading millions of
        rows), only per (run, key) group with its count, and the points as numbers in group order.
        """
        if not run_ids:
            return _empty_points()
        keys = None if keys is None else sorted(keys)
        if keys is not None and not keys:
            return _empty_points()
        where = "WHERE run_uuid IN :ids" + ("" if keys is None else " AND key IN :keys")
        extra = {} if keys is None else {"keys": keys}
        expanding = () if keys is None else ("keys",)
        parts = []
        for i in range(0, len(run_ids), _SQL_CHUNK):
            ids = list(run_ids[i:i + _SQL_CHUNK])
            part = self._numeric_history(ids, where, extra, expanding) if frozen else None
            if part is None:
                part = self._query(
                    f"SELECT run_uuid AS run_id, key AS metric, step, value, timestamp, is_nan FROM metrics {where}",
                    {"ids": ids, **extra}, ("ids", *expanding))
                if len(part):
                    value = part["value"].to_numpy(dtype=float, copy=True)
                    value[part["is_nan"].to_numpy(dtype=bool)] = np.nan
                    part = part.assign(value=value).drop(columns="is_nan")
            if len(part):
                parts.append(part)
        return pd.concat(parts, ignore_index=True) if parts else _empty_points()

    def _numeric_history(self, ids: list[str], where: str, extra: dict[str, Any],
                         expanding: Sequence[str]) -> pd.DataFrame | None:
        """Two queries in (run, key) order: group counts, then numbers only. None if the counts
        and the points disagree (the runs changed in between after all): the caller falls back."""
        import itertools

        import sqlalchemy as sa

        params = {"ids": ids, **extra}
        groups = self._query(f"SELECT run_uuid, key, COUNT(*) AS n FROM metrics {where} "
                             "GROUP BY run_uuid, key ORDER BY run_uuid, key", params, ("ids", *expanding))
        if groups.empty:
            return _empty_points()
        stmt = sa.text(f"SELECT step, value, timestamp, is_nan FROM metrics {where} ORDER BY run_uuid, key, step")
        stmt = stmt.bindparams(*(sa.bindparam(n, expanding=True) for n in ("ids", *expanding)))
        self.requests += 1
        chunks = []
        with self.engine.connect() as conn:
            cursor = conn.execute(stmt, params).cursor
            while rows := cursor.fetchmany(250_000):
                chunks.append(np.fromiter(itertools.chain.from_iterable(rows), dtype=float, count=4 * len(rows)))
        data = np.concatenate(chunks).reshape(-1, 4) if chunks else np.empty((0, 4))
        counts = groups["n"].to_numpy(dtype=np.int64)
        if counts.sum() != len(data):
            return None
        value = data[:, 1].copy()
        value[data[:, 3] != 0] = np.nan
        gid = np.repeat(np.arange(len(groups)), counts)
        return _points_from_codes(groups["run_uuid"].to_numpy(), groups["key"].to_numpy(), gid,
                                  data[:, 0].astype(np.int64), value, data[:, 2].astype(np.int64))

    def parent_run_id(self, experiment_id: str) -> str | None:
        df = self._query(
            "SELECT r.run_uuid FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = :role_tag "
            "AND t.value = 'study' WHERE r.experiment_id = :eid AND r.lifecycle_stage = 'active' "
            "ORDER BY r.start_time", {"role_tag": ROLE_TAG, "eid": int(experiment_id)})
        return None if df.empty else str(df["run_uuid"].iloc[0])


def _empty_like(sql: str) -> pd.DataFrame:
    # column names of an empty chunked result: the SELECT list's aliases
    head = sql.split(" FROM ")[0].removeprefix("SELECT ")
    return pd.DataFrame(columns=[c.split(" AS ")[-1].strip() for c in head.split(",")])


def _sqlite_ro(path: Path):
    import sqlite3

    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False, timeout=30)


def _group_kv(df: pd.DataFrame) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for rid, key, value in zip(df["run_uuid"], df["key"], df["value"], strict=True):
        out.setdefault(rid, {})[key] = value
    return out


def _empty_points() -> pd.DataFrame:
    return pd.DataFrame({"run_id": pd.Series([], dtype=str), "metric": pd.Series([], dtype=str),
                         "step": pd.Series([], dtype="int64"), "value": pd.Series([], dtype=float),
                         "timestamp": pd.Series([], dtype="int64")})


def _arrow_strings(codes: np.ndarray, names: Sequence[str]) -> pd.Series:
    """A str column from integer codes into ``names``, built in arrow (no Python str per row)."""
    import pyarrow as pa

    dictionary = pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(list(names), pa.string()))
    return pd.Series(dictionary.cast(pa.string()), dtype=pd.Series([""]).dtype)


def _points_from_codes(group_runs: np.ndarray, group_keys: np.ndarray, gid: np.ndarray, step: np.ndarray,
                       value: np.ndarray, timestamp: np.ndarray) -> pd.DataFrame:
    """Points frame from per-(run, key) groups and per-point group ids (no per-point strings)."""
    run_names, run_of_group = np.unique(group_runs.astype(str), return_inverse=True)
    key_names, key_of_group = np.unique(group_keys.astype(str), return_inverse=True)
    return pd.DataFrame({"run_id": _arrow_strings(run_of_group[gid], run_names),
                         "metric": _arrow_strings(key_of_group[gid], key_names),
                         "step": step, "value": value, "timestamp": timestamp})


Transport = Callable[[str, dict[str, Any]], dict[str, Any]]


class _RestBackend:
    """A tracking server: ``search_runs`` for runs, ``metrics/get-history-bulk`` for histories.

    ``transport(endpoint, params) -> json`` performs one GET against the server (default: MLflow's
    ``http_request`` with the client's credentials); tests pass one backed by Flask's test client.
    """

    name = "rest"
    BULK_ENDPOINT = "/ajax-api/2.0/mlflow/metrics/get-history-bulk"
    MAX_RUNS_PER_REQUEST = 100  # server limit
    MAX_POINTS_PER_REQUEST = 25000  # server limit (the response is truncated, sorted by run id)

    def __init__(self, uri: str, client: Any = None, transport: Transport | None = None) -> None:
        from mlflow import MlflowClient

        self.uri = uri
        self.client = client or MlflowClient(uri)
        self.transport = transport or self._http
        self.requests = 0
        self._keys: dict[str, set[str]] = {}

    def _http(self, endpoint: str, params: dict[str, Any]) -> dict[str, Any]:
        from mlflow.utils.rest_utils import http_request, verify_rest_response

        creds = self.client._tracking_client.store.get_host_creds()
        response = http_request(creds, endpoint, "GET", params=params)
        return json.loads(verify_rest_response(response, endpoint).text)

    def experiment_names(self) -> list[str]:
        return [e.name for e in self.client.search_experiments()]

    def experiment_id(self, name: str) -> str | None:
        exp = self.client.get_experiment_by_name(name)
        return None if exp is None or exp.lifecycle_stage != "active" else exp.experiment_id

    def run_info(self, run_id: str) -> dict[str, Any] | None:
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            return None
        exp = self.client.get_experiment(run.info.experiment_id)
        return {"run_id": run_id, "experiment_id": run.info.experiment_id, "experiment": exp.name,
                "role": run.data.tags.get(ROLE_TAG), "artifact_uri": run.info.artifact_uri}

    def runs(self, experiment_id: str, role: str):
        rows, tags, params = [], {}, {}
        token = None
        while True:
            page = self.client.search_runs([experiment_id], f"tags.`{ROLE_TAG}` = '{role}'",
                                           max_results=1000, page_token=token)
            for run in page:
                i = run.info
                rows.append({"run_id": i.run_id, "run_name": i.run_name, "status": i.status,
                             "start_time": i.start_time, "end_time": i.end_time, "artifact_uri": i.artifact_uri})
                tags[i.run_id] = dict(run.data.tags)
                params[i.run_id] = dict(run.data.params)
                self._keys[i.run_id] = set(run.data.metrics)
            token = page.token
            if not token:
                break
        cols = ["run_id", "run_name", "status", "start_time", "end_time", "artifact_uri"]
        return pd.DataFrame(rows, columns=cols), tags, params

    def metric_keys(self, run_ids: Sequence[str]) -> dict[str, set[str]]:
        return {r: set(self._keys.get(r, set())) for r in run_ids}

    def history(self, run_ids: Sequence[str], keys: Iterable[str] | None, *, frozen: bool = False) -> pd.DataFrame:
        run_keys = self.metric_keys(run_ids)
        wanted = set().union(*run_keys.values()) if run_keys else set()
        if keys is not None:
            wanted &= set(keys)
        frames = []
        for key in sorted(wanted):
            todo = [r for r in run_ids if key in run_keys[r]]
            frames.extend(self._bulk(key, todo))
        frames = [f for f in frames if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else _empty_points()

    def _bulk(self, key: str, run_ids: list[str]) -> list[pd.DataFrame]:
        """All points of ``key`` for ``run_ids``, in requests of <= 100 runs; a truncated
        response (25,000 points) keeps its complete runs and asks again for the rest."""
        out = []
        queue = list(run_ids)
        while queue:
            batch, queue = queue[:self.MAX_RUNS_PER_REQUEST], queue[self.MAX_RUNS_PER_REQUEST:]
            self.requests += 1
            data = self.transport(self.BULK_ENDPOINT, {"run_id": batch, "metric_key": key,
                                                      "max_results": self.MAX_POINTS_PER_REQUEST})
            points = data.get("metrics", [])
            df = pd.DataFrame(points, columns=["run_id", "key", "step", "value", "timestamp"])
            if len(points) >= self.MAX_POINTS_PER_REQUEST:
                last = df["run_id"].iloc[-1]  # sorted by run id: only the last run can be cut off
                complete = df[df["run_id"] != last]
                if complete.empty:  # one run alone exceeds the limit: page through its history
                    out.append(self._paged(last, key))
                    batch = [r for r in batch if r != last]
                    queue = [r for r in batch if r > last] + queue
                else:
                    out.append(complete)
                    queue = [r for r in batch if r >= last] + queue
                continue
            out.append(df)
        return [d.rename(columns={"key": "metric"}) for d in out]

    def _paged(self, run_id: str, key: str) -> pd.DataFrame:
        self.requests += 1
        ms = self.client.get_metric_history(run_id, key)
        return pd.DataFrame({"run_id": run_id, "key": key, "step": [m.step for m in ms],
                             "value": [m.value for m in ms], "timestamp": [m.timestamp for m in ms]})

    def parent_run_id(self, experiment_id: str) -> str | None:
        found = self.client.search_runs([experiment_id], f"tags.`{ROLE_TAG}` = 'study'",
                                        order_by=["attributes.start_time ASC"], max_results=1)
        return found[0].info.run_id if found else None


def _backend_for(uri: str, **kwargs: Any):
    scheme = urlparse(uri).scheme.split("+")[0]
    if scheme in ("sqlite", "postgresql", "postgres", "mysql", "mssql"):
        return _SqlBackend(uri)
    if scheme in ("http", "https", "databricks"):
        return _RestBackend(uri, **kwargs)
    from workbench.tracking.redact import redact_uri

    raise ValueError(f"cannot read tracking URI {redact_uri(uri)!r}: expected a database (sqlite:///..., postgresql://...) "
                     "or a tracking server (http://...)")


# --------------------------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------------------------

class _HistoryCache:
    """Per-run parquet files of terminal runs' histories, with a JSON sidecar (status, end time, keys)."""

    def __init__(self, root: Path | None, uri: str) -> None:
        self.dir = None if root is None else root / hashlib.sha1(uri.encode()).hexdigest()[:12]

    def _paths(self, run_id: str) -> tuple[Path, Path]:
        return self.dir / f"{run_id}.parquet", self.dir / f"{run_id}.json"

    @staticmethod
    def _stamp(status: str, end_time: Any) -> str:
        return f"{status}:{'' if end_time is None or pd.isna(end_time) else int(end_time)}"

    def get(self, run_id: str, status: str, end_time: Any) -> tuple[pd.DataFrame, set[str], set[str]] | None:
        """(points, complete keys, all keys of the run) or None."""
        if self.dir is None or status not in TERMINAL_STATUSES:
            return None
        data, meta = self._paths(run_id)
        try:
            info = json.loads(meta.read_text())
            if info.get("version") != _CACHE_VERSION or info.get("stamp") != self._stamp(status, end_time):
                return None
            frame = pd.read_parquet(data)
        except (OSError, ValueError):
            return None
        return frame, set(info["keys"]), set(info["available"])

    def put(self, run_id: str, status: str, end_time: Any, frame: pd.DataFrame, keys: set[str],
            available: set[str]) -> None:
        if self.dir is None or status not in TERMINAL_STATUSES:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        data, meta = self._paths(run_id)
        tmp = data.with_suffix(f".{os.getpid()}.tmp")
        frame[["metric", "step", "value"]].to_parquet(tmp, index=False)
        os.replace(tmp, data)
        info = {"version": _CACHE_VERSION, "stamp": self._stamp(status, end_time), "keys": sorted(keys),
                "available": sorted(available)}
        tmp = meta.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(info))
        os.replace(tmp, meta)

    def get_json(self, name: str, run_id: str, status: str, end_time: Any) -> tuple[bool, Any]:
        if self.dir is None or status not in TERMINAL_STATUSES:
            return False, None
        try:
            info = json.loads((self.dir / f"{run_id}.{name}").read_text())
        except (OSError, ValueError):
            return False, None
        if info.get("stamp") != self._stamp(status, end_time):
            return False, None
        return True, info.get("data")

    def put_json(self, name: str, run_id: str, status: str, end_time: Any, data: Any) -> None:
        if self.dir is None or status not in TERMINAL_STATUSES:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{run_id}.{name}"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"stamp": self._stamp(status, end_time), "data": data}))
        os.replace(tmp, path)


def default_cache_dir() -> Path:
    return Path(os.environ.get("WORKBENCH_HISTORY_CACHE") or Path(".workbench") / "cache").resolve()


# --------------------------------------------------------------------------------------------
# The reader
# --------------------------------------------------------------------------------------------

class StudyReader:
    """Reads studies from one MLflow store. See the module docstring."""

    def __init__(self, tracking_uri: str | None = None, *, cache_dir: str | os.PathLike[str] | bool | None = None,
                 **backend_kwargs: Any) -> None:
        self.tracking_uri = tracking_uri or resolve_tracking_uri()
        self.backend = _backend_for(self.tracking_uri, **backend_kwargs)
        if cache_dir is False:
            root = None
        elif cache_dir is None or cache_dir is True:
            root = default_cache_dir()
        else:
            root = Path(cache_dir).resolve()
        self.cache = _HistoryCache(root, self.tracking_uri)

    # ---- lookup ------------------------------------------------------------------------------

    def experiment_id(self, study: str) -> str:
        eid = self.backend.experiment_id(study)
        if eid is None:
            names = self.backend.experiment_names()
            hint = did_you_mean(study, names)
            known = ", ".join(sorted(n for n in names if n != "Default")) or "none"
            from workbench.tracking.redact import redact_uri

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
        return eid, _runs_frame(rows, tags, params)

    def load(self, study: str, metrics: Iterable[str] | None = None, *, run_ids: Iterable[str] | None = None,
             role: str = "run") -> StudyFrames:
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
            hit = self.cache.get(rid, status, _ms(end))
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
        fetched = _clean_points(pd.concat(parts, ignore_index=True) if parts else _empty_points())
        stats.fetched_runs = list(to_fetch)
        stats.cached_runs = list(cached)
        stats.points_fetched = len(fetched)

        by_run = _split_runs(fetched)
        for rid in to_fetch:
            new = by_run.get(rid, _EMPTY_RUN)
            available = available_keys.get(rid, set())
            got = available if want is None else available & want
            if rid in partial:
                old, keys, _ = partial[rid]
                new = pd.concat([old[~old["metric"].isin(got)], new], ignore_index=True)
                new = new.sort_values(["metric", "step"], kind="stable", ignore_index=True)
                got = keys | got
            cached[rid] = new
            self.cache.put(rid, info.at[rid, "status"], _ms(info.at[rid, "end_time"]), new, got, available)

        history = _assemble(runs, cached, want)
        stats.points = len(history)
        stats.requests = self.backend.requests - requests0
        stats.seconds = time.perf_counter() - t0
        return StudyFrames(study, eid, history, runs, stats)

    # ---- artifacts ---------------------------------------------------------------------------

    def read_artifact_text(self, run_id: str, artifact_uri: str | None, path: str) -> str | None:
        """One artifact file as text (None if absent): read directly for a local artifact
        store, downloaded otherwise."""
        if artifact_uri and artifact_uri.startswith("file:"):
            local = Path(unquote(urlparse(artifact_uri).path)) / path
            try:
                return local.read_text(encoding="utf-8")
            except OSError:
                return None
        import tempfile

        import mlflow
        from mlflow.exceptions import MlflowException

        with tempfile.TemporaryDirectory() as tmp:
            try:
                local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path, dst_path=tmp,
                                                            tracking_uri=self.tracking_uri)
                return Path(local).read_text(encoding="utf-8")
            except (MlflowException, OSError):
                return None

    def health_reports(self, runs: pd.DataFrame, artifact: str = "health.json") -> dict[str, dict[str, Any] | None]:
        """``run_id -> health.json`` (None where the run logged none), read in parallel, cached
        for terminal runs."""
        out: dict[str, dict[str, Any] | None] = {}
        todo = []
        for rid, status, end, art in zip(runs["run_id"], runs["status"], runs["end_time"], runs["artifact_uri"],
                                         strict=True):
            hit, data = self.cache.get_json(artifact, rid, status, _ms(end))
            if hit:
                out[rid] = data
            else:
                todo.append((rid, status, _ms(end), art))

        def read(item):
            rid, _, _, art = item
            text = self.read_artifact_text(rid, art, artifact)
            try:
                return json.loads(text) if text else None
            except ValueError:
                return None

        if todo:
            with ThreadPoolExecutor(max_workers=min(8, len(todo))) as pool:
                for item, report in zip(todo, pool.map(read, todo), strict=True):
                    out[item[0]] = report
                    self.cache.put_json(artifact, item[0], item[1], item[2], report)
        return {rid: out[rid] for rid in runs["run_id"]}


def load_study_frames(study_name: str, tracking_uri: str | None = None, metrics: Iterable[str] | None = None,
                      *, cache_dir: str | os.PathLike[str] | bool | None = None,
                      run_ids: Iterable[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(history, runs)`` of every child run of the study ``study_name`` (its experiment).

    ``metrics``: only these metric keys (default all). See the module docstring for the columns,
    the fast paths and the cache.
    """
    frames = StudyReader(tracking_uri, cache_dir=cache_dir).load(study_name, metrics, run_ids=run_ids)
    return frames.history, frames.runs


# --------------------------------------------------------------------------------------------
# Frame assembly
# --------------------------------------------------------------------------------------------

def _ms(v: Any) -> Any:
    """end_time (Timestamp or ms) back to integer ms for cache stamps."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NaT:
        return None
    if isinstance(v, pd.Timestamp):
        return int(v.value // 1_000_000)
    return int(v)


def _clean_points(df: pd.DataFrame) -> pd.DataFrame:
    """Types, ±1e308 -> ±inf, sorted by (run, metric, step), one value per (run, metric, step):
    the one with the latest timestamp (the last logged). Sorting works on integer codes."""
    if df.empty:
        return _empty_points()
    df = df.astype({"step": "int64", "value": "float64", "timestamp": "int64"})
    v = df["value"].to_numpy(copy=True)
    big = np.abs(v) >= _INF_STORED
    if big.any():
        v[big] = np.copysign(np.inf, v[big])
        df["value"] = v
    r, _ = pd.factorize(df["run_id"], sort=True)
    m, _ = pd.factorize(df["metric"], sort=True)
    step, ts = df["step"].to_numpy(), df["timestamp"].to_numpy()
    if not _lex_sorted(r, m, step, ts):
        order = np.lexsort((ts, step, m, r))
        df, r, m, step = df.iloc[order].reset_index(drop=True), r[order], m[order], step[order]
    dup = (r[1:] == r[:-1]) & (m[1:] == m[:-1]) & (step[1:] == step[:-1])
    if dup.any():
        df = df[np.r_[~dup, True]].reset_index(drop=True)
    return df


def _lex_sorted(*keys: np.ndarray) -> bool:
    """Whether rows are in nondecreasing lexicographic order of ``keys`` (vectorised)."""
    ok = np.ones(max(len(keys[0]) - 1, 0), dtype=bool)
    equal = np.ones_like(ok)
    for k in keys:
        d = np.diff(k)
        ok &= ~equal | (d >= 0)
        equal &= d == 0
    return bool(ok.all())


_EMPTY_RUN = pd.DataFrame({"metric": pd.Series([], dtype=str), "step": pd.Series([], dtype="int64"),
                           "value": pd.Series([], dtype=float)})


def _split_runs(points: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Clean points (sorted by run) -> ``run_id -> frame(metric, step, value)`` by slicing."""
    if points.empty:
        return {}
    rid = points["run_id"].to_numpy()
    starts = np.r_[0, np.flatnonzero(rid[1:] != rid[:-1]) + 1]
    ends = np.r_[starts[1:], len(rid)]
    body = points[["metric", "step", "value"]]
    return {rid[a]: body.iloc[a:b].reset_index(drop=True) for a, b in zip(starts, ends, strict=True)}


def _assemble(runs: pd.DataFrame, per_run: dict[str, pd.DataFrame], want: set[str] | None) -> pd.DataFrame:
    """The history frame: runs in ``runs`` order, each run's points by metric then step."""
    parts, idx = [], []
    for i, rid in enumerate(runs["run_id"]):
        f = per_run.get(rid)
        if f is None or f.empty:
            continue
        if want is not None:
            f = f[f["metric"].isin(want)]
        parts.append(f)
        idx.append(np.full(len(f), i, dtype=np.int64))
    if not parts:
        return pd.DataFrame({"run_id": pd.Series([], dtype=str), "variant": pd.Series([], dtype=str),
                             "seed": pd.Series([], dtype="Int64"), "step": pd.Series([], dtype="int64"),
                             "metric": pd.Series([], dtype=str), "value": pd.Series([], dtype=float)})
    body = pd.concat(parts, ignore_index=True)
    which = np.concatenate(idx)
    variants = runs["variant"].astype(str).tolist()
    v_names, v_codes = np.unique(variants, return_inverse=True)
    return pd.DataFrame({
        "run_id": _arrow_strings(which, runs["run_id"].astype(str).tolist()),
        "variant": _arrow_strings(v_codes[which], list(v_names)),
        "seed": pd.array(runs["seed"].to_numpy()[which], dtype=runs["seed"].dtype),
        "step": body["step"].to_numpy(), "metric": body["metric"], "value": body["value"].to_numpy(),
    })[list(HISTORY_COLUMNS)]


def _arm_from_name(variant: str, run_name: str | None, seed: Any) -> str:
    """The run's arm from its name, the study label: the name without ``/seed=N`` when it starts
    with the variant and N is the run's seed; else the variant (runs named otherwise: one arm
    per variant, as before grids were told apart)."""
    m = _SEED_SUFFIX.search(run_name or "")
    if m is None:
        return variant
    stem = run_name[:m.start()]
    if stem != variant and not stem.startswith(variant + "/"):
        return variant
    try:
        if seed is not None and int(seed) != int(m.group(1)):
            return variant
    except (TypeError, ValueError):
        return variant
    return stem


def _param_value(v: Any) -> Any:
    return None if v == "None" else v


def _runs_frame(rows: pd.DataFrame, tags: dict[str, dict[str, str]], params: dict[str, dict[str, str]]) -> pd.DataFrame:
    records = []
    for r in rows.to_dict("records"):
        t = tags.get(r["run_id"], {})
        rec = {"run_id": r["run_id"], "run_name": r["run_name"]}
        for tag, col in _TAG_COLUMNS.items():
            rec[col] = t.get(tag)
        rec.update(status=r["status"], start_time=r["start_time"], end_time=r["end_time"],
                   artifact_uri=r["artifact_uri"])
        p = params.get(r["run_id"], {})
        if rec["seed"] is None and "seed" in p:
            rec["seed"] = p["seed"]
        if rec["variant"] is None:
            rec["variant"] = r["run_name"] or r["run_id"][:8]
        if not rec["arm"]:
            rec["arm"] = _arm_from_name(rec["variant"], r["run_name"], rec["seed"])
        records.append((rec, p))
    param_keys = sorted({k for _, p in records for k in p})
    reserved = set(RUN_COLUMNS)
    out_rows = []
    for rec, p in records:
        row = {c: rec.get(c) for c in RUN_COLUMNS}
        for k in param_keys:
            v = _param_value(p.get(k))
            if k in reserved:
                if str(row[k]) == str(v):
                    continue  # e.g. the `seed` param equals the seed tag
                k = f"params.{k}"
            row[k] = v
        out_rows.append(row)
    cols = list(RUN_COLUMNS) + [k if k not in reserved else f"params.{k}" for k in param_keys]
    df = pd.DataFrame(out_rows, columns=list(dict.fromkeys(cols)))
    clashes = [c for c in df.columns if c.startswith("params.") and c[len("params."):] in reserved]
    df = df.drop(columns=[c for c in clashes if df[c].isna().all()])
    df["seed"] = pd.to_numeric(df["seed"], errors="coerce").astype("Int64")
    for c in ("start_time", "end_time"):
        df[c] = pd.to_datetime(pd.to_numeric(df[c], errors="coerce"), unit="ms", utc=True)
    df["stopped_early"] = df["stopped_early"].map({"true": True, "false": False}).astype("boolean")
    for c in df.columns[len(RUN_COLUMNS):]:
        num = pd.to_numeric(df[c], errors="coerce")
        if num.notna().sum() == df[c].notna().sum() and df[c].notna().any():
            df[c] = num
    # order: variants in order of their first run's start, then their arms alike, then seed, start time
    first = df.groupby("variant", sort=False)["start_time"].transform("min")
    first_arm = df.groupby("arm", sort=False)["start_time"].transform("min")
    df = df.assign(_first=first, _first_arm=first_arm).sort_values(
        ["_first", "variant", "_first_arm", "arm", "seed", "start_time"], kind="stable")
    return df.drop(columns=["_first", "_first_arm"]).reset_index(drop=True)
