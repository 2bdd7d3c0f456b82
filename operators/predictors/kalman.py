"""Kalman local-linear-trend predictor (spec §7.4), a hand-written 2-state filter."""

from __future__ import annotations

import math

from operators.predictors.base import Predictor


class KalmanPredictor(Predictor):
    """Local linear trend: state ``[level, trend]``, one predict step per interval.

    ``F = [[1, 1], [0, 1]]``, ``H = [1, 0]``, ``P0 = 1000·I``, ``R = max(1e-9, r)``,
    ``Q = diag(max(1e-12, q_level), max(1e-12, q_trend))``. The first stored point initialises
    ``x = [z, 0]``. A forecast runs the predict step and caches it, so repeated calls between two
    observations return the same value and the next observation updates that very prediction.
    With fewer than ``min_points`` stored values the forecast is the last value (not cached).
    In ``log1p`` mode the filter runs on ``log1p(y)`` and forecasts ``expm1(level)``.

    >>> p = KalmanPredictor(q_level=1e-4, q_trend=1e-5, r=0.1, min_points=3)
    >>> for y in (10, 20, 30):
    ...     p.learn_one(y)
    >>> round(p.forecast(), 1), p.forecast() == p.forecast()
    (40.0, True)
    """

    max_values = 1024

    def __init__(
        self,
        q_level: float = 1.0,
        q_trend: float = 0.1,
        r: float = 10.0,
        min_points: int = 5,
        log1p: bool = False,
    ) -> None:
        super().__init__()
        self.q_level = q_level
        self.q_trend = q_trend
        self.r = r
        self.min_points = min_points
        self.log1p = log1p
        self._x: tuple[float, float] | None = None
        self._p: tuple[float, float, float] = (1000.0, 0.0, 1000.0)  # P00, P01 (=P10), P11
        self._predicted: tuple[tuple[float, float], tuple[float, float, float]] | None = None
        self._points = 0

    def _z(self, value: float) -> float:
        return math.log1p(max(0.0, value)) if self.log1p else value

    def _predict_step(self) -> tuple[tuple[float, float], tuple[float, float, float]]:
        assert self._x is not None
        level, trend = self._x
        p00, p01, p11 = self._p
        # x' = F x ; P' = F P F^T + Q
        x = (level + trend, trend)
        p = (
            p00 + 2.0 * p01 + p11 + max(1e-12, self.q_level),
            p01 + p11,
            p11 + max(1e-12, self.q_trend),
        )
        return x, p

    def _learn(self, value: float) -> None:
        z = self._z(value)
        self._points += 1
        if self._x is None:
            self._x = (z, 0.0)
            return
        (level, trend), (p00, p01, p11) = self._predicted or self._predict_step()
        self._predicted = None
        s = p00 + max(1e-9, self.r)
        k0, k1 = p00 / s, p01 / s
        innovation = z - level
        self._x = (level + k0 * innovation, trend + k1 * innovation)
        # P = (I - K H) P'
        self._p = (p00 - k0 * p00, p01 - k0 * p01, p11 - k1 * p01)
        if not all(math.isfinite(v) for v in (*self._x, *self._p)):
            # an overflow (values near 1e308) would leave the filter NaN for good: start over
            self._x, self._p = (z, 0.0), (1000.0, 0.0, 1000.0)

    def _forecast(self) -> float:
        if self._x is None or self._points < self.min_points:
            self.fallback_reason = f"fewer than {self.min_points} points"
            return self.last_value()
        if self._predicted is None:
            self._predicted = self._predict_step()
        level = self._predicted[0][0]
        return math.expm1(level) if self.log1p else level
