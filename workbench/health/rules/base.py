"""Health rules: small stateful watchers over the per-step metric stream.

Each rule is a class registered in ``HEALTH_RULES`` under its ``name``, with a pydantic
``Params`` model (every field has a default and a docstring) and one method that matters,
``observe(step, metrics) -> HealthEvent | None``, called once per RL step with the step's metric
dict (canonical names, docs/metrics.md).

Shared semantics (implemented once, in ``HealthRule.observe``):

* A rule *reads* the metrics it needs. If one is absent, or is not a finite number, the rule does
  not evaluate at that step: nothing fires and its state (streak, baseline, history) is unchanged.
  Non-finite values are the business of ``non_finite`` alone.
* ``patience`` counts consecutive *evaluated* steps (observations) on which the condition holds.
  A step where the condition does not hold resets the streak and clears the rule.
* The rule fires **once** (returns a ``HealthEvent``) on the observation where the streak reaches
  ``patience``; it then stays *active* (no new event) until an observation clears it. If the
  condition comes back later it fires again after another ``patience`` observations.
* Comparisons are strict: "below" is ``<``, "above" is ``>``.

Citations refer to the references of the seed overview "GRPO++: Tricks for Making RL Actually
Work": [1] DAPO (Yu et al. 2025, arXiv:2503.14476); [3] Dr. GRPO,
"Understanding R1-Zero-like training" (Liu et al. 2025, arXiv:2503.20783); [4] "Your efficient
RL framework secretly brings you off-policy RL training" (Yao et al. 2025, truncated IS);
[8] MiniMax-M1 / CISPO (2025, arXiv:2506.13585); [11] PPO (Schulman et al. 2017,
arXiv:1707.06347); [13] DeepSeekMath / GRPO (Shao et al. 2024, arXiv:2402.03300).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from pydantic import BaseModel, ConfigDict, Field

from workbench.registry import Registry

from ..columns import Block
from ..events import HealthEvent, Severity

__all__ = [
    "MAX_NOISE_WINDOW",
    "NOISE_Z",
    "HEALTH_RULES",
    "BlockReadings",
    "HealthRule",
    "Reading",
    "RuleParams",
    "StreakParams",
    "finite_value",
    "to_float",
]

HEALTH_RULES: Registry[type[HealthRule]] = Registry("health rule")

# reward_collapse: standard errors of the running reward below the steps before it (calibrated, see Params).
NOISE_Z = 5.0
# reward_collapse fits its AR(1) noise to at most this many observations before its running window
# (health/trend.py: at φ = 0.95 the correlation time is ~40 steps; 150 left 500-step runs at 8% false alarms, 300 at 5%).
MAX_NOISE_WINDOW = 300
# Rows of windowed values handed to the trend kernels at once by observe_block (up to 166 values
# each): under 1 MB per temporary array, so the import's peak memory barely moves.
KERNEL_ROWS = 512


# --------------------------------------------------------------------------------------------
# Value helpers
# --------------------------------------------------------------------------------------------


def to_float(v: Any) -> float | None:
    """A metric value as a float, or ``None`` if it is not a number.

    Accepts Python/NumPy numbers and anything with ``__float__`` (a 0-d tensor); rejects
    ``bool``, strings and multi-element arrays. NaN and inf are returned as floats.
    """
    if v is None or isinstance(v, (bool, str, bytes)):
        return None
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    except Exception:  # noqa: BLE001 - e.g. a multi-element tensor raising RuntimeError
        return None


def finite_value(metrics: Mapping[str, Any], key: str) -> float | None:
    """``metrics[key]`` as a finite float, or ``None`` if absent, non-numeric or non-finite."""
    x = to_float(metrics.get(key))
    return x if x is not None and math.isfinite(x) else None


# --------------------------------------------------------------------------------------------
# Params and the rule base class
# --------------------------------------------------------------------------------------------


class RuleParams(BaseModel):
    """Parameters every rule has."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    enabled: bool = True
    """Whether the rule runs at all. A disabled rule never fires and never affects the status."""

    severity: Severity = "warn"
    """``warn`` marks the run; ``fail`` marks it failed and, with ``on_fail: stop``, stops it."""


