"""Trend and noise-margin tests for health rules, valid under autocorrelated step noise.

Step metrics are autocorrelated: a metric averaged over a batch moves with the policy, so the
noise around its level at step t is correlated with that at t-1 (lag-1 autocorrelation φ).
Tests that assume independent steps then see trends and drops in noise: an OLS slope over a
12-step window with its ordinary standard error, at one-sided level 0.002 and 3 consecutive
firings, fired on 1.8% / 16% / 52% / 93% of flat 200-step runs at φ = 0 / 0.3 / 0.5 / 0.7
(issue #29). Newey–West (HAC) standard errors do not fix it in a window this short: the critical
value the HAC t needs for a 5% per-run false-alarm rate went from 5.0 (φ = 0) to 12.8 (φ = 0.8)
(Bartlett kernel, 2 lags, 12-step window; 2,000 simulated runs per φ while fixing #29), i.e.
the window holds too few points to see its own correlation.

So the noise is estimated from a longer stretch than the window it judges, and the stretch grows
with the run: AR(1) noise at φ = 0.8 has a correlation time of about 9 steps, so 40–60 observations
hold only ~7 independent ones and its fitted variance and φ have heavy tails. A critical value that
keeps those tails quiet was too high to catch a planted failure in 95% of runs (80% for a reward
collapse, 92% for a length drift, while fixing #29). Fitting the noise to every observation before
the window, up to a cap (150 by default), keeps the false alarms at or below 3% (2.8% for
``reward_collapse`` at φ = 0.8, 400 runs; 0–0.8% otherwise) and catches both in at least 96%
(tests/health/test_false_alarms_autocorrelated.py, docs/metrics.md). A learning curve that bends
within that stretch inflates the fitted variance (the fit is around a line), which makes the tests
more conservative, never less.

* ``slope_z``: the least-squares slope over the last ``window`` observations, divided by its
  standard error under AR(1) noise, with the AR(1) variance and φ fitted to the ``history``
  observations *before* the window (detrended by a line; φ bias-corrected for the short sample).
  The exact variance of an OLS slope under AR(1) noise is ``σ² x'P(φ)x / (x'x)²`` with
  ``P_ij = φ^|i-j|`` and x the centred observation index. Using the observations before the
  window keeps a trend that starts inside the window out of its own noise estimate. The critical
  value is calibrated by simulation (tests/health/test_false_alarms.py), not read from a t table:
  the estimated φ is uncertain, so the statistic has heavier tails than a normal.
* ``mean_shift_se``: the standard error of the difference between the mean of ``reference``
  observations and the mean of the ``window`` observations right after them, under AR(1) noise
  fitted (as above) to a history: ``√(σ² · (f(φ, k) + f(φ, m) − 2 c(φ, k, m)))`` with
  ``f(φ, k) = Σ_{|h|<k} (k − |h|) φ^|h| / k²`` (the variance of a k-step mean of a stationary AR(1)
  series per unit marginal variance) and ``c(φ, k, m) = φ(1 − φ^k)(1 − φ^m) / ((1 − φ)² k m)`` (the
  covariance of the two adjacent means). ``reward_collapse`` judges its running reward against the
  mean of the steps before it with it. Comparing against the *best* running reward instead (this
  rule's first form) measures from a maximum, which noise biases up by about two standard errors
  over a run and which has to be paid for with a larger noise margin.

Both take arrays with any leading axes (a batch of runs in the simulations, or of a run's steps in
the whole-history recheck) and work along the last axis; the rules call them on one row. Cost per
call is O(history + window) numpy operations.

Every result of a row is the same, bit for bit, whatever the batch around it: only elementwise
operations (exactly rounded in any loop numpy picks) and sums along the last axis (numpy's pairwise
sum over each row) are used; no matrix products (BLAS may block a batch differently from one row)
and no ``**`` (a vectorised ``pow`` may round differently from the scalar one): integer powers
are running products. So a rule judged step by step and the same rule judged over a run's whole
history at once (health/columns.py) give the same numbers, hence the same events.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ExpandingTrend",
    "SlopeTest",
    "WindowTrend",
    "ar1_mean_shift_variance_factor",
    "ar1_mean_variance_factor",
    "ar1_noise",
    "ar1_slope_variance_factor",
    "mean_shift_se",
    "running_mean_se",
    "separated_means_se",
    "slope_tests",
    "slope_z",
    "trend_tests",
    "trend_z",
]

MAX_PHI = 0.95  # cap on the fitted autocorrelation: the variance factor grows without bound at 1


def _centred_index(n: int) -> np.ndarray:
    return np.arange(n, dtype=float) - (n - 1) / 2


def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``Σ a·b`` along the last axis, row by row (batch-invariant, unlike ``@``: module docstring)."""
    return np.sum(a * b, axis=-1)


