"""Health rules — Sampler/learner mismatch: spikes, the peers' bands, the tail, growth."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from pydantic import Field, model_validator

from workbench.metrics.names import (
    MISMATCH_CHI2_TOKEN,
    MISMATCH_ESS,
    MISMATCH_IS_RATIO_MEAN,
    MISMATCH_IS_RATIO_STD,
    MISMATCH_IS_RATIO_TAIL_FRAC,
    MISMATCH_KL,
    MISMATCH_KL_K1,
    MISMATCH_PROB_ABS_DIFF_MAX,
    MISMATCH_TOKEN_MULT_PROB_ERROR,
)

from ..columns import Block
from ..trend import separated_means_se
from .base import (
    MAX_NOISE_WINDOW,
    BlockReadings,
    HealthRule,
    Reading,
    StreakParams,
    _Above,
    _fmt,
    _observations,
    _register,
    _row_results,
    _stateless,
    _warm_up,
    _windows,
    finite_value,
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
    watches = (MISMATCH_PROB_ABS_DIFF_MAX, MISMATCH_KL)
    consequence = (
        "Sampler/learner mismatch: training is silently off-policy "
        "(Yao et al. [4]; enable an IS correction such as tis, align dtypes/kernels)."
    )

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:
        readings: list[Reading] = []
        for key, thr in (
            (MISMATCH_PROB_ABS_DIFF_MAX, self.params.max_prob_abs_diff),
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
        for key, thr in ((MISMATCH_PROB_ABS_DIFF_MAX, p.max_prob_abs_diff), (MISMATCH_KL, p.max_kl)):
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
    watches = (
        MISMATCH_IS_RATIO_MEAN,
        MISMATCH_ESS,
        MISMATCH_IS_RATIO_STD,
        MISMATCH_KL_K1,
        MISMATCH_CHI2_TOKEN,
        MISMATCH_TOKEN_MULT_PROB_ERROR,
    )
    consequence = (
        "The sampler and learner disagree beyond the published bands: check a leaked generation setting "
        "(temperature, top-k, repetition_penalty), the weight sync and the dtypes; an IS correction only "
        "bounds the damage."
    )

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:
        p = self.params
        readings: list[Reading] = []
        x = finite_value(metrics, MISMATCH_IS_RATIO_MEAN)
        if p.is_ratio_mean is not None and x is not None:
            lo, hi = p.is_ratio_mean
            thr = lo if x < lo else hi
            readings.append(
                Reading(
                    not lo <= x <= hi,
                    MISMATCH_IS_RATIO_MEAN,
                    x,
                    thr,
                    f"{MISMATCH_IS_RATIO_MEAN} = {_fmt(x)} outside [{lo:g}, {hi:g}]",
                )
            )
        for key, thr, below in (
            (MISMATCH_ESS, p.min_ess, True),
            (MISMATCH_IS_RATIO_STD, p.max_is_ratio_std, False),
            (MISMATCH_KL_K1, p.max_abs_kl_k1, False),
            (MISMATCH_CHI2_TOKEN, p.max_chi2_token, False),
            (MISMATCH_TOKEN_MULT_PROB_ERROR, p.max_token_mult_prob_error, False),
        ):
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
            x = block.finite(MISMATCH_IS_RATIO_MEAN)
            checked |= ~np.isnan(x)
            violated |= (x < lo) | (x > hi)  # not lo <= x <= hi, for a finite x
        for key, thr, below in (
            (MISMATCH_ESS, p.min_ess, True),
            (MISMATCH_IS_RATIO_STD, p.max_is_ratio_std, False),
            (MISMATCH_KL_K1, p.max_abs_kl_k1, False),
            (MISMATCH_CHI2_TOKEN, p.max_chi2_token, False),
            (MISMATCH_TOKEN_MULT_PROB_ERROR, p.max_token_mult_prob_error, False),
        ):
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

    Stale by design (``rollout.staleness`` >= 1, docs/async.md) it fires on a healthy run: the sampler is
    k versions behind, and k updates move more than 5% of tokens' probabilities by over 10%
    (sanity config, k = 2, lr 1e-4: a tail of 5.6% median, 9.3% max over 40 steps, fired at step 3; the
    synchronous run beside it 0%). There the warning measures the lag the study asked for, not a broken
    sync: read it with ``offpolicy/staleness_max`` and against the staleness-0 arm. ``mismatch_bands``,
    ``mismatch_spike`` and ``mismatch_growth`` stayed silent on that run.
    """

    name = "mismatch_tail"
    summary = "too many tokens' sampler/learner ratio is outside [0.9, 1.1]"
    Params = MismatchTailParams
    limit = "max_tail_frac"
    watches = (MISMATCH_IS_RATIO_TAIL_FRAC,)
    consequence = (
        "A share of tokens is sampled far off the learner's distribution: check the sampler's "
        "generation settings and the weight sync (with rollout.staleness >= 1 the lag itself does this: "
        "see offpolicy/staleness_max and the staleness-0 arm)."
    )


