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
        """Append finite ``value``; the test over the full window, or ``None`` until it is full
        (and, for a window whose spread exceeds the float range, ``None``: it cannot be fitted)."""
        self._values.append(value)
        if len(self._values) < self.window:
            return None
        ys = self._values
        mean = math.fsum(y / self.window for y in ys)  # divide first: no overflow for finite values
        deviations = [y - mean for y in ys]
        scale = max(abs(d) for d in deviations)
        df = self.window - 2
        if not math.isfinite(scale):
            return None
        if scale == 0.0:  # a flat window
            return SlopeTest(slope=0.0, t=0.0, df=df, fitted_end=mean, rising=False)
        # Sums on deviations scaled to [-1, 1] cannot overflow; t does not depend on the scale.
        unit = [d / scale for d in deviations]
        sxy = math.fsum(x * u for x, u in zip(self._x, unit))
        syy = math.fsum(u * u for u in unit)
        unit_slope = sxy / self._sxx
        rss = max(syy - unit_slope * sxy, 0.0)  # residual sum of squares (>= 0 up to rounding)
        se = math.sqrt(rss / df / self._sxx)
        if se > 0.0:
            t = unit_slope / se
        else:  # a perfect line: rising if the slope is positive at all
            t = math.inf if unit_slope > 0 else (-math.inf if unit_slope < 0 else 0.0)
        slope = unit_slope * scale
        fitted_end = mean + slope * self._x[-1]
        return SlopeTest(slope=slope, t=t, df=df, fitted_end=fitted_end, rising=t > self._critical)
