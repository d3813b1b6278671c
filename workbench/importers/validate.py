"""Validate-then-write for every importer: bounded streaming reads, checked values, labels, names.

An import reads each source once, here, to check everything that could make MLflow refuse a write
(step range, number range, metric names by MLflow's own rules) and to compute what the run's tags
need (health, judged a block of steps at a time, metric names, point count); the points it checked
go, under their imported names, to a temporary file (:class:`CheckedPoints`), which :mod:`.write`
streams into the store. Nothing is written unless every run passed, and what is written is what was
checked. Memory per run is constant for a log whose steps ascend (a log that repeats or reorders
steps is merged in memory, bounded by the file limits below).

File readers get their lines from :func:`numbered_lines` (a regular file only: FIFOs and devices
are refused before they are opened; at most :data:`MAX_SOURCE_BYTES`, :data:`MAX_LINES` lines of at
most :data:`MAX_LINE_BYTES`) and report a malformed line to :class:`BadLines`, which raises with the
line number unless ``--skip-bad-lines`` was given (then the lines are counted and reported).
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
import tempfile
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, BinaryIO

import numpy as np
from pydantic import TypeAdapter, ValidationError

from workbench.config import RunConfig
from workbench.errors import UserFileError, explain_pydantic_error
from workbench.safe_io import open_user_file
from workbench.study.report import Reporter
from workbench.study.schema import validate_fields
from workbench.tracking.bulk import MetricColumns
from workbench.tracking.limits import metric_name_problem

from .errors import ImportSourceError

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_LINES",
    "MAX_LINE_BYTES",
    "MAX_SOURCE_BYTES",
    "BadLines",
    "CheckedPoints",
    "Point",
    "Points",
    "RunCheck",
    "check_import",
    "check_labels",
    "check_run",
    "file_sha256",
    "metric_value",
    "numbered_lines",
    "open_source",
    "regular_file_size",
    "step_number",
]

MAX_SOURCE_BYTES = 4 << 30  # 4 GiB: a 1M-step verl log is ~80 MB; /dev/zero or a runaway file is not a log
MAX_LINES = 50_000_000
MAX_LINE_BYTES = 1 << 20  # one metric line is a few KB; a 1 MiB line is not one (and bounds json nesting work)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # MLflow stores a step as a 64-bit integer
SPILL_POINTS = 1 << 15  # checked points buffered in memory before they go to the temporary file (~0.8 MB)

#: (where, step, {source metric name: value}): ``where`` names the line ("log.jsonl:12") or run.
Point = tuple[str, int, dict[str, float]]


# --------------------------------------------------------------------------------------------
# Reading a file
# --------------------------------------------------------------------------------------------


def regular_file_size(path: str) -> int:
    """The size of ``path`` if it is a regular file within :data:`MAX_SOURCE_BYTES`; else the reason.

    Checked with ``stat`` before ``open``: opening a FIFO blocks until a writer appears, and a
    device (``/dev/zero``) never ends."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ImportSourceError(f"{path}: no such file") from None
    except OSError as e:
        raise ImportSourceError(f"{path}: cannot read ({e.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise ImportSourceError(f"{path} is a directory, not a metric log")
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device or socket"
        raise ImportSourceError(f"{path} is {kind}, not a regular file: copy the log to a file first")
    if info.st_size > MAX_SOURCE_BYTES:
        raise ImportSourceError(f"{path} is {info.st_size:,} bytes, over the import limit of {MAX_SOURCE_BYTES:,}")
    return info.st_size


def open_source(path: str) -> BinaryIO:
    """``path`` opened as :func:`workbench.safe_io.open_regular` opens it (a regular file, checked on the
    open descriptor: a file swapped for a FIFO after :func:`regular_file_size` cannot block either),
    its size within :data:`MAX_SOURCE_BYTES`; failures are ``ImportSourceError`` naming the file."""
    regular_file_size(path)  # the clearer message first: "is a FIFO", "is a directory"
    try:
        return open_user_file(path, what="metric log")
    except UserFileError as e:
        raise ImportSourceError(str(e)) from None


def numbered_lines(path: str) -> Iterator[tuple[int, str]]:
    """``(1-based line number, text without the newline)``, streamed; bounded as the module says
    (at most :data:`MAX_SOURCE_BYTES` read, even from a file that grows while it is read)."""
    with open_source(path) as f:
        total = 0
        for number in range(1, MAX_LINES + 2):
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            total += len(raw)
            if total > MAX_SOURCE_BYTES:
                raise ImportSourceError(f"{path}: more than {MAX_SOURCE_BYTES:,} bytes, over the import limit")
            if number > MAX_LINES:
                raise ImportSourceError(f"{path}: more than {MAX_LINES:,} lines, over the import limit")
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise ImportSourceError(
                    f"{path}:{number}: a line longer than {MAX_LINE_BYTES:,} bytes is not a metric log line"
                )
            yield number, raw.decode("utf-8", errors="replace").rstrip("\r\n")


def file_sha256(path: str) -> str:
    """SHA-256 of a file's bytes, read in chunks (constant memory), at most :data:`MAX_SOURCE_BYTES`."""
    digest, total = hashlib.sha256(), 0
    with open_source(path) as f:
        while chunk := f.read(1 << 20):
            total += len(chunk)
            if total > MAX_SOURCE_BYTES:
                raise ImportSourceError(f"{path}: more than {MAX_SOURCE_BYTES:,} bytes, over the import limit")
            digest.update(chunk)
    return digest.hexdigest()


class BadLines:
    """Where a reader reports a malformed line: an error naming it, or (``skip``) a count."""

    def __init__(self, path: str, skip: bool, unit: str = "line") -> None:
        self.path = path
        self.skip = skip
        self.unit = unit  # what the import's summary counts: malformed line(s), record(s)
        self.count = 0
        self.first = ""  # "line N: why" of the first one skipped

    def reset(self) -> None:
        self.count, self.first = 0, ""

    def __call__(self, number: int, why: str, what: str = "line") -> None:
        """A malformed ``what`` at ``number``: a line; a ``log_history entry`` of a JSON document; a
        TensorBoard record at a ``byte`` offset; a W&B ``history record``."""
        if not self.skip:
            where = f"{self.path}:{number}" if what == "line" else f"{self.path}: {what} {number}"
            plural = {"line": "lines", "byte": "records"}.get(
                what, what.replace("entry", "entries").replace("record", "records")
            )
            raise ImportSourceError(f"{where}: {why} (--skip-bad-lines skips such {plural} and counts them)")
        self.count += 1
        self.first = self.first or f"{what} {number}: {why}"


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------


def step_number(value: Any) -> int:
    """A step as MLflow stores it (a 64-bit integer); ``ValueError`` saying why not."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"step {_short(value)} is not an integer")
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"step {_short(value)} is out of range (MLflow steps are 64-bit integers)")
    return value


def metric_value(value: Any) -> float:
    """A metric value as a float: numbers (NaN and infinities written as such are kept) and None
    (NaN); ``ValueError`` for a number beyond float range (a 400-digit integer, ``1e400``)."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"value {_short(value)} is not a number")
    try:
        x = float(value)
    except OverflowError:
        raise ValueError(f"value {_short(value)} is out of range (beyond a 64-bit float)") from None
    if math.isinf(x) and not (
        isinstance(value, float) or str(value).strip().lstrip("+-").lower() in ("inf", "infinity")
    ):
        raise ValueError(f"value {_short(value)} is out of range (beyond a 64-bit float)")
    return x


def _short(value: Any, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else f"{text[: width - 12]}... ({len(text)} chars)"


def check_labels(study: str, variant: str, seed: int, where: str = "") -> None:
    """``--study``/``--variant``/``--seed`` (or a source run's variant and seed) must be what a
    study file accepts: checked by the study's own field checks and the run config's ``seed``
    field, so the two never disagree (without validating a whole run config: that imports torch)."""
    rep = Reporter(None)
    validate_fields({"name": study, "base": {}, "variants": {variant: {}}, "seeds": [seed]}, rep)
    for issue in rep.issues:
        option, value = ("--study", study) if issue.path == "name" else ("--variant", variant)
        if issue.path.startswith("seeds"):
            option, value = "--seed", seed
        raise ImportSourceError(f"{where}{option} {_short(value)}: {issue.message}")
    field = RunConfig.model_fields["seed"]
    try:
        TypeAdapter(Annotated[field.annotation, field]).validate_python(seed)
    except ValidationError as err:
        raise ImportSourceError(f"{where}--seed {_short(seed)}: {explain_pydantic_error(err.errors()[0])}") from None


# --------------------------------------------------------------------------------------------
# One run, checked
# --------------------------------------------------------------------------------------------


class Points:
    """A run's points, iterable more than once: ``produce()`` makes a fresh iterator of
    ``(where, step, {name: value})`` each time (a file is re-read; nothing is kept)."""

    def __init__(self, produce: Callable[[], Iterable[Point]], on_pass: Callable[[], None] | None = None) -> None:
        self._fresh = produce
        self._on_pass = on_pass  # e.g. BadLines.reset: a pass over the source counts its bad lines afresh
        self.merged: list[tuple[int, dict[str, float]]] | None = None  # set when steps repeat or go back

    def _produce(self) -> Iterable[Point]:
        if self._on_pass is not None:
            self._on_pass()
        return self._fresh()

    def __iter__(self) -> Iterator[tuple[int, dict[str, float]]]:
        """``(step, metrics)`` in ascending step order, a repeated step's metrics merged (later wins)."""
        if self.merged is not None:
            yield from self.merged
            return
        for _, step, metrics in self._produce():
            yield step, metrics

    def with_where(self) -> Iterator[Point]:
        return iter(self._produce())

    def merge(self) -> None:
        """Steps repeat or go back (a resumed run logs some again): merge them in memory, sorted."""
        by_step: dict[int, dict[str, float]] = {}
        for _, step, metrics in self._produce():
            by_step.setdefault(step, {}).update(metrics)
        self.merged = sorted(by_step.items())

    @classmethod
    def of(cls, steps: list[tuple[int, dict[str, float]]], where: str) -> Points:
        return cls(lambda: ((where, step, metrics) for step, metrics in steps))


class CheckedPoints:
    """The points the validating pass checked, under their imported names, kept in an anonymous
    temporary file (deleted when closed or when the process ends), a chunk of
    :data:`SPILL_POINTS` at a time: the write reads these instead of parsing the source again, so
    it writes exactly what was checked, and memory stays bounded."""

    def __init__(self) -> None:
        self._file: Any = None
        self._names: dict[str, int] = {}
        self._chunks: list[int] = []  # points per chunk written
        self._new_buffers()

    def _new_buffers(self) -> None:
        self._key, self._step, self._value = array("q"), array("q"), array("d")

    def add(self, step: int, metrics: dict[str, float]) -> None:
        names, key, steps, values = self._names, self._key, self._step, self._value
        for name, value in metrics.items():
            k = names.get(name)
            if k is None:
                k = names[name] = len(names)
            key.append(k)
            steps.append(step)
            values.append(value)
        if len(values) >= SPILL_POINTS:
            self._flush()

    def _flush(self) -> None:
        if not self._value:
            return
        try:
            if self._file is None:
                self._file = tempfile.TemporaryFile(prefix="workbench-import-")  # noqa: SIM115 - kept open across blocks; close() closes it
            for column in (self._key, self._step, self._value):
                column.tofile(self._file)
        except OSError as e:
            raise ImportSourceError(
                f"cannot keep the checked points in a temporary file ({e.strerror}; TMPDIR={tempfile.gettempdir()})"
            ) from None
        self._chunks.append(len(self._value))
        self._new_buffers()

    def chunks(self) -> Iterator[MetricColumns]:
        """The points in the order they were checked, as columns, a chunk at a time."""
        self._flush()
        if self._file is None:
            return
        self._file.seek(0)
        names = list(self._names)
        for n in self._chunks:
            key = np.fromfile(self._file, dtype=np.int64, count=n)
            step = np.fromfile(self._file, dtype=np.int64, count=n)
            value = np.fromfile(self._file, dtype=np.float64, count=n)
            yield MetricColumns(names, key, step, value)

    def steps(self) -> Iterator[tuple[int, dict[str, float]]]:
        """The points regrouped by step, ``(step, {name: value})`` in order (for ``log_batch``)."""
        current: dict[str, float] = {}
        at = None
        for chunk in self.chunks():
            for k, s, v in zip(
                np.asarray(chunk.names, dtype=object)[chunk.key].tolist(),
                chunk.step.tolist(),
                chunk.value.tolist(),
                strict=True,
            ):
                if s != at and current:
                    yield at, current  # type: ignore[misc]  # at is set before current has an entry
                    current = {}
                at = s
                current[k] = v
        if current:
            yield at, current  # type: ignore[misc]  # at is set before current has an entry

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclass
class RunCheck:
    """What the validating pass learnt about one run: enough to write it without looking again."""

    names: set[str] = field(default_factory=set)  # source metric names
    points: int = 0  # metric values
    steps: int = 0
    monitor: Any = None  # the HealthMonitor after every step (its tags go on the run)
    health: Any = None  # its collector: the steps go to it, the rules judge them a block at a time
    checked: CheckedPoints | None = None  # the points checked, under their imported names: what is written


def _start_over(check: RunCheck, new_monitor: Callable[[], Any]) -> None:
    """A fresh monitor, fed block by block (workbench.health.columns: the rules judge a long run
    with numpy instead of ~0.1 ms a step in Python, with the same verdicts), and fresh points."""
    check.monitor = new_monitor()
    check.health = check.monitor.columns()
    if check.checked is not None:
        check.checked.close()
    check.checked = CheckedPoints()


def check_run(
    points: Points, convert: Callable[[dict[str, float]], dict[str, float]], new_monitor: Callable[[], Any], label: str
) -> RunCheck:
    """One streaming pass over a run: every imported metric name valid for MLflow (steps and
    values were checked by the reader), the health rules applied. Raises ``ImportSourceError``
    naming the line (or source run) of the first problem. A log whose steps repeat or go back is
    merged (:meth:`Points.merge`) and its health computed on the merged, ascending series."""
    check = RunCheck()
    _start_over(check, new_monitor)

    def check_names(where: str, metrics: dict[str, float]) -> None:
        if metrics.keys() <= check.names:  # nearly every line: no name it has not seen
            return
        for name in metrics.keys() - check.names:  # each name checked once, where it first appears
            for target in convert({name: 0.0}):
                problem = metric_name_problem(target)
                if problem:
                    raise ImportSourceError(f"{where}: {problem} ({label})")
            check.names.add(name)

    def observe(step: int, metrics: dict[str, float]) -> None:
        converted = convert(metrics)
        check.points += len(converted)
        check.steps += 1
        check.health.add(step, converted)
        check.checked.add(step, converted)  # type: ignore[union-attr]  # checked is set for every check this loop adds to

    ascending, last = True, None
    for where, step, metrics in points.with_where():
        check_names(where, metrics)  # every line, so a bad name is reported at its line
        ascending = ascending and (last is None or step > last)
        last = step
        if ascending:
            observe(step, metrics)
    if not ascending:  # health again, on the merged ascending series
        points.merge()
        check.points = check.steps = 0
        _start_over(check, new_monitor)
        for step, metrics in points:
            observe(step, metrics)
    check.health.finish()
    return check


def check_import(
    runs: Sequence[Any],
    study: str,
    convert: Callable[[dict[str, float]], dict[str, float]],
    new_monitor: Callable[[], Any],
) -> dict[str, RunCheck]:
    """Every run of an import checked before the first write: the study name and each run's
    variant and seed as a study file would take them, then each run's points
    (:func:`check_run`). ``run.key -> RunCheck``; ``ImportSourceError`` for the first problem."""
    check_labels(study, "base", 0)
    for run in runs:
        check_labels(study, run.variant, run.seed, where=_source_of(run))
    return {run.key: check_run(run.steps, convert, new_monitor, run.label) for run in runs}


def _source_of(run: Any) -> str:
    """ "FILE: " or "source run ID: " (a label problem names the source it came from); "" for files
    whose labels the user typed (--variant/--seed)."""
    rid = run.origin.get("workbench.source_run")
    return f"source run {rid}: " if rid else ""
