"""Worker-process side of :class:`workbench.reward.verify.AnswerVerifier`.

Everything here runs in a child process, in its main thread, so math-verify's own
``signal.alarm`` timeouts work. This module must stay cheap to import: the parent only
needs the names, and math-verify is imported inside the worker (or preloaded by the
multiprocessing forkserver so that forked workers start warm).

Protocol on the worker's end of a duplex ``Pipe``:

* worker -> parent, once after start-up: ``("ready", pid)``
* parent -> worker: a list of ``(index, completion, answer)`` items, or ``None`` to exit
* worker -> parent, once per item, in order: ``(index, correct, extracted, timed_out)``

Three layers bound the time spent on an item:

1. math-verify's own ``parsing_timeout`` / ``timeout_seconds`` (``SIGALRM``, whole seconds);
2. a soft wall-clock budget here (a watchdog thread signals the main thread with
   ``SIGUSR1``; sub-second, and independent of the ``SIGALRM`` timer that math-verify
   re-arms and cancels itself), which ends a slow *Python-level* computation (sympy
   simplification, mpmath evaluation) cleanly, without losing the worker;
3. the parent's wall-clock limit, which kills the process. Only this one stops code that
   never returns to the interpreter, e.g. a huge integer power inside CPython's C code,
   during which no Python signal handler can run.

A cap on the worker's address space (``RLIMIT_AS``) makes the huge-integer cases fail
fast with ``MemoryError`` instead of allocating gigabytes for seconds: measured here,
``\\boxed{\\gcd(3^{3^{21}}, 6)}`` takes 4-10 s and 4.4 GB uncapped, 0.1 s capped (sympy
falls back to a cheap path).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

# A completion's answer is near its end, and the answer field is short: longer inputs are
# cut before they are sent to a worker (see AnswerVerifier.max_chars).
MAX_EXTRACTED_CHARS = 500  # keep VerifyResult.extracted small (it is logged in tables)
_GOLD_CACHE_MAX = 4096  # parsed gold answers kept per worker (a group shares one answer)

# A scorer maps (completion, answer, timeout_s) -> (correct, extracted answer or None).
# It signals "ran out of time" by raising TimeoutError (or math-verify's TimeoutException).
Scorer = Callable[[str, str, float], "tuple[bool, str | None]"]


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker needs; pickled once per worker start."""

    scorer: Scorer  # a module-level function (pickled by reference)
    timeout_s: float  # the parent's per-item wall-clock limit
    soft_budget_s: float  # wall-clock budget per item inside the worker (< timeout_s)
    memory_limit_mb: int | None  # extra address space a worker may take after start-up


class _SoftTimeout(BaseException):
    """Raised in the main thread when an item overruns its soft budget; a BaseException so
    library ``except Exception`` blocks (math-verify has several) cannot swallow it."""


class _Watchdog:
    """Soft wall-clock deadline for the item running in the main thread.

    The main thread calls ``start(budget)`` / ``stop()`` around each item (two attribute
    writes: no per-item cost). A daemon thread polls; when the running item is past its
    deadline it sends ``SIGUSR1`` to the main thread, whose handler raises ``_SoftTimeout``
    only if that same item is still running. Each item is signalled at most once, and the
    handler can raise only before ``stop()`` has run, i.e. inside the guarded region.
    Code that holds the GIL in C (a huge integer power) starves this thread too; the
    parent's kill covers that case.
    """

    def __init__(self, poll_s: float) -> None:
        self.poll_s = poll_s
        self.state: tuple[int, float] | None = None  # (item seq, deadline) while running
        self.target = -1  # seq the last signal was meant for
        self._seq = 0
        self._main = threading.get_ident()
        signal.signal(signal.SIGUSR1, self._on_signal)
        threading.Thread(target=self._run, name="answer-verifier-watchdog", daemon=True).start()

    def start(self, budget_s: float) -> None:
        self._seq += 1
        self.state = (self._seq, time.monotonic() + budget_s)

    def stop(self) -> None:
        self.state = None

    def _on_signal(self, signum, frame) -> None:  # signal handler signature
        state = self.state
        if state is not None and state[0] == self.target:
            raise _SoftTimeout()

    def _run(self) -> None:
        fired = -1
        while True:
            time.sleep(self.poll_s)
            state = self.state
            if state is not None and state[0] != fired and time.monotonic() >= state[1]:
                fired = self.target = state[0]
                signal.pthread_kill(self._main, signal.SIGUSR1)


