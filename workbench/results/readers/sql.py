"""The SQL backend: MLflow's ``runs``/``tags``/``params``/``metrics`` tables read directly with a
handful of queries (any SQLAlchemy database MLflow supports: sqlite, PostgreSQL, MySQL, MSSQL)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.tracking.store import sqlite_file

from .frames import empty_points, points_from_codes
from .protocol import ROLE_TAG, StudyNotFound

__all__ = ["SqlRunReader"]

_SQL_CHUNK = 500  # bound parameters per IN list (sqlite's old limit is 999)
#: Run ids per history query on SQLite, at most (its own bound-parameter limit, read from the connection,
#: may be lower). The key filter scans each key's whole range of MLflow's primary-key index once per query,
#: so fewer, longer IN lists read less: 3,000 runs x 8 keys took 27 s in chunks of 500, 19 s in one query.
_SQLITE_HISTORY_CHUNK = 20_000


class SqlRunReader:
    """MLflow's tables read directly (any SQLAlchemy database MLflow supports)."""

    name = "sql"

    def __init__(self, uri: str) -> None:
        import sqlalchemy as sa

        self.uri = uri
        if uri.startswith("sqlite:///"):
            path = sqlite_file(uri)
            if not path.exists():
                raise StudyNotFound(f"no MLflow store at {path} (run a study first, or pass the tracking URI)")
            # read-only: never create or migrate a store just to look at it
            self.engine = sa.create_engine("sqlite://", creator=lambda: _sqlite_ro(path))
        else:
            self.engine = sa.create_engine(uri)
        self.requests = 0
        self._history_chunk = self._sqlite_history_chunk() if uri.startswith("sqlite:") else _SQL_CHUNK

    def _sqlite_history_chunk(self) -> int:
        import sqlite3

        with self.engine.connect() as conn:
            limit = conn.connection.dbapi_connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        # room for the keys' IN list (MLflow caps a run's keys far below this in practice)
        return max(_SQL_CHUNK, min(_SQLITE_HISTORY_CHUNK, limit // 2))

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

    def _query_chunked(
        self, sql: str, ids: Sequence[str], params: dict[str, Any] | None = None, expanding: Sequence[str] = ()
    ) -> pd.DataFrame:
        parts = [
            self._query(sql, {**(params or {}), "ids": list(ids[i : i + _SQL_CHUNK])}, ("ids", *expanding))
            for i in range(0, len(ids), _SQL_CHUNK)
        ]
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
            {"id": run_id, "role_tag": ROLE_TAG},
        )
        if df.empty:
            return None
        row = df.iloc[0]
        return {
            "run_id": run_id,
            "experiment_id": str(row["experiment_id"]),
            "experiment": row["experiment"],
            "role": row["role"],
            "artifact_uri": row["artifact_uri"],
        }

    def runs(
        self, experiment_id: str, role: str
    ) -> tuple[pd.DataFrame, dict[str, dict[str, str]], dict[str, dict[str, str]]]:
        """Run rows (run_id, run_name, status, start_time, end_time, artifact_uri), tags and params by run."""
        base = (
            "SELECT r.run_uuid FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
            "AND t.key = :role_tag AND t.value = :role "
            "WHERE r.experiment_id = :eid AND r.lifecycle_stage = 'active'"
        )
        p = {"role_tag": ROLE_TAG, "role": role, "eid": int(experiment_id)}
        rows = self._query(
            "SELECT run_uuid AS run_id, name AS run_name, status, start_time, end_time, artifact_uri "
            f"FROM runs WHERE run_uuid IN ({base})",
            p,
        )
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
            return empty_points()
        keys = None if keys is None else sorted(keys)
        if keys is not None and not keys:
            return empty_points()
        where = "WHERE run_uuid IN :ids" + ("" if keys is None else " AND key IN :keys")
        extra = {} if keys is None else {"keys": keys}
        expanding = () if keys is None else ("keys",)
        parts = []
        chunk = self._history_chunk
        for i in range(0, len(run_ids), chunk):
            ids = list(run_ids[i : i + chunk])
            part = self._numeric_history(ids, where, extra, expanding) if frozen else None
            if part is None:
                part = self._query(
                    f"SELECT run_uuid AS run_id, key AS metric, step, value, timestamp, is_nan FROM metrics {where}",
                    {"ids": ids, **extra},
                    ("ids", *expanding),
                )
                if len(part):
                    value = part["value"].to_numpy(dtype=float, copy=True)
                    value[part["is_nan"].to_numpy(dtype=bool)] = np.nan
                    part = part.assign(value=value).drop(columns="is_nan")
            if len(part):
                parts.append(part)
        return pd.concat(parts, ignore_index=True) if parts else empty_points()

    def _numeric_history(
        self, ids: list[str], where: str, extra: dict[str, Any], expanding: Sequence[str]
    ) -> pd.DataFrame | None:
        """Two queries in (run, key) order: group counts, then numbers only. None if the counts
        and the points disagree (the runs changed in between after all): the caller falls back."""
        import itertools

        import sqlalchemy as sa

        params = {"ids": ids, **extra}
        groups = self._query(
            f"SELECT run_uuid, key, COUNT(*) AS n FROM metrics {where} GROUP BY run_uuid, key ORDER BY run_uuid, key",
            params,
            ("ids", *expanding),
        )
        if groups.empty:
            return empty_points()
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
        return points_from_codes(
            groups["run_uuid"].to_numpy(),
            groups["key"].to_numpy(),
            gid,
            data[:, 0].astype(np.int64),
            value,
            data[:, 2].astype(np.int64),
        )

    def parent_run_id(self, experiment_id: str) -> str | None:
        df = self._query(
            "SELECT r.run_uuid FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = :role_tag "
            "AND t.value = 'study' WHERE r.experiment_id = :eid AND r.lifecycle_stage = 'active' "
            "ORDER BY r.start_time",
            {"role_tag": ROLE_TAG, "eid": int(experiment_id)},
        )
        return None if df.empty else str(df["run_uuid"].iloc[0])


def _empty_like(sql: str) -> pd.DataFrame:
    # column names of an empty chunked result: the SELECT list's aliases
    head = sql.split(" FROM ")[0].removeprefix("SELECT ")
    return pd.DataFrame(columns=[c.split(" AS ")[-1].strip() for c in head.split(",")])


def _sqlite_ro(path: Path):
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False, timeout=30)
    # helper threads for SQLite's sorter: the history query's ORDER BY sorts every point read (12M at search
    # scale: 19 s -> 14 s with 2 threads on 2 cores, measured); a read-only setting of this connection only
    con.execute(f"PRAGMA threads = {min(4, os.cpu_count() or 1)}")
    return con


def _group_kv(df: pd.DataFrame) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for rid, key, value in zip(df["run_uuid"], df["key"], df["value"], strict=True):
        out.setdefault(rid, {})[key] = value
    return out
