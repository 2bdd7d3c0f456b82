"""Seasonal Holt-Winters predictor (our replacement for the reference's Prophet, spec §7.5).

statsmodels' ``ExponentialSmoothing`` estimates the smoothing parameters (damped additive trend;
additive or multiplicative season) on a bounded window; between refits each new point runs the
Holt-Winters recursions with those parameters, which costs a few float operations:

    level  l' = α·(y ⊖ s) + (1 − α)·(l + φ·b)
    trend  b' = β·(l' − l) + (1 − β)·φ·b
    season s' = γ·(y ⊖ (l + φ·b)) + (1 − γ)·s          (⊖ is − or ÷ for an additive or
    forecast  = (l' + φ·b') ⊕ (season of the next slot)     multiplicative season, ⊕ is + or ×)

— the same component form statsmodels fits, so the first forecast after a fit equals the fit's
own forecast. The season is multiplicative when every value in the window is positive and the
multiplicative fit has the lower AIC, otherwise additive.

With ``log1p=True`` (``load_predictor_log1p``, as the reference's Prophet has it) the model
fits and runs on ``log1p(y)`` and forecasts ``expm1`` of its forecast.

The season needs two full seasons of data (``2 · season_length`` points, at least 12 and at
least ``10 + 2 · (season_length // 2)``, statsmodels' minimum) for the heuristic
initialisation; until then the predictor is Holt's damped-trend smoothing (no
season), and with fewer than ``MIN_POINTS`` points it forecasts the last value.

Refits happen every ``refit_every`` points, when the season becomes available, whenever the
number of points doubled while the non-seasonal window is still filling, and when the
forecast error grew (mean squared standardised error of the points since the last fit, at least
3 of them, above 4; the residual scale of a fit is floored at 1 % of the mean level, so a
near-perfect fit does not refit on rounding noise).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from operators.predictors.base import Predictor

MIN_POINTS = 10
"""Fewer stored points than this: forecast the last value (no model yet)."""


class HoltWintersPredictor(Predictor):
    """Holt-Winters with a damped trend and a season of ``season_length`` points.

    >>> import math
    >>> p = HoltWintersPredictor(season_length=12)
    >>> for t in range(36):
    ...     p.learn_one(100 + 50 * math.sin(2 * math.pi * t / 12))
    >>> expected = 100 + 50 * math.sin(2 * math.pi * 36 / 12)
    >>> abs(p.forecast() - expected) / expected < 0.05, p.seasonal
    (True, 'add')
    """

    def __init__(
        self,
        season_length: int = 480,
        fit_seasons: int = 4,
        window: int = 200,
        refit_every: int = 48,
        log1p: bool = False,
    ) -> None:
        super().__init__()
        self.season_length = season_length
        self.log1p = log1p
        self.fit_seasons = fit_seasons
        self.window = window
        self.refit_every = refit_every
        self.max_values = max(window, fit_seasons * season_length)
        self.seasonal: str | None = None  # "add" / "mul" once the season is fitted
        self.fits = 0
        self._alpha = self._beta = self._gamma = 0.0
        self._phi = 1.0
        self._level = self._trend = 0.0
        self._season: list[float] = []  # the last m seasonal states, oldest (next slot) first
        self._sigma = 0.0  # residual standard deviation of the last fit
        self._fitted = False
        self._count = 0
        self._count_at_fit = 0
        self._sq_error_sum = 0.0
        self._errors_since_fit = 0

    @property
    def _season_ready(self) -> bool:
        m = self.season_length
        # statsmodels' heuristic initialisation needs 10 + 2·(m//2) points as well
        return m >= 2 and len(self.values) >= max(2 * m, 12, 10 + 2 * (m // 2))

    # --- recursions ---------------------------------------------------------------------------

    def _model_forecast(self) -> float:
        base = self._level + self._phi * self._trend
        if self.seasonal == "add":
            return base + self._season[0]
        if self.seasonal == "mul":
            return base * self._season[0]
        return base

    def _space(self, value: float) -> float:
        """``value`` in the model's space: ``log1p`` of the load in ``log1p`` mode."""
        return math.log1p(value) if self.log1p else value

    def _learn(self, value: float) -> None:
        self._count += 1
        if not self._fitted:
            return
        value = self._space(value)
        predicted = self._model_forecast()
        if self._sigma > 0:
            z = (value - predicted) / self._sigma
            self._sq_error_sum += z * z  # a float ** 2 raises on overflow; z * z is inf
            self._errors_since_fit += 1
        a, b, g, phi = self._alpha, self._beta, self._gamma, self._phi
        previous = self._level + phi * self._trend
        if self.seasonal is None:
            level = a * value + (1 - a) * previous
        else:
            s = self._season[0]
            if self.seasonal == "add":
                level = a * (value - s) + (1 - a) * previous
                new_s = g * (value - previous) + (1 - g) * s
            else:
                level = a * (value / s if s else value) + (1 - a) * previous
                new_s = g * (value / previous if previous else 1.0) + (1 - g) * s
            self._season = [*self._season[1:], new_s]
        self._trend = b * (level - self._level) + (1 - b) * phi * self._trend
        self._level = level

    # --- fitting ------------------------------------------------------------------------------

    def _fit(self) -> None:
        from statsmodels.tsa.holtwinters import ExponentialSmoothing  # slow import: lazily

        self.fits += 1
        self._count_at_fit = self._count
        self._sq_error_sum, self._errors_since_fit = 0.0, 0
        m = self.season_length
        seasonal_kinds: tuple[str | None, ...] = (None,)
        if self._season_ready:
            data = [self._space(v) for v in self.values[-self.fit_seasons * m :]]
            seasonal_kinds = ("add", "mul") if min(data) > 0 else ("add",)
        else:
            data = [self._space(v) for v in self.values[-self.window :]]
        best: tuple[float, str | None, Any] | None = None
        for kind in seasonal_kinds:
            model = ExponentialSmoothing(
                data,
                trend="add",
                damped_trend=True,
                seasonal=kind,
                seasonal_periods=m if kind else None,
                initialization_method="heuristic" if kind else "estimated",
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    results = model.fit()
                except Exception:  # degenerate data; try the other kind, else fail below
                    continue
            aic = float(results.aic) if math.isfinite(float(results.aic)) else math.inf
            if best is None or aic < best[0]:
                best = (aic, kind, results)
        if best is None:
            raise ValueError("Holt-Winters fit failed")
        _, kind, results = best
        params = results.params
        self.seasonal = kind
        self._alpha = float(params["smoothing_level"])
        self._beta = float(params["smoothing_trend"])
        self._gamma = float(params["smoothing_seasonal"]) if kind else 0.0
        self._phi = float(params["damping_trend"])
        self._level = float(results.level[-1])
        self._trend = float(results.trend[-1])
        self._season = [float(v) for v in results.season[-m:]] if kind else []
        residuals = [float(v) for v in results.resid]
        rms = math.sqrt(sum(r * r for r in residuals) / max(1, len(residuals)))
        level = sum(abs(v) for v in data) / len(data)
        self._sigma = max(rms, 0.01 * level)  # a near-perfect fit must not refit on rounding
        self._fitted = True

    def _due(self) -> bool:
        if not self._fitted:
            return True
        if self.seasonal is None and self._season_ready:
            return True
        if self._count - self._count_at_fit >= self.refit_every:
            return True
        filling = self.seasonal is None and self._count_at_fit < self.window
        if filling and self._count >= 2 * self._count_at_fit:
            return True  # early fits on 10 points are rough: refit as the data doubles
        return self._errors_since_fit >= 3 and self._sq_error_sum / self._errors_since_fit > 4.0

    def _forecast(self) -> float:
        if len(self.values) < MIN_POINTS:
            self.fallback_reason = f"fewer than {MIN_POINTS} points"
            return self.last_value()
        if self._due():
            try:
                self._fit()
            except Exception as error:
                if not self._fitted:
                    raise
                self.fallback_reason = f"refit failed, kept the last fit: {error}"[:200]
        forecast = self._model_forecast()
        return math.expm1(forecast) if self.log1p else forecast