class StreakParams(RuleParams):
    """Parameters of rules that must hold for several consecutive observations."""

    patience: int = Field(default=5, ge=1)
    """Consecutive observations the condition must hold before the rule fires (1 = at once)."""


@dataclass(frozen=True, slots=True)
class Reading:
    """One evaluation of a rule's condition at one step."""

    violated: bool
    metric: str  # the metric the value refers to (or a derived name such as a ratio)
    value: float  # the watched quantity
    threshold: float  # the limit it was compared with
    detail: str  # the comparison in words, e.g. "entropy/mean = 0.05 < 0.2 × initial 0.9 = 0.18"


@dataclass(frozen=True, slots=True)
class BlockReadings:
    """A rule's evaluations over a block (``HealthRule.observe_block``): the positions of the
    steps it evaluated, whether each violated its condition, and the full :class:`Reading` of
    the k-th of them, built only where an event fires (its words cost more than the comparison)."""

    at: np.ndarray  # int positions in the block, ascending
    violated: np.ndarray  # bool, one per position
    reading: Callable[[int], Reading]

    @classmethod
    def none(cls) -> BlockReadings:
        return cls(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool), _no_reading)


def _no_reading(k: int) -> Reading:
    raise IndexError(f"no reading {k}: the rule evaluated no step of this block")


def reading_of(update: Callable[[], Reading | None]) -> Reading:
    """The reading ``update`` gives at a step the block form found violated: always one (a rule's
    ``update`` returns None only where it could not evaluate, and such steps are not violations)."""
    reading = update()
    if reading is None:
        raise AssertionError("a violated step gave no reading: the block and step forms disagree")
    return reading