class MismatchGrowthParams(StreakParams):
    patience: int = Field(default=3, ge=1)
    """Consecutive observations the condition must hold before the rule fires."""

    baseline_steps: int = Field(default=20, ge=6)
    """The baseline is the mean mismatch/kl of the first ``baseline_steps`` observations (not checked;
    at least 6: they are the first noise history)."""

    window: int = Field(default=20, ge=1)
    """The current level is the mean mismatch/kl of the last ``window`` observations.

    20 and 20, not 10 and 10 (#29): step KL is log-normal-ish (real bf16 runs: log-sd 0.45) and may be
    autocorrelated; with 10-step means a stable KL fired in 9.5% / 17.5% of 200-step runs at log-sd
    0.6, φ 0.5 / log-sd 0.5, φ 0.8, with 20-step means 0.5% / 4.2%, for 4 more steps of detection delay
    (tests/health/test_false_alarms_autocorrelated.py)."""

    max_multiple: float = Field(default=3.0, gt=1.0)
    """Fires when the current level > this multiple of the baseline ..."""

    min_kl: float = Field(default=2e-4, gt=0.0)
    """... and > this (nats): an fp32 baseline of 1e-12 growing 100× is still no mismatch ..."""

    noise_z: float = Field(default=4.5, ge=0.0)
    """... and the mean log KL of the last ``window`` observations is more than ``noise_z`` standard
    errors above that of the baseline, under AR(1) noise fitted to the log KL of every observation
    before the window (up to ``max_noise_window``; 0 switches this margin off). The 3× level alone
    fired on 8.5-21.5% of stable runs at φ 0.9-0.95 (a 20-step mean of such a series holds about one
    independent value); with the margin at 4.5: ≤ 4% at φ ≤ 0.95, growth ×1.05/step still caught in
    ≥ 95%, median delay 33 steps at φ ≤ 0.5 and ≤ 50 at 0.95 (#49, tests/health/test_trend_power.py)."""

    max_noise_window: int = Field(default=MAX_NOISE_WINDOW, ge=6)
    """The noise is fitted to at most this many observations before the running window."""

    @model_validator(mode="after")
    def _noise_cap_covers_baseline(self) -> MismatchGrowthParams:
        if self.max_noise_window < self.baseline_steps:
            raise ValueError(
                f"max_noise_window ({self.max_noise_window}) is below baseline_steps ({self.baseline_steps})"
            )
        return self


