"""Autocorrelated noise and the trend rules' decisions over whole batches of runs, vectorised.

``ar1`` draws AR(1) streams; ``block_bootstrap`` resamples a real run's detrended metric history
(tests/health/data/). ``length_gap_first_fire`` and ``reward_collapse_first_fire`` apply the
default ``incorrect_length_gap`` and ``reward_collapse`` decisions to a (runs × steps) array with
the very functions the rules call (health/trend.py), so hundreds of 200-step runs take
milliseconds; test_false_alarms_autocorrelated.py checks they agree with the rule objects.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.health.rules import HEALTH_RULES
from workbench.health.trend import mean_shift_se, separated_means_se, slope_z, trend_z

REAL_HISTORY = Path(__file__).parent / "data" / "sanity_seed0_steps.csv"
NEVER = -1  # first-firing step of a run that never fired


def ar1(rng: np.random.Generator, runs: int, steps: int, phi: float, sd: float) -> np.ndarray:
    """``runs`` stationary AR(1) streams with lag-1 autocorrelation ``phi`` and marginal sd ``sd``."""
    innovations = rng.standard_normal((runs, steps)) * sd * math.sqrt(1.0 - phi * phi)
    x = np.empty((runs, steps))
    x[:, 0] = rng.standard_normal(runs) * sd
    for t in range(1, steps):
        x[:, t] = phi * x[:, t - 1] + innovations[:, t]
    return x


def smooth_trend(values: np.ndarray, degree: int = 3) -> np.ndarray:
    """A cubic least-squares fit over the run: the learning curve, without the step noise."""
    t = np.linspace(-1.0, 1.0, len(values))
    return np.polynomial.Polynomial.fit(t, values, degree)(t)


def block_bootstrap(rng: np.random.Generator, residuals: np.ndarray, runs: int, steps: int, block: int) -> np.ndarray:
    """``runs`` series of ``steps`` made of random contiguous ``block``-long stretches of
    ``residuals`` (moving-block bootstrap: keeps the autocorrelation within a block)."""
    starts = rng.integers(0, len(residuals) - block + 1, size=(runs, -(-steps // block)))
    index = (starts[..., None] + np.arange(block)).reshape(runs, -1)[:, :steps]
    return residuals[index]


def real_history() -> pd.DataFrame:
    return pd.read_csv(REAL_HISTORY)


def _first_streak_end(violated: np.ndarray, patience: int, first_step: int) -> np.ndarray:
    """Per run, the step at which ``patience`` consecutive violations first complete (``NEVER``)."""
    runs, n = violated.shape
    counts = np.zeros(runs, dtype=int)
    first = np.full(runs, NEVER)
    for j in range(n):  # n <= steps: a loop over steps, vectorised over runs
        counts = np.where(violated[:, j], counts + 1, 0)
        newly = (counts == patience) & (first == NEVER)
        first[newly] = first_step + j
    return first


def length_gap_first_fire(ratio: np.ndarray, **params) -> np.ndarray:
    """First firing step of ``incorrect_length_gap`` (default params unless overridden) on each row of ``ratio``:
    the short test (slope over ``trend_window`` against the noise of the steps before it) or the long one
    (slope over the last ``long_min_window``..``long_window`` values against the noise around that line)."""
    p = HEALTH_RULES.get("incorrect_length_gap").Params(**params)
    w, short_first = p.trend_window, p.noise_window + p.trend_window - 1
    first_step = min(short_first, p.long_min_window - 1)
    violated = np.zeros((len(ratio), ratio.shape[1] - first_step), dtype=bool)
    for j, end in enumerate(range(first_step, ratio.shape[1])):  # a loop over steps, vectorised over runs
        if end >= p.long_min_window - 1:
            _, z, fitted_end = trend_z(ratio[:, max(0, end + 1 - p.long_window) : end + 1])
            violated[:, j] |= (z > p.long_critical_z) & (fitted_end > p.max_ratio)
        if end >= short_first:
            history = ratio[:, max(0, end + 1 - w - p.max_noise_window) : end + 1 - w]  # all before, up to the cap
            _, z, fitted_end = slope_z(ratio[:, end + 1 - w : end + 1], history)
            violated[:, j] |= (z > p.critical_z) & (fitted_end > p.max_ratio)
    return _first_streak_end(violated, p.patience, first_step=first_step)


def reward_collapse_first_fire(reward: np.ndarray, **params) -> np.ndarray:
    """First firing step of ``reward_collapse`` (default params unless overridden) on each row of ``reward``."""
    p = HEALTH_RULES.get("reward_collapse").Params(**params)
    w, m = p.window, p.noise_window
    cumulative = np.concatenate([np.zeros((len(reward), 1)), np.cumsum(reward, axis=1)], axis=1)
    running = (cumulative[:, w:] - cumulative[:, :-w]) / w  # running[:, j] ends at step j + w - 1
    best = np.maximum.accumulate(running, axis=1)
    first_step = w - 1 + m
    runs, evaluations = len(reward), reward.shape[1] - first_step
    violated = np.zeros((runs, evaluations), dtype=bool)
    reference, se = np.full(runs, np.nan), np.full(runs, np.nan)
    for j, end in enumerate(range(first_step, reward.shape[1])):
        r, b = running[:, end - w + 1], best[:, end - w + 1]
        remeasure = np.isnan(se) | (r >= b - p.margin)  # frozen inside a candidate drop, as the rule
        before = reward[:, max(0, end + 1 - w - p.max_noise_window) : end + 1 - w]
        reference = np.where(remeasure, before[:, -m:].mean(axis=1), reference)
        se = np.where(remeasure, mean_shift_se(before, w, m), se)
        noise_limit = reference - p.noise_z * se if p.noise_z > 0 else np.inf  # noise_z 0: margin only
        violated[:, j] = r < np.minimum(b - p.margin, noise_limit)
    return _first_streak_end(violated, p.patience, first_step=first_step)


def mismatch_growth_first_fire(kl: np.ndarray, **params) -> np.ndarray:
    """First firing step of ``mismatch_growth`` (default params unless overridden) on each row of ``kl``:
    the mean of the last ``window`` values above ``max(max_multiple × the mean of the first
    ``baseline_steps``, min_kl)`` and their mean log more than ``noise_z`` standard errors above the
    baseline's (``separated_means_se`` of the log KL before the window, re-measured only while the level
    is within its limit), for ``patience`` consecutive steps."""
    p = HEALTH_RULES.get("mismatch_growth").Params(**params)
    b, w = p.baseline_steps, p.window
    logs = np.log(np.maximum(kl, p.min_kl * 1e-3))
    base, log_base = kl[:, :b].mean(axis=1), logs[:, :b].mean(axis=1)
    limit = np.maximum(p.max_multiple * base, p.min_kl)
    first_step = b + w - 1
    violated = np.zeros((len(kl), kl.shape[1] - first_step), dtype=bool)
    se = np.full(len(kl), np.nan)
    for j, end in enumerate(range(first_step, kl.shape[1])):
        start = end + 1 - w
        above = kl[:, start : end + 1].mean(axis=1) > limit
        remeasure = np.isnan(se) | ~above  # frozen while the level is above its limit, as the rule
        se = np.where(remeasure, separated_means_se(logs[:, max(0, start - p.max_noise_window) : start], w, b), se)
        shift = logs[:, start : end + 1].mean(axis=1) - log_base
        violated[:, j] = above & ((shift > p.noise_z * se) if p.noise_z > 0 else True)
    return _first_streak_end(violated, p.patience, first_step=first_step)
