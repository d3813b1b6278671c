"""Time-bounded answer checking with math-verify in worker processes.

Why processes: math-verify's timeouts use ``signal.alarm``, which works only in a main
thread, and some inputs (a huge integer power such as ``\\gcd(3^{3^{21}}, 6)``) spend
seconds inside CPython's C code, where no signal handler runs at all. So each item runs in
the main thread of a worker process with math-verify's timeouts on, and the parent
enforces a hard wall-clock limit per item: a worker that overruns is killed and replaced,
its item scores incorrect with ``timed_out=True``, and the rest of the batch continues.

Common case: items go to a worker in chunks (one pipe message per chunk out, one small
message per item back, which is also how the parent knows which item is running), and
parsed gold answers are cached in the worker, so 1000 ordinary items cost about a second.

Start method: ``forkserver`` (``spawn`` where unavailable). ``fork`` is unsafe because the
caller has torch loaded with its threads. The forkserver preloads math-verify, so a
replacement worker is a cheap fork of a warm process rather than a fresh interpreter.

Not thread-safe across concurrent ``score`` calls on one instance (a lock serialises them).
"""

from __future__ import annotations

import math
import multiprocessing as mp
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait as _wait_connections

from workbench.reward import _worker

__all__ = ["AnswerVerifier", "VerifyResult"]

# Workers are started in the background of the first call; a cold interpreter importing
# sympy on a loaded 2-core machine can take several seconds. A worker that is not ready in
# this time counts as failed to start.
_STARTUP_TIMEOUT_S = 60.0
_MAX_START_FAILURES = 3  # consecutive start failures before score() raises
_MAX_CHUNK = 256  # items per worker round trip
_SOFT_BUDGET_FRACTION = 0.75  # worker's own (soft) wall-clock budget per item, as a fraction of timeout_s
_PRELOAD = ("math_verify", "workbench.reward._worker")


@dataclass(frozen=True)
class VerifyResult:
    """Outcome for one (completion, answer) pair."""

    correct: bool
    extracted: str | None  # the answer string math-verify matched; None if none or timed out
    timed_out: bool  # scoring ran out of time (math-verify's, the worker's or the parent's limit)


_FAILED = VerifyResult(correct=False, extracted=None, timed_out=False)
_TIMED_OUT = VerifyResult(correct=False, extracted=None, timed_out=True)


def _context():
    methods = mp.get_all_start_methods()
    if "forkserver" not in methods:
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    # Add our modules to the forkserver's preload list. This takes effect only if the
    # forkserver has not been started yet in this process; otherwise workers simply import
    # math-verify themselves (slower start, same behaviour).
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    current = list(getattr(server, "_preload_modules", None) or ["__main__"])
    wanted = current + [m for m in _PRELOAD if m not in current]
    if wanted != current:
        ctx.set_forkserver_preload(wanted)
    return ctx


def _clean(text: object, max_chars: int, keep: str) -> str:
    """Coerce to ``str``, keep the last (``keep="tail"``) or first ``max_chars`` characters,
    and make it valid UTF-8 without NULs (lone surrogates become ``?``). A NUL becomes U+FFFD,
    never nothing: removing it would join its neighbours (``\\boxed{4\\x002}`` would read 42)."""
    if text is None:
        text = ""
    elif isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    elif not isinstance(text, str):
        text = str(text)
    if len(text) > max_chars:
        text = text[-max_chars:] if keep == "tail" else text[:max_chars]
    if not text.isascii():
        text = text.encode("utf-8", errors="replace").decode("utf-8")
    return text.replace("\x00", "\ufffd")  # other control characters stay: math-verify rejects them itself


@dataclass(eq=False)
class _Slot:
    """Parent-side state of one worker process."""

    proc: mp.process.BaseProcess
    conn: object  # multiprocessing.connection.Connection
    born: float
    ready: bool = False
    assigned: deque = field(default_factory=deque)  # item indices sent, in order, not yet answered
    started: float = 0.0  # when the item at assigned[0] started (as seen by the parent)

    def deadline(self, timeout_s: float) -> float:
        if not self.ready:
            return self.born + _STARTUP_TIMEOUT_S
        return self.started + timeout_s


