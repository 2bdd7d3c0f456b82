"""Periodic predictor: a short cycle found in the series' own autocorrelation (ours).

Traffic often repeats on a cycle far shorter than a day — clients that poll, cron jobs, batch
pipelines that resubmit every few minutes. The Azure code trace has one: its arrivals
correlate at 290 s (autocorrelation 0.47 at a lag of 5 one-minute intervals). Holt-Winters
models only the configured season (``seasonal_period_seconds``, a day by default), so this
predictor finds the cycle itself:

1. over the last ``window`` points (mean ``μ``), the sample autocorrelation ``ρ(k)`` for lags
   ``2 ≤ k ≤ n/3`` (at least three cycles must fit);
2. the cycle ``P`` is the lag with the largest ``ρ``, if ``ρ(P)`` is above the white-noise band
   ``z/√n`` (Bartlett), where ``z`` is the normal quantile that a series without memory exceeds
   at *any* of the tested lags with probability ``significance`` (Bonferroni: ``1 −
   significance / lags``; with 5 % and 60 lags, ``z`` = 3.1) — testing many lags at the
   plain 95 % band would find a cycle in almost every noise; otherwise there is no cycle;
3. the forecast is the Yule–Walker autoregression on lags ``P − 1, P, P + 1`` (the neighbours
   carry a cycle that is not a whole number of intervals, as 290 s at 60 s):
   ``μ + Σ φ_l · (y[t+1−l] − μ)``. The sample autocorrelation divides by the whole window's
   variance, which shrinks the forecast towards ``μ`` when the window holds few cycles — the
   cautious side while a cycle is young;
4. without a cycle (or with fewer than ``min_points`` points) the forecast is ``μ`` — the best
   one can do for a series with no memory; with the selector's learned margin it becomes a
   running quantile of the series itself.

:attr:`period` holds the cycle behind the last forecast (``None`` when none was found).

>>> import math
>>> p = PeriodicPredictor()
>>> for t in range(80):
...     p.learn_one(100 + 50 * math.sin(2 * math.pi * t / 7))
>>> expected = 100 + 50 * math.sin(2 * math.pi * 80 / 7)
>>> abs(p.forecast() - expected) < 5, p.period
(True, 7)
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from operators.predictors.base import Predictor


class PeriodicPredictor(Predictor):
    """Autoregression on a cycle found in the autocorrelation, else the window mean.

    >>> p = PeriodicPredictor(min_points=4)
    >>> for y in (10, 30, 10, 30, 10, 30, 10, 30, 10, 30, 10, 30):
    ...     p.learn_one(y)
    >>> round(p.forecast()), p.period  # shrunk towards the mean (20): 12 points are few
    (11, 2)
    """

    def __init__(self, window: int = 480, min_points: int = 12, significance: float = 0.05) -> None:
        super().__init__()
        self.window = window
        self.min_points = min_points
        self.significance = significance
        self.max_values = window
        self.period: int | None = None

    def _forecast(self) -> float:
        y = np.asarray(self.values[-self.window :], dtype=float)
        n = len(y)
        mean = float(y.mean())
        self.period = None
        deviations = y - mean
        largest = float(np.max(np.abs(deviations)))
        longest = n // 3
        if n < self.min_points or longest < 2 or not largest > 0.0:
            return mean
        unit = deviations / largest  # squares of values above 1e154 would overflow
        acf = np.correlate(unit, unit, "full")[n - 1 : n + longest] / float(unit @ unit)
        period = 2 + int(np.argmax(acf[2:]))
        z = NormalDist().inv_cdf(1.0 - self.significance / (longest - 1))
        if acf[period] <= z / math.sqrt(n):
            return mean
        self.period = period
        lags = [lag for lag in (period - 1, period, period + 1) if lag <= longest]
        toeplitz = np.array([[acf[abs(i - j)] for j in lags] for i in lags])
        phi = np.linalg.solve(toeplitz, acf[lags])
        return mean + float(sum(p * deviations[n - lag] for p, lag in zip(phi, lags, strict=True)))