# ---------------------------------------------------------------------------------------
# The default scorer: math-verify
# ---------------------------------------------------------------------------------------


class _TimeoutLogFlag(logging.Filter):
    """math-verify swallows its own timeouts (``raise_on_error=False``) and only logs a
    warning that contains the whole input. This filter records that it happened and drops
    the record, so the worker's stderr is not flooded with 2000-character completions."""

    def __init__(self) -> None:
        super().__init__()
        self.hit = False

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.msg if isinstance(record.msg, str) else ""
        if msg.startswith("Timeout"):
            self.hit = True
            return False
        return True


_timeout_flag = _TimeoutLogFlag()
_gold_cache: dict[str, list] = {}
_mv = None  # the math_verify module, once loaded


def _load_math_verify():
    global _mv
    if _mv is None:
        import math_verify

        for name in ("math_verify", "math_verify.parser", "math_verify.grader", "math_verify.metric"):
            lg = logging.getLogger(name)
            if _timeout_flag not in lg.filters:
                lg.addFilter(_timeout_flag)
        _mv = math_verify
    return _mv


def _parse_gold(mv, answer: str, timeout: int) -> list:
    """Parse a reference answer. Plain strings ("85", "-12", "3/4", "\\frac{1}{2}") are
    wrapped in ``$...$`` so the LaTeX extractor takes the whole string; an answer that
    already carries its own delimiters or ``\\boxed`` is parsed as is."""
    cached = _gold_cache.get(answer)
    if cached is not None:
        return cached
    configs = [mv.LatexExtractionConfig(), mv.ExprExtractionConfig()]
    text = answer.strip()
    if "$" in text or "\\boxed" in text or "\\(" in text or "\\[" in text:
        parsed = mv.parse(text, extraction_config=configs, parsing_timeout=timeout)
    else:
        parsed = mv.parse(f"${text}$", extraction_config=configs, parsing_timeout=timeout)
        if not parsed:
            parsed = mv.parse(text, extraction_config=configs, parsing_timeout=timeout)
    if _timeout_flag.hit:  # do not remember a gold answer as unparseable because it was slow
        return parsed
    if len(_gold_cache) >= _GOLD_CACHE_MAX:
        _gold_cache.clear()
    _gold_cache[answer] = parsed
    return parsed


# A parsed prediction containing a number with more decimal digits than this is judged
# incorrect without calling ``verify``: no reference answer is that large, and sympy would
# evaluate it with one uninterruptible C-level integer power (``9^{9^{9}}`` alone is 370
# million digits and about a second of CPU holding the GIL).
MAX_ANSWER_DIGITS = 100_000
_LOG10_2 = math.log10(2)


def _log10_size(e) -> float | None:
    """Rough log10 of the magnitude (digits) an exact evaluation of the numeric constant
    ``e`` produces, or None when ``e`` is not a numeric constant built from integers,
    rationals, floats, powers, factorials, sums and products. May return ``inf``."""
    import sympy

    if e.is_Integer:
        return max(0, abs(int(e)).bit_length() - 1) * _LOG10_2
    if e.is_Rational:
        return max(_log10_size(sympy.Integer(e.p)), _log10_size(sympy.Integer(e.q)))
    if e.is_Float:
        x = abs(float(e))
        return math.log10(x) if math.isfinite(x) and x >= 1 else (math.inf if not math.isfinite(x) else 0.0)
    if e.is_Pow:
        base, exp = (_log10_size(a) for a in e.args)
        if base is None or exp is None:
            return None
        if base == 0.0:  # base 0, +-1 or a float below 1: cheap whatever the exponent
            return 0.0
        return math.inf if exp > 300 else 10.0**exp * base
    if isinstance(e, sympy.factorial):
        n = _log10_size(e.args[0])
        if n is None:
            return None
        return math.inf if n > 300 else 10.0**n * max(n, 1.0)
    if e.is_Add or e.is_Mul:
        sizes = [_log10_size(a) for a in e.args]
        if any(x is None for x in sizes):
            return None
        return sum(sizes) if e.is_Mul else max(sizes)
    return None


