"""Health rules — Length: truncation and the incorrect/correct length gap."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from workbench.metrics.names import LENGTH_CORRECT_MEAN, LENGTH_INCORRECT_MEAN, LENGTH_TRUNCATED_FRAC

from ..columns import Block
from ..trend import ExpandingTrend, SlopeTest, WindowTrend, slope_tests, trend_tests
from .base import (
    BlockReadings,
    HealthRule,
    Reading,
    StreakParams,
    _Above,
    _fmt,
    _register,
    _row_results,
    _windows,
    finite_value,
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
    watches = (LENGTH_TRUNCATED_FRAC,)
    consequence = (
        "Length blow-up: truncated samples get misleading rewards "
        "(DAPO [1]: overlong filtering or soft overlong punishment)."
    )


class IncorrectLengthGapParams(StreakParams):
    patience: int = Field(default=3, ge=1)
    """Consecutive observations the condition must hold before the rule fires (1 = at once)."""

    max_ratio: float = Field(default=1.5, gt=0.0)
    """Fires when the fitted length/incorrect_mean ÷ length/correct_mean at the newest observation
    exceeds this and either of two slope tests finds it rising. The short test (a fast drift):"""

    trend_window: int = Field(default=16, ge=3)
    """the least-squares slope over the last ``trend_window`` observations is more than
    ``critical_z`` standard errors above 0 ..."""

    noise_window: int = Field(default=40, ge=6)
    """... the standard error coming from AR(1) noise fitted to the observations before the trend
    window: at least ``noise_window`` of them (the short test first evaluates after ``noise_window +
    trend_window``) ..."""

    max_noise_window: int = Field(default=150, ge=6)
    """... and at most ``max_noise_window``."""

    critical_z: float = Field(default=5.5, gt=0.0)
    """The short test's critical value (4.5 before #49; 5.5 keeps the union of both tests at ≤ 3%
    false alarms up to φ = 0.95)."""

    long_min_window: int = Field(default=40, ge=6)
    """The long test (a slow drift): the least-squares slope over the last ``long_min_window`` (the
    rule first evaluates at that observation) ..."""

    long_window: int = Field(default=100, ge=6)
    """... to ``long_window`` observations (the window expands, then slides) is more than
    ``long_critical_z`` standard errors above 0, the noise fitted around that same line ..."""

    long_critical_z: float = Field(default=9.0, gt=0.0)
    """... at this critical value. Both critical values are calibrated by simulation, not normal
    quantiles (the fitted φ is uncertain: at φ = 0.95 its error makes the statistics' tails heavy):
    on flat AR(1) ratios with φ 0 to 0.95, 200 and 500 steps, at most 3% of runs fire; a ratio rising
    1.0 over 150 steps is caught in ≥ 95% of runs and one rising 0.03 per step in ≥ 98%, within ~10
    steps (docs/metrics.md, tests/health/test_trend_power.py)."""

    @model_validator(mode="after")
    def _windows_cover_their_minimums(self) -> IncorrectLengthGapParams:
        if self.max_noise_window < self.noise_window:
            raise ValueError(f"max_noise_window ({self.max_noise_window}) is below noise_window ({self.noise_window})")
        if self.long_window < self.long_min_window:
            raise ValueError(f"long_window ({self.long_window}) is below long_min_window ({self.long_min_window})")
        return self


@_register
class IncorrectLengthGap(HealthRule):
    """GRPO length bias: incorrect answers are much longer than correct ones, and the gap grows.

    Symptom: ``length/incorrect_mean / length/correct_mean`` above a limit and rising. With
    per-sequence length normalisation (vanilla GRPO's ``seq-mean-token-mean``) a long wrong answer
    is penalised less per token than a short one, so the policy learns to "overthink" when wrong
    (Dr. GRPO [3]); token-level aggregation (DAPO [1]) or a constant normaliser removes the bias.
    "Rising" is a tested trend: the least-squares slope of the ratio over the last
    ``min_window`` to ``max_window`` observations (the window expands, then slides) is more than
    ``critical_z`` standard errors above 0, and the fitted ratio at the newest observation is
    above ``max_ratio``; a large but stable gap does not fire. Step noise is autocorrelated, so
    the standard error is the slope's under AR(1) noise fitted to the residuals of that line
    (health/trend.py ``ExpandingTrend``).

    Why this test (#49, chosen by simulation, tests/health/test_trend_power.py): the drift it
    exists for is slow (a ratio rising 1.0 over 150 steps, 0.007 per step against step noise of
    sd 0.05). Its first form tested a 16-step window against noise fitted to the steps *before*
    the window: 16 steps hold a tenth of the rise, and the steps before them hold the drift's
    start, which inflates the fitted noise, so it caught 2.5% of such drifts at φ = 0 and 10% at
    φ = 0.8. A window that expands to 100 steps, with the noise measured around its own fitted
    line, catches ≥ 96% at every φ from 0 to 0.95; a critical value of 9 is what keeps flat runs
    quiet at φ = 0.95 (4 suffices at φ ≤ 0.5, where it would catch the drift ~30 steps sooner).
    Needs both lengths and a positive correct length; otherwise it does not evaluate.
    """

    name = "incorrect_length_gap"
    summary = (
        "the incorrect/correct length ratio is above a limit and its least-squares slope over "
        "the last 40-100 steps is significantly positive against autocorrelated (AR(1)) noise "
        "fitted around that line (GRPO length bias); a stable gap does not fire"
    )
    Params = IncorrectLengthGapParams
    watches = (LENGTH_CORRECT_MEAN, LENGTH_INCORRECT_MEAN)
    consequence = (
        "GRPO length bias: wrong answers are getting longer relative to right ones "
        "(Dr. GRPO [3]; use token-level or constant-normalised loss aggregation)."
    )
    RATIO = "length/incorrect_mean÷length/correct_mean"

    @property
    def min_observations(self) -> int:
        p = self.params
        return min(p.noise_window + p.trend_window, p.long_min_window)

    def _reset_state(self) -> None:
        p = self.params
        self._short = WindowTrend(p.trend_window, p.noise_window, p.critical_z, p.max_noise_window)
        self._long = ExpandingTrend(p.long_min_window, p.long_window, p.long_critical_z)

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:
        correct = finite_value(metrics, LENGTH_CORRECT_MEAN)
        incorrect = finite_value(metrics, LENGTH_INCORRECT_MEAN)
        if correct is None or incorrect is None or correct <= 0.0:
            return None
        ratio = incorrect / correct
        if not math.isfinite(ratio):  # a correct length near 0 (e.g. 1e-320): no usable ratio
            return None
        short, long = self._short.add(ratio), self._long.add(ratio)
        if short is None and long is None:
            return None  # no trend can be tested before a window is full
        return self._reading(short, long)

    def _reading(self, short: SlopeTest | None, long: SlopeTest | None) -> Reading:
        thr = self.params.max_ratio
        for test, is_long in ((short, False), (long, True)):
            if test is not None and test.rising and test.fitted_end > thr:
                return Reading(True, self.RATIO, test.fitted_end, thr, self._detail(test, is_long, thr))
        shown = long if long is not None else short
        return Reading(
            False,
            self.RATIO,
            shown.fitted_end,
            thr,  # type: ignore[union-attr]  # one is not None
            "slope not significant or fitted ratio within the limit",
        )

    def _block_readings(self, block: Block) -> BlockReadings:
        correct, incorrect = block.finite(LENGTH_CORRECT_MEAN), block.finite(LENGTH_INCORRECT_MEAN)
        usable = ~np.isnan(correct) & ~np.isnan(incorrect) & (correct > 0.0)
        with np.errstate(over="ignore"):
            ratio = incorrect / np.where(usable, correct, 1.0)
        at = np.flatnonzero(usable & np.isfinite(ratio))
        ratio = ratio[at]
        p = self.params
        short = _trend_series(
            self._short.values,
            ratio,
            p.noise_window + p.trend_window,
            lambda rows: slope_tests(rows, p.trend_window, p.critical_z),
        )
        long = _trend_series(
            self._long.values, ratio, p.long_min_window, lambda rows: trend_tests(rows, p.long_critical_z)
        )
        n = len(ratio)
        tests = (short.aligned(n), long.aligned(n))
        ok = tests[0][0] | tests[1][0]
        violated = np.zeros(n, dtype=bool)
        for has, rising, fitted in tests:
            violated |= has & rising & (fitted > p.max_ratio)
        kept = np.flatnonzero(ok)
        return BlockReadings(
            at[kept], violated[kept], lambda k: self._reading(short.test(int(kept[k])), long.test(int(kept[k])))
        )

    def _detail(self, test: SlopeTest, long: bool, thr: float) -> str:
        p = self.params
        window, critical = (test.observations, p.long_critical_z) if long else (p.trend_window, p.critical_z)
        noise = "AR(1) noise fitted around the line" if long else "AR(1) noise fitted to the observations before them"
        return (
            f"incorrect/correct length ratio rises {_fmt(test.slope)} per observation over the last "
            f"{window} (least-squares slope {test.z:.3g} standard errors above 0 > {critical:g}, "
            f"{noise}) and its fitted value {_fmt(test.fitted_end)} > {thr:g}"
        )


class _TrendSeries:
    """One slope test over a block's observations (``_trend_series``): its results for the
    observations from ``first`` on (the earlier ones filled its window)."""

    def __init__(self, first: int, tests: list[Any]):
        self.first = first
        self._tests = tests
        self._where = [(i, j) for i, t in enumerate(tests) for j in range(len(t.ok))]  # (batch, row) per observation

    def aligned(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(tested, rising, fitted_end)`` for each of the block's ``n`` observations."""
        tested, rising, fitted = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), np.zeros(n)
        if self._tests:
            tested[self.first :] = np.concatenate([t.ok for t in self._tests])
            rising[self.first :] = np.concatenate([t.rising for t in self._tests])
            fitted[self.first :] = np.concatenate([t.fitted_end for t in self._tests])
        return tested, rising, fitted

    def test(self, k: int) -> SlopeTest | None:
        """The test at the block's k-th observation (None: not tested there)."""
        if k < self.first:
            return None
        i, j = self._where[k - self.first]
        return self._tests[i].at(j)


def _trend_series(held: Any, values: np.ndarray, need: int, kernel: Callable[[np.ndarray], Any]) -> _TrendSeries:
    """Append ``values`` to ``held`` (a trend's deque of observations) and run ``kernel`` on the
    window of each observation from the first at which ``need`` are held, batched (``_row_results``):
    the same tests as adding them one by one."""
    k = 0
    while k < len(values) and len(held) + 1 < need:  # the window filling: no test yet
        held.append(float(values[k]))
        k += 1
    rest = values[k:]
    seq, spans = _windows(held, rest, held.maxlen)
    held.extend(rest[-held.maxlen :].tolist())
    return _TrendSeries(k, _row_results(seq, spans, kernel))
