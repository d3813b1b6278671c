"""TensorBoard event files -> :class:`TrackedRun`, read with the ``tensorboard`` package's ``EventAccumulator``.

A run is one log directory holding ``events.out.tfevents.*`` files (what one ``SummaryWriter``
writes: HF Trainer's ``logging_dir``, verl's ``$TENSORBOARD_DIR``). Scalars written with
``add_scalar`` (``simple_value``) and TF2 ``tf.summary.scalar`` (scalar tensors) are read;
images, histograms and text are not metrics and are skipped.

Each event file is read through :mod:`workbench.safe_io` (a regular file, bounded: a FIFO or a link
to ``/dev/zero`` named like an event file is refused, not opened) and its TFRecord framing checked
here, record by record (length, masked CRC-32C of the length and of the data): ``EventAccumulator``
stops at a record that fails its CRC and says nothing, which would import part of a run in silence.
A corrupt record is an error naming the file and byte, or, with ``--skip-bad-lines``, left out and
counted in the import's summary (a corrupt length ends the file: nothing after it can be framed).
A last record cut short (a writer still running) is left out and counted the same way. The checked
records are then handed to ``EventAccumulator`` in a private copy, so what it reads is what was checked.
"""

from __future__ import annotations

import hashlib
import struct
import tempfile
from pathlib import Path

from workbench.errors import UserFileError
from workbench.safe_io import open_regular, read_bytes

from .errors import ImportSourceError
from .trackers import TrackedRun
from .validate import MAX_SOURCE_BYTES, BadLines

__all__ = ["EVENT_GLOB", "read_tensorboard_run", "tfrecords"]

EVENT_GLOB = "*tfevents*"
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")


def _event_files(path: Path) -> list[Path]:
    if not path.exists():
        raise ImportSourceError(f"{path}: no such directory")
    if not path.is_dir():
        raise ImportSourceError(
            f"{path} is not a directory; give a TensorBoard log directory (with events.out.tfevents.* files)"
        )
    files = sorted(path.glob(EVENT_GLOB))
    for f in files:  # every entry EventAccumulator would open: a FIFO would block it, /dev/zero never ends
        try:
            open_regular(f, what="TensorBoard event file").close()
        except (OSError, ValueError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise ImportSourceError(f"{f}: {why}") from None
    if not files:
        below = sorted({str(f.parent.relative_to(path)) for f in path.rglob(EVENT_GLOB) if f.is_file()})
        hint = (
            f"; run directories below it: {', '.join(below[:8])}{', ...' if len(below) > 8 else ''} "
            "(give each, with one --seed each)"
            if below
            else ""
        )
        raise ImportSourceError(f"{path} holds no TensorBoard event files (events.out.tfevents.*){hint}")
    return files


def tfrecords(data: bytes, bad: BadLines) -> bytes:
    """``data`` (a TFRecord file) with only the records whose framing and CRCs check; each record that
    does not goes to ``bad`` (byte offset, why). A corrupt length header ends the file (no later record
    can be found); so does a last record cut short."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c  # deferred: tensorboard

    kept, pos, end = bytearray(), 0, len(data)
    while pos < end:
        if pos + 12 > end:
            bad(pos, f"the last record is cut short ({end - pos} bytes: a writer still running?)", what="byte")
            break
        head = data[pos : pos + 8]
        if masked_crc32c(head) != _CRC.unpack_from(data, pos + 8)[0]:
            bad(
                pos, "a record's length fails its CRC check (corrupt): the rest of the file cannot be read", what="byte"
            )
            break
        (length,) = _LENGTH.unpack(head)
        stop = pos + 12 + length + 4
        if stop > end:
            bad(
                pos,
                f"the last record is cut short ({end - pos} of {stop - pos} bytes: a writer still running?)",
                what="byte",
            )
            break
        body = data[pos + 12 : pos + 12 + length]
        if masked_crc32c(body) != _CRC.unpack_from(data, stop - 4)[0]:
            bad(pos, "a record fails its CRC check (corrupt)", what="byte")
        else:
            kept += data[pos:stop]
        pos = stop
    return bytes(kept)


def read_tensorboard_run(path: Path, bad: BadLines | None = None) -> TrackedRun:
    """Every scalar of the log directory ``path``: ``(step, {tag: value})`` rows, one per step.
    ``bad``: where corrupt records go (default: an error naming the file and byte)."""
    from tensorboard.backend.event_processing import event_accumulator  # deferred: tensorboard, protobuf
    from tensorboard.util import tensor_util  # deferred: as above

    files = _event_files(path)
    digest = hashlib.sha256()
    budget = MAX_SOURCE_BYTES
    with tempfile.TemporaryDirectory(prefix="workbench-tensorboard-") as copy:
        for f in files:
            try:
                data = read_bytes(f, limit=budget, what="TensorBoard event file")
            except UserFileError as e:
                raise ImportSourceError(str(e)) from None
            budget -= len(data)
            digest.update(f.name.encode() + b"\0" + data)
            sink = BadLines(str(f), skip=bad.skip if bad is not None else False)
            (Path(copy) / f.name).write_bytes(tfrecords(data, sink))
            if bad is not None and sink.count:
                bad.count += sink.count
                bad.first = bad.first or f"{f.name}: {sink.first}"
        accumulator = event_accumulator.EventAccumulator(
            copy, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0}
        )  # 0: keep every point
        try:
            accumulator.Reload()
        except Exception as e:  # noqa: BLE001 - the reader's errors (DataLossError, DecodeError) have no common base
            raise ImportSourceError(
                f"{path}: not readable as TensorBoard event files ({type(e).__name__}: {e})"
            ) from None
    by_step: dict[int, dict[str, float]] = {}
    tags = accumulator.Tags()
    for tag in tags.get("scalars", []):
        for event in accumulator.Scalars(tag):
            by_step.setdefault(int(event.step), {})[tag] = float(event.value)
    for tag in tags.get("tensors", []):  # TF2 summaries: scalars are 0-d tensors
        for event in accumulator.Tensors(tag):
            value = tensor_util.make_ndarray(event.tensor_proto)
            if value.ndim == 0 and value.dtype.kind in "fiu":
                by_step.setdefault(int(event.step), {})[tag] = float(value)
    return TrackedRun(scalars=sorted(by_step.items()), digest=digest.hexdigest(), name=path.name)
