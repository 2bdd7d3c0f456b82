"""The interface every load predictor implements, and the common intake rules (spec §7.1)."""

from __future__ import annotations

import inspect
import math
from abc import ABC, abstractmethod
from typing import Any

PLAUSIBLE_FACTOR = 3.0
"""A model forecast above this many times the largest of the last ``PLAUSIBLE_WINDOW`` values is
treated as a model failure (an exploding fit must not scale a fleet to its maximum). The default
of :attr:`Predictor.plausible_factor`; ``PlannerConfig.forecast_plausibility_factor`` sets it."""

PLAUSIBLE_WINDOW = 48


class Predictor(ABC):
    """A one-step-ahead forecaster of one series (one point per throughput interval).

    Intake rules shared by all predictors: a non-finite value counts as 0; zeros before the first
    non-zero value since construction (or since :meth:`reset_idle_skip`) are skipped, so a
    deployment's idle start does not teach the model "zero demand". Negative values are clamped
    to 0 (demand, ISL and OSL are never negative).

    :meth:`forecast` never raises and never returns a negative or non-finite number: when the
    model behind a predictor cannot produce a forecast (an exception, a non-finite value, or —
    ours, not in the reference — a value above :attr:`plausible_factor` times the largest recent
    value; ``None`` turns that check off, as in the reference) it falls back to the last stored
    value and records why in :attr:`fallback_reason` (``None`` when the last forecast came from
    the model).

    The constructor stores parameters only (same-named attributes, so :meth:`params` and
    :meth:`clone` work as in river); state is plain attributes that pickle.

    >>> class Mean(Predictor):
    ...     def _forecast(self) -> float:
    ...         return sum(self.values) / len(self.values)
    >>> p = Mean()
    >>> for y in (0, 0, 4, float("nan"), 8):
    ...     p.learn_one(y)
    >>> p.values, p.forecast()
    ([4.0, 0.0, 8.0], 4.0)
    >>> Mean().forecast(), Mean().fallback_reason  # an empty mean divides by zero
    (0.0, None)
    """

    max_values: int | None = None
    """Keep at most this many stored values (``None`` = all); subclasses bound their memory."""
    scored: bool = True
    """Whether learning a value scores the forecasts made for it (only the selector scores:
    its weights and margins). A warm-up learns all but its last windows unscored."""
    plausible_factor: float | None = PLAUSIBLE_FACTOR
    """Ours: a forecast above this many times the largest recent value is a model failure
    (``None``: no such check, the reference). Set after construction; :meth:`clone` keeps it."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self._seen_nonzero = False
        self.fallback_reason: str | None = None

    # --- intake -------------------------------------------------------------------------------

    def learn_one(self, y: float) -> None:
        """Add the observation of one interval (applies the intake rules first)."""
        try:
            value = float(y)
        except (TypeError, ValueError, OverflowError):
            value = 0.0
        if not math.isfinite(value) or value < 0.0:
            value = 0.0
        if value == 0.0 and not self._seen_nonzero:
            return
        self._seen_nonzero = True
        self.values.append(value)
        if self.max_values is not None and len(self.values) > self.max_values:
            del self.values[: len(self.values) - self.max_values]
        self._learn(value)

    def reset_idle_skip(self) -> None:
        """Skip leading zeros again (called after warm-up from a trace)."""
        self._seen_nonzero = False

    def last_value(self) -> float:
        """The last stored value, 0 when empty."""
        return self.values[-1] if self.values else 0.0

    def _learn(self, value: float) -> None:  # noqa: B027 - optional hook
        """Hook for incremental state updates after ``value`` was stored."""

    # --- forecast -----------------------------------------------------------------------------

    def forecast(self) -> float:
        """The forecast for the next interval (finite, >= 0); never raises."""
        if not self.values:
            self.fallback_reason = None
            return 0.0
        self.fallback_reason = None
        try:
            value = float(self._forecast())
        except Exception as error:  # a model failure must never stop the planner
            self.fallback_reason = f"{type(error).__name__}: {error}"[:200]
            return self.last_value()
        if not math.isfinite(value):
            self.fallback_reason = "non-finite model forecast"
            return self.last_value()
        factor = self.plausible_factor
        ceiling = math.inf if factor is None else factor * max(self.values[-PLAUSIBLE_WINDOW:])
        if value > ceiling:
            self.fallback_reason = f"implausible model forecast {value:.6g} > {ceiling:.6g}"
            return self.last_value()
        return max(0.0, value)

    @abstractmethod
    def _forecast(self) -> float:
        """The model's forecast; only called with at least one stored value. May raise."""

    # --- river-style parameters ---------------------------------------------------------------

    def params(self) -> dict[str, Any]:
        """The constructor arguments of this predictor (read back from same-named attributes)."""
        names = [
            name
            for name, parameter in inspect.signature(type(self).__init__).parameters.items()
            if name != "self" and parameter.kind is not parameter.VAR_KEYWORD
        ]
        return {name: getattr(self, name) for name in names}

    def clone(self) -> Predictor:
        """A fresh, untrained predictor with the same parameters (nested predictors cloned)."""

        def fresh(value: Any) -> Any:
            if isinstance(value, Predictor):
                return value.clone()
            if isinstance(value, tuple | list):
                return type(value)(fresh(item) for item in value)
            return value

        clone = type(self)(**{name: fresh(value) for name, value in self.params().items()})
        clone.plausible_factor = self.plausible_factor
        return clone
