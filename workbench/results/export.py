"""A study's runs as a small, committed directory, and back into any MLflow store (docs/export.md).

    from workbench.results.export import export_study, load_export

    export_study("sqlite:///mlflow.db", "prompt-curation", "docs/findings/data/prompt-curation")
    load_export("docs/findings/data/prompt-curation", "sqlite:///elsewhere/mlflow.db")

An export holds what every table of the study is derived from, so a study's findings outlive the
machine its store was on: ``compare``, ``health``, ``dashboard`` and the notebook API read a loaded
store exactly as they read the original, and ``workbench run STUDY.yaml`` against it skips every run
it holds (the study resumes there).

Format (version :data:`FORMAT_VERSION`), one directory per study, zstd-compressed parquet:

* ``manifest.json``: ``format``, ``format_version``, ``study``, ``experiment``, ``workbench_version``,
  ``last_end_time`` (the latest end of an exported run, epoch ms; no clock time: the same store
  always gives the same bytes), ``docs``, ``rollouts: "omitted"`` when the completions were left out
  (``export_study(..., rollouts=False)``), and per file its ``sha256``, ``rows``, ``bytes`` and columns.
* ``runs.parquet``: one row per run: the study's parent run (``role`` study) first, then its runs
  (``role`` run) by start time. ``run`` (int32, the row's index: the other files' key), ``role``,
  ``run_key``, ``variant``, ``arm``, ``seed`` (the tags, for reading the file alone), ``run_name``,
  ``status``, ``start_time`` and ``end_time`` (epoch ms), ``tags`` and ``params`` (JSON objects of
  strings, keys sorted; every tag but MLflow's own ``mlflow.*``, which a store writes itself).
* ``metrics.parquet``: every logged point, long: ``run``, ``key``, ``step``, ``value`` (as stored:
  NaN, and ``±1e308`` for ``±inf``), ``timestamp`` (epoch ms), sorted by run, key, step, timestamp.
* ``problems.parquet``: the runs' ``eval/problems.csv.gz`` tables (:mod:`workbench.tracking.artifacts`)
  with a ``run`` column, in each artifact's row order.
* ``artifacts.parquet``: ``run``, ``path``, ``data`` (the bytes) of the small artifacts the commands
  read (:data:`EXPORTED_ARTIFACTS`: ``health.json``, ``mismatch.json``, the parent's ``study.yaml``,
  ``sequential.json``, ...) and every completion the run kept (its ``rollouts/`` chunks and manifest,
  :mod:`workbench.tracking.rollouts`, parquet already). Not exported: samples, data records, reports and dashboards (HTML, written
  again by ``compare``/``dashboard``), checkpoints; and runs still RUNNING (exported once they end).

Loading validates everything (checksums, columns, references between files) before its first write,
and decodes a parquet file only within a row count and a decompressed size (:func:`workbench.safe_io.read_parquet`):
bad input raises :class:`ExportError` with one line naming the file, and the store is left as it was.
A run already in the store (same role, run_key and start time: loaded before) is skipped, and so is
every run of a run_key that FINISHED there; loading twice adds nothing. A store whose experiment has
a parent run already keeps it (the loaded runs become its children).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.errors import UserFileError
from workbench.results.reader import StudyReader
from workbench.results.readers.frames import empty_points
from workbench.results.readers.protocol import TERMINAL_STATUSES
from workbench.safe_io import parse_json, read_bytes, read_json, read_parquet
from workbench.tracking.artifacts import (
    PASS_AT_K_COLUMNS,
    PROBLEM_COLUMNS,
    PROBLEMS_ARTIFACT,
    decode_problem_rows,
    encode_problem_rows,
)
from workbench.tracking.bulk import MetricColumns, bulk_writable, write_metric_history
from workbench.tracking.limits import entity_problem, metric_name_problem
from workbench.tracking.redact import redact_uri
from workbench.tracking.rollouts import is_rollout_artifact
from workbench.tracking.store import ensure_store, get_or_create_experiment

__all__ = [
    "EXPORTED_ARTIFACTS",
    "FORMAT_VERSION",
    "ExportError",
    "ExportSummary",
    "ExportedRun",
    "LoadSummary",
    "export_study",
    "load_export",
    "read_export",
    "write_run",
]

FORMAT = "workbench-study-export"
FORMAT_VERSION = 1
DOCS = "docs/export.md"
MANIFEST = "manifest.json"
RUNS, METRICS, PROBLEMS, ARTIFACTS = "runs.parquet", "metrics.parquet", "problems.parquet", "artifacts.parquet"
FILES = (RUNS, METRICS, PROBLEMS, ARTIFACTS)
ROLES = ("study", "run")  # the parent run, then its runs (Optuna searches' runs are not exported)
#: Artifacts kept, byte for byte: those the commands read back (health, mismatch, the parent's study
#: file and looks) and small records of how a run was made (config, error, import mapping).
EXPORTED_ARTIFACTS = (
    "health.json",
    "mismatch.json",
    "config.yaml",
    "error.txt",
    "import.json",
    "study.yaml",
    "plan.json",
    "sequential.json",
    "sequential.log",
)
MANIFEST_ROLLOUTS = "rollouts/manifest.json"  # with the rollouts/ parquet chunks (workbench.tracking.rollouts)
ZSTD_LEVEL = 19  # files are written once per finished run and read rarely: the smallest is worth it
#: Column encodings where parquet's default (a dictionary, else plain) is not the smallest, measured on
#: prompt-curation's 198k points: metric values byte-stream-split, steps and timestamps as deltas
#: (metrics.parquet 899 -> 702 KB; the float64 values are most of it and are kept exact).
ENCODINGS = {METRICS: {"step": "DELTA_BINARY_PACKED", "timestamp": "DELTA_BINARY_PACKED", "value": "BYTE_STREAM_SPLIT"}}
MLFLOW_TAG_PREFIX = "mlflow."
_MAX_PARAMS_PER_BATCH = 100
_MAX_METRICS_PER_BATCH = 1000


MAX_MANIFEST_BYTES = 16 << 20  # the manifest lists a few files
MAX_EXPORT_FILE_BYTES = 4 << 30  # a parquet file of an export: a large study's metrics are tens of MB


class ExportError(ValueError):
    """A directory that is not a readable export, or a study that cannot be exported: one line naming the file."""


def _schema():
    import pyarrow as pa

    return {
        RUNS: pa.schema(
            [
                ("run", pa.int32()),
                ("role", pa.string()),
                ("run_key", pa.string()),
                ("variant", pa.string()),
                ("arm", pa.string()),
                ("seed", pa.string()),
                ("run_name", pa.string()),
                ("status", pa.string()),
                ("start_time", pa.int64()),
                ("end_time", pa.int64()),
                ("tags", pa.string()),
                ("params", pa.string()),
            ]
        ),
        METRICS: pa.schema(
            [
                ("run", pa.int32()),
                ("key", pa.string()),
                ("step", pa.int64()),
                ("value", pa.float64()),
                ("timestamp", pa.int64()),
            ]
        ),
        PROBLEMS: pa.schema(
            [
                ("run", pa.int32()),
                ("step", pa.int64()),
                ("problem_id", pa.string()),
                ("correct", pa.int8()),
                ("length", pa.int64()),
                ("truncated", pa.int8()),
            ]
        ),
        ARTIFACTS: pa.schema([("run", pa.int32()), ("path", pa.string()), ("data", pa.binary())]),
    }


# --------------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------------


@dataclass
class ExportSummary:
    study: str
    directory: Path
    runs: int = 0  # child runs exported
    points: int = 0
    problem_rows: int = 0
    artifacts: int = 0
    running: int = 0  # runs still RUNNING, left for a later export
    bytes: int = 0  # the directory's files, manifest included
    written: list[str] = field(default_factory=list)  # files whose bytes changed
    seconds: float = 0.0

    def line(self) -> str:
        later = f"; {self.running} still running, exported once they end" if self.running else ""
        return (
            f"exported study {self.study!r} to {self.directory}: {self.runs} runs, {self.points:,} metric points, "
            f"{self.problem_rows:,} problem rows, {self.artifacts} artifacts, {self.bytes / 1024:.0f} KB "
            f"({len(self.written)} file(s) changed) in {self.seconds:.1f} s{later}"
        )


def export_study(
    tracking_uri: str,
    experiment: str,
    directory: str | os.PathLike[str],
    *,
    reader: StudyReader | None = None,
    rollouts: bool = True,
) -> ExportSummary:
    """Write the study ``experiment`` of the store ``tracking_uri`` to ``directory`` (created if
    missing; the export's files in it are replaced, each only if its bytes changed). Raises
    ``StudyNotFound`` for an unknown study.

    ``rollouts=False`` leaves out the runs' stored completions (no table ``compare`` prints reads them:
    they are ~90% of an export of runs that kept them) and says so in the manifest (``"rollouts":
    "omitted"``); ``workbench rollouts`` then finds none in a store loaded from it."""
    t0 = time.perf_counter()
    reader = reader or StudyReader(tracking_uri, cache_dir=False)
    eid = reader.experiment_id(experiment)
    out = Path(directory)
    summary = ExportSummary(experiment, out)
    rows, artifact_uris, running = [], [], 0
    for role in ROLES:
        found, tags, params = reader.backend.runs(eid, role)
        for r in found.to_dict("records"):
            if role == "run" and r["status"] not in TERMINAL_STATUSES:
                running += 1
                continue
            rows.append(_run_row(role, r, tags.get(r["run_id"], {}), params.get(r["run_id"], {})))
            artifact_uris.append((r["run_id"], r["artifact_uri"]))
    order = sorted(
        range(len(rows)),
        key=lambda i: (
            ROLES.index(rows[i]["role"]),
            rows[i]["start_time"] or 0,
            rows[i]["run_key"] or "",
            rows[i]["end_time"] or 0,
            rows[i]["run_name"] or "",
        ),
    )
    rows = [rows[i] for i in order]
    artifact_uris = [artifact_uris[i] for i in order]
    index = {run_id: i for i, (run_id, _) in enumerate(artifact_uris)}
    study_name = next((json.loads(r["tags"]).get("workbench.study") for r in rows if r["role"] == "study"), None)

    tables = {
        RUNS: _runs_table(rows),
        METRICS: _metrics_table(reader, index),
        PROBLEMS: _problems_table(reader, artifact_uris),
        ARTIFACTS: _artifacts_table(reader, artifact_uris, rollouts=rollouts),
    }
    summary.runs = sum(r["role"] == "run" for r in rows)
    summary.points, summary.problem_rows = tables[METRICS].num_rows, tables[PROBLEMS].num_rows
    summary.artifacts, summary.running = tables[ARTIFACTS].num_rows, running
    files = {name: _parquet_bytes(table, ENCODINGS.get(name, {})) for name, table in tables.items()}
    ends = [r["end_time"] for r in rows if r["end_time"] is not None]
    omitted = {} if rollouts else {"rollouts": "omitted"}  # absent when kept: earlier exports keep their bytes
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "study": study_name or experiment,
        "experiment": experiment,
        "workbench_version": _workbench_version(),
        "last_end_time": max(ends) if ends else None,
        "runs": summary.runs,
        "docs": DOCS,
        **omitted,
        "files": {
            name: {
                "sha256": hashlib.sha256(data).hexdigest(),
                "rows": tables[name].num_rows,
                "bytes": len(data),
                "columns": {f.name: str(f.type) for f in tables[name].schema},
            }
            for name, data in files.items()
        },
    }
    files[MANIFEST] = (json.dumps(manifest, indent=2) + "\n").encode()
    out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():  # the manifest last: a reader never sees it name bytes not yet written
        if _replace_if_changed(out / name, data):
            summary.written.append(name)
    summary.bytes = sum(len(d) for d in files.values())
    summary.seconds = time.perf_counter() - t0
    return summary


def _workbench_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rl-workbench")
    except PackageNotFoundError:  # a source tree on PYTHONPATH
        return "unknown"


def _ms(value: Any) -> int | None:
    if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NaT:
        return None
    return int(value)


def _run_row(role: str, r: dict[str, Any], tags: dict[str, str], params: dict[str, str]) -> dict[str, Any]:
    kept = {k: v for k, v in tags.items() if not k.startswith(MLFLOW_TAG_PREFIX)}
    return {
        "role": role,
        "run_key": kept.get("workbench.run_key"),
        "variant": kept.get("workbench.variant"),
        "arm": kept.get("workbench.arm"),
        "seed": kept.get("workbench.seed"),
        "run_name": r["run_name"],
        "status": r["status"],
        "start_time": _ms(r["start_time"]),
        "end_time": _ms(r["end_time"]),
        "tags": json.dumps(kept, sort_keys=True, ensure_ascii=False),
        "params": json.dumps(params, sort_keys=True, ensure_ascii=False),
        "_run_id": r["run_id"],
    }


def _runs_table(rows: list[dict[str, Any]]):
    import pyarrow as pa

    schema = _schema()[RUNS]
    columns = {f.name: [r[f.name] for r in rows] for f in schema if f.name != "run"}
    return pa.table({"run": pa.array(range(len(rows)), pa.int32()), **columns}, schema=schema)


def _metrics_table(reader: StudyReader, index: dict[str, int]):
    import pyarrow as pa

    points = reader.backend.history(list(index), None, frozen=True) if index else empty_points()
    run = points["run_id"].map(index).to_numpy(dtype=np.int32)
    names, key = np.unique(points["metric"].astype(str).to_numpy(), return_inverse=True)
    step = points["step"].to_numpy(dtype=np.int64)
    value = points["value"].to_numpy(dtype=float)
    stamp = points["timestamp"].to_numpy(dtype=np.int64)
    order = np.lexsort((value, stamp, step, key, run))
    keys = pa.DictionaryArray.from_arrays(pa.array(key[order].astype(np.int32)), pa.array(list(names), pa.string()))
    return pa.table(
        {
            "run": pa.array(run[order]),
            "key": keys.cast(pa.string()),
            "step": pa.array(step[order]),
            "value": pa.array(value[order]),
            "timestamp": pa.array(stamp[order]),
        },
        schema=_schema()[METRICS],
    )


def _problems_table(reader: StudyReader, runs: list[tuple[str, str | None]]):
    import pyarrow as pa

    frames = []
    for i, (run_id, artifact_uri) in enumerate(runs):
        data = reader.read_artifact_bytes(run_id, artifact_uri, PROBLEMS_ARTIFACT)
        if data is None:
            continue
        try:
            frame = decode_problem_rows(data)
        except ValueError as error:
            raise ExportError(f"run {run_id}: {error}") from None
        frames.append(frame.assign(run=np.int32(i)))
    schema = _schema()[PROBLEMS]
    if not frames:
        return schema.empty_table()
    frame = pd.concat(frames, ignore_index=True)
    columns = {f.name: pa.array(frame[f.name].to_numpy(), f.type) for f in schema}
    for name in PASS_AT_K_COLUMNS:  # only when some run sampled several answers per problem (null elsewhere)
        if name in frame.columns:
            schema = schema.append(pa.field(name, pa.int64()))
            columns[name] = pa.array(frame[name].astype("Int64"), pa.int64(), from_pandas=True)
    return pa.table(columns, schema=schema)


def _artifacts_table(reader: StudyReader, runs: list[tuple[str, str | None]], *, rollouts: bool = True):
    import pyarrow as pa

    from workbench.results.rollouts import rollout_files  # deferred: only an export reads them

    run, path, data = [], [], []
    for i, (run_id, artifact_uri) in enumerate(runs):
        chunks = rollout_files(reader.tracking_uri, run_id, artifact_uri) if rollouts else []
        for name in [*EXPORTED_ARTIFACTS, *chunks, *([MANIFEST_ROLLOUTS] if chunks else [])]:
            blob = reader.read_artifact_bytes(run_id, artifact_uri, name)
            if blob is not None:
                run.append(i)
                path.append(name)
                data.append(blob)
    return pa.table(
        {"run": pa.array(run, pa.int32()), "path": pa.array(path, pa.string()), "data": pa.array(data, pa.binary())},
        schema=_schema()[ARTIFACTS],
    )


def _parquet_bytes(table, encodings: dict[str, str]) -> bytes:
    """One file's bytes: zstd, dictionary-encoded strings (metric keys, problem ids), ``encodings``
    for the columns named there, statistics off (they would only repeat the data); no wall-clock or
    host in them, so the same table always gives the same bytes."""
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(
        table,
        sink,
        compression="zstd",
        compression_level=ZSTD_LEVEL,
        use_dictionary=[c for c in table.column_names if c not in encodings],
        column_encoding=encodings or None,
        write_statistics=False,
        store_schema=False,
    )
    return sink.getvalue()


def _replace_if_changed(path: Path, data: bytes) -> bool:
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True


# --------------------------------------------------------------------------------------------
# Reading an export back (all checks, no store)
# --------------------------------------------------------------------------------------------


@dataclass
class ExportedRun:
    index: int
    role: str
    run_key: str | None
    run_name: str | None
    status: str
    start_time: int | None
    end_time: int | None
    tags: dict[str, str]
    params: dict[str, str]
    metrics: MetricColumns | None = None
    problems: pd.DataFrame | None = None
    artifacts: dict[str, bytes] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.run_name or self.run_key or f"run {self.index}"


@dataclass
class Export:
    directory: Path
    manifest: dict[str, Any]
    runs: list[ExportedRun]

    @property
    def experiment(self) -> str:
        return self.manifest["experiment"]


def read_export(directory: str | os.PathLike[str]) -> Export:
    """The export in ``directory``, every file checked (manifest, checksums, columns, references);
    :class:`ExportError` naming the file otherwise."""
    import pyarrow as pa

    root = Path(directory)
    if not root.is_dir():
        raise ExportError(f"{root}: not a directory (give the directory `workbench export --to` wrote)")
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        raise ExportError(f"{root} is not a workbench study export: no {MANIFEST} in it")
    try:  # a regular file inside the export, bounded, recursion-safe (workbench/safe_io.py)
        manifest = read_json(manifest_path, limit=MAX_MANIFEST_BYTES, what="export manifest", inside=root)
    except UserFileError as error:
        raise ExportError(str(error)) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ExportError(f"{manifest_path}: not a workbench study export (its format is not {FORMAT!r})")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise ExportError(
            f"{manifest_path}: format version {version!r} is not one this workbench reads "
            f"(it reads {FORMAT_VERSION}); use the workbench version that wrote it "
            f"({manifest.get('workbench_version', 'unknown')}) or a newer one"
        )
    listed = manifest.get("files")
    if not isinstance(listed, dict) or not isinstance(manifest.get("experiment"), str) or not manifest["experiment"]:
        raise ExportError(f"{manifest_path}: lacks its files or experiment name")
    schemas = _schema()
    tables = {}
    for name in FILES:
        path = root / name
        entry = listed.get(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            raise ExportError(f"{manifest_path}: does not list {name}")
        if not path.exists() and not path.is_symlink():
            raise ExportError(f"{path}: missing (listed in {MANIFEST})")
        try:  # a FIFO or a link to /dev/zero among the files is refused, not read forever
            data = read_bytes(path, limit=MAX_EXPORT_FILE_BYTES, what="export file", inside=root)
        except UserFileError as error:
            raise ExportError(str(error)) from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry["sha256"]:
            raise ExportError(
                f"{path}: checksum mismatch (sha256 {digest[:12]}..., {MANIFEST} says "
                f"{entry['sha256'][:12]}...): the file changed after the export"
            )
        try:  # the row count and decompressed size checked before decoding (a zstd row bomb is refused)
            table = read_parquet(data, str(path))
        except UserFileError as error:
            raise ExportError(str(error)) from None
        missing = [f.name for f in schemas[name] if f.name not in table.column_names]
        if missing:
            raise ExportError(f"{path}: lacks columns {missing}")
        schema = schemas[name]
        if name == PROBLEMS:  # rollout.eval_samples > 1: the answer counts, when the export has them
            for extra in PASS_AT_K_COLUMNS:
                if extra in table.column_names:
                    schema = schema.append(pa.field(extra, pa.int64()))
        try:
            table = table.select([f.name for f in schema]).cast(schema)
        except (pa.ArrowException, ValueError) as error:
            raise ExportError(f"{path}: columns of the wrong type ({str(error).splitlines()[0]})") from None
        if table.num_rows != entry.get("rows"):
            raise ExportError(f"{path}: {table.num_rows} rows, {MANIFEST} says {entry.get('rows')}")
        tables[name] = table
    runs = _exported_runs(root / RUNS, tables[RUNS])
    _attach(root, runs, tables)
    return Export(root, manifest, runs)


def _exported_runs(path: Path, table) -> list[ExportedRun]:
    runs = []
    for i, r in enumerate(table.to_pylist()):
        where = f"{path}: row {i}"
        if r["run"] != i:
            raise ExportError(f"{where}: run {r['run']}, expected {i} (rows are numbered from 0)")
        if r["role"] not in ROLES:
            raise ExportError(f"{where}: role {r['role']!r} (expected one of {', '.join(ROLES)})")
        if r["status"] not in (*TERMINAL_STATUSES, "RUNNING", "SCHEDULED"):
            raise ExportError(f"{where}: status {r['status']!r} is not an MLflow run status")
        if r["role"] == "run" and not r["run_key"]:
            raise ExportError(f"{where}: a run without a run_key")
        _check_times(where, r)
        decoded = {}
        for column in ("tags", "params"):
            try:
                value = parse_json(r[column] or "{}", where)
            except ValueError:  # not JSON, or nested too deeply
                value = None
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise ExportError(f"{where}: {column} is not a JSON object of strings")
            for key, text in value.items():  # MLflow's own limits: a bulk load would not ask MLflow
                problem = entity_problem("tag" if column == "tags" else "parameter", key, text)
                if problem:
                    raise ExportError(f"{where}: {problem}")
            decoded[column] = value
        if decoded["tags"].get("workbench.role") != r["role"]:
            raise ExportError(f"{where}: its workbench.role tag is not its role {r['role']!r}")
        runs.append(
            ExportedRun(
                i,
                r["role"],
                r["run_key"],
                r["run_name"],
                r["status"],
                r["start_time"],
                r["end_time"],
                decoded["tags"],
                decoded["params"],
            )
        )
    if sum(r.role == "study" for r in runs) > 1:
        raise ExportError(f"{path}: more than one study (parent) run")
    seen: dict[tuple[str | None, int | None], int] = {}
    finished: dict[str | None, int] = {}
    for run in runs:  # one run twice would be loaded twice, and `compare` would count its seed twice
        if run.role != "run":
            continue
        same = seen.setdefault((run.run_key, run.start_time), run.index)
        if same != run.index:
            raise ExportError(
                f"{path}: rows {same} and {run.index} are the same run (run_key {run.run_key!r}, "
                f"start time {run.start_time})"
            )
        if run.status == "FINISHED":
            first = finished.setdefault(run.run_key, run.index)
            if first != run.index:
                raise ExportError(
                    f"{path}: rows {first} and {run.index} are both a FINISHED run of run_key "
                    f"{run.run_key!r} (a study finishes each run once)"
                )
    return runs


def _check_times(where: str, r: dict[str, Any]) -> None:
    """A run's start and end as MLflow would keep them: a missing start became the load's own time,
    which put the start after the end."""
    start, end = r["start_time"], r["end_time"]
    if start is None:
        raise ExportError(f"{where}: start_time is empty (MLflow would take the load's own time)")
    if start < 0 or (end is not None and end < 0):
        raise ExportError(f"{where}: a negative start_time or end_time ({start}, {end})")
    if end is None and r["status"] in TERMINAL_STATUSES:
        raise ExportError(f"{where}: a {r['status']} run without an end_time")
    if end is not None and end < start:
        raise ExportError(f"{where}: end_time {end} is before start_time {start}")


def _runs_of(root: Path, name: str, table, n: int) -> np.ndarray:
    run = table.column("run").to_numpy(zero_copy_only=False)
    bad = (run < 0) | (run >= n)
    if bad.any():
        raise ExportError(
            f"{root / name}: row {int(np.argmax(bad))} names run {int(run[bad][0])}, which "
            f"{RUNS} does not hold ({n} runs)"
        )
    return run


def _spans(run: np.ndarray) -> dict[int, slice]:
    """Rows of each run, which must be contiguous (the files are sorted by run)."""
    if not len(run):
        return {}
    starts = np.r_[0, np.flatnonzero(run[1:] != run[:-1]) + 1]
    ends = np.r_[starts[1:], len(run)]
    out = {}
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        if int(run[a]) in out:
            raise ValueError(f"run {int(run[a])}'s rows are not together")
        out[int(run[a])] = slice(a, b)
    return out


def _attach(root: Path, runs: list[ExportedRun], tables: dict[str, Any]) -> None:
    n = len(runs)
    metrics = tables[METRICS]
    run = _runs_of(root, METRICS, metrics, n)
    key = metrics.column("key").to_numpy(zero_copy_only=False).astype(str)
    step = metrics.column("step").to_numpy(zero_copy_only=False)
    value = metrics.column("value").to_numpy(zero_copy_only=False).astype(float)
    stamp = metrics.column("timestamp").to_numpy(zero_copy_only=False)
    if pd.isna(key).any() or (len(key) and min(len(k) for k in np.unique(key)) == 0):
        raise ExportError(f"{root / METRICS}: a point without a metric key")
    try:
        spans = _spans(run)
    except ValueError as error:
        raise ExportError(f"{root / METRICS}: {error}") from None
    for i, span in spans.items():
        names, codes = np.unique(key[span], return_inverse=True)
        for name in names.tolist():  # written in bulk, past MLflow's own checks: checked here
            problem = metric_name_problem(name)
            if problem:
                raise ExportError(f"{root / METRICS}: run {i}: {problem}")
        columns = MetricColumns(
            list(names), codes.astype(np.int64), step[span].astype(np.int64), value[span], stamp[span].astype(np.int64)
        )
        seen = pd.DataFrame({"k": codes, "s": columns.step, "t": columns.timestamp, "v": columns.value})
        if seen.duplicated().any():
            raise ExportError(f"{root / METRICS}: run {i} has a point twice (same key, step, timestamp, value)")
        runs[i].metrics = columns
    problems = tables[PROBLEMS]
    run = _runs_of(root, PROBLEMS, problems, n)
    frame = problems.to_pandas()
    try:
        spans = _spans(run)
    except ValueError as error:
        raise ExportError(f"{root / PROBLEMS}: {error}") from None
    if frame[list(PROBLEM_COLUMNS)].isna().any().any():
        raise ExportError(f"{root / PROBLEMS}: empty cells")
    extra = [c for c in PASS_AT_K_COLUMNS if c in frame.columns]
    for i, span in spans.items():
        runs[i].problems = frame.iloc[span][[*PROBLEM_COLUMNS, *extra]].reset_index(drop=True)
    artifacts = tables[ARTIFACTS]
    run = _runs_of(root, ARTIFACTS, artifacts, n)
    for i, path, data in zip(
        run.tolist(), artifacts.column("path").to_pylist(), artifacts.column("data").to_pylist(), strict=True
    ):
        if path not in EXPORTED_ARTIFACTS and not is_rollout_artifact(path):
            raise ExportError(
                f"{root / ARTIFACTS}: artifact {path!r} of run {i} is not one an export holds "
                f"({', '.join(EXPORTED_ARTIFACTS)}, rollouts/)"
            )
        if path in runs[i].artifacts:
            raise ExportError(f"{root / ARTIFACTS}: run {i} has {path} twice")
        runs[i].artifacts[path] = data


# --------------------------------------------------------------------------------------------
# Loading into a store
# --------------------------------------------------------------------------------------------


@dataclass
class LoadSummary:
    study: str
    experiment: str
    tracking_uri: str
    loaded: list[str] = field(default_factory=list)  # labels of the runs written
    skipped: list[str] = field(default_factory=list)  # labels already in the store
    not_finished: list[str] = field(default_factory=list)  # SCHEDULED/RUNNING runs in the export: not loaded
    points: int = 0
    parent: str = ""  # "loaded" | "kept" (the store had one) | "" (the export has none)
    seconds: float = 0.0

    def line(self) -> str:
        parent = {"loaded": "; its parent run loaded", "kept": "; the store's own parent run kept"}.get(self.parent, "")
        return (
            f"study {self.study!r} into {redact_uri(self.tracking_uri)}: {len(self.loaded)} run(s) loaded "
            f"({self.points:,} metric points), {len(self.skipped)} already there (skipped){parent}, "
            f"in {self.seconds:.1f} s"
        )


def load_export(source: str | os.PathLike[str] | Export, tracking_uri: str) -> LoadSummary:
    """Load the export in the directory ``source`` (or one :func:`read_export` read already) into the
    store ``tracking_uri`` (its experiment created if missing). Everything is read and checked first;
    a run already there is skipped (module docstring)."""
    from mlflow import MlflowClient

    t0 = time.perf_counter()
    export = source if isinstance(source, Export) else read_export(source)
    summary = LoadSummary(export.manifest.get("study") or export.experiment, export.experiment, tracking_uri)
    ensure_store(tracking_uri)
    client = MlflowClient(tracking_uri)
    existing = client.get_experiment_by_name(export.experiment)
    present, finished, parent_id = _in_store(client, existing, export.experiment, tracking_uri)
    todo = []
    for run in export.runs:
        if run.role == "study":
            if parent_id is not None:
                summary.parent = "kept"
            continue
        if run.status not in TERMINAL_STATUSES:  # a SCHEDULED/RUNNING run would stay a phantom RUNNING run
            summary.not_finished.append(f"{run.label} ({run.status})")
        elif (run.run_key, run.start_time) in present or run.run_key in finished:
            summary.skipped.append(run.label)
        else:
            todo.append(run)
    parent = next((r for r in export.runs if r.role == "study"), None)
    if not todo and (parent is None or parent_id is not None):
        summary.seconds = time.perf_counter() - t0
        return summary
    eid = get_or_create_experiment(client, export.experiment, tracking_uri)
    written: list[str] = []
    try:
        if parent_id is None and parent is not None:
            parent_id = write_run(client, tracking_uri, eid, parent, None)
            written.append(parent_id)
            summary.parent = "loaded"
        for run in todo:
            written.append(write_run(client, tracking_uri, eid, run, parent_id))
            summary.loaded.append(run.label)
            summary.points += 0 if run.metrics is None else len(run.metrics)
    except BaseException:  # the store failing part-way: the runs of this load go, so a retry starts afresh
        for run_id in reversed(written):
            try:
                client.delete_run(run_id)
            except Exception:  # noqa: BLE001 - the store failing again: the original error is the one to report
                pass
        raise
    summary.seconds = time.perf_counter() - t0
    return summary


def _in_store(client, experiment, name: str, uri: str) -> tuple[set, set, str | None]:
    """The experiment's runs already there: ``(run_key, start_time)`` of each, run_keys FINISHED, its
    parent run id; refuses an experiment of that name that is not a workbench study."""
    if experiment is None:
        return set(), set(), None
    runs = []
    token = None
    while True:
        page = client.search_runs([experiment.experiment_id], max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    parents = sorted((r for r in runs if r.data.tags.get("workbench.role") == "study"), key=lambda r: r.info.start_time)
    if runs and not parents:
        raise ExportError(
            f"experiment {name!r} exists in {redact_uri(uri)} and is not a workbench study "
            "(no workbench.role=study run): load the export into another store"
        )
    children = [r for r in runs if r.data.tags.get("workbench.role") == "run"]
    present = {(r.data.tags.get("workbench.run_key"), r.info.start_time) for r in children}
    finished = {r.data.tags.get("workbench.run_key") for r in children if r.info.status == "FINISHED"}
    return present, finished, parents[0].info.run_id if parents else None


def write_run(client, uri: str, experiment_id: str, run: ExportedRun, parent_id: str | None) -> str:
    """One run as it was: tags, params, metric history, artifacts, then its status and end time.
    A failure part-way deletes the run (a half-written run would hold its run_key). Also copies a run
    between two studies of one store (:mod:`workbench.execution.reuse`)."""
    import tempfile

    from mlflow.entities import Metric, Param

    tags = dict(run.tags)
    if parent_id is not None:
        tags["mlflow.parentRunId"] = parent_id
    created = client.create_run(experiment_id, start_time=run.start_time, tags=tags, run_name=run.run_name)
    run_id = created.info.run_id
    try:
        params = [Param(k, v) for k, v in sorted(run.params.items())]
        for i in range(0, len(params), _MAX_PARAMS_PER_BATCH):
            client.log_batch(run_id, params=params[i : i + _MAX_PARAMS_PER_BATCH])
        if run.metrics is not None and len(run.metrics):
            if bulk_writable(uri):
                write_metric_history(uri, run_id, [run.metrics], 0)
            else:
                m = run.metrics
                points = [
                    Metric(m.names[k], v, t, s)
                    for k, s, v, t in zip(
                        m.key.tolist(), m.step.tolist(), m.value.tolist(), m.timestamp.tolist(), strict=True
                    )
                ]
                for i in range(0, len(points), _MAX_METRICS_PER_BATCH):
                    client.log_batch(run_id, metrics=points[i : i + _MAX_METRICS_PER_BATCH])
        files = dict(run.artifacts)
        if run.problems is not None and len(run.problems):
            columns = {c: run.problems[c].tolist() for c in PROBLEM_COLUMNS}
            for c in PASS_AT_K_COLUMNS:  # the answer counts of a run that sampled several answers per problem
                if c in run.problems.columns and run.problems[c].notna().all():
                    columns[c] = [int(v) for v in run.problems[c]]
            files[PROBLEMS_ARTIFACT] = encode_problem_rows(columns)
        if files:
            with tempfile.TemporaryDirectory() as tmp:
                for path, data in files.items():
                    local = Path(tmp) / path
                    local.parent.mkdir(parents=True, exist_ok=True)
                    local.write_bytes(data)
                client.log_artifacts(run_id, tmp)
        if run.status in TERMINAL_STATUSES:
            client.set_terminated(run_id, run.status, end_time=run.end_time)
    except BaseException:
        client.delete_run(run_id)
        raise
    return run_id