def _stop(slot: _Slot, graceful: bool) -> None:
    if graceful and slot.proc.is_alive():
        try:
            slot.conn.send(None)
        except (OSError, ValueError):
            pass
        slot.proc.join(timeout=1.0)
    if slot.proc.is_alive():
        slot.proc.kill()
        slot.proc.join(timeout=5.0)
    try:
        slot.conn.close()
    except OSError:  # pragma: no cover
        pass


def _stop_all(slots: list[_Slot]) -> None:
    while slots:
        _stop(slots.pop(), graceful=True)


class AnswerVerifier:
    """Scores completions against reference answers with math-verify, time-bounded.

    >>> with AnswerVerifier(timeout_s=1.0) as v:
    ...     [r.correct for r in v.score(["so \\\\boxed{0.5}", "no idea"], ["\\\\frac{1}{2}", "3"])]
    [True, False]

    Args:
        timeout_s: wall-clock limit per item. An item over it scores incorrect with
            ``timed_out=True`` (its worker is killed and replaced if it does not stop).
        workers: worker processes, started lazily on the first ``score`` and reused.
        max_chars: only the last ``max_chars`` characters of a completion (and the first
            of an answer) are checked; a final answer sits at the end of a completion.
        memory_limit_mb: address space a worker may add after start-up (``RLIMIT_AS``;
            ``None``: no cap). Huge-integer inputs then fail fast with ``MemoryError``
            instead of allocating gigabytes in C code that no signal can interrupt.
        scorer: a module-level function ``(completion, answer, timeout_s) -> (correct,
            extracted)`` run in the workers instead of math-verify (raise ``TimeoutError``
            to report a timeout). For other answer formats, and for tests
            (:mod:`workbench.reward.testing`).

    ``score`` raises ``RuntimeError`` if a worker cannot start or its scorer fails a
    warm-up check (``\\boxed{1}`` vs ``1``): a broken install must not look like a policy
    that never answers correctly.
    """

    def __init__(
        self,
        timeout_s: float = 1.0,
        workers: int = 1,
        *,
        max_chars: int = 2000,
        memory_limit_mb: int | None = 2048,
        scorer: _worker.Scorer | None = None,
    ) -> None:
        if not timeout_s > 0 or not math.isfinite(timeout_s):
            raise ValueError(f"timeout_s must be a positive number, got {timeout_s!r}")
        if int(workers) != workers or workers < 1:
            raise ValueError(f"workers must be a positive integer, got {workers!r}")
        if memory_limit_mb is not None and (int(memory_limit_mb) != memory_limit_mb or memory_limit_mb < 1):
            raise ValueError(f"memory_limit_mb must be a positive integer or None, got {memory_limit_mb!r}")
        if int(max_chars) != max_chars or max_chars < 1:
            raise ValueError(f"max_chars must be a positive integer, got {max_chars!r}")
        self.timeout_s = float(timeout_s)
        self.workers = int(workers)
        self.max_chars = int(max_chars)
        self._cfg = _worker.WorkerConfig(
            scorer=scorer or _worker.math_verify_scorer,
            timeout_s=self.timeout_s,
            soft_budget_s=self.timeout_s * _SOFT_BUDGET_FRACTION,
            memory_limit_mb=None if memory_limit_mb is None else int(memory_limit_mb),
        )
        self._slots: list[_Slot] = []
        self._ctx = None
        self._lock = threading.Lock()
        self._closed = False
        self.restarts = 0  # workers killed or lost since construction (for metrics/tests)
        self._finalizer = weakref.finalize(self, _stop_all, self._slots)

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> AnswerVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers. Idempotent; the verifier cannot be used afterwards."""
        self._closed = True
        self._finalizer()

    def _spawn(self) -> _Slot:
        if self._ctx is None:
            self._ctx = _context()
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=_worker.worker_main,
            args=(child_conn, self._cfg),
            name="workbench-answer-verifier",
            daemon=True,
        )
        proc.start()
        child_conn.close()  # so the worker's death reads as EOF here
        slot = _Slot(proc=proc, conn=parent_conn, born=time.monotonic())
        self._slots.append(slot)
        return slot

    # -- scoring ----------------------------------------------------------------------------

    def score(self, completions: Sequence[str], answers: Sequence[str]) -> list[VerifyResult]:
        """Score ``completions[i]`` against ``answers[i]``; results in input order.

        Never raises for any content of the inputs. Raises ``RuntimeError`` only if worker
        processes cannot be started at all.
        """
        if len(completions) != len(answers):
            raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
        if self._closed:
            raise RuntimeError("AnswerVerifier is closed")
        # Identical (completion, answer) pairs are scored once: converged policies repeat
        # themselves a lot within a group.
        unique: dict[tuple[str, str], int] = {}
        slot_of = [
            unique.setdefault((_clean(c, self.max_chars, "tail"), _clean(a, self.max_chars, "head")), len(unique))
            for c, a in zip(completions, answers, strict=True)
        ]
        if not slot_of:
            return []
        items = [(i, c, a) for (c, a), i in unique.items()]
        with self._lock:
            try:
                scored = self._run(items)
            except BaseException:
                # Busy workers would later deliver this call's results into the next one:
                # stop them all (including on KeyboardInterrupt); they restart lazily.
                _stop_all(self._slots)
                raise
        return [scored[i] for i in slot_of]

    def _run(self, items: list[tuple[int, str, str]]) -> list[VerifyResult]:
        results: list[VerifyResult | None] = [None] * len(items)
        pending: deque[int] = deque(range(len(items)))
        remaining = len(items)
        start_failures = 0
        by_conn: dict[object, _Slot] = {}

        def retire(slot: _Slot, result: VerifyResult) -> None:
            """Kill a worker; its running item gets ``result``, its other items go back."""
            nonlocal remaining, start_failures
            _stop(slot, graceful=False)
            self._slots.remove(slot)
            by_conn.pop(slot.conn, None)
            self.restarts += 1
            if slot.ready and slot.assigned:
                results[slot.assigned.popleft()] = result
                remaining -= 1
            elif not slot.ready:
                start_failures += 1
            pending.extendleft(reversed(slot.assigned))
            slot.assigned.clear()

        while remaining:
            if start_failures >= _MAX_START_FAILURES:
                raise RuntimeError(
                    f"answer-verifier workers failed to start {start_failures} times in a row "
                    f"(exit codes: see stderr); is math-verify importable in a fresh interpreter?"
                )
            # Hand chunks to idle workers, starting workers as needed.
            while len(self._slots) < self.workers and len(self._slots) < len(pending):
                self._spawn()
            for slot in self._slots:
                by_conn[slot.conn] = slot
                if pending and not slot.assigned:
                    if slot.ready and not slot.proc.is_alive():  # died while idle: no item to blame
                        retire(slot, _FAILED)
                        break
                    n_busy = max(1, len(self._slots))
                    size = max(1, min(_MAX_CHUNK, math.ceil(len(pending) / n_busy)))
                    chunk = [pending.popleft() for _ in range(min(size, len(pending)))]
                    try:
                        slot.conn.send([items[i] for i in chunk])
                    except (OSError, ValueError):
                        pending.extendleft(reversed(chunk))
                        retire(slot, _FAILED)
                        break
                    slot.assigned.extend(chunk)
                    slot.started = time.monotonic()
            busy = [s for s in self._slots if s.assigned]
            if not busy:
                continue
            now = time.monotonic()
            wake = min(s.deadline(self.timeout_s) for s in busy)
            ready = _wait_connections([s.conn for s in busy], timeout=max(0.0, wake - now))
            for conn in ready:
                slot = by_conn[conn]
                try:
                    while True:
                        msg = conn.recv()
                        if msg[0] == "ready":
                            slot.ready = True
                            start_failures = 0
                        elif msg[0] == "error":
                            retire(slot, _FAILED)
                            raise RuntimeError(f"answer-verifier worker failed its start-up check: {msg[1]}")
                        else:
                            index, correct, extracted, timed_out = msg
                            slot.assigned.popleft()
                            results[index] = VerifyResult(bool(correct), extracted, bool(timed_out))
                            remaining -= 1
                        slot.started = time.monotonic()
                        if not conn.poll():
                            break
                except (EOFError, OSError):  # the worker died (crash, OOM kill, ...)
                    retire(slot, _FAILED)
            now = time.monotonic()
            for slot in list(self._slots):
                if slot.assigned and now >= slot.deadline(self.timeout_s) and not slot.conn.poll():
                    retire(slot, _TIMED_OUT)
        return results  # type: ignore[return-value]  # every slot of results is filled by the loop above
