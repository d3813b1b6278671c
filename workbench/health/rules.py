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
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, ClassVar

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from pydantic import BaseModel, ConfigDict, Field, model_validator

from workbench.registry import Registry

from .columns import Block
from .events import HealthEvent, Severity
from .trend import SlopeTest, WindowTrend, mean_shift_se, slope_tests

__all__ = [
    "HEALTH_RULES",
    "BlockReadings",
    "HealthRule",
    "Reading",
    "RuleParams",
    "StreakParams",
    "finite_value",
    "markdown_table",
    "to_float",
]

# Canonical metric names read by the rules (docs/metrics.md).
ENTROPY = "entropy/mean"
TRUNCATED_FRAC = "length/truncated_frac"
LEN_CORRECT = "length/correct_mean"
LEN_INCORRECT = "length/incorrect_mean"
REWARD = "reward/mean"
ZERO_STD_FRAC = "batch/zero_std_frac"
MISMATCH_PROB_MAX = "mismatch/prob_abs_diff_max"
MISMATCH_KL = "mismatch/kl"
IS_RATIO_MEAN = "mismatch/is_ratio_mean"
IS_RATIO_STD = "mismatch/is_ratio_std"
IS_RATIO_TAIL = "mismatch/is_ratio_tail_frac"
MISMATCH_ESS = "mismatch/ess"
MISMATCH_KL_K1 = "mismatch/kl_k1"
CHI2_TOKEN = "mismatch/chi2_token"
TOKEN_MULT_PROB_ERROR = "mismatch/token_mult_prob_error"
CLIP_FRAC = "clip/frac"
KL_REF = "kl/ref"

HEALTH_RULES: Registry[type[HealthRule]] = Registry("health rule")

# reward_collapse: standard errors of the running reward below the steps before it (calibrated, see Params).
NOISE_Z = 4.0
# Both trend rules fit their AR(1) noise to at most this many observations before the window
# they judge (health/trend.py: fewer leave the fitted noise too uncertain at strong autocorrelation).
MAX_NOISE_WINDOW = 150
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
        return cls(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool), lambda k: None)  # type: ignore[arg-type,return-value]