class HealthRule:
    """Base class: the patience/active bookkeeping shared by every rule.

    Subclasses set ``name``, ``Params``, ``watches`` (metric names read), ``consequence`` (why the
    symptom matters, one sentence used in event messages), ``summary`` (what the rule catches, its
    row of docs/health.md's rule table) and implement ``update(metrics)``,
    which advances the rule's own state and returns a ``Reading`` or ``None`` (not evaluated).

    A rule may also give a column form, ``_block_readings(block)``: the same evaluations over a
    whole :class:`~workbench.health.columns.Block` at once, with numpy, advancing the same state.
    ``observe_block`` then applies the patience bookkeeping to the block at once; without one it
    calls ``observe`` step by step. Either way the events and the state are those of ``observe``.
    """

    name: ClassVar[str]
    Params: ClassVar[type[RuleParams]] = StreakParams
    watches: ClassVar[tuple[str, ...]] = ()
    consequence: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def __init__(self, params: RuleParams | Mapping[str, Any] | None = None, **overrides: Any):
        if params is None:
            params = self.Params(**overrides)
        elif isinstance(params, Mapping):
            params = self.Params(**{**params, **overrides})
        elif overrides:
            params = self.Params(**{**params.model_dump(), **overrides})
        if not isinstance(params, self.Params):
            raise TypeError(f"health rule {self.name!r} expects {self.Params.__name__}, got {type(params).__name__}")
        self.params = params
        self.reset()

    # -- state -------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget everything observed (streak, active flag and the rule's own state)."""
        self._streak = 0
        self._streak_start: int | None = None
        self._active = False
        self._evaluated = 0  # observations on which update() returned a reading
        self._reset_state()

    def _reset_state(self) -> None:
        """Subclass hook: clear baselines/histories."""

    @property
    def active(self) -> bool:
        """Whether the condition has held for ``patience`` observations and not cleared since."""
        return self._active

    @property
    def evaluated(self) -> int:
        """How many observations the rule evaluated (0: its inputs never arrived, e.g. an imported run)."""
        return self._evaluated

    @property
    def enabled(self) -> bool:
        return self.params.enabled

    @property
    def min_observations(self) -> int:
        """Observations the rule needs before its first evaluation (its baseline or windows filling):
        a run with fewer cannot be judged by it, which its report says (``not evaluated: needs ≥ N``)."""
        return 1

    @property
    def patience(self) -> int:
        return getattr(self.params, "patience", 1)

    # -- evaluation --------------------------------------------------------------------------

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def observe(self, step: int, metrics: Mapping[str, Any]) -> HealthEvent | None:
        """Consume one step; return an event on the step the rule starts firing, else ``None``."""
        if not self.params.enabled:
            return None
        reading = self.update(metrics)
        if reading is None:
            return None
        self._evaluated += 1
        if not reading.violated:
            self._streak = 0
            self._streak_start = None
            self._active = False
            return None
        if self._streak == 0:
            self._streak_start = step
        self._streak += 1
        if self._active or self._streak < self.patience:
            return None
        self._active = True
        return self._event(step, reading, self._streak, self._streak_start)

    def _event(self, step: int, reading: Reading, streak: int, streak_start: int | None) -> HealthEvent:
        return HealthEvent(
            rule=self.name,
            step=step,
            metric=reading.metric,
            value=reading.value,
            threshold=reading.threshold,
            severity=self.params.severity,
            message=self._message(step, reading, streak, streak_start),
        )

    def _message(self, step: int, reading: Reading, streak: int, streak_start: int | None) -> str:
        if self.patience == 1:
            when = f"at step {step}"
        else:
            when = f"for {streak} consecutive observations (steps {streak_start}–{step})"
        return f"{self.name}: {reading.detail} {when}. {self.consequence}".strip()

    # -- a block of steps at once ------------------------------------------------------------

    def columns(self) -> tuple[str, ...]:
        """The metrics the column form reads as columns (``*`` is not a column)."""
        return tuple(w for w in self.watches if w != "*")

    @property
    def has_column_form(self) -> bool:
        return type(self)._block_readings is not HealthRule._block_readings

    def _block_readings(self, block: Block) -> BlockReadings | None:
        """The column form (see the class docstring); None: this rule has none."""
        return None

    def observe_block(self, block: Block) -> list[tuple[int, HealthEvent]]:
        """Observe every step of ``block`` in order: the same events and state as ``observe``
        step by step. Returns ``(position in the block, event)`` pairs."""
        if not self.params.enabled:
            return []
        readings = self._block_readings(block)
        if readings is None:
            if block.rows is None:
                raise ValueError(f"health rule {self.name!r} has no column form: the block must keep its rows")
            steps = block.steps.tolist()
            found = [(i, self.observe(steps[i], row)) for i, row in enumerate(block.rows)]
            return [(i, e) for i, e in found if e is not None]
        return self._streaks(block, readings)

    def _streaks(self, block: Block, r: BlockReadings) -> list[tuple[int, HealthEvent]]:
        """``observe``'s patience bookkeeping over a block's evaluations at once. The streak at an
        evaluation is the number of violations since the last clear (plus the streak carried in,
        before the block's first clear); the rule fires where it reaches ``patience`` (it stays
        active, without firing again, until a clear: active == streak >= patience)."""
        n = len(r.at)
        if n == 0:
            return []
        self._evaluated += n
        index = np.arange(n)
        last_clear = np.maximum.accumulate(np.where(r.violated, -1, index))
        carried = r.violated & (last_clear < 0)  # in the run of violations the block began with
        streak = np.where(r.violated, index - last_clear, 0) + np.where(carried, self._streak, 0)
        steps = block.steps

        def start_of(k: int) -> int:
            if carried[k] and self._streak > 0:
                assert self._streak_start is not None  # a carried streak has its start (set with _streak)
                return self._streak_start
            return int(steps[r.at[last_clear[k] + 1]])

        events = []
        for k in np.flatnonzero(streak == self.patience).tolist():
            reading = r.reading(k)
            if not reading.violated:  # the column form and update() disagree: a bug, never a silent verdict
                raise AssertionError(
                    f"health rule {self.name}: column form and update() disagree at step {int(steps[r.at[k]])}"
                )
            step = int(steps[r.at[k]])
            events.append((int(r.at[k]), self._event(step, reading, int(streak[k]), start_of(k))))
        end = int(streak[-1])
        self._streak_start = None if end == 0 else start_of(n - 1)
        self._streak = end
        self._active = end >= self.patience
        return events


