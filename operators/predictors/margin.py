"""Learned upward margins: turn a candidate's point forecast into a forecast of a quantile.

The asymmetric loss (:mod:`operators.predictors.loss`) is minimised by the ``τ``-quantile of
the next value (``τ = w/(1+w)`` = 0.75), while a candidate forecasts something like its mean or
last value. A margin learned online from the candidate's one-step residuals
``r = actual − forecast`` closes the gap; the selector offers each candidate with each margin.

* :class:`QuantileMargin` — the empirical ``τ``-quantile of the last ``window`` residuals
  (0 until ``min_points`` exist). Learns a bias and the shape of the residuals, slowly.
* :class:`ScaledMargin` — ``z · s``: ``s`` is a volatility, the exponentially weighted mean of
  ``|r|`` (half-life ``scale_half_life``), and ``z`` the ``τ``-quantile of the last ``window``
  standardised residuals ``r / s`` *shrunk* towards the Gaussian value
  ``z* = Φ⁻¹(τ)·√(π/2)`` (0.845 for τ = 0.75: the τ-quantile of a normal residual in units of
  its mean absolute value) with ``prior_points`` pseudo-residuals. It follows calm and bursty
  spells, and it works from the second point on (the prior needs one residual for ``s``), which
  matters on short series. A residual above ``scale_clip · s`` updates ``s`` as if it were
  ``scale_clip · s`` (an outage's edge must not inflate the margin for hours), unless it is the
  third such residual in a row (then the volatility really changed).

Why these defaults (chosen on validation series that are not the bench's goal series; see
:mod:`operators.predictors.selector`): an empirical 75th percentile of fewer than 16 residuals
is too noisy to beat no margin; a window of 48 residuals tracks slow changes; the shrunk ``z``
beat the raw empirical one on the whole (``prior_points`` 16, 48 and "infinitely many" were
within 0.5 % of each other, 0 was 1.3 % worse; 48 = one window, so a full window weighs as much
as the prior); scale half-lives of 3 to 12 points were within 0.3 %; the clipping gained 0.2 %.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from operators.predictors.loss import UNDER_WEIGHT, loss_quantile


def quantile(values: list[float], q: float) -> float:
    """The ``q``-quantile with linear interpolation between order statistics.

    >>> quantile([4.0, 1.0, 3.0, 2.0], 0.75)
    3.25
    """
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _positive_window(window: int) -> int:
    if window < 1:
        raise ValueError(f"a margin window must hold at least 1 residual, got {window}")
    return window


def gaussian_z(q: float) -> float:
    """The ``q``-quantile of a zero-mean normal variable in units of its mean ``|value|``.

    >>> round(gaussian_z(0.75), 4)
    0.8453
    """
    return NormalDist().inv_cdf(q) * math.sqrt(math.pi / 2.0)


class QuantileMargin:
    """The empirical ``τ``-quantile of the last ``window`` residuals.

    >>> m = QuantileMargin(window=4, min_points=2)
    >>> m.margin()
    0.0
    >>> for r in (-1.0, 2.0, 4.0, 3.0, 10.0):
    ...     m.update(r)
    >>> m.margin()  # of (2, 4, 3, 10)
    5.5
    """

    def __init__(
        self, under_weight: float = UNDER_WEIGHT, window: int = 48, min_points: int = 16
    ) -> None:
        self.q = loss_quantile(under_weight)
        self.window = _positive_window(window)
        self.min_points = min_points
        self.residuals: list[float] = []

    def margin(self) -> float:
        """The margin to add to the next forecast."""
        if len(self.residuals) < max(1, self.min_points):
            return 0.0
        return quantile(self.residuals, self.q)

    def update(self, residual: float) -> None:
        """Learn one residual ``actual − forecast`` (non-finite ones are ignored)."""
        if math.isfinite(residual):
            self.residuals.append(residual)
            del self.residuals[: -self.window]


class ScaledMargin:
    """``z · s``: a volatility times a standardised quantile shrunk towards the Gaussian one.

    >>> m = ScaledMargin(prior_points=48)
    >>> m.margin()  # no residual yet: no scale
    0.0
    >>> m.update(-10.0)
    >>> round(m.margin(), 2)  # the prior alone: 0.845 · 10
    8.45
    >>> for r in (10.0, -10.0) * 30:
    ...     m.update(r)
    >>> 0.845 * 10 < m.margin() < 10  # the data's 75 % quantile (10) pulls z up
    True
    """

    def __init__(
        self,
        under_weight: float = UNDER_WEIGHT,
        window: int = 48,
        prior_points: float = 48.0,
        scale_half_life: float = 6.0,
        scale_clip: float = 3.0,
    ) -> None:
        self.q = loss_quantile(under_weight)
        self.prior_z = gaussian_z(self.q)
        self.window = _positive_window(window)
        self.prior_points = prior_points
        self.decay = 0.5 ** (1.0 / scale_half_life)
        self.scale_clip = scale_clip
        self.scale = 0.0
        self.standardised: list[float] = []
        self._clipped_in_a_row = 0

    def z(self) -> float:
        """The standardised quantile in use (the prior until residuals arrive)."""
        n = len(self.standardised)
        if n == 0:
            return self.prior_z
        return (n * quantile(self.standardised, self.q) + self.prior_points * self.prior_z) / (
            n + self.prior_points
        )

    def margin(self) -> float:
        """The margin to add to the next forecast (0 until a non-zero residual was seen)."""
        return self.z() * self.scale if self.scale > 0.0 else 0.0

    def update(self, residual: float) -> None:
        """Learn one residual ``actual − forecast`` (non-finite ones are ignored)."""
        if not math.isfinite(residual):
            return
        size = abs(residual)
        if self.scale <= 0.0:
            self.scale = size
            return
        z = residual / self.scale
        if math.isfinite(z):
            self.standardised.append(z)
            del self.standardised[: -self.window]
        limit = self.scale_clip * self.scale
        if size > limit:
            self._clipped_in_a_row += 1
            if self._clipped_in_a_row < 3:
                size = limit
        else:
            self._clipped_in_a_row = 0
        self.scale = self.scale * self.decay + (1.0 - self.decay) * size
