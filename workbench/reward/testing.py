"""Scorers that misbehave on demand, for testing code that uses :class:`AnswerVerifier`.

Pass one as ``AnswerVerifier(scorer=...)``. They compare stripped strings for equality,
except on completions containing a marker:

* ``HANG``  - blocks every signal and sleeps: like C code that never returns to the
  interpreter (only the parent's kill ends it);
* ``SLOW``  - a pure-Python busy loop: ended by the worker's soft time budget, the worker
  survives;
* ``CRASH`` - the worker process exits abruptly (like a segfault or an OOM kill);
* ``RAISE`` - the scorer raises an ordinary exception.

``slow_start_scorer`` is slow on its first call in a process (like math-verify's lazy imports on a
loaded machine) and times out like math-verify's alarm when that call's limit is shorter.

They live in the package (not under ``tests/``) so that worker processes can always import
them by name, whatever pytest's import mode.
"""

from __future__ import annotations

import os
import signal
import time


def _exact(completion: str, answer: str) -> tuple[bool, str | None]:
    text = completion.strip()
    return bool(text) and text == answer.strip(), text or None


def misbehaving_scorer(completion: str, answer: str, timeout_s: float) -> tuple[bool, str | None]:
    """Exact-match scorer with the failure markers described in the module docstring."""
    if "HANG" in completion:
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        time.sleep(3600)
    if "SLOW" in completion:
        x = 0
        while True:  # interruptible: the worker's soft budget ends it
            x += 1
    if "CRASH" in completion:
        os._exit(3)
    if "RAISE" in completion:
        raise ArithmeticError("scorer failed on purpose")
    return _exact(completion, answer)


def failing_scorer(completion: str, answer: str, timeout_s: float) -> tuple[bool, str | None]:
    """Always raises: a verifier using it must fail its start-up check loudly."""
    raise ImportError("scorer dependencies are missing (on purpose)")


def sleepy_scorer(completion: str, answer: str, timeout_s: float) -> tuple[bool, str | None]:
    """Exact match after a 0.1 s sleep: scoring slow enough that a test sees what runs meanwhile."""
    time.sleep(0.1)
    return _exact(completion, answer)


SLOW_START_S = 1.5  # longer than the 1 s default per-item limit


def slow_start_scorer(completion: str, answer: str, timeout_s: float) -> tuple[bool, str | None]:
    """Exact match; the first call in a process takes ``SLOW_START_S`` and raises ``TimeoutError``
    when ``timeout_s`` is shorter (as math-verify's own alarm does)."""
    global _started
    if not _started:
        _started = True
        time.sleep(SLOW_START_S)
        if timeout_s < SLOW_START_S:
            raise TimeoutError("first call outlasted its limit")
    return _exact(completion, answer)


_started = False
