"""The selector: run every predictor, forecast with the one whose recent loss is lowest.

Every candidate predictor sees every point. The loss that matters
(:mod:`operators.predictors.loss`) is minimised by the ``τ``-quantile of the next value
(``τ = w/(1+w)``, 0.75), while the candidates forecast something like its mean or last value.
So each candidate is offered with a **margin** learned online from its own one-step residuals
``r = actual − forecast`` (its *options*):

* ``quantile`` — the τ-quantile of its last ``margin_window`` residuals;
* ``scaled`` — the τ-quantile of its last ``margin_window`` standardised residuals ``r / s``
  times the current scale ``s``, an exponentially weighted mean of ``|r|`` (half-life
  ``scale_half_life`` points). Load comes in calm and bursty spells; this margin widens in
  the bursty ones and narrows in the calm ones.

Both margins are 0 until ``min_margin_points`` residuals exist, and an option's forecast is
``max(0, forecast + margin)``. Each option's **recent loss** is its asymmetric loss, discounted
with a half-life of ``loss_half_life`` points. The forecast comes from the option with the lowest
recent loss (ties go to the earlier option). All of it is a function of the points seen, so it is
deterministic. :attr:`chosen` names the option behind the last forecast and
:attr:`candidate_forecasts` holds every candidate's own forecast for the coming interval.

Defaults, and why: a margin needs 16 residuals because an empirical 75th percentile of fewer
points is too noisy to beat no margin at all (its coverage easily lands anywhere between 60 and
90 %); 48 residuals (a few hours at the default 180-s interval) track slow changes in the error
level; a loss half-life of 24 points keeps the choice from chasing single lucky forecasts.
Candidates forecast before they learn each point, exactly as standalone predictors do, so a
candidate inside the selector gives the same forecasts as the same predictor alone.
"""

from __future__ import annotations

import math

from operators.predictors.base import Predictor
from operators.predictors.constant import ConstantPredictor
from operators.predictors.loss import UNDER_WEIGHT, asymmetric_loss, loss_quantile


def candidate_name(predictor: Predictor) -> str:
    """Short name of a predictor kind: ``KalmanPredictor`` → ``kalman``.

    >>> candidate_name(ConstantPredictor())
    'constant'
    """
    name = type(predictor).__name__
    name = name.removesuffix("Predictor")
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


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


class SelectorPredictor(Predictor):
    """Forecast with the option (candidate + learned margin) whose recent loss is lowest.

    >>> from operators.predictors.kalman import KalmanPredictor
    >>> p = SelectorPredictor(candidates=(ConstantPredictor(), KalmanPredictor(min_points=2)))
    >>> for y in (10, 20, 30, 40, 50, 60):
    ...     p.learn_one(y)
    >>> round(p.forecast()), p.chosen
    (70, 'kalman+quantile')
    """

    max_values = 1024

    def __init__(
        self,
        candidates: tuple[Predictor, ...] = (),
        under_weight: float = UNDER_WEIGHT,
        loss_half_life: float = 24.0,
        margin_window: int = 48,
        min_margin_points: int = 16,
        scale_half_life: float = 12.0,
        margin_kinds: tuple[str, ...] = ("quantile", "scaled"),
    ) -> None:
        super().__init__()
        self.candidates = tuple(candidates) or (ConstantPredictor(),)
        self.under_weight = under_weight
        self.loss_half_life = loss_half_life
        self.margin_window = margin_window
        self.min_margin_points = min_margin_points
        self.scale_half_life = scale_half_life
        self.margin_kinds = tuple(margin_kinds)
        unknown = set(self.margin_kinds) - {"none", "quantile", "scaled"}
        if unknown or not self.margin_kinds:
            raise ValueError(
                f"margin_kinds must be some of none/quantile/scaled, got {margin_kinds}"
            )
        self.names = [candidate_name(c) for c in self.candidates]
        for i, name in enumerate(self.names):
            if self.names.count(name) > 1:
                self.names[i] = f"{name}{i}"
        self.option_names = [
            name if kind == "none" else f"{name}+{kind}"
            for name in self.names
            for kind in self.margin_kinds
        ]
        k = len(self.candidates)
        self.candidate_forecasts: list[float] | None = None
        self.chosen: str | None = None
        self._residuals: list[list[float]] = [[] for _ in range(k)]
        self._standardised: list[list[float]] = [[] for _ in range(k)]
        self._scales: list[float] = [0.0] * k
        self._option_losses: list[float] = [0.0] * len(self.option_names)

    def reset_idle_skip(self) -> None:
        super().reset_idle_skip()
        for candidate in self.candidates:
            candidate.reset_idle_skip()

    def _margin(self, i: int, kind: str) -> float:
        tau = loss_quantile(self.under_weight)
        if kind == "quantile" and len(self._residuals[i]) >= self.min_margin_points:
            return quantile(self._residuals[i], tau)
        if kind == "scaled" and len(self._standardised[i]) >= self.min_margin_points:
            return quantile(self._standardised[i], tau) * self._scales[i]
        return 0.0

    def option_forecasts(self) -> list[float]:
        """The forecast of every option (``option_names`` order) for the coming interval."""
        raw = self._raw_forecasts()
        return [
            max(0.0, raw[i] + self._margin(i, kind))
            for i in range(len(self.candidates))
            for kind in self.margin_kinds
        ]

    def _raw_forecasts(self) -> list[float]:
        if self.candidate_forecasts is None:
            self.candidate_forecasts = [c.forecast() for c in self.candidates]
        return self.candidate_forecasts

    def _learn(self, value: float) -> None:
        first = len(self.values) == 1  # nothing was known before: the forecasts were not models
        raw = self._raw_forecasts()
        if not first:
            decay = 0.5 ** (1.0 / self.loss_half_life)
            for j, forecast in enumerate(self.option_forecasts()):
                loss = asymmetric_loss(value, forecast, self.under_weight)
                self._option_losses[j] = self._option_losses[j] * decay + loss
            scale_decay = 0.5 ** (1.0 / self.scale_half_life)
            for i in range(len(self.candidates)):
                residual = value - raw[i]
                self._residuals[i].append(residual)
                del self._residuals[i][: -self.margin_window]
                scale = self._scales[i]
                if scale > 0.0:
                    self._standardised[i].append(residual / scale)
                    del self._standardised[i][: -self.margin_window]
                    self._scales[i] = scale * scale_decay + (1.0 - scale_decay) * abs(residual)
                else:
                    self._scales[i] = abs(residual)
        for candidate in self.candidates:
            candidate.learn_one(value)
        self.candidate_forecasts = None

    def _forecast(self) -> float:
        options = self.option_forecasts()
        losses = self._option_losses
        index = min(range(len(options)), key=lambda j: (losses[j], j))
        self.chosen = self.option_names[index]
        reason = self.candidates[index // len(self.margin_kinds)].fallback_reason
        if reason:
            self.fallback_reason = f"{self.chosen}: {reason}"
        return options[index]
