"""A run's whole metric history written straight into a SQLite MLflow store, in one transaction.

``log_batch`` costs 0.3-1 s per 1,000 points into SQLite (an ORM object per point, a query for
the latest values per batch), so the 3M points of a 1M-line import would take an hour. An import
writes a finished history into a run it has just created, so it can write the rows MLflow would
have written itself: one row per point in ``metrics`` and the latest point per metric in
``latest_metrics`` (the only tables ``log_batch`` touches for metrics without a model id; the
MLflow UI and ``MlflowClient`` read these two). Rows follow MLflow's own rules
(``SqlAlchemyStore.sanitize_metric_value``: NaN is stored as 0 with ``is_nan`` set; the latest
point is the greatest ``(step, timestamp, value)``), after the workbench's own (:func:`store_value`,
as ``RunTracker`` sends it). tests/tracking/test_bulk.py compares the rows with those ``log_batch``
writes for the same points.

Only a SQLite store whose two tables have exactly the columns this was checked against is
written this way (:func:`bulk_writable`); any other store (a server, PostgreSQL, a future schema)
gets ``log_batch``. One transaction: a failure part-way leaves no row behind.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable, Iterator, Mapping

from workbench.tracking.store import sqlite_file

__all__ = ["METRIC_COLUMNS", "LATEST_COLUMNS", "bulk_writable", "store_value", "write_metric_history"]

#: The columns of MLflow's ``metrics`` and ``latest_metrics`` tables (MLflow 3.x sqlite schema),
#: in the order the rows below give them.
METRIC_COLUMNS = ("key", "value", "timestamp", "run_uuid", "step", "is_nan")
LATEST_COLUMNS = ("key", "value", "timestamp", "step", "is_nan", "run_uuid")
#: SQLite page cache for the insert (the pages of the indexes being appended to): 8 MB, bounded.
CACHE_KIB = 8 * 1024
BUSY_TIMEOUT_S = 60.0


def store_value(value: float) -> float:
    """A metric value as the workbench sends it to MLflow: NaN kept, ±inf as ±1e308 (MLflow's sqlite
    store rejects infinities in some versions; the health rules saw the raw value)."""
    value = float(value)
    if math.isfinite(value) or math.isnan(value):
        return value
    return math.copysign(1e308, value)


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
        return (_columns(con, "metrics") == tuple(sorted(METRIC_COLUMNS))
                and _columns(con, "latest_metrics") == tuple(sorted(LATEST_COLUMNS)))
    finally:
        con.close()


def write_metric_history(tracking_uri: str, run_id: str, steps: Iterable[tuple[int, Mapping[str, float]]],
                         timestamp_ms: int, expect_points: int | None = None) -> int:
    """Write ``(step, {key: value})`` for a run that has no metrics yet (each key at most once per
    step), all at ``timestamp_ms``, in one transaction; returns the number of points. Streams:
    memory does not grow with the history. ``expect_points``: the number a first pass counted; any
    other number rolls everything back (``ValueError``): the source changed in between."""
    latest: dict[str, tuple[int, int, float, int]] = {}  # key -> (step, timestamp, value, is_nan)
    written = 0

    def rows() -> Iterator[tuple[str, float, int, str, int, int]]:
        nonlocal written
        for step, metrics in steps:
            for key, value in metrics.items():
                v = store_value(value)
                is_nan = v != v
                stored = 0.0 if is_nan else v  # sanitize_metric_value: NaN is 0 with is_nan set
                written += 1
                last = latest.get(key)
                if last is None or (step, timestamp_ms, stored) > last[:3]:  # _update_latest_metrics_if_necessary
                    latest[key] = (step, timestamp_ms, stored, is_nan)
                yield key, stored, timestamp_ms, run_id, step, is_nan

    con = sqlite3.connect(sqlite_file(tracking_uri), timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        con.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        con.execute("BEGIN IMMEDIATE")  # the write lock now: MLflow's own writers wait, as for log_batch
        try:
            con.executemany(f"INSERT INTO metrics ({', '.join(METRIC_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)", rows())
            con.executemany(f"INSERT INTO latest_metrics ({', '.join(LATEST_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)",
                            ((key, v, ts, step, is_nan, run_id) for key, (step, ts, v, is_nan) in latest.items()))
            if expect_points is not None and written != expect_points:
                raise ValueError(f"the source changed while it was imported: {expect_points:,} points checked, "
                                 f"{written:,} read again; nothing written")
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:  # SQLite may have rolled back itself (a full disk at COMMIT)
                con.execute("ROLLBACK")
            raise
    finally:
        con.close()
    return written