def _astronomical(expr) -> bool:
    """True if some numeric sub-expression of ``expr`` has more than MAX_ANSWER_DIGITS
    digits (see :func:`_log10_size`). Never raises."""
    try:
        import sympy

        if not isinstance(expr, sympy.Basic):
            return False
        for node in sympy.preorder_traversal(expr):
            if node.is_Pow or isinstance(node, sympy.factorial):
                size = _log10_size(node)
                if size is not None and size > MAX_ANSWER_DIGITS:
                    return True
            elif node.is_Integer and _log10_size(node) > MAX_ANSWER_DIGITS:
                return True
        return False
    except Exception:  # noqa: BLE001 - the guard must not be a new way to fail
        return False


def math_verify_scorer(completion: str, answer: str, timeout_s: float) -> tuple[bool, str | None]:
    """Score one completion against one reference answer with math-verify.

    ``extracted`` is math-verify's matched answer string (the last element of ``parse``'s
    result), never ``str()`` of the sympy object: printing a pathological expression can
    itself hang. Raises ``TimeoutError`` when math-verify reported a timeout and the item
    was not judged correct.
    """
    mv = _load_math_verify()
    timeout = max(1, math.ceil(timeout_s))  # math-verify's alarm takes whole seconds
    _timeout_flag.hit = False
    gold = _parse_gold(mv, answer, timeout)
    pred = mv.parse(completion, parsing_timeout=timeout)
    extracted = pred[-1] if pred and isinstance(pred[-1], str) else None
    if extracted is not None:
        extracted = extracted[:MAX_EXTRACTED_CHARS]
    if any(_astronomical(p) for p in pred):
        return False, extracted
    correct = bool(gold) and bool(pred) and bool(mv.verify(gold, pred, timeout_seconds=timeout))
    if _timeout_flag.hit and not correct:
        raise TimeoutError("math-verify timed out")
    return correct, extracted


def gsm8k_scorer(completion: str, answer: str, timeout_s: float) -> tuple[bool, str | None]:
    """``task.answer_format: gsm8k``: the answer is what directly follows the completion's last ``####``, up to
    the next space or line end (``#### 1,000``, ``#### $5``, ``#### 5 dollars``: as verl's strict GSM8K reward
    reads the number right after ``#### ``), checked by math-verify; a completion without ``####`` is incorrect.
    A gold answer written as a whole GSM8K solution (``... #### 72``) is read the same way."""
    final = _after_last_marker(completion)
    if not final:
        return False, None
    return math_verify_scorer(final, _after_last_marker(answer) or answer, timeout_s)


def boxed_scorer(completion: str, answer: str, timeout_s: float) -> tuple[bool, str | None]:
    """``task.answer_format: boxed``: only a ``\\boxed{}`` answer counts (math-verify reads the last one);
    a completion without ``\\boxed`` is incorrect, where ``auto`` would fall back to its last number."""
    if "\\boxed" not in completion:
        return False, None
    return math_verify_scorer(completion, answer, timeout_s)


GSM8K_MARKER = "####"


def _after_last_marker(text: str) -> str | None:
    """The first word after the last ``####`` in ``text`` ("" when nothing follows), or None without one."""
    _, marker, tail = text.rpartition(GSM8K_MARKER)
    if not marker:
        return None
    words = tail.split(maxsplit=1)
    return words[0] if words else ""


