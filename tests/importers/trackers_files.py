"""Tracker files for the import tests, written with the installed libraries' own classes: TensorBoard
event files with ``tensorboard``'s ``EventFileWriter`` (what torch's ``SummaryWriter`` writes through),
and W&B transaction logs of ``wandb``'s protobuf ``Record`` messages.

W&B 0.31 ships no Python writer for its framing (its service, in Go, writes it), so :func:`wandb_log`
frames the records as the reader undoes it (``workbench/importers/wandb.py``: a ``:W&B`` header, 32 KiB
blocks, each chunk a CRC-32, a length and a type): it is how the tests give a run a value W&B's own
client cannot write (a 5,000-digit integer: Python's ``json`` refuses to print one).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path

VERL_ROW = {"critic/score/mean": 0.5, "actor/entropy": 1.0, "response_length/mean": 100.0}


def tensorboard_run(directory: Path, steps: Iterable[int], row: Mapping[str, float] = VERL_ROW) -> Path:
    """One event file of scalars in ``directory`` (verl's ``_TensorboardAdapter``: ``add_scalar(key, value, step)``)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(directory))
    for step in steps:
        values = [summary_pb2.Summary.Value(tag=key, simple_value=value + 0.01 * step) for key, value in row.items()]
        writer.add_event(event_pb2.Event(step=step, wall_time=1.7e9 + step, summary=summary_pb2.Summary(value=values)))
    writer.close()
    (event_file,) = directory.glob("*tfevents*")
    return event_file


def _frame(payloads: Iterable[bytes]) -> bytes:
    out = bytearray(b":W&B" + (0xBEE1).to_bytes(2, "little") + b"\x00")
    block = 32768
    for payload in payloads:
        data, first = payload, True
        while True:
            left = block - len(out) % block
            if left < 7:
                out += b"\x00" * left
                continue
            room = left - 7
            chunk, data = data[:room], data[room:]
            kind = (1 if not data else 2) if first else (4 if not data else 3)  # FULL, FIRST, LAST, MIDDLE
            out += struct.pack("<IHB", zlib.crc32(chunk, zlib.crc32(bytes([kind]))), len(chunk), kind) + chunk
            first = False
            if not data:
                break
    return bytes(out)


def wandb_log(
    directory: Path,
    history: Iterable[Mapping[str, str]],
    config: Mapping[str, str] | None = None,
    exit_code: int | None = 0,
    run_id: str = "abc123",
) -> Path:
    """``directory/run-<id>.wandb``: a run record (with ``config``, values as JSON text), one history record
    per row (``{key: JSON text}``, ``_step`` among them) and an exit record (none: a run still going)."""
    from wandb.proto import wandb_internal_pb2 as pb

    records = []
    run = pb.Record()
    run.run.run_id, run.run.display_name = run_id, f"run-{run_id}"
    for key, value in (config or {}).items():
        item = run.run.config.update.add()
        item.key, item.value_json = key, value
    records.append(run)
    for row in history:
        record = pb.Record()
        for key, value in row.items():
            item = record.history.item.add()
            item.key, item.value_json = key, value
        records.append(record)
    if exit_code is not None:
        done = pb.Record()
        done.exit.exit_code = exit_code
        records.append(done)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"run-{run_id}.wandb"
    path.write_bytes(_frame(r.SerializeToString() for r in records))
    return path


def verl_history(steps: Iterable[int]) -> list[dict[str, str]]:
    return [{"_step": str(s), **{k: json.dumps(v + 0.01 * s) for k, v in VERL_ROW.items()}} for s in steps]