@_register
class MismatchGrowth(HealthRule):
    """The mismatch grows: the running mean of mismatch/kl climbs to a multiple of its early level,
    by more than its noise.

    Precedes the crashes users report (NeMo-RL #1801 asks for a metric that rises first; Yao et al. [4] tie
    the collapse to a growing gap): a low-precision
    sampler on a model whose logits sharpen (the rounding error grows with their magnitude), or a weight
    sync that stopped (the gap grows with every update). A level rule fires only once the gap is large;
    this one fires on the trend, while it is still small.

    The noise margin is measured in log KL (the step KL is log-normal-ish) and, like
    ``reward_collapse``'s, only while the level is within its limit: a growth in progress does not
    widen the yardstick it is judged by. KL values are floored at ``min_kl`` / 1000 before the log
    (an exact 0 from identical engines has no log; anything that small is far below the limit).
    """

    name = "mismatch_growth"
    summary = "the sampler/learner mismatch keeps growing"
    Params = MismatchGrowthParams
    watches = (MISMATCH_KL,)
    consequence = (
        "The mismatch is growing: check the weight sync, and a low-precision sampler on a sharpening model "
        "(a higher-precision sampler, or an IS correction)."
    )

    @property
    def min_observations(self) -> int:
        return self.params.baseline_steps + self.params.window

    def _reset_state(self) -> None:
        p = self.params
        self._baseline: list[float] = []
        self._log_baseline = math.nan
        self._recent: deque[float] = deque(maxlen=p.window)
        self._logs: deque[float] = deque(maxlen=p.max_noise_window + p.window)  # log KL, baseline included
        self._standard_error = math.nan

    def _log(self, kl: float) -> float:
        return math.log(max(kl, self.params.min_kl * 1e-3))  # math.log in both paths: the same bits

    def update(self, metrics: Mapping[str, Any]) -> Reading | None:
        x = finite_value(metrics, MISMATCH_KL)
        if x is None:
            return None
        p = self.params
        self._logs.append(self._log(x))
        if len(self._baseline) < p.baseline_steps:
            self._baseline.append(x)
            if len(self._baseline) == p.baseline_steps:
                self._log_baseline = sum(self._logs) / len(self._logs)
            return None
        self._recent.append(x)
        if len(self._recent) < p.window:
            return None
        recent = np.fromiter(self._recent, dtype=float, count=len(self._recent))
        level = float(recent[None, :].mean(axis=-1)[0])  # a row mean, as observe_block takes it
        logs = np.fromiter(self._logs, dtype=float, count=len(self._logs))
        log_level = float(logs[None, -p.window :].mean(axis=-1)[0])
        if not level > self._limit()[1] or math.isnan(self._standard_error):
            # Measured only while the level is within its limit (class docstring).
            self._standard_error = float(self._noise(logs[None, : -p.window])[0])
        return self._reading(level, log_level, self._standard_error)

    def _noise(self, before: np.ndarray) -> np.ndarray:
        """For rows of log KL before the running window: the standard error of the window's mean log
        minus the baseline's."""
        p = self.params
        return separated_means_se(before, p.window, p.baseline_steps)

    def _limit(self) -> tuple[float, float]:
        """The baseline (the mean of the first observations) and the limit it sets."""
        p = self.params
        base = sum(self._baseline) / len(self._baseline)
        return base, max(p.max_multiple * base, p.min_kl)

    def _reading(self, level: float, log_level: float, standard_error: float) -> Reading:
        p = self.params
        base, thr = self._limit()
        z = (log_level - self._log_baseline) / standard_error if standard_error > 0 else math.inf
        beyond_noise = p.noise_z == 0 or z > p.noise_z
        return Reading(
            level > thr and beyond_noise,
            MISMATCH_KL,
            level,
            thr,
            f"mean {MISMATCH_KL} over the last {p.window} = {_fmt(level)} > max({p.max_multiple:g} × "
            f"initial {_fmt(base)}, {p.min_kl:g}) and its mean log is {z:.3g} standard errors above "
            f"the initial one (> {p.noise_z:g}, AR(1) noise of the log KL before the window)",
        )

    def _block_readings(self, block: Block) -> BlockReadings:
        p = self.params
        at, x = _observations(block, MISMATCH_KL)
        k = _warm_up(
            self, MISMATCH_KL, x, lambda: len(self._baseline) < p.baseline_steps or len(self._recent) + 1 < p.window
        )
        at, x = at[k:], x[k:]
        if not len(x):
            return BlockReadings.none()
        logs_new = np.array([self._log(float(v)) for v in x])
        seq, spans = _windows(self._recent, x, p.window)
        self._recent.extend(x[-p.window :].tolist())
        level = sliding_window_view(seq, p.window)[spans[:, 1] - p.window].mean(axis=-1)
        held = self._logs.maxlen or 0
        log_seq, log_spans = _windows(self._logs, logs_new, held)
        self._logs.extend(logs_new[-held:].tolist())
        log_level = sliding_window_view(log_seq, p.window)[log_spans[:, 1] - p.window].mean(axis=-1)
        above = level > self._limit()[1]
        refit = ~above
        refit[0] |= math.isnan(self._standard_error)
        fits = np.flatnonzero(refit)
        noise = _row_results(
            log_seq, np.stack([log_spans[fits, 0], log_spans[fits, 1] - p.window], axis=1), self._noise
        )
        last = np.cumsum(refit)  # each observation uses the last refit at or before it (0: the one carried in)
        standard_error = np.concatenate([[self._standard_error], *noise])[last]
        self._standard_error = float(standard_error[-1])
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(
                standard_error > 0,
                (log_level - self._log_baseline) / np.where(standard_error > 0, standard_error, 1.0),
                np.inf,
            )
        violated = above & ((z > p.noise_z) if p.noise_z > 0 else True)
        return BlockReadings(
            at, violated, lambda i: self._reading(float(level[i]), float(log_level[i]), float(standard_error[i]))
        )