# task.answer_format -> the scorer the verifier's workers run
ANSWER_SCORERS: dict[str, Scorer] = {"auto": math_verify_scorer, "gsm8k": gsm8k_scorer, "boxed": boxed_scorer}
# a completion every math-verify scorer reads as 1: the workers' start-up check
WARMUP_COMPLETION = "\\boxed{1}\n#### 1"
# The start-up check's own time limit, not the per-item one (1 s by default): its first parse pays sympy's lazy
# imports and parser tables, which on a loaded machine (load 7 on 2 cores) outlasted 1 s and failed whole runs.
# Below the parent's start-up deadline (verify._STARTUP_TIMEOUT_S, 60 s), which stays the backstop for a hang.
WARMUP_TIMEOUT_S = 30.0


# ---------------------------------------------------------------------------------------
# The worker loop
# ---------------------------------------------------------------------------------------


def _timeout_exception_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [_SoftTimeout, TimeoutError]
    try:
        from math_verify.errors import TimeoutException

        types.append(TimeoutException)
    except Exception:  # pragma: no cover  # noqa: BLE001 - a custom scorer without math-verify installed
        pass
    return tuple(types)


def _reset_alarm() -> None:
    # If a soft timeout interrupted math-verify between arming and cancelling its
    # SIGALRM, the alarm is still pending: cancel it and keep SIGALRM harmless.
    signal.alarm(0)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)


def score_item(
    cfg: WorkerConfig, watchdog: _Watchdog, completion: str, answer: str, timeouts
) -> tuple[bool, str | None, bool]:
    """Run the scorer on one item under the soft budget; never raises."""
    try:
        try:
            watchdog.start(cfg.soft_budget_s)
            correct, extracted = cfg.scorer(completion, answer, cfg.timeout_s)
        finally:
            watchdog.stop()
        return bool(correct), extracted if isinstance(extracted, str) else None, False
    except timeouts:
        return False, None, True
    except BaseException:  # noqa: BLE001 - any failure of one item scores it incorrect
        return False, None, False
    finally:
        _reset_alarm()


def _limit_memory(extra_mb: int) -> None:
    try:
        import resource

        with open("/proc/self/statm") as f:
            current = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = current + extra_mb * 2**20
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        if soft == resource.RLIM_INFINITY or limit < soft:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, ValueError):  # pragma: no cover - non-Linux: no cap
        pass


def worker_main(conn, cfg: WorkerConfig) -> None:
    """Entry point of a worker process (the target of ``Process``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    watchdog = _Watchdog(poll_s=min(0.05, max(0.005, cfg.soft_budget_s / 10)))
    timeouts = _timeout_exception_types()
    # Warm up lazy imports and parser tables, so the first real item is not charged for
    # them, and fail loudly (not with all-zero rewards) if the scorer cannot work at all.
    try:
        math_verify_based = cfg.scorer in ANSWER_SCORERS.values()
        if math_verify_based:
            _load_math_verify()
        if cfg.memory_limit_mb is not None:
            _limit_memory(cfg.memory_limit_mb)
        try:
            watchdog.start(max(cfg.soft_budget_s, WARMUP_TIMEOUT_S))
            correct, _ = cfg.scorer(WARMUP_COMPLETION, "1", max(cfg.timeout_s, WARMUP_TIMEOUT_S))
        finally:
            watchdog.stop()
            _reset_alarm()
        if math_verify_based and not correct:
            raise RuntimeError(f"math-verify judged {WARMUP_COMPLETION!r} vs '1' incorrect")
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            items = conn.recv()
        except (EOFError, OSError):  # parent went away
            return
        if items is None:
            return
        for index, completion, answer in items:
            correct, extracted, timed_out = score_item(cfg, watchdog, completion, answer, timeouts)
            try:
                conn.send((index, correct, extracted, timed_out))
            except (BrokenPipeError, OSError):  # parent went away
                return
