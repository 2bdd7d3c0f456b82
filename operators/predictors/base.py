"""The interface every load predictor implements, and the common intake rules (spec §7.1)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod


class Predictor(ABC):
    """A one-step-ahead forecaster of one series (one point per throughput interval).

    Intake rules shared by all predictors: a non-finite value counts as 0; zeros before the first
    non-zero value since construction (or since :meth:`reset_idle_skip`) are skipped, so a
    deployment's idle start does not teach the model "zero demand". Forecasts are never negative.
    The constructor stores parameters only; state is plain attributes that pickle.
    """

    def __init__(self) -> None:
        self.values: list[float] = []
        self._seen_nonzero = False

    def learn_one(self, y: float) -> None:
        """Add the observation of one interval."""
        value = float(y) if math.isfinite(y) else 0.0
        if value == 0.0 and not self._seen_nonzero:
            return
        self._seen_nonzero = True
        self.values.append(value)
        self._learn(value)

    def reset_idle_skip(self) -> None:
        """Skip leading zeros again (called after warm-up from a trace)."""
        self._seen_nonzero = False

    def last_value(self) -> float:
        """The last stored value, 0 when empty."""
        return self.values[-1] if self.values else 0.0

    def _learn(self, value: float) -> None:  # noqa: B027 - optional hook
        """Hook for incremental state updates after ``value`` was stored."""

    @abstractmethod
    def forecast(self) -> float:
        """The forecast for the next interval (>= 0)."""
