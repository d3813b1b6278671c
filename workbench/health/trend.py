"""Least-squares trend test over a bounded window of recent observations.

A rule that says a quantity is *rising* must have tested a slope, not compared two noisy points.
``WindowTrend`` keeps the last ``window`` values (equally spaced observations), fits a line by
least squares and tests ``slope > 0`` with the one-sided t test of the regression slope (the
test ``scipy.stats.linregress`` reports two-sided), at level ``alpha``. Under independent
Gaussian noise around a flat level, one evaluation is significant with probability ``alpha``.

Cost per observation is O(window) float operations; the t critical value comes from scipy once
per (alpha, window) and the p-value is only computed for a message.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from functools import cache

__all__ = ["SlopeTest", "WindowTrend", "one_sided_p", "t_critical"]


@cache
def t_critical(alpha: float, df: int) -> float:
    """One-sided critical value: ``P(T_df > t) = alpha`` (``scipy.stats.t.isf``)."""
    from scipy import stats  # deferred: scipy is only needed once a trend rule is built

    return float(stats.t.isf(alpha, df))


def one_sided_p(t: float, df: int) -> float:
    """``P(T_df > t)``: the one-sided p-value of a slope's t statistic."""
    from scipy import stats

    return float(stats.t.sf(t, df))


@dataclass(frozen=True, slots=True)
class SlopeTest:
    """A least-squares fit over the window and its one-sided test of ``slope > 0``."""

    slope: float  # per observation
    t: float  # slope / standard error; +inf for a perfect rising line, 0 for a flat one
    df: int  # window - 2
    fitted_end: float  # the fitted line at the newest observation
    rising: bool  # t > t_critical(alpha, df)


class WindowTrend:
    """The last ``window`` observations and the slope test over them (``window >= 3``)."""

    def __init__(self, window: int, alpha: float):
        if window < 3:
            raise ValueError(f"a trend window needs at least 3 observations, got {window}")
        self.window = window
        self.alpha = alpha
        self._values: deque[float] = deque(maxlen=window)
        centred = [i - (window - 1) / 2 for i in range(window)]
        self._x = centred  # observation index minus its mean
        self._sxx = math.fsum(c * c for c in centred)  # = w (w^2 - 1) / 12
        self._critical = t_critical(alpha, window - 2)

    def __len__(self) -> int:
        return len(self._values)

    def clear(self) -> None:
        self._values.clear()

    def add(self, value: float) -> SlopeTest | None:
        """Append ``value``; the test over the full window, or ``None`` until it is full."""
        self._values.append(value)
        if len(self._values) < self.window:
            return None
        ys = self._values
        mean = math.fsum(ys) / self.window
        sxy = math.fsum(x * (y - mean) for x, y in zip(self._x, ys))
        syy = math.fsum((y - mean) ** 2 for y in ys)
        slope = sxy / self._sxx
        df = self.window - 2
        rss = max(syy - slope * sxy, 0.0)  # residual sum of squares (>= 0 up to rounding)
        se = math.sqrt(rss / df / self._sxx)
        if se > 0.0:
            t = slope / se
        else:  # a perfect line: rising if the slope is positive at all
            t = math.inf if slope > 0 else (-math.inf if slope < 0 else 0.0)
        fitted_end = mean + slope * self._x[-1]
        return SlopeTest(slope=slope, t=t, df=df, fitted_end=fitted_end, rising=t > self._critical)
