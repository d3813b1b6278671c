"""TensorBoard event files -> :class:`TrackedRun`, read with the ``tensorboard`` package's ``EventAccumulator``.

A run is one log directory holding ``events.out.tfevents.*`` files (what one ``SummaryWriter``
writes: HF Trainer's ``logging_dir``, verl's ``$TENSORBOARD_DIR``). Scalars written with
``add_scalar`` (``simple_value``) and TF2 ``tf.summary.scalar`` (scalar tensors) are read;
images, histograms and text are not metrics and are skipped.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .errors import ImportSourceError
from .trackers import TrackedRun

__all__ = ["EVENT_GLOB", "read_tensorboard_run"]

EVENT_GLOB = "*tfevents*"


def _event_files(path: Path) -> list[Path]:
    if not path.exists():
        raise ImportSourceError(f"{path}: no such directory")
    if not path.is_dir():
        raise ImportSourceError(f"{path} is not a directory; give a TensorBoard log directory (with events.out.tfevents.* files)")
    files = sorted(f for f in path.glob(EVENT_GLOB) if f.is_file())
    if not files:
        below = sorted({str(f.parent.relative_to(path)) for f in path.rglob(EVENT_GLOB) if f.is_file()})
        hint = f"; run directories below it: {', '.join(below[:8])}{', ...' if len(below) > 8 else ''} " \
               "(give each, with one --seed each)" if below else ""
        raise ImportSourceError(f"{path} holds no TensorBoard event files (events.out.tfevents.*){hint}")
    return files


def read_tensorboard_run(path: Path) -> TrackedRun:
    """Every scalar of the log directory ``path``: ``(step, {tag: value})`` rows, one per step."""
    from tensorboard.backend.event_processing import event_accumulator  # deferred: tensorboard, protobuf
    from tensorboard.util import tensor_util  # deferred: as above

    files = _event_files(path)
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0" + f.read_bytes())
    accumulator = event_accumulator.EventAccumulator(
        str(path), size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})  # 0: keep every point
    try:
        accumulator.Reload()
    except Exception as e:  # noqa: BLE001 - the reader's errors (DataLossError, DecodeError) have no common base
        raise ImportSourceError(f"{path}: not readable as TensorBoard event files ({type(e).__name__}: {e})") from None
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
