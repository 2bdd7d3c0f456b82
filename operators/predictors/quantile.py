"""Recent-quantile predictor: the τ-quantile of the last few points."""

from __future__ import annotations

from operators.predictors.base import Predictor
from operators.predictors.loss import UNDER_WEIGHT, loss_quantile
from operators.predictors.selector import quantile


class RecentQuantilePredictor(Predictor):
    """Forecasts the ``q``-quantile of the last ``window`` stored values.

    Model-free: for a bursty series whose next value is about as likely as any recent one,
    the ``w/(1+w)``-quantile of recent values is what minimises the asymmetric loss.

    >>> p = RecentQuantilePredictor(window=4)
    >>> for y in (10, 40, 20, 30, 50):
    ...     p.learn_one(y)
    >>> p.forecast()  # 0.75-quantile of 40, 20, 30, 50
    42.5
    """

    def __init__(self, window: int = 12, q: float = loss_quantile(UNDER_WEIGHT)) -> None:
        super().__init__()
        self.window = window
        self.q = q
        self.max_values = window

    def _forecast(self) -> float:
        return quantile(self.values[-self.window :], self.q)
