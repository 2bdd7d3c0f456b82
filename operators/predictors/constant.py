"""The constant predictor: tomorrow looks like today (spec §7.2)."""

from __future__ import annotations

from operators.predictors.base import Predictor


class ConstantPredictor(Predictor):
    """Forecasts the last observed value.

    >>> p = ConstantPredictor()
    >>> for y in (10, 20, 30):
    ...     p.learn_one(y)
    >>> p.forecast()
    30.0
    """

    max_values = 1024

    def _forecast(self) -> float:
        return self.last_value()
