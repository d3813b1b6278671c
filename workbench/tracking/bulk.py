"""A run's whole metric history written straight into a SQLite MLflow store, in one transaction.

``log_batch`` costs 0.3-1 s per 1,000 points into SQLite (an ORM object per point, a query for
the latest values per batch), so the 3M points of a 1M-line import would take 15-50 minutes. An
import writes a finished history into a run it has just created, so it can write the rows MLflow
would have written itself: one row per point in ``metrics`` and the latest point per metric in
``latest_metrics`` (the only tables ``log_batch`` touches for metrics without a model id; the
MLflow UI and ``MlflowClient`` read these two). Rows follow MLflow's own rules
(``SqlAlchemyStore.sanitize_metric_value``: NaN is stored as 0 with ``is_nan`` set; the latest
point is the greatest ``(step, timestamp, value)``), after the workbench's own
(``writer.store_value``, as ``RunTracker`` sends it). tests/test_tracking_bulk.py compares the
rows with those ``log_batch`` writes for the same points.

Only a SQLite store whose two tables have exactly the columns this was checked against is
written this way (:func:`bulk_writable`); any other store (a server, PostgreSQL, a future schema)
gets ``log_batch``. One transaction: a failure part-way leaves no row behind.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from workbench.tracking.store import sqlite_file

__all__ = ["LATEST_COLUMNS", "METRIC_COLUMNS", "MetricColumns", "bulk_writable", "write_metric_history"]

#: The columns of MLflow's ``metrics`` and ``latest_metrics`` tables (MLflow 3.x sqlite schema),
#: in the order the rows below give them.
METRIC_COLUMNS = ("key", "value", "timestamp", "run_uuid", "step", "is_nan")
LATEST_COLUMNS = ("key", "value", "timestamp", "step", "is_nan", "run_uuid")
#: SQLite page cache for the insert: its default, 2 MB, holds the index pages being appended to (a larger one was
#: no faster, measured, and adds to the import's peak memory).
CACHE_KIB = 2 * 1024
BUSY_TIMEOUT_S = 60.0


def _columns(con: sqlite3.Connection, table: str) -> tuple[str, ...]:
    return tuple(sorted(row[1] for row in con.execute(f"PRAGMA table_info({table})")))


def bulk_writable(tracking_uri: str) -> bool:
    """True for a SQLite store whose ``metrics`` and ``latest_metrics`` tables have exactly the
    columns :func:`write_metric_history` fills (a schema MLflow changes later goes to ``log_batch``)."""
    if not tracking_uri.startswith("sqlite:///"):
        return False
    path = sqlite_file(tracking_uri)
    if not path.is_file():
        return False
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    try:
        return _columns(con, "metrics") == tuple(sorted(METRIC_COLUMNS)) and _columns(con, "latest_metrics") == tuple(
            sorted(LATEST_COLUMNS)
        )
    finally:
        con.close()


@dataclass(frozen=True)
class MetricColumns:
    """A stretch of a run's metric points as columns: point i is ``names[key[i]]`` at ``step[i]``
    with ``value[i]`` (the value as the workbench logs it; ``store_value`` is applied when written),
    logged at ``timestamp[i]`` (epoch ms) when given, else at the history's one timestamp."""

    names: Sequence[str]
    key: np.ndarray  # int, an index into names
    step: np.ndarray  # int64
    value: np.ndarray  # float64
    timestamp: np.ndarray | None = None  # int64 epoch ms per point (a study export's points keep their own)

    def __len__(self) -> int:
        return len(self.step)

    @classmethod
    def of_steps(cls, steps: Iterable[tuple[int, Mapping[str, float]]]) -> MetricColumns:
        """``(step, {key: value})`` pairs as columns (small histories, tests)."""
        names: dict[str, int] = {}
        key, step, value = [], [], []
        for s, metrics in steps:
            for name, v in metrics.items():
                key.append(names.setdefault(name, len(names)))
                step.append(s)
                value.append(v)
        return cls(
            list(names), np.array(key, dtype=np.int64), np.array(step, dtype=np.int64), np.array(value, dtype=float)
        )


def write_metric_history(tracking_uri: str, run_id: str, chunks: Iterable[MetricColumns], timestamp_ms: int) -> int:
    """Write the points of ``chunks`` for a run that has no metrics yet, in one transaction; returns
    the number of points. Each point at its chunk's ``timestamp`` where the chunk has one, else at
    ``timestamp_ms``. No two points with the same (metric, step, timestamp, value): MLflow's primary
    key (an import's points: a step's metrics are a mapping; an export's: the rows of a store).
    Streams: memory does not grow with the history."""
    latest: dict[str, tuple[int, int, float, bool]] = {}  # key -> (step, timestamp, stored value, is_nan)
    written = 0

    def rows() -> Iterator[tuple[str, float, int, str, int, bool]]:
        nonlocal written
        for chunk in chunks:
            if not len(chunk):
                continue
            value = np.where(np.isinf(chunk.value), np.copysign(1e308, chunk.value), chunk.value)  # store_value()
            is_nan = np.isnan(value)
            stored = np.where(is_nan, 0.0, value)  # sanitize_metric_value: NaN is 0 with is_nan set
            stamps = (
                np.full(len(chunk), timestamp_ms, dtype=np.int64)
                if chunk.timestamp is None
                else np.asarray(chunk.timestamp, dtype=np.int64)
            )
            _keep_latest(latest, chunk, stamps, stored, is_nan)
            keys = np.asarray(chunk.names, dtype=object)[chunk.key].tolist()
            written += len(chunk)
            yield from zip(
                keys,
                stored.tolist(),
                stamps.tolist(),
                repeat(run_id),
                chunk.step.tolist(),
                is_nan.tolist(),
                strict=False,
            )

    con = sqlite3.connect(sqlite_file(tracking_uri), timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        con.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        con.execute("BEGIN IMMEDIATE")  # the write lock now: MLflow's own writers wait, as for log_batch
        try:
            con.executemany(f"INSERT INTO metrics ({', '.join(METRIC_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)", rows())
            con.executemany(
                f"INSERT INTO latest_metrics ({', '.join(LATEST_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)",
                ((key, v, ts, step, is_nan, run_id) for key, (step, ts, v, is_nan) in latest.items()),
            )
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:  # SQLite may have rolled back itself (a full disk at COMMIT)
                con.execute("ROLLBACK")
            raise
    finally:
        con.close()
    return written


def _keep_latest(
    latest: dict[str, tuple[int, int, float, bool]],
    chunk: MetricColumns,
    stamps: np.ndarray,
    stored: np.ndarray,
    is_nan: np.ndarray,
) -> None:
    """MLflow's latest point per metric (``_update_latest_metrics_if_necessary``): the greatest
    ``(step, timestamp, value)``."""
    order = np.lexsort((stored, stamps, chunk.step, chunk.key))
    key = chunk.key[order]
    last = order[np.append(key[1:] != key[:-1], True)]  # per key, its greatest (step, timestamp, value)
    for i in last.tolist():
        name, step, ts, v = chunk.names[int(chunk.key[i])], int(chunk.step[i]), int(stamps[i]), float(stored[i])
        held = latest.get(name)
        if held is None or (step, ts, v) > held[:3]:
            latest[name] = (step, ts, v, bool(is_nan[i]))