class HealthRule:
    """Base class: the patience/active bookkeeping shared by every rule.

    Subclasses set ``name``, ``Params``, ``watches`` (metric names read), ``consequence`` (why the
    symptom matters, one sentence used in event messages), ``summary`` (what the rule catches, its
    row of the README's rule table) and implement ``update(metrics)``,
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
            raise TypeError(
                f"health rule {self.name!r} expects {self.Params.__name__}, "
                f"got {type(params).__name__}"
            )
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
            when = (
                f"for {streak} consecutive observations "
                f"(steps {streak_start}–{step})"
            )
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
                return self._streak_start  # type: ignore[return-value]
            return int(steps[r.at[last_clear[k] + 1]])

        events = []
        for k in np.flatnonzero(streak == self.patience).tolist():
            reading = r.reading(k)
            if not reading.violated:  # the column form and update() disagree: a bug, never a silent verdict
                raise AssertionError(f"health rule {self.name}: column form and update() disagree at "
                                     f"step {int(steps[r.at[k]])}")
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
    return BlockReadings(at, violated[at], lambda k: rule.update(block.row(int(at[k]), rule.columns())))  # type: ignore[arg-type,return-value]


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


# --------------------------------------------------------------------------------------------
# Entropy
# --------------------------------------------------------------------------------------------


class EntropyBaselineParams(StreakParams):
    baseline_steps: int = Field(default=3, ge=1)
    """Initial entropy = mean of the first ``baseline_steps`` observations (not checked)."""


class _EntropyRelative(HealthRule):
    """Shared baseline logic: initial entropy from the first observations, then a relative check."""

    watches = (ENTROPY,)

    def _reset_state(self) -> None:
        self._baseline: list[float] = []
        self._initial: float | None = None

    @property
    def initial(self) -> float | None:
        """The baseline entropy, once ``baseline_steps`` observations have been seen."""
        return self._initial

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:
        x = finite_value(metrics, ENTROPY)
        if x is None:
            return None
        if self._initial is None:
            self._baseline.append(x)
            if len(self._baseline) == self.params.baseline_steps:
                self._initial = math.fsum(self._baseline) / len(self._baseline)
            return None
        if self._initial <= 0.0:
            return None  # a degenerate baseline: relative thresholds are meaningless
        return self._compare(x, self._initial)

    def _compare(self, x: float, initial: float) -> Reading:  # pragma: no cover - abstract
        raise NotImplementedError

    def _violated(self, x: np.ndarray, initial: float) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _block_readings(self, block: Block) -> BlockReadings:
        at, x = _observations(block, ENTROPY)
        k = _warm_up(self, ENTROPY, x, lambda: self._initial is None)
        at, x = at[k:], x[k:]
        initial = self._initial
        if initial is None or initial <= 0.0:
            return BlockReadings.none()
        return BlockReadings(at, self._violated(x, initial), lambda i: self._compare(float(x[i]), initial))


class EntropyCollapseParams(EntropyBaselineParams):
    min_fraction: float = Field(default=0.2, gt=0.0, lt=1.0)
    """Fires when entropy < ``min_fraction`` × initial entropy."""


@_register
class EntropyCollapse(_EntropyRelative):
    """Entropy collapse: ``entropy/mean`` falls below a fraction of its initial value.

    Symptom: the next-token distribution concentrates on one token, samples in a group become
    near-identical, the group-relative advantage loses its signal and exploration stops. DAPO [1]
    identifies it in vanilla GRPO and traces it to the symmetric PPO clip (hence clip-higher);
    [4] sees it with quantised (int8) rollouts, i.e. a large sampler/learner mismatch.
    """

    name = "entropy_collapse"
    summary = "entropy falls below a fraction of its starting value"
    Params = EntropyCollapseParams
    consequence = (
        "Entropy collapse: outputs turn deterministic and exploration stops "
        "(DAPO [1]; try clip_high > clip_low, or an IS correction if the mismatch is large [4])."
    )

    def _violated(self, x: np.ndarray, initial: float) -> np.ndarray:
        return x < self.params.min_fraction * initial

    def _compare(self, x: float, initial: float) -> Reading:
        f = self.params.min_fraction
        thr = f * initial
        return Reading(
            violated=x < thr,
            metric=ENTROPY,
            value=x,
            threshold=thr,
            detail=f"entropy/mean = {_fmt(x)} < {f:g} × initial {_fmt(initial)} = {_fmt(thr)}",
        )


class EntropyBlowupParams(EntropyBaselineParams):
    max_multiple: float = Field(default=3.0, gt=1.0)
    """Fires when entropy > ``max_multiple`` × initial entropy."""


@_register
class EntropyBlowup(_EntropyRelative):
    """Entropy blow-up: ``entropy/mean`` rises above a multiple of its initial value.

    Symptom: the policy spreads probability over many tokens, i.e. it is drifting towards
    gibberish. The seed overview's health checklist asks for entropy "not too low and not too
    high"; a *slow* rise is healthy (DAPO [1]), a multiple of the start is not.
    """

    name = "entropy_blowup"
    summary = "entropy rises above a multiple of its starting value"
    Params = EntropyBlowupParams
    consequence = (
        "Entropy blow-up: the policy is drifting towards random text "
        "(check the learning rate, clip_high and the reward)."
    )

    def _violated(self, x: np.ndarray, initial: float) -> np.ndarray:
        return x > self.params.max_multiple * initial

    def _compare(self, x: float, initial: float) -> Reading:
        m = self.params.max_multiple
        thr = m * initial
        return Reading(
            violated=x > thr,
            metric=ENTROPY,
            value=x,
            threshold=thr,
            detail=f"entropy/mean = {_fmt(x)} > {m:g} × initial {_fmt(initial)} = {_fmt(thr)}",
        )


# --------------------------------------------------------------------------------------------
# Length
# --------------------------------------------------------------------------------------------


class LengthBlowupParams(StreakParams):
    max_truncated_frac: float = Field(default=0.3, ge=0.0, le=1.0)
    """Fires when ``length/truncated_frac`` > this fraction of completions hit max_new_tokens."""


@_register
class LengthBlowup(_Above):
    """Length blow-up: too many completions are truncated at ``max_new_tokens``.

    Symptom: responses grow without bound (repetition, gibberish). Truncated samples carry a
    misleading reward and destabilise training unless filtered or softly penalised (DAPO [1],
    overlong filtering / reward shaping); [4] reports abnormally long responses together with
    entropy collapse under a large sampler/learner mismatch.
    """

    name = "length_blowup"
    summary = "the truncated fraction goes over a limit"
    Params = LengthBlowupParams
    limit = "max_truncated_frac"
    watches = (TRUNCATED_FRAC,)
    consequence = (
        "Length blow-up: truncated samples get misleading rewards "
        "(DAPO [1]: overlong filtering or soft overlong punishment)."
    )


class IncorrectLengthGapParams(StreakParams):
    patience: int = Field(default=3, ge=1)
    """Consecutive observations the condition must hold before the rule fires (1 = at once)."""

    max_ratio: float = Field(default=1.5, gt=0.0)
    """Fires when the fitted length/incorrect_mean ÷ length/correct_mean at the newest observation
    exceeds this ..."""

    trend_window: int = Field(default=16, ge=3)
    """... and its least-squares slope over the last ``trend_window`` observations is
    significantly positive: more than ``critical_z`` standard errors above 0 ..."""

    noise_window: int = Field(default=40, ge=6)
    """... the standard error coming from AR(1) noise fitted to the observations before the trend
    window: at least ``noise_window`` of them (so the rule first evaluates after ``noise_window +
    trend_window``) ..."""

    max_noise_window: int = Field(default=MAX_NOISE_WINDOW, ge=6)
    """... and at most ``max_noise_window`` (all of them until then: the longer the stretch, the
    better the noise is known)."""

    critical_z: float = Field(default=4.5, gt=0.0)
    """Slope / standard error above which one evaluation counts as rising. Calibrated by
    simulation, not a normal quantile: with the defaults, at most 5% of flat 200-step runs fire
    (patience 3 over overlapping windows) for lag-1 autocorrelation 0 to 0.8 and on resampled real
    histories, and a planted drift is caught within 25 steps in at least 95% of runs (docs/metrics.md,
    tests/health/test_false_alarms*.py)."""

    @model_validator(mode="after")
    def _noise_cap_covers_minimum(self) -> IncorrectLengthGapParams:
        if self.max_noise_window < self.noise_window:
            raise ValueError(f"max_noise_window ({self.max_noise_window}) is below noise_window ({self.noise_window})")
        return self


@_register
class IncorrectLengthGap(HealthRule):
    """GRPO length bias: incorrect answers are much longer than correct ones, and the gap grows.

    Symptom: ``length/incorrect_mean / length/correct_mean`` above a limit and rising. With
    per-sequence length normalisation (vanilla GRPO's ``seq-mean-token-mean``) a long wrong answer
    is penalised less per token than a short one, so the policy learns to "overthink" when wrong
    (Dr. GRPO [3]); token-level aggregation (DAPO [1]) or a constant normaliser removes the bias.
    "Rising" is a tested trend: the least-squares slope of the ratio over the last
    ``trend_window`` observations is more than ``critical_z`` standard errors above 0, and the
    fitted ratio at the newest observation is above ``max_ratio``; a large but stable gap does
    not fire. Step noise is autocorrelated, so the standard error is the slope's under AR(1)
    noise fitted to the observations before the window (``noise_window`` to ``max_noise_window``
    of them; health/trend.py).
    Needs both lengths and a positive correct length; otherwise it does not evaluate.
    """

    name = "incorrect_length_gap"
    summary = (
        "the incorrect/correct length ratio is above a limit and its least-squares slope over "
        "a window is significantly positive against autocorrelated (AR(1)) noise fitted to the "
        "steps before it (GRPO length bias); a stable gap does not fire"
    )
    Params = IncorrectLengthGapParams
    watches = (LEN_CORRECT, LEN_INCORRECT)
    consequence = (
        "GRPO length bias: wrong answers are getting longer relative to right ones "
        "(Dr. GRPO [3]; use token-level or constant-normalised loss aggregation)."
    )
    RATIO = "length/incorrect_mean÷length/correct_mean"

    def _reset_state(self) -> None:
        p = self.params
        self._trend = WindowTrend(p.trend_window, p.noise_window, p.critical_z, p.max_noise_window)

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:
        correct = finite_value(metrics, LEN_CORRECT)
        incorrect = finite_value(metrics, LEN_INCORRECT)
        if correct is None or incorrect is None or correct <= 0.0:
            return None
        ratio = incorrect / correct
        if not math.isfinite(ratio):  # a correct length near 0 (e.g. 1e-320): no usable ratio
            return None
        test = self._trend.add(ratio)
        if test is None:
            return None  # no trend can be tested before the window is full
        return self._reading(test)

    def _reading(self, test: SlopeTest) -> Reading:
        thr = self.params.max_ratio
        violated = test.rising and test.fitted_end > thr
        return Reading(
            violated=violated,
            metric=self.RATIO,
            value=test.fitted_end,
            threshold=thr,
            detail=self._detail(test, thr) if violated else "slope not significant or fitted ratio within the limit",
        )

    def _block_readings(self, block: Block) -> BlockReadings:
        correct, incorrect = block.finite(LEN_CORRECT), block.finite(LEN_INCORRECT)
        usable = ~np.isnan(correct) & ~np.isnan(incorrect) & (correct > 0.0)
        with np.errstate(over="ignore"):
            ratio = incorrect / np.where(usable, correct, 1.0)
        at = np.flatnonzero(usable & np.isfinite(ratio))
        ratio = ratio[at]
        trend = self._trend
        need = trend.history + trend.window
        k = 0
        while k < len(ratio) and len(trend) + 1 < need:  # the window filling: no test yet
            trend.add(float(ratio[k]))
            k += 1
        at, ratio = at[k:], ratio[k:]
        seq, spans = _windows(trend.values, ratio, trend.values.maxlen)
        trend.values.extend(ratio[-trend.values.maxlen:].tolist())
        tests = _row_results(seq, spans, lambda rows: slope_tests(rows, trend.window, trend.critical))
        ok = np.concatenate([t.ok for t in tests]) if tests else np.zeros(0, dtype=bool)
        rising = np.concatenate([t.rising for t in tests]) if tests else ok
        fitted = np.concatenate([t.fitted_end for t in tests]) if tests else np.zeros(0)
        where = [(i, j) for i, t in enumerate(tests) for j in range(len(t.ok))]  # (batch, row) per observation
        kept = np.flatnonzero(ok)
        violated = rising[kept] & (fitted[kept] > self.params.max_ratio)

        def reading(n: int) -> Reading:
            i, j = where[kept[n]]
            return self._reading(tests[i].at(j))  # type: ignore[arg-type]

        return BlockReadings(at[kept], violated, reading)

    def _detail(self, test: SlopeTest, thr: float) -> str:
        p = self.params
        return (
            f"incorrect/correct length ratio rises {_fmt(test.slope)} per observation over the last "
            f"{p.trend_window} (least-squares slope {test.z:.3g} standard errors above 0 > {p.critical_z:g}, "
            f"noise fitted to the observations before it) and its fitted value {_fmt(test.fitted_end)} > {thr:g}"
        )


# --------------------------------------------------------------------------------------------
# Reward and learning signal
# --------------------------------------------------------------------------------------------


class RewardCollapseParams(StreakParams):
    patience: int = Field(default=4, ge=1)
    """Consecutive observations the condition must hold before the rule fires (1 = at once)."""

    window: int = Field(default=5, ge=1)
    """Running reward = mean of the last ``window`` observations of reward/mean."""

    margin: float = Field(default=0.2, gt=0.0)
    """Fires when the running reward is more than ``margin`` (reward units) below its best ..."""

    noise_z: float = Field(default=NOISE_Z, ge=0.0)
    """... and more than ``noise_z`` standard errors below the mean of the ``noise_window`` steps
    before the running window (the noise margin; 0 switches it off). Calibrated by simulation, not
    a normal quantile: at most 5% of healthy 200-step runs fire for lag-1 autocorrelation 0 to 0.8
    and on resampled real histories, at most 5% of healthy 100-step runs with independent reward
    sd up to 0.3, and a 0.4 drop is caught within 15 steps in at least 95% of runs (docs/metrics.md,
    tests/health/test_false_alarms*.py)."""

    noise_window: int = Field(default=60, ge=6)
    """The reference: the mean of the ``noise_window`` observations before the running window. The
    rule evaluates once it has them (from observation ``noise_window + window``) ..."""

    max_noise_window: int = Field(default=MAX_NOISE_WINDOW, ge=6)
    """... and fits the AR(1) noise of its standard error to all observations before the running
    window, at most ``max_noise_window`` of them."""

    @model_validator(mode="after")
    def _noise_cap_covers_minimum(self) -> RewardCollapseParams:
        if self.max_noise_window < self.noise_window:
            raise ValueError(f"max_noise_window ({self.max_noise_window}) is below noise_window ({self.noise_window})")
        return self


@_register
class RewardCollapse(HealthRule):
    """Reward collapse: the running training reward falls well below where it was.

    Symptom: training diverged after making progress. The seed overview's health checklist: the
    training reward "should increase in a stable manner"; DAPO [1] uses a reward that does not
    "decline significantly" as a sign an experiment is not deteriorating. The running reward is a
    ``window``-observation mean. "Well below" is both more than ``margin`` below the best running
    reward (a drop large enough to matter) and more than ``noise_z`` standard errors below the mean
    of the ``noise_window`` observations before the running window (a drop the noise does not
    explain). Step rewards are autocorrelated, so the standard error is that of the difference of
    the two means under AR(1) noise fitted (around a line, φ bias-corrected) to the observations
    before the running window (health/trend.py ``mean_shift_se``). The reference mean and its
    standard error are re-measured only while the running reward is within ``margin`` of its best,
    so a collapse in progress moves neither. Evaluated once the running window and ``noise_window``
    are full.
    """

    name = "reward_collapse"
    summary = (
        "the running reward drops more than a margin below its best and more than "
        f"{NOISE_Z:g} standard errors below the steps before it (AR(1) noise fitted to those steps)"
    )
    Params = RewardCollapseParams
    watches = (REWARD,)
    consequence = "Reward collapse: training is undoing its progress (check lr, clipping, entropy)."

    def _reset_state(self) -> None:
        p = self.params
        self._values: deque[float] = deque(maxlen=p.max_noise_window + p.window)
        self._best = -math.inf
        self._reference: float | None = None
        self._standard_error = math.nan

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:
        x = finite_value(metrics, REWARD)
        if x is None:
            return None
        p = self.params
        self._values.append(x)
        if len(self._values) < p.window:
            return None
        values = np.fromiter(self._values, dtype=float, count=len(self._values))
        running = float(values[None, -p.window :].mean(axis=-1)[0])  # a row mean, as observe_block takes it
        self._best = max(self._best, running)  # tracked from the first full window
        if len(values) < p.noise_window + p.window:
            return None  # no reference yet
        if self._reference is None or running >= self._best - p.margin:
            # Measured only outside a candidate drop: a collapse in progress must move neither the
            # reference it is judged against nor the noise margin (its steps would widen it).
            reference, standard_error = self._noise(values[None, : -p.window])
            self._reference, self._standard_error = float(reference[0]), float(standard_error[0])
        return self._reading(running, self._best, self._reference, self._standard_error)

    def _noise(self, before: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For rows of the observations before the running window: the mean of their last
        ``noise_window`` (the reference) and the standard error of the drop from it."""
        p = self.params
        return before[:, -p.noise_window :].mean(axis=-1), mean_shift_se(before, p.window, p.noise_window)

    def _reading(self, running: float, best: float, reference: float, standard_error: float) -> Reading:
        p = self.params
        noise_limit = reference - p.noise_z * standard_error if p.noise_z > 0 else math.inf
        thr = min(best - p.margin, noise_limit)
        return Reading(
            violated=running < thr,
            metric=REWARD,
            value=running,
            threshold=thr,
            detail=(
                f"running {REWARD} (mean of {p.window}) = {_fmt(running)} is more than {p.margin:g} below its "
                f"best {_fmt(best)} and more than {p.noise_z:g} standard errors "
                f"({_fmt(standard_error)} each) below the mean {_fmt(reference)} of the "
                f"{p.noise_window} observations before it"
            ),
        )

    def _block_readings(self, block: Block) -> BlockReadings:
        p = self.params
        at, x = _observations(block, REWARD)
        k = _warm_up(self, REWARD, x, lambda: len(self._values) + 1 < p.noise_window + p.window)
        at, x = at[k:], x[k:]
        if not len(x):
            return BlockReadings.none()
        held = self._values.maxlen or 0
        seq, spans = _windows(self._values, x, held)
        self._values.extend(x[-held:].tolist())
        running = sliding_window_view(seq, p.window)[spans[:, 1] - p.window].mean(axis=-1)
        best = np.array(list(accumulate(running.tolist(), max, initial=self._best))[1:])  # max(): update's NaN rules
        refit = running >= best - p.margin
        refit[0] |= self._reference is None
        fits = np.flatnonzero(refit)
        noise = _row_results(seq, np.stack([spans[fits, 0], spans[fits, 1] - p.window], axis=1), self._noise)
        # each observation is judged against the reference of the last refit at or before it
        last = np.cumsum(refit)  # 0: the one carried in
        carried = math.nan if self._reference is None else self._reference
        reference = np.concatenate([[carried], *(r for r, _ in noise)])[last]
        standard_error = np.concatenate([[self._standard_error], *(se for _, se in noise)])[last]
        noise_limit = reference - p.noise_z * standard_error if p.noise_z > 0 else np.full(len(x), math.inf)
        below_best = best - p.margin
        threshold = np.where(noise_limit < below_best, noise_limit, below_best)  # min(): update's NaN rules
        self._best = float(best[-1])
        self._reference, self._standard_error = float(reference[-1]), float(standard_error[-1])
        return BlockReadings(at, running < threshold, lambda i: self._reading(
            float(running[i]), float(best[i]), float(reference[i]), float(standard_error[i])))


class NoLearningSignalParams(StreakParams):
    patience: int = Field(default=10, ge=1)
    """Consecutive observations the condition must hold before the rule fires (1 = at once)."""

    max_zero_std_frac: float = Field(default=0.9, ge=0.0, le=1.0)
    """Fires when batch/zero_std_frac > this (fraction of groups whose rewards are all equal)."""


@_register
class NoLearningSignal(_Above):
    """No learning signal: almost every group has identical rewards, so advantages are zero.

    Symptom: in GRPO a group whose completions all get the same reward contributes zero advantage
    and zero gradient; when most groups are like that (all solved or all failed) the effective
    batch shrinks and the gradient is noise. DAPO [1] adds dynamic sampling for this reason.
    """

    name = "no_learning_signal"
    summary = "most groups have identical rewards, so there is no gradient"
    Params = NoLearningSignalParams
    limit = "max_zero_std_frac"
    watches = (ZERO_STD_FRAC,)
    consequence = (
        "No learning signal: most groups have zero-variance rewards and zero advantage "
        "(DAPO [1] dynamic sampling, or harder/easier prompts)."
    )


# --------------------------------------------------------------------------------------------
# Off-policyness: sampler/learner mismatch, clipping, KL
# --------------------------------------------------------------------------------------------


class MismatchSpikeParams(StreakParams):
    patience: int = Field(default=1, ge=1)
    """Consecutive observations the condition must hold before the rule fires (1 = at once)."""

    max_prob_abs_diff: float | None = Field(default=0.8, gt=0.0)
    """Fires when mismatch/prob_abs_diff_max > this (``None`` skips this check)."""

    max_kl: float | None = Field(default=0.05, gt=0.0)
    """Fires when mismatch/kl > this (``None`` skips this check)."""


@_register
class MismatchSpike(HealthRule):
    """Sampler/learner mismatch spike: token probabilities disagree between the two engines.

    Symptom: the max |p_learner − p_sampler| over sampled tokens, or the token-mean k3 KL between
    them, jumps. Yao et al. [4] show the gap silently makes "on-policy" RL off-policy; the *max*
    difference is the sensitive signal (≈0.4 with bf16 rollouts, ≈1.0 with int8, while the mean
    barely moves), and a large gap goes with entropy collapse and long responses. Fires if either
    configured check is exceeded; the event reports the first one exceeded (prob diff first).
    """

    name = "mismatch_spike"
    summary = "sampler and learner disagree"
    Params = MismatchSpikeParams
    watches = (MISMATCH_PROB_MAX, MISMATCH_KL)
    consequence = (
        "Sampler/learner mismatch: training is silently off-policy "
        "(Yao et al. [4]; enable an IS correction such as tis, align dtypes/kernels)."
    )

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:
        readings: list[Reading] = []
        for key, thr in (
            (MISMATCH_PROB_MAX, self.params.max_prob_abs_diff),
            (MISMATCH_KL, self.params.max_kl),
        ):
            x = finite_value(metrics, key)
            if thr is None or x is None:
                continue
            readings.append(Reading(x > thr, key, x, thr, f"{key} = {_fmt(x)} > {thr:g}"))
        if not readings:
            return None
        for r in readings:
            if r.violated:
                return r
        return readings[0]

    def _block_readings(self, block: Block) -> BlockReadings:
        p = self.params
        checked = np.zeros(len(block), dtype=bool)
        violated = np.zeros(len(block), dtype=bool)
        for key, thr in ((MISMATCH_PROB_MAX, p.max_prob_abs_diff), (MISMATCH_KL, p.max_kl)):
            if thr is not None:
                x = block.finite(key)
                checked |= ~np.isnan(x)
                violated |= x > thr  # NaN > thr is False
        return _stateless(self, block, checked, violated)


class MismatchBandsParams(StreakParams):
    patience: int = Field(default=2, ge=1)
    """Consecutive observations outside a band before the rule fires (2: one noisy batch is not a trend)."""

    is_ratio_mean: tuple[float, float] | None = (0.5, 2.0)
    """verl's band for the mean raw token IS ratio (docs/algo/rollout_corr.md); ``None`` skips it."""

    min_ess: float | None = Field(default=0.3, gt=0.0, le=1.0)
    """verl: fires when the normalised effective sample size mismatch/ess < this."""

    max_is_ratio_std: float | None = Field(default=1.0, gt=0.0)
    """verl: fires when the raw ratio's std mismatch/is_ratio_std > this."""

    max_abs_kl_k1: float | None = Field(default=0.1, gt=0.0)
    """verl: fires when |mismatch/kl_k1| > this (nats)."""

    max_chi2_token: float | None = Field(default=1.0, gt=0.0)
    """verl: fires when mismatch/chi2_token > this."""

    max_token_mult_prob_error: float | None = Field(default=1.05, gt=1.0)
    """NeMo-RL's "investigate" level of mean exp|Δ| (docs/guides/grpo.md); ``None`` skips it."""


@_register
class MismatchBands(HealthRule):
    """Sampler/learner mismatch outside the peers' published warning bands.

    verl (docs/algo/rollout_corr.md) warns when the mean IS ratio leaves [0.5, 2.0], the ESS falls
    below 0.3, the ratio's std exceeds 1.0, |KL| exceeds 0.1 or χ²_token exceeds 1.0; NeMo-RL asks to
    investigate when ``token_mult_prob_error`` exceeds 1.05. All are read off the raw ratios, so the rule
    sees the mismatch with or without a correction. The event names the first band left (in this order).
    False alarms and detection are measured on simulated token streams (tests/health/test_mismatch_rules.py).
    """

    name = "mismatch_bands"
    summary = "the mismatch leaves verl's or NeMo-RL's published bands"
    Params = MismatchBandsParams
    watches = (IS_RATIO_MEAN, MISMATCH_ESS, IS_RATIO_STD, MISMATCH_KL_K1, CHI2_TOKEN, TOKEN_MULT_PROB_ERROR)
    consequence = (
        "The sampler and learner disagree beyond the published bands: check a leaked generation setting "
        "(temperature, top-k, repetition_penalty), the weight sync and the dtypes; an IS correction only "
        "bounds the damage."
    )

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:
        p = self.params
        readings: list[Reading] = []
        x = finite_value(metrics, IS_RATIO_MEAN)
        if p.is_ratio_mean is not None and x is not None:
            lo, hi = p.is_ratio_mean
            thr = lo if x < lo else hi
            readings.append(Reading(not lo <= x <= hi, IS_RATIO_MEAN, x, thr,
                                    f"{IS_RATIO_MEAN} = {_fmt(x)} outside [{lo:g}, {hi:g}]"))
        for key, thr, below in ((MISMATCH_ESS, p.min_ess, True), (IS_RATIO_STD, p.max_is_ratio_std, False),
                                (MISMATCH_KL_K1, p.max_abs_kl_k1, False), (CHI2_TOKEN, p.max_chi2_token, False),
                                (TOKEN_MULT_PROB_ERROR, p.max_token_mult_prob_error, False)):
            x = finite_value(metrics, key)
            if thr is None or x is None:
                continue
            if below:
                readings.append(Reading(x < thr, key, x, thr, f"{key} = {_fmt(x)} < {thr:g}"))
            elif key == MISMATCH_KL_K1:
                readings.append(Reading(abs(x) > thr, key, x, thr, f"|{key}| = {_fmt(abs(x))} > {thr:g}"))
            else:
                readings.append(Reading(x > thr, key, x, thr, f"{key} = {_fmt(x)} > {thr:g}"))
        if not readings:
            return None
        return next((r for r in readings if r.violated), readings[0])

    def _block_readings(self, block: Block) -> BlockReadings:
        p = self.params
        checked = np.zeros(len(block), dtype=bool)
        violated = np.zeros(len(block), dtype=bool)
        if p.is_ratio_mean is not None:
            lo, hi = p.is_ratio_mean
            x = block.finite(IS_RATIO_MEAN)
            checked |= ~np.isnan(x)
            violated |= (x < lo) | (x > hi)  # not lo <= x <= hi, for a finite x
        for key, thr, below in ((MISMATCH_ESS, p.min_ess, True), (IS_RATIO_STD, p.max_is_ratio_std, False),
                                (MISMATCH_KL_K1, p.max_abs_kl_k1, False), (CHI2_TOKEN, p.max_chi2_token, False),
                                (TOKEN_MULT_PROB_ERROR, p.max_token_mult_prob_error, False)):
            if thr is None:
                continue
            x = block.finite(key)
            checked |= ~np.isnan(x)
            violated |= (x < thr) if below else (np.abs(x) > thr if key == MISMATCH_KL_K1 else x > thr)
        return _stateless(self, block, checked, violated)


class MismatchTailParams(StreakParams):
    patience: int = Field(default=3, ge=1)
    """Consecutive observations the condition must hold before the rule fires."""

    max_tail_frac: float = Field(default=0.05, gt=0.0, le=1.0)
    """Fires when mismatch/is_ratio_tail_frac (tokens whose raw ratio is outside [0.9, 1.1]) > this."""


@_register
class MismatchTail(_Above):
    """Mismatch in the tail: many tokens disagree by more than 10% while the mean ratio looks fine.

    TRL #6789 found 7.5% of tokens outside [0.9, 1.1] with a healthy mean difference; a bf16 sampler
    on a healthy small model keeps this well under 1%. Watching the tail, not the mean, catches a
    sampler that samples from another distribution (a leaked temperature or top-k) or stale weights.
    """

    name = "mismatch_tail"
    summary = "too many tokens' sampler/learner ratio is outside [0.9, 1.1]"
    Params = MismatchTailParams
    limit = "max_tail_frac"
    watches = (IS_RATIO_TAIL,)
    consequence = (
        "A share of tokens is sampled far off the learner's distribution: check the sampler's "
        "generation settings and the weight sync."
    )


class MismatchGrowthParams(StreakParams):
    patience: int = Field(default=3, ge=1)
    """Consecutive observations the condition must hold before the rule fires."""

    baseline_steps: int = Field(default=20, ge=1)
    """The baseline is the mean mismatch/kl of the first ``baseline_steps`` observations (not checked)."""

    window: int = Field(default=20, ge=1)
    """The current level is the mean mismatch/kl of the last ``window`` observations.

    20 and 20, not 10 and 10 (#29): step KL is log-normal-ish (real bf16 runs: log-sd 0.45) and may be
    autocorrelated; with 10-step means a stable KL fired in 9.5% / 17.5% of 200-step runs at log-sd
    0.6, φ 0.5 / log-sd 0.5, φ 0.8, with 20-step means 0.5% / 4.2%, for 4 more steps of detection delay
    (tests/health/test_false_alarms_autocorrelated.py)."""

    max_multiple: float = Field(default=3.0, gt=1.0)
    """Fires when the current level > this multiple of the baseline ..."""

    min_kl: float = Field(default=2e-4, gt=0.0)
    """... and > this (nats): an fp32 baseline of 1e-12 growing 100× is still no mismatch."""


@_register
class MismatchGrowth(HealthRule):
    """The mismatch grows: the running mean of mismatch/kl climbs to a multiple of its early level.

    Precedes the crashes users report (NeMo-RL #1801 asks for a metric that rises first; Yao et al. [4] tie
    the collapse to a growing gap): a low-precision
    sampler on a model whose logits sharpen (the rounding error grows with their magnitude), or a weight
    sync that stopped (the gap grows with every update). A level rule fires only once the gap is large;
    this one fires on the trend, while it is still small.
    """

    name = "mismatch_growth"
    summary = "the sampler/learner mismatch keeps growing"
    Params = MismatchGrowthParams
    watches = (MISMATCH_KL,)
    consequence = (
        "The mismatch is growing: check the weight sync, and a low-precision sampler on a sharpening model "
        "(a higher-precision sampler, or an IS correction)."
    )

    def _reset_state(self) -> None:
        self._baseline: list[float] = []
        self._recent: deque[float] = deque(maxlen=self.params.window)

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:
        x = finite_value(metrics, MISMATCH_KL)
        if x is None:
            return None
        p = self.params
        if len(self._baseline) < p.baseline_steps:
            self._baseline.append(x)
            return None
        self._recent.append(x)
        if len(self._recent) < p.window:
            return None
        recent = np.fromiter(self._recent, dtype=float, count=len(self._recent))
        return self._reading(float(recent[None, :].mean(axis=-1)[0]))  # a row mean, as observe_block takes it

    def _limit(self) -> tuple[float, float]:
        """The baseline (the mean of the first observations) and the limit it sets."""
        p = self.params
        base = sum(self._baseline) / len(self._baseline)
        return base, max(p.max_multiple * base, p.min_kl)

    def _reading(self, level: float) -> Reading:
        p = self.params
        base, thr = self._limit()
        return Reading(level > thr, MISMATCH_KL, level, thr,
                       f"mean {MISMATCH_KL} over the last {p.window} = {_fmt(level)} > max({p.max_multiple:g} × "
                       f"initial {_fmt(base)}, {p.min_kl:g})")

    def _block_readings(self, block: Block) -> BlockReadings:
        p = self.params
        at, x = _observations(block, MISMATCH_KL)
        k = _warm_up(self, MISMATCH_KL, x, lambda: len(self._baseline) < p.baseline_steps or len(self._recent) + 1 < p.window)
        at, x = at[k:], x[k:]
        if not len(x):
            return BlockReadings.none()
        seq, spans = _windows(self._recent, x, p.window)
        self._recent.extend(x[-p.window:].tolist())
        level = sliding_window_view(seq, p.window)[spans[:, 1] - p.window].mean(axis=-1)
        return BlockReadings(at, level > self._limit()[1], lambda i: self._reading(float(level[i])))


class ClipFractionParams(StreakParams):
    max_clip_frac: float = Field(default=0.3, ge=0.0, le=1.0)
    """Fires when clip/frac > this fraction of response tokens clipped."""


@_register
class ClipFractionAnomaly(_Above):
    """Clip-fraction anomaly: a large share of tokens hit the PPO/GRPO clip.

    Symptom: the policy moves far from the sampling policy within one step (lr too high, too many
    updates per batch, or a large mismatch); clipped tokens get no gradient, so learning stalls
    and, on the high side, exploration tokens are cut off (PPO [11]; DAPO [1] clip-higher;
    MiniMax-M1/CISPO [8] on clipped "fork" tokens).
    """

    name = "clip_fraction_anomaly"
    summary = "the clip fraction stays too high"
    Params = ClipFractionParams
    limit = "max_clip_frac"
    watches = (CLIP_FRAC,)
    consequence = (
        "Clip fraction anomaly: updates are too far off the sampling policy "
        "(lower lr or updates per batch; check the mismatch)."
    )


class KLExplosionParams(StreakParams):
    patience: int = Field(default=1, ge=1)
    """Consecutive observations the condition must hold before the rule fires (1 = at once)."""

    max_kl: float = Field(default=1.0, gt=0.0)
    """Fires when kl/ref (KL to the reference policy) > this."""


@_register
class KLExplosion(_Above):
    """KL explosion: the policy runs away from the reference policy.

    Symptom: ``kl/ref`` (only logged when a reference/KL penalty is used, as in the original GRPO
    [13]) exceeds a limit: the KL anchor is no longer holding the policy, typically before reward
    hacking or a collapse. The seed overview notes most reasoning recipes drop the KL term; then
    the metric is absent and this rule does not evaluate.
    """

    name = "kl_explosion"
    summary = "KL to the reference policy explodes"
    Params = KLExplosionParams
    limit = "max_kl"
    watches = (KL_REF,)
    consequence = (
        "KL explosion: the policy is running away from the reference "
        "(raise the KL coefficient or lower the lr)."
    )


# --------------------------------------------------------------------------------------------
# Non-finite values
# --------------------------------------------------------------------------------------------


class NonFiniteParams(RuleParams):
    severity: Severity = "fail"
    """``fail`` by default: a NaN/inf in the loss or gradient poisons the weights."""

    keys: list[str] | None = None
    """Metrics to check; ``None`` checks every numeric value in the step's dict."""


@_register
class NonFinite(HealthRule):
    """Non-finite metrics: a NaN or ±inf in ``loss/policy``, ``grad/norm`` or any other metric.

    Symptom: numerical divergence: overflowing importance ratios (hence the ±20 log-ratio clamp
    of workbench/algorithms/_masked.py, as in verl), a zero-variance group divided by a zero std in the GRPO advantage
    [13] without its ε, low-precision (bf16/fp8) overflow [4]. Once a NaN reaches the optimizer
    the weights are lost, so this rule is immediate (no patience) and ``fail`` by default.
    Non-numeric values are ignored.
    """

    name = "non_finite"
    summary = "a NaN or inf appears; this is fatal and stops the run"
    Params = NonFiniteParams
    watches = ("loss/policy", "grad/norm", "*")
    consequence = "Non-finite values: training has diverged numerically; further steps are wasted."

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:
        keys = self.params.keys if self.params.keys is not None else list(metrics)
        bad: list[tuple[str, float]] = []
        seen = False
        for key in keys:
            x = to_float(metrics.get(key))
            if x is None:
                continue
            seen = True
            if not math.isfinite(x):
                bad.append((key, x))
        if not seen:
            return None
        if not bad:
            return Reading(False, "", 0.0, math.nan, "all metrics finite")
        bad.sort()
        key, x = bad[0]
        listed = ", ".join(f"{k} = {v}" for k, v in bad)
        return Reading(True, key, x, math.nan, f"non-finite metric(s): {listed}")

    def columns(self) -> tuple[str, ...]:
        return tuple(self.params.keys or ())  # every metric (keys None): the block's own non-finite list

    def _block_readings(self, block: Block) -> BlockReadings:
        keys = self.params.keys
        if keys is None:
            at = np.flatnonzero(block.numeric)
            bad = np.zeros(len(block), dtype=bool)
            bad[list(block.non_finite)] = True
            return BlockReadings(at, bad[at], lambda k: self.update(dict(block.non_finite[int(at[k])])))  # type: ignore[return-value]
        checked = np.zeros(len(block), dtype=bool)
        violated = np.zeros(len(block), dtype=bool)
        for key in keys:
            present = block.has(key)
            checked |= present
            if key in block.values:
                violated |= present & ~np.isfinite(block.values[key])
        return _stateless(self, block, checked, violated)


HEALTH_RULES.freeze()


def markdown_table() -> str:
    """The registered rules as the table in README.md (kept in sync by tests/health/test_rules.py)."""
    lines = ["| rule | what it catches |", "|---|---|"]
    lines += [f"| `{name}` | {HEALTH_RULES.get(name).summary} |" for name in HEALTH_RULES.names()]
    return "\n".join(lines) + "\n"
