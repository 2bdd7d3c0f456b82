"""How a load forecast is scored: an asymmetric linear loss, MAPE and the under-forecast rate.

An under-forecast costs SLA (too few replicas, queues grow, TTFT/ITL blow up); an
over-forecast costs GPUs (idle replicas for one interval). Both costs grow linearly with the
error, but the SLA side is the dear one, so the loss weighs an under-forecast ``w`` times an
over-forecast of the same size:

    loss(actual, forecast) = w · max(actual − forecast, 0) + max(forecast − actual, 0)

with ``w = UNDER_WEIGHT = 3``. This is the pinball (quantile) loss of quantile
``τ = w / (1 + w) = 0.75`` up to the factor ``1 + w``: the forecast that minimises it is the
75th percentile of the next value, not its mean — which is why the selector adds a learned
upward margin (see :mod:`operators.predictors.selector`).

Scores are reported scale-free: the summed loss divided by the summed actuals (a weighted
absolute percentage error with the asymmetric weights). MAPE is the mean of
``|actual − forecast| / actual`` over the points whose actual is not 0 (a zero actual has no
relative error; those points still count in the loss and the under-forecast rate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

UNDER_WEIGHT = 3.0
"""An under-forecast costs this many times an over-forecast of the same size."""


def asymmetric_loss(actual: float, forecast: float, under_weight: float = UNDER_WEIGHT) -> float:
    """The asymmetric linear loss of one forecast.

    >>> asymmetric_loss(100, 90), asymmetric_loss(100, 110), asymmetric_loss(5, 5)
    (30.0, 10.0, 0.0)
    """
    error = float(actual) - float(forecast)
    return under_weight * error if error >= 0 else -error


def loss_quantile(under_weight: float = UNDER_WEIGHT) -> float:
    """The quantile whose forecast minimises the loss: ``w / (1 + w)``.

    >>> loss_quantile(3.0)
    0.75
    """
    return under_weight / (1.0 + under_weight)


@dataclass
class ForecastScore:
    """Running score of a series of (actual, forecast) pairs.

    >>> s = ForecastScore()
    >>> for actual, forecast in ((100, 90), (100, 110), (0, 5)):
    ...     s.add(actual, forecast)
    >>> round(s.mape, 3), round(s.under_rate, 3), round(s.loss, 3)
    (0.1, 0.333, 0.225)
    """

    under_weight: float = UNDER_WEIGHT
    points: int = 0
    under: int = 0
    loss_sum: float = 0.0
    actual_sum: float = 0.0
    ape_sum: float = 0.0
    ape_points: int = 0

    def add(self, actual: float, forecast: float) -> None:
        """Score one forecast against the value that then happened."""
        actual, forecast = float(actual), float(forecast)
        if not (math.isfinite(actual) and math.isfinite(forecast)):
            raise ValueError(f"cannot score non-finite pair ({actual}, {forecast})")
        self.points += 1
        self.under += forecast < actual
        self.loss_sum += asymmetric_loss(actual, forecast, self.under_weight)
        self.actual_sum += abs(actual)
        if actual != 0.0:
            self.ape_sum += abs(actual - forecast) / abs(actual)
            self.ape_points += 1

    @property
    def mape(self) -> float:
        """Mean absolute percentage error over the non-zero actuals (NaN when there are none)."""
        return self.ape_sum / self.ape_points if self.ape_points else math.nan

    @property
    def under_rate(self) -> float:
        """Share of forecasts below the actual (NaN when empty)."""
        return self.under / self.points if self.points else math.nan

    @property
    def loss(self) -> float:
        """Summed asymmetric loss / summed actuals (NaN when the actuals sum to 0)."""
        return self.loss_sum / self.actual_sum if self.actual_sum else math.nan