def _register(cls: type[HealthRule]) -> type[HealthRule]:
    HEALTH_RULES.register(cls.name)(cls)
    return cls


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _observations(block: Block, key: str) -> tuple[np.ndarray, np.ndarray]:
    """The positions of the block's steps where ``key`` is a finite number (the steps a
    one-metric rule evaluates), and those values."""
    x = block.finite(key)
    at = np.flatnonzero(~np.isnan(x))
    return at, x[at]


def _warm_up(rule: HealthRule, key: str, values: np.ndarray, warming: Callable[[], bool]) -> int:
    """Feed ``rule.update`` the first observations, one by one, while ``warming()`` (a baseline
    or a window filling: never evaluated, so nothing to fire); returns how many it took."""
    k = 0
    while k < len(values) and warming():
        if rule.update({key: float(values[k])}) is not None:
            raise AssertionError(f"health rule {rule.name}: evaluated during its warm-up")
        k += 1
    return k


def _windows(carried: Any, new: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
    """A deque of the last ``length`` observations (``carried``) followed by ``new`` ones: the
    sequence, and for each new observation where its window (the deque after appending it)
    starts and ends in that sequence."""
    seq = np.concatenate([np.fromiter(carried, dtype=float, count=len(carried)), new])
    end = len(carried) + 1 + np.arange(len(new))
    return seq, np.stack([np.maximum(end - length, 0), end], axis=1)


def _row_results(seq: np.ndarray, spans: np.ndarray, kernel: Callable[[np.ndarray], Any]) -> list[Any]:
    """``kernel`` over the windows ``seq[start:end]`` of ``spans``, in order, batched: windows of
    the full length (all but a run's first ones) go ``KERNEL_ROWS`` at a time, the shorter ones
    (the deque still filling) one by one. The kernels are batch-invariant (health/trend.py), so
    each row gets exactly what one call on that window alone gives."""
    out: list[Any] = []
    if not len(spans):
        return out
    lengths = spans[:, 1] - spans[:, 0]
    full = int(lengths.max())
    views = sliding_window_view(seq, full)
    i = 0
    while i < len(spans):
        if lengths[i] < full:
            start, end = spans[i]
            out.append(kernel(seq[start:end][None, :]))
            i += 1
            continue
        j = i
        while j < len(spans) and j - i < KERNEL_ROWS and lengths[j] == full:
            j += 1
        out.append(kernel(np.ascontiguousarray(views[spans[i:j, 0]])))
        i = j
    return out


def _stateless(rule: HealthRule, block: Block, checked: np.ndarray, violated: np.ndarray) -> BlockReadings:
    """Readings of a rule whose ``update`` keeps no state: at a firing step, ``update`` itself on
    that step's values gives the reading (and its words)."""
    at = np.flatnonzero(checked)
    return BlockReadings(
        at, violated[at], lambda k: reading_of(lambda: rule.update(block.row(int(at[k]), rule.columns())))
    )


class _Above(HealthRule):
    """A rule on one metric that must not stay above a limit: ``watches[0] > params.<limit>``."""

    limit: ClassVar[str]  # the Params field holding the limit

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:
        x = finite_value(metrics, self.watches[0])
        return None if x is None else self._reading(x)

    def _reading(self, x: float) -> Reading:
        key, thr = self.watches[0], getattr(self.params, self.limit)
        return Reading(x > thr, key, x, thr, f"{key} = {_fmt(x)} > {thr:g}")

    def _block_readings(self, block: Block) -> BlockReadings:
        at, x = _observations(block, self.watches[0])
        return BlockReadings(at, x > getattr(self.params, self.limit), lambda k: self._reading(float(x[k])))
