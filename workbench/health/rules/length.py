"""Health rules — Length: truncation and the incorrect/correct length gap."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from ..columns import Block
from ..trend import SlopeTest, WindowTrend, slope_tests
from .base import (
    LEN_CORRECT,
    LEN_INCORRECT,
    MAX_NOISE_WINDOW,
    TRUNCATED_FRAC,
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
