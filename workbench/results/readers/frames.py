"""Frame assembly: raw points and run rows from any :class:`~.protocol.RunReader` into the tidy
``history`` and ``runs`` frames of :mod:`workbench.results.reader` (columns documented there).

Pure pandas/numpy/pyarrow: no store, no cache. Points frames (``run_id, metric, step, value,
timestamp``) are what a backend's ``history`` returns; :func:`clean_points` types them, restores
``±inf`` and keeps one value per (run, metric, step); :func:`assemble_history` joins the runs'
points into the history frame; :func:`runs_frame` turns run rows, tags and params into the runs frame.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "EMPTY_RUN",
    "HISTORY_COLUMNS",
    "RUN_COLUMNS",
    "TAG_COLUMNS",
    "arm_from_name",
    "arrow_strings",
    "assemble_history",
    "clean_points",
    "empty_points",
    "end_time_ms",
    "lex_sorted",
    "points_from_codes",
    "runs_frame",
    "split_runs",
]

HISTORY_COLUMNS: tuple[str, ...] = ("run_id", "variant", "seed", "step", "metric", "value")
RUN_COLUMNS: tuple[str, ...] = (
    "run_id",
    "run_name",
    "variant",
    "arm",
    "seed",
    "status",
    "health",
    "health_reasons",
    "run_key",
    "stopped_early",
    "start_time",
    "end_time",
    "artifact_uri",
)
#: tag -> runs column
TAG_COLUMNS = {
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
#: ... and its cold start's (``replicate.cold_start`` > 1: ``<arm>/cold_start=<i>/seed=<int>``)
_COLD_START_SUFFIX = re.compile(r"/cold_start=\d+$")
_INF_STORED = 1e308  # RunTracker writes ±inf as ±1e308 (MLflow stores reject infinities)


def empty_points() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_id": pd.Series([], dtype=str),
            "metric": pd.Series([], dtype=str),
            "step": pd.Series([], dtype="int64"),
            "value": pd.Series([], dtype=float),
            "timestamp": pd.Series([], dtype="int64"),
        }
    )


def arrow_strings(codes: np.ndarray, names: Sequence[str]) -> pd.Series:
    """A str column from integer codes into ``names``, built in arrow (no Python str per row)."""
    import pyarrow as pa

    dictionary = pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(list(names), pa.string()))
    return pd.Series(dictionary.cast(pa.string()), dtype=pd.Series([""]).dtype)


def points_from_codes(
    group_runs: np.ndarray,
    group_keys: np.ndarray,
    gid: np.ndarray,
    step: np.ndarray,
    value: np.ndarray,
    timestamp: np.ndarray,
) -> pd.DataFrame:
    """Points frame from per-(run, key) groups and per-point group ids (no per-point strings): the
    run id is categorical (a 32-character string per point cost 2 s at 12M points; the points are only
    split by run, :func:`split_runs`), the metric a string (each run's frame keeps it)."""
    run_names, run_of_group = np.unique(group_runs.astype(str), return_inverse=True)
    key_names, key_of_group = np.unique(group_keys.astype(str), return_inverse=True)
    return pd.DataFrame(
        {
            "run_id": pd.Categorical.from_codes(run_of_group[gid], categories=pd.Index(run_names)),
            "metric": arrow_strings(key_of_group[gid], key_names),
            "step": step,
            "value": value,
            "timestamp": timestamp,
        }
    )


def end_time_ms(v: Any) -> Any:
    """end_time (Timestamp or ms) back to integer ms for cache stamps."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NaT:
        return None
    if isinstance(v, pd.Timestamp):
        return int(v.value // 1_000_000)
    return int(v)


def clean_points(df: pd.DataFrame) -> pd.DataFrame:
    """Types, ±1e308 -> ±inf, sorted by (run, metric, step), one value per (run, metric, step):
    the one with the latest timestamp (the last logged). Sorting works on integer codes."""
    if df.empty:
        return empty_points()
    df = df.astype({"step": "int64", "value": "float64", "timestamp": "int64"})
    v = df["value"].to_numpy(copy=True)
    big = np.abs(v) >= _INF_STORED
    if big.any():
        v[big] = np.copysign(np.inf, v[big])
        df["value"] = v
    r, _ = pd.factorize(df["run_id"], sort=True)
    m, _ = pd.factorize(df["metric"], sort=True)
    step, ts = df["step"].to_numpy(), df["timestamp"].to_numpy()
    if not lex_sorted(r, m, step, ts):
        order = np.lexsort((ts, step, m, r))
        df, r, m, step = df.iloc[order].reset_index(drop=True), r[order], m[order], step[order]
    dup = (r[1:] == r[:-1]) & (m[1:] == m[:-1]) & (step[1:] == step[:-1])
    if dup.any():
        df = df[np.r_[~dup, True]].reset_index(drop=True)
    return df


def lex_sorted(*keys: np.ndarray) -> bool:
    """Whether rows are in nondecreasing lexicographic order of ``keys`` (vectorised)."""
    ok = np.ones(max(len(keys[0]) - 1, 0), dtype=bool)
    equal = np.ones_like(ok)
    for k in keys:
        d = np.diff(k)
        ok &= ~equal | (d >= 0)
        equal &= d == 0
    return bool(ok.all())


EMPTY_RUN = pd.DataFrame(
    {"metric": pd.Series([], dtype=str), "step": pd.Series([], dtype="int64"), "value": pd.Series([], dtype=float)}
)


def split_runs(points: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Clean points (sorted by run) -> ``run_id -> frame(metric, step, value)`` by slicing."""
    if points.empty:
        return {}
    column = points["run_id"]
    categorical = isinstance(column.dtype, pd.CategoricalDtype)  # points_from_codes: compare codes, not strings
    values = column.cat.codes.to_numpy() if categorical else column.to_numpy()
    starts = np.r_[0, np.flatnonzero(values[1:] != values[:-1]) + 1]
    rid = column.cat.categories[values[starts]] if categorical else values[starts]
    ends = np.r_[starts[1:], len(column)]
    body = points[["metric", "step", "value"]]
    return {str(r): body.iloc[a:b].reset_index(drop=True) for r, a, b in zip(rid, starts, ends, strict=True)}


def assemble_history(runs: pd.DataFrame, per_run: dict[str, pd.DataFrame], want: set[str] | None) -> pd.DataFrame:
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
        return pd.DataFrame(
            {
                "run_id": pd.Series([], dtype=str),
                "variant": pd.Series([], dtype=str),
                "seed": pd.Series([], dtype="Int64"),
                "step": pd.Series([], dtype="int64"),
                "metric": pd.Series([], dtype=str),
                "value": pd.Series([], dtype=float),
            }
        )
    body = pd.concat(parts, ignore_index=True)
    which = np.concatenate(idx)
    variants = runs["variant"].astype(str).tolist()
    v_names, v_codes = np.unique(variants, return_inverse=True)
    return pd.DataFrame(
        {
            "run_id": arrow_strings(which, runs["run_id"].astype(str).tolist()),
            "variant": arrow_strings(v_codes[which], list(v_names)),
            "seed": pd.array(runs["seed"].to_numpy()[which], dtype=runs["seed"].dtype),
            "step": body["step"].to_numpy(),
            "metric": body["metric"],
            "value": body["value"].to_numpy(),
        }
    )[list(HISTORY_COLUMNS)]


def arm_from_name(variant: str, run_name: str | None, seed: Any) -> str:
    """The run's arm from its name, the study label: the name without ``/seed=N`` when it starts
    with the variant and N is the run's seed; else the variant (runs named otherwise: one arm
    per variant, as before grids were told apart)."""
    m = _SEED_SUFFIX.search(run_name or "")
    if m is None:
        return variant
    stem = _COLD_START_SUFFIX.sub("", run_name[: m.start()])  # a replicated cold start is not another arm
    if stem != variant and not stem.startswith(variant + "/"):
        return variant
    try:
        if seed is not None and int(seed) != int(m.group(1)):
            return variant
    except (TypeError, ValueError):
        return variant
    return stem


def param_value(v: Any) -> Any:
    return None if v == "None" else v


def runs_frame(rows: pd.DataFrame, tags: dict[str, dict[str, str]], params: dict[str, dict[str, str]]) -> pd.DataFrame:
    records = []
    for r in rows.to_dict("records"):
        t = tags.get(r["run_id"], {})
        rec = {"run_id": r["run_id"], "run_name": r["run_name"]}
        for tag, col in TAG_COLUMNS.items():
            rec[col] = t.get(tag)
        rec.update(
            status=r["status"], start_time=r["start_time"], end_time=r["end_time"], artifact_uri=r["artifact_uri"]
        )
        p = params.get(r["run_id"], {})
        if rec["seed"] is None and "seed" in p:
            rec["seed"] = p["seed"]
        if rec["variant"] is None:
            rec["variant"] = r["run_name"] or r["run_id"][:8]
        if not rec["arm"]:
            rec["arm"] = arm_from_name(rec["variant"], r["run_name"], rec["seed"])
        records.append((rec, p))
    param_keys = sorted({k for _, p in records for k in p})
    reserved = set(RUN_COLUMNS)
    out_rows = []
    for rec, p in records:
        row = {c: rec.get(c) for c in RUN_COLUMNS}
        for k in param_keys:
            v = param_value(p.get(k))
            if k in reserved:
                if str(row[k]) == str(v):
                    continue  # e.g. the `seed` param equals the seed tag
                k = f"params.{k}"
            row[k] = v
        out_rows.append(row)
    cols = list(RUN_COLUMNS) + [k if k not in reserved else f"params.{k}" for k in param_keys]
    df = pd.DataFrame(out_rows, columns=list(dict.fromkeys(cols)))
    clashes = [c for c in df.columns if c.startswith("params.") and c[len("params.") :] in reserved]
    df = df.drop(columns=[c for c in clashes if df[c].isna().all()])
    df["seed"] = pd.to_numeric(df["seed"], errors="coerce").astype("Int64")
    for c in ("start_time", "end_time"):
        df[c] = pd.to_datetime(pd.to_numeric(df[c], errors="coerce"), unit="ms", utc=True)
    df["stopped_early"] = df["stopped_early"].map({"true": True, "false": False}).astype("boolean")
    for c in df.columns[len(RUN_COLUMNS) :]:
        num = pd.to_numeric(df[c], errors="coerce")
        if num.notna().sum() == df[c].notna().sum() and df[c].notna().any():
            df[c] = num
    # order: variants in order of their first run's start, then their arms alike, then seed, start time
    first = df.groupby("variant", sort=False)["start_time"].transform("min")
    first_arm = df.groupby("arm", sort=False)["start_time"].transform("min")
    df = df.assign(_first=first, _first_arm=first_arm).sort_values(
        ["_first", "variant", "_first_arm", "arm", "seed", "start_time"], kind="stable"
    )
    return df.drop(columns=["_first", "_first_arm"]).reset_index(drop=True)
