"""W&B offline run directories -> :class:`TrackedRun`, no account or server needed.

``WANDB_MODE=offline`` writes ``wandb/offline-run-<time>-<id>/run-<id>.wandb``: W&B's transaction
log, a 7-byte header (``:W&B``, magic 0xBEE1, version 0) and then LevelDB-log framing (32 KiB
blocks; each chunk a CRC-32, a length and a FULL/FIRST/MIDDLE/LAST type) around protobuf
``Record`` messages. The records are decoded with the ``wandb`` package's own protobuf classes
(``wandb.proto.wandb_internal_pb2``); W&B 0.31 ships no Python reader for the framing itself,
so :func:`_records` undoes it. Read: ``history`` rows (metrics at W&B's ``_step``), the ``run``
record's config (params) and the ``exit`` record (status: no exit record means the run is still
going, or died without closing, and is not imported yet).
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from workbench.errors import UserFileError, one_line
from workbench.safe_io import read_bytes

from .errors import ImportSourceError
from .trackers import TrackedRun
from .validate import MAX_SOURCE_BYTES, BadLines, metric_value, step_number

__all__ = ["read_wandb_run"]

_HEADER = b":W&B" + (0xBEE1).to_bytes(2, "little") + b"\x00"
_BLOCK = 32768
_CHUNK_HEAD = struct.Struct("<IHB")  # crc32 of type+data, data length, chunk type
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_BOOKKEEPING = ("_step", "_runtime", "_timestamp")  # W&B's own history keys, not metrics


def _transaction_log(path: Path) -> Path:
    if not path.exists():
        raise ImportSourceError(f"{path}: no such directory")
    if not path.is_dir():
        return path  # a file (or a FIFO, a device: read_bytes refuses those in one line)
    logs = sorted(path.glob("run-*.wandb"))
    if len(logs) == 1:
        return logs[0]
    below = sorted(p.name for p in path.glob("*run-*") if p.is_dir() and any(p.glob("run-*.wandb")))
    hint = f"; W&B runs below it: {', '.join(below[:8])} (give each, with one --seed each)" if below else ""
    many = f" ({len(logs)} run-*.wandb files)" if logs else ""
    raise ImportSourceError(f"{path} is not a W&B run directory (one run-<id>.wandb file){many}{hint}")


def _records(data: bytes, where: Path) -> Iterator[bytes]:
    """The payloads of the transaction log ``data`` (a truncated last record ends it: a run still writing)."""
    if not data.startswith(_HEADER):
        raise ImportSourceError(f"{where} is not a W&B transaction log (no :W&B header)")
    pos, pending = len(_HEADER), bytearray()
    while pos + _CHUNK_HEAD.size <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _CHUNK_HEAD.size:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        crc, length, kind = _CHUNK_HEAD.unpack_from(data, pos)
        start, pos = pos + _CHUNK_HEAD.size, pos + _CHUNK_HEAD.size + length
        if pos > len(data):
            return
        chunk = data[start:pos]
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            raise ImportSourceError(f"{where}: corrupt W&B transaction log (checksum mismatch at byte {start})")
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = bytearray(chunk)
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            yield bytes(pending + chunk)
            pending = bytearray()
        elif kind != 0:
            raise ImportSourceError(f"{where}: corrupt W&B transaction log (chunk type {kind} at byte {start})")


def _number(value_json: str) -> tuple[float | None, str | None]:
    """``(value, None)`` for a scalar, ``(None, None)`` for what is not one (a string, a table, a
    histogram: not a metric, left out), ``(None, why)`` for a value that cannot be read as logged (not
    JSON, nested too deeply, a number beyond a 64-bit float such as a 5,000-digit integer)."""
    try:
        value = json.loads(value_json)  # W&B writes NaN and Infinity as JSON extensions, which json reads
    except RecursionError:
        return None, "nested too deeply"
    except ValueError as e:  # bad JSON, or an integer past Python's 4,300-digit conversion limit
        return None, f"not readable as a number ({len(value_json):,} characters: {one_line(str(e))[:80]})"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, None
    if isinstance(value, float) and math.isinf(value) and "Infinity" not in value_json:  # 1e400: json says inf
        return None, f"value {value_json[:40]!r} is out of range (beyond a 64-bit float)"
    try:
        return metric_value(value), None
    except ValueError as e:
        return None, str(e)


def _step(value: float | None) -> int:
    """W&B's ``_step`` as a step MLflow stores (a 64-bit integer); ``ValueError`` saying why not."""
    if value is None:
        raise ValueError("no _step")
    if not math.isfinite(value) or value != int(value):
        raise ValueError(f"step {value!r} is not an integer")
    return step_number(int(value))


def read_wandb_run(path: Path, bad: BadLines | None = None) -> TrackedRun:
    """The history, config and exit status of the offline run at ``path`` (its directory or its .wandb file).

    A history value that cannot be read as logged, or a step that is not a 64-bit integer, goes to
    ``bad`` (default: an error naming the file, record and key; with ``--skip-bad-lines``: the record's
    value, or the record for a bad step, left out and counted in the import's summary)."""
    from google.protobuf.message import DecodeError  # deferred: protobuf comes with wandb
    from wandb.proto import wandb_internal_pb2  # deferred: wandb

    log = _transaction_log(path)
    bad = bad if bad is not None else BadLines(str(log), skip=False)
    bad.path = str(log)
    try:
        data = read_bytes(log, limit=MAX_SOURCE_BYTES, what="W&B transaction log")
    except UserFileError as e:
        raise ImportSourceError(str(e)) from None
    by_step: dict[int, dict[str, float]] = {}
    params: dict[str, str] = {}
    status, name, run_id = "RUNNING", "", ""
    history = 0
    for payload in _records(data, log):
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(payload)
        except DecodeError:
            raise ImportSourceError(f"{log}: corrupt W&B record") from None
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history += 1
            row: dict[str, float] = {}
            step = None
            for item in record.history.item:
                key = item.key or ".".join(item.nested_key)
                value, problem = _number(item.value_json)
                if problem is not None:
                    bad(history, f"{_short(key)}: {problem}", what="history record")
                elif key == "_step":
                    step = value
                elif value is not None and key not in _BOOKKEEPING:
                    row[key] = value
            if step is None and record.history.HasField("step"):
                step = float(record.history.step.num)
            try:
                by_step.setdefault(_step(step), {}).update(row)
            except ValueError as e:
                bad(history, str(e), what="history record")
        elif kind == "run":
            name, run_id = record.run.display_name or record.run.run_id, record.run.run_id
            for item in record.run.config.update:
                key = item.key or ".".join(item.nested_key)
                if not key.startswith("_"):  # _wandb: W&B's own bookkeeping
                    params[key] = _param(item.value_json)
        elif kind == "exit":
            status = "FINISHED" if record.exit.exit_code == 0 else "FAILED"
    return TrackedRun(
        scalars=sorted(by_step.items()),
        digest=hashlib.sha256(data).hexdigest(),
        params=params,
        status=status,
        name=name,
        run_id=run_id,
    )


def _short(key: str, width: int = 60) -> str:
    return repr(key) if len(key) <= width else f"{key[: width - 12]!r}... ({len(key)} chars)"


def _param(value_json: str) -> str:
    try:
        value = json.loads(value_json)
    except (ValueError, RecursionError):
        return value_json
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