def _powers(phi: np.ndarray | float, n: int) -> np.ndarray:
    """``φ^1 .. φ^n`` along a new last axis, as running products (batch-invariant, unlike ``**``)."""
    phi = np.asarray(phi, dtype=float)
    return np.multiply.accumulate(np.broadcast_to(phi[..., None], (*phi.shape, n)), axis=-1)


def ar1_slope_variance_factor(phi: np.ndarray | float, window: int) -> np.ndarray:
    """``x'P(φ)x / (x'x)²``: the OLS slope's variance over ``window`` equally spaced points per
    unit noise variance, under AR(1) noise with autocorrelation ``phi`` (1/(x'x) at φ = 0)."""
    x = _centred_index(window)
    sxx = float(_dot(x, x))
    lagged = np.array([_dot(x[k:], x[:-k]) for k in range(1, window)])  # Σ_i x_i x_{i+k}
    return (sxx + 2.0 * _dot(_powers(phi, window - 1), lagged)) / sxx**2


def ar1_noise(history: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(variance, φ)`` of AR(1) noise around a line, fitted to ``history`` (last axis, n >= 6).

    Removing a fitted line biases the lag-1 autocorrelation down by about (2 + 4φ)/n and the
    variance down by about the variance of the mean (Kendall's and Bartlett's first-order
    corrections); both are corrected, and φ is clipped to [0, ``MAX_PHI``].
    """
    n = history.shape[-1]
    x = _centred_index(n)
    centred = history - history.mean(axis=-1, keepdims=True)
    slope = _dot(centred, x) / _dot(x, x)
    residual = centred - slope[..., None] * x
    ss = _dot(residual, residual)
    lag1 = _dot(residual[..., 1:], residual[..., :-1])
    with np.errstate(invalid="ignore", divide="ignore"):
        raw_phi = np.where(ss > 0, lag1 / ss, 0.0)
    phi = np.clip((n * raw_phi + 2.0) / (n - 4.0), 0.0, MAX_PHI)
    variance = ss / (n - 2) * (1.0 + 2.0 * phi / (n * (1.0 - phi)))
    return variance, phi


def slope_z(window_values: np.ndarray, history: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(slope, z, fitted_end)`` of the OLS line over ``window_values`` (last axis), z being the
    slope over its standard error under the AR(1) noise fitted to ``history`` (the observations
    just before the window). z is +inf for a rising window after a noiseless history, 0 when flat.
    """
    return _line_z(window_values, history)


def _line_z(values: np.ndarray, noise_from: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(slope, z, fitted_end)`` of the OLS line over ``values``, z under the AR(1) noise fitted to
    ``noise_from`` (+inf for a rising line with no noise, 0 when flat)."""
    n = values.shape[-1]
    x = _centred_index(n)
    mean = values.mean(axis=-1)
    slope = _dot(values - mean[..., None], x) / _dot(x, x)
    variance, phi = ar1_noise(noise_from)
    se = np.sqrt(variance * ar1_slope_variance_factor(phi, n))
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(se > 0, slope / np.where(se > 0, se, 1.0), np.sign(slope) * np.inf)
    z = np.where(slope == 0, 0.0, z)
    return slope, z, mean + slope * x[-1]


def ar1_mean_variance_factor(phi: np.ndarray | float, window: int) -> np.ndarray:
    """``Σ_{|h|<k} (k − |h|) φ^|h| / k²`` for k = ``window``: the variance of a k-observation mean
    per unit noise variance, under AR(1) noise with autocorrelation ``phi`` (1/k at φ = 0)."""
    lags = np.arange(1, window, dtype=float)
    return (window + 2.0 * _dot(_powers(phi, window - 1), window - lags)) / window**2


def running_mean_se(history: np.ndarray, window: int) -> np.ndarray:
    """Standard error of a ``window``-observation mean under the AR(1) noise fitted to ``history``
    (last axis, at least 6 observations; see the module docstring)."""
    variance, phi = ar1_noise(history)
    return np.sqrt(variance * ar1_mean_variance_factor(phi, window))


def ar1_mean_shift_variance_factor(phi: np.ndarray | float, window: int, reference: int) -> np.ndarray:
    """Variance of ``mean(reference observations) − mean(the window observations right after
    them)`` per unit noise variance under AR(1) noise with autocorrelation ``phi`` (< 1):
    ``f(φ, window) + f(φ, reference) − 2 c`` with ``c = φ(1 − φ^w)(1 − φ^m) / ((1 − φ)² w m)``."""
    phi = np.asarray(phi, dtype=float)
    powers = _powers(phi, max(window, reference))
    covariance = (
        phi
        * (1.0 - powers[..., window - 1])
        * (1.0 - powers[..., reference - 1])
        / ((1.0 - phi) * (1.0 - phi) * window * reference)
    )
    return ar1_mean_variance_factor(phi, window) + ar1_mean_variance_factor(phi, reference) - 2.0 * covariance


def mean_shift_se(history: np.ndarray, window: int, reference: int) -> np.ndarray:
    """Standard error of ``mean(reference) − mean(window)`` for ``reference`` observations followed
    by ``window`` observations, under the AR(1) noise fitted to ``history`` (last axis, >= 6)."""
    variance, phi = ar1_noise(history)
    return np.sqrt(variance * ar1_mean_shift_variance_factor(phi, window, reference))


def separated_means_se(history: np.ndarray, window: int, reference: int) -> np.ndarray:
    """Standard error of ``mean(window) − mean(reference)`` for two stretches of ``window`` and
    ``reference`` observations that need not be adjacent (a run's first steps and its latest ones),
    under the AR(1) noise fitted to ``history`` (last axis, >= 6): ``√(σ² (f(φ, w) + f(φ, m)))``.
    Their covariance (positive under φ > 0, and largest when adjacent) is left out, which overstates
    the standard error, never understates it."""
    variance, phi = ar1_noise(history)
    return np.sqrt(variance * (ar1_mean_variance_factor(phi, window) + ar1_mean_variance_factor(phi, reference)))


@dataclass(frozen=True, slots=True)
class SlopeTest:
    """A least-squares fit over the window and its one-sided test of ``slope > 0``."""

    slope: float  # per observation
    z: float  # slope / its standard error under the AR(1) noise of the history
    fitted_end: float  # the fitted line at the newest observation
    rising: bool  # z > critical
    observations: int = 0  # the observations the test read (history and window)


@dataclass(frozen=True)
class SlopeTests:
    """The :class:`SlopeTest` of each row of a batch, as arrays (``ok`` False: no line can be fitted)."""

    ok: np.ndarray
    slope: np.ndarray
    z: np.ndarray
    fitted_end: np.ndarray
    rising: np.ndarray
    observations: int = 0  # every row's length

    def at(self, i: int) -> SlopeTest | None:
        if not self.ok[i]:
            return None
        return SlopeTest(
            slope=float(self.slope[i]),
            z=float(self.z[i]),
            fitted_end=float(self.fitted_end[i]),
            rising=bool(self.rising[i]),
            observations=self.observations,
        )


def _scaled_tests(
    rows: np.ndarray, critical: float, kernel: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]
) -> SlopeTests:
    """``kernel`` (slope, z, fitted end) over 2-D ``rows``, each rescaled to [-1, 1] around its
    mean first (no overflow in the sums of squares); a row whose spread exceeds the float range
    cannot be fitted (``ok`` False), a constant row is flat (z = 0)."""
    k = rows.shape[0]
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow means "cannot be fitted"
        centre = rows.mean(axis=-1)
        spread = np.max(np.abs(rows - centre[:, None]), axis=-1)
    scale = np.where(np.isfinite(centre), spread, np.inf)
    ok = np.isfinite(scale)
    slope, z, fitted_end = np.zeros(k), np.zeros(k), centre.copy()
    fit = np.flatnonzero(ok & (scale != 0.0))
    if len(fit):
        c, s = centre[fit], scale[fit]
        unit_slope, unit_z, unit_fitted = kernel((rows[fit] - c[:, None]) / s[:, None])  # in [-1, 1]
        slope[fit] = unit_slope * s
        z[fit] = unit_z
        fitted_end[fit] = c + unit_fitted * s
    return SlopeTests(
        ok=ok, slope=slope, z=z, fitted_end=fitted_end, rising=ok & (z > critical), observations=rows.shape[1]
    )


def slope_tests(rows: np.ndarray, window: int, critical: float) -> SlopeTests:
    """:class:`WindowTrend`'s test of each row (2-D: rows of equal length): the slope over its last
    ``window`` values against the AR(1) noise of the values before them (see ``_scaled_tests``)."""
    split = rows.shape[1] - window
    return _scaled_tests(rows, critical, lambda unit: slope_z(unit[:, split:], unit[:, :split]))


def trend_z(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(slope, z, fitted_end)`` of the OLS line over ``values`` (last axis, >= 6), z being the
    slope over its standard error under AR(1) noise fitted to the residuals of that same line
    (``ar1_noise``): the trend is removed before the noise is measured, so a drift does not
    inflate its own yardstick (the test :class:`ExpandingTrend` makes; module docstring)."""
    return _line_z(values, values)


def trend_tests(rows: np.ndarray, critical: float) -> SlopeTests:
    """:class:`ExpandingTrend`'s test of each row (2-D: rows of equal length): ``trend_z`` over the
    whole row (see ``_scaled_tests``)."""
    return _scaled_tests(rows, critical, trend_z)


class ExpandingTrend:
    """The last ``max_window`` observations; once at least ``min_window`` are held, tests the OLS
    slope over all of them against AR(1) noise fitted to that line's own residuals (``trend_z``).

    The window expands from ``min_window`` to ``max_window`` and then slides, so a slow drift is
    judged over up to ``max_window`` steps (a 16-step window saw a ratio rising 1.0 over 150 steps
    move 0.1 inside it: 2.5-40% caught) and the noise is measured around the fitted line, not on
    the steps before the window, which contain the drift's start (module docstring)."""

    def __init__(self, min_window: int, max_window: int, critical: float):
        if min_window < 6:
            raise ValueError(f"a trend needs at least 6 observations to fit its noise, got {min_window}")
        if max_window < min_window:
            raise ValueError(f"the trend's maximum window {max_window} is below its minimum {min_window}")
        self.min_window = min_window
        self.critical = critical
        self._values: deque[float] = deque(maxlen=max_window)

    def __len__(self) -> int:
        return len(self._values)

    @property
    def values(self) -> deque[float]:
        """The observations held (the last ``max_window``)."""
        return self._values

    def add(self, value: float) -> SlopeTest | None:
        """Append finite ``value``; the test once ``min_window`` observations are held, else ``None``
        (also ``None`` when their spread exceeds the float range: no line can be fitted)."""
        self._values.append(value)
        if len(self._values) < self.min_window:
            return None
        row = np.fromiter(self._values, dtype=float, count=len(self._values))[None, :]
        return trend_tests(row, self.critical).at(0)


class WindowTrend:
    """The last ``max_history + window`` observations; tests the slope over the last ``window`` of
    them against the noise of all observations before the window, once there are at least
    ``history`` of them (``window >= 3``, ``6 <= history <= max_history``)."""

    def __init__(self, window: int, history: int, critical: float, max_history: int | None = None):
        max_history = history if max_history is None else max_history
        if window < 3:
            raise ValueError(f"a trend window needs at least 3 observations, got {window}")
        if history < 6:
            raise ValueError(f"a noise history needs at least 6 observations, got {history}")
        if max_history < history:
            raise ValueError(f"the noise history cap {max_history} is below its minimum {history}")
        self.window = window
        self.history = history
        self.critical = critical
        self._values: deque[float] = deque(maxlen=max_history + window)

    def __len__(self) -> int:
        return len(self._values)

    @property
    def values(self) -> deque[float]:
        """The observations held (the last ``max_history + window``)."""
        return self._values

    def clear(self) -> None:
        self._values.clear()

    def add(self, value: float) -> SlopeTest | None:
        """Append finite ``value``; the test once ``history + window`` observations are held, else
        ``None`` (also ``None`` when their spread exceeds the float range: no line can be fitted)."""
        self._values.append(value)
        if len(self._values) < self.history + self.window:
            return None
        row = np.fromiter(self._values, dtype=float, count=len(self._values))[None, :]
        return slope_tests(row, self.window, self.critical).at(0)
