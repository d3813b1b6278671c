"""Health rules — Reward and learning signal: a reward collapse, groups with no signal."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from itertools import accumulate
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from pydantic import Field, model_validator

from workbench.metrics.names import BATCH_ZERO_STD_FRAC, REWARD_MEAN, REWARD_VERIFY_TIMEOUT_FRAC

from ..columns import Block
from ..trend import mean_shift_se
from .base import (
    MAX_NOISE_WINDOW,
    NOISE_Z,
    BlockReadings,
    HealthRule,
    Reading,
    StreakParams,
    _Above,
    _fmt,
    _observations,
    _register,
    _row_results,
    _warm_up,
    _windows,
    finite_value,
)

# --------------------------------------------------------------------------------------------
# Reward and learning signal
# --------------------------------------------------------------------------------------------


class RewardCollapseParams(StreakParams):
    patience: int = Field(default=4, ge=1)
    """Consecutive observations the condition must hold before the rule fires (1 = at once)."""

    window: int = Field(default=20, ge=1)
    """Running reward = mean of the last ``window`` observations of reward/mean (20, not 5, since #49:
    under strong autocorrelation a 5-step mean is one noisy draw; see ``noise_z``)."""

    margin: float = Field(default=0.2, gt=0.0)
    """Fires when the running reward is more than ``margin`` (reward units) below its best ..."""

    noise_z: float = Field(default=NOISE_Z, ge=0.0)
    """... and more than ``noise_z`` standard errors below the mean of the ``noise_window`` steps
    before the running window (the noise margin; 0 switches it off). Calibrated by simulation, not
    a normal quantile, on the measured trade-off curve (docs/metrics.md, tests/health/test_trend_power.py):
    at most 5% of flat 200- and 500-step runs fire for lag-1 autocorrelation 0 to 0.95 (noise sd
    0.08), and a reward falling 0.3 within 20 steps is caught in 100% of runs at φ ≤ 0.5, ~90% at
    φ 0.8 and 75-90% at φ 0.9-0.95. No window and critical value reached ≥ 95% at φ 0.8 with ≤ 5%
    false alarms at φ 0.95: the noise of a 0.95-autocorrelated reward wanders as far as the drop."""

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
    watches = (REWARD_MEAN,)
    consequence = "Reward collapse: training is undoing its progress (check lr, clipping, entropy)."

    @property
    def min_observations(self) -> int:
        return self.params.noise_window + self.params.window

    def _reset_state(self) -> None:
        p = self.params
        self._values: deque[float] = deque(maxlen=p.max_noise_window + p.window)
        self._best = -math.inf
        self._reference: float | None = None
        self._standard_error = math.nan

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:
        x = finite_value(metrics, REWARD_MEAN)
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
            metric=REWARD_MEAN,
            value=running,
            threshold=thr,
            detail=(
                f"running {REWARD_MEAN} (mean of {p.window}) = {_fmt(running)} is more than {p.margin:g} below its "
                f"best {_fmt(best)} and more than {p.noise_z:g} standard errors "
                f"({_fmt(standard_error)} each) below the mean {_fmt(reference)} of the "
                f"{p.noise_window} observations before it"
            ),
        )

    def _block_readings(self, block: Block) -> BlockReadings:
        p = self.params
        at, x = _observations(block, REWARD_MEAN)
        k = _warm_up(self, REWARD_MEAN, x, lambda: len(self._values) + 1 < p.noise_window + p.window)
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
        return BlockReadings(
            at,
            running < threshold,
            lambda i: self._reading(float(running[i]), float(best[i]), float(reference[i]), float(standard_error[i])),
        )


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
    watches = (BATCH_ZERO_STD_FRAC,)
    consequence = (
        "No learning signal: most groups have zero-variance rewards and zero advantage "
        "(DAPO [1] dynamic sampling, or harder/easier prompts)."
    )


class VerifierTimeoutsParams(StreakParams):
    patience: int = Field(default=1, ge=1)
    """Consecutive observations the condition must hold before the rule fires (1 = at once: the running
    mean already spans ``window`` steps)."""

    window: int = Field(default=10, ge=1)
    """The running share = mean of the last ``window`` observations of reward/verify_timeout_frac,
    evaluated once it has them ..."""

    max_frac: float = Field(default=0.01, ge=0.0, le=1.0)
    """... fires when it is above this: more than 1 reward in 100 of those steps was a timeout's 0, not the
    verifier's judgement (a realised share, not an estimated rate). One timeout in a 128-completion batch
    (0.0078, what a loaded CPU gives now and then) moves a 10-step mean by 0.00078: it never fires on its
    own. Simulated (tests/health/test_verifier_timeouts.py, binomial timeouts in 128-completion batches,
    2,000 runs a case): no alarm in 500-step runs at 1e-3 per completion (~90x the rate measured on this
    CPU under load, 3 in 265,000); a step to 3% caught in every run, 0-8 steps after it (median 3); a linear
    drift from 0 to 5% over 200 steps caught in every run, 20-65 steps after it starts (median 40; the
    rate passes 1% at 40). A steady 0.5% realises a 10-step window above 1% in 57% of 200-step runs."""


@_register
class VerifierTimeouts(HealthRule):
    """Verifier timeouts: a material share of rewards were a timeout's 0, not a judgement.

    Symptom: the answer verifier has a wall-clock limit per completion (``reward.timeout_s``); an
    answer it could not judge in time is scored incorrect. A few are harmless (one in a batch on a
    busy CPU); a sustained share means the reward is no longer the verifier's judgement, biased
    down by that share times the accuracy, and two runs of one run key can log different numbers.
    The running share is a ``window``-observation mean of ``reward/verify_timeout_frac``.
    [MV] Math-Verify's ``parse``/``verify`` take a time limit and, by default, swallow its expiry (an empty
    parse, "not equal"), so without this count a timeout reads as a wrong answer; one such timeout is
    the likely reason two staleness runs of one run key diverged (docs/findings.md, staleness).
    """

    name = "verifier_timeouts"
    summary = (
        "more than 1% of the last 10 steps' training rewards were a verifier timeout's 0 (reward.timeout_s), "
        "not the verifier's judgement"
    )
    Params = VerifierTimeoutsParams
    watches = (REWARD_VERIFY_TIMEOUT_FRAC,)
    consequence = (
        "Verifier timeouts: rewards are not the verifier's judgement (raise reward.timeout_s, or "
        "give the verifier workers more CPU)."
    )

    @property
    def min_observations(self) -> int:
        return self.params.window

    def _reset_state(self) -> None:
        self._values: deque[float] = deque(maxlen=self.params.window)

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:
        x = finite_value(metrics, REWARD_VERIFY_TIMEOUT_FRAC)
        if x is None:
            return None
        self._values.append(x)
        if len(self._values) < self.params.window:
            return None  # a shorter mean is one batch's luck: two timeouts in the first batch would read 0.016
        return self._reading(math.fsum(self._values) / len(self._values))

    def _reading(self, running: float) -> Reading:
        p = self.params
        return Reading(
            violated=running > p.max_frac,
            metric=REWARD_VERIFY_TIMEOUT_FRAC,
            value=running,
            threshold=p.max_frac,
            detail=(
                f"running {REWARD_VERIFY_TIMEOUT_FRAC} (mean of the last {p.window}) = {_fmt(running)} > {p.max_frac:g}"
            ),
        )

    def _block_readings(self, block: Block) -> BlockReadings:
        at, x = _observations(block, REWARD_VERIFY_TIMEOUT_FRAC)
        if not len(x):
            return BlockReadings.none()
        window = self.params.window
        seq, spans = _windows(self._values, x, window)
        self._values.extend(x[-window:].tolist())
        full = spans[:, 1] - spans[:, 0] == window  # evaluated once the window is full, as update()
        at, spans = at[full], spans[full]
        # each window's mean by fsum, as update() takes it, so the two forms agree to the last bit
        running = np.array([math.fsum(seq[a:b]) / window for a, b in spans.tolist()])
        return BlockReadings(at, running > self.params.max_frac, lambda k: self._reading(float(running[k])))
