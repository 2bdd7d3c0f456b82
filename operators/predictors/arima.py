"""ARIMA predictor (spec §7.3): an auto-ARIMA emulation on statsmodels' SARIMAX.

pmdarima's ``auto_arima`` (what the reference uses) is emulated as follows:

* ``d`` — KPSS tests (level stationarity, 5 %, short lag truncation ``⌊4·(n/100)^¼⌋``): keep
  differencing while stationarity is rejected, up to ``max_d = 2``.
* ``(p, q)`` — the stepwise AIC search of Hyndman & Khandakar: fit (2,2), (0,0), (1,0), (0,1),
  then move to the best neighbour (p±1, q±1 and the diagonals) while the AIC improves, within
  ``p ≤ max_p``, ``q ≤ max_q``, ``p + q ≤ max_order``; an intercept (``trend='c'``) when ``d == 0``.
  A fit that fails is skipped.

With ``refit=False`` (the reference, ``PlannerConfig.arima_refits``) this is pmdarima's
``auto_arima`` with its defaults, fitted once: ``p, q ≤ ⌊n/3⌋``, the search starting from (1, 1)
instead of (2, 2) below ten points; then each later point is added as pmdarima's
``model.update`` does — a few optimiser steps (``max(5, new points // 10)``) from the parameters
in use. It matches pmdarima 2.1.1's forecasts to the hundredth on the cases we compared. One
difference: pmdarima keeps every point; this keeps the last ``window + refit_every``.

Ours (``refit=True``), incremental updates: between refits a new point costs one
``results.append(new, refit=False)`` (the Kalman filter over at most ``window + refit_every``
points, no optimisation), and orders with more parameters than half the points are not tried.
A refit (a new order search on the last ``window`` points) happens when

1. the number of points doubled since the last fit while the buffer is still filling (early
   fits on 5 points are rough), or ``refit_every`` points arrived since the last fit; or
2. the forecast error grew: the mean squared standardised one-step error of the points since the
   last fit (at least ``ERROR_REFIT_MIN_POINTS`` = 6 of them) exceeds ``4`` — the noise variance
   quadrupled, e.g. after a regime change.

A refit re-runs the KPSS test; when ``d`` is unchanged the stepwise search starts from the
order in use (its neighbourhood) rather than from scratch, which keeps a refit to a few fits.

Model space: raw values, or ``log1p`` values when ``log1p=True`` or when a raw fit collapses to
``(0, d, 0)`` (then the predictor refits on ``log1p``, as the reference does). The reference
fits once; here every refit is a fresh auto-ARIMA, so each one starts from raw values again
(unless ``log1p=True``) — a series that once looked like a random walk is not kept in log
space for good, where an idle stretch (``log1p(0) = 0``) distorts every later fit.
"Collapses" means the AIC preferred ``(0, d, 0)`` over AR/MA orders that were fitted; a forced
``(0, d, 0)`` does not switch (ours allows an order only while ``p + q + trend + 1`` is at most
half the usable points: on 5 points and d = 0 only ``(0, 0, 0)``; on 6 and 7 one AR or MA
term).
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable
from typing import Any

from operators.predictors.base import Predictor

MIN_POINTS = 5
"""Fewer stored points than this: forecast the last value (spec §7.3)."""

ERROR_REFIT_MIN_POINTS = 6
"""An error-triggered refit needs at least this many points since the last fit."""


def _sarimax_class() -> Any:
    from statsmodels.tsa.statespace.sarimax import SARIMAX  # slow import: only when fitting

    return SARIMAX


def kpss_differences(series: list[float], max_d: int = 2, alpha: float = 0.05) -> int:
    """The number of differences the KPSS test asks for (pmdarima ``ndiffs(test='kpss')``).

    >>> import math
    >>> kpss_differences([math.sin(i) for i in range(60)])
    0
    >>> [kpss_differences([t**k for t in range(60)]) for k in [1, 2]]
    [1, 2]
    """
    from statsmodels.tsa.stattools import kpss

    x = [float(v) for v in series]
    d = 0
    while d < max_d and len(x) >= 3 and max(x) != min(x):
        lags = max(0, min(len(x) - 2, int(4.0 * (len(x) / 100.0) ** 0.25)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                p_value = kpss(x, regression="c", nlags=lags)[1]
            except (ValueError, ZeroDivisionError, OverflowError):
                break
        if p_value >= alpha:
            break
        x = [b - a for a, b in itertools.pairwise(x)]
        d += 1
    return d


class _StepwiseSearch:
    """One stepwise AIC search over ``(p, q)`` at a fixed ``d`` (Hyndman & Khandakar): the
    orders tried, with their AIC (``inf`` when the fit failed), and the best so far."""

    NEIGHBOURS = ((-1, 0), (1, 0), (0, -1), (0, 1), (-1, -1), (1, 1), (-1, 1), (1, -1))
    MAX_ORDERS = 40

    def __init__(self, fit: Callable[[int, int], Any], allowed: Callable[[int, int], bool]) -> None:
        self.fit = fit
        self.allowed = allowed
        self.tried: dict[tuple[int, int], float] = {}
        self.best: tuple[float, tuple[int, int], Any] | None = None

    def attempt(self, p: int, q: int) -> bool:
        """Fit ``(p, q)`` unless tried or not allowed; whether it became the best."""
        if (p, q) in self.tried or not self.allowed(p, q):
            return False
        self.tried[(p, q)] = math.inf
        try:
            results = self.fit(p, q)
            aic = float(results.aic)
        except Exception:  # an order that cannot be fitted is skipped (error_action=ignore)
            return False
        if not math.isfinite(aic):
            return False
        self.tried[(p, q)] = aic
        if self.best is None or aic < self.best[0] - 1e-9:
            self.best = (aic, (p, q), results)
            return True
        return False

    def attempt_all(self, orders: tuple[tuple[int, int], ...]) -> None:
        for p, q in orders:
            self.attempt(p, q)

    def climb(self) -> None:
        """Move to the first neighbour of the best order that lowers the AIC, while one does."""
        while self.best is not None and len(self.tried) < self.MAX_ORDERS:
            p0, q0 = self.best[1]
            if not any(self.attempt(p0 + dp, q0 + dq) for dp, dq in self.NEIGHBOURS):
                return

    def fitted_with_terms(self) -> bool:
        """Whether an order with AR or MA terms could be fitted."""
        return any(key != (0, 0) and math.isfinite(aic) for key, aic in self.tried.items())


class ArimaPredictor(Predictor):
    """Auto-ARIMA one-step forecaster with incremental updates and occasional refits.

    >>> p = ArimaPredictor()
    >>> for y in (7, 7, 7, 7, 7, 7):
    ...     p.learn_one(y)
    >>> p.forecast()  # constant series: that value, no fit
    7.0
    >>> q = ArimaPredictor()
    >>> for y in (3, 4):
    ...     q.learn_one(y)
    >>> q.forecast(), q.fallback_reason
    (4.0, 'fewer than 5 points')
    """

    def __init__(
        self,
        log1p: bool = False,
        window: int = 200,
        refit_every: int = 48,
        max_p: int = 5,
        max_q: int = 5,
        max_d: int = 2,
        max_order: int = 5,
        refit: bool = True,
    ) -> None:
        super().__init__()
        self.log1p = log1p
        self.refit = refit
        self.window = window
        self.refit_every = refit_every
        self.max_p = max_p
        self.max_q = max_q
        self.max_d = max_d
        self.max_order = max_order
        self.max_values = window
        self.mode_log1p = log1p
        self.order: tuple[int, int, int] | None = None
        self.fits = 0
        self._params: list[float] | None = None
        self._series: list[float] = []  # model-space points the current params are applied to
        self._pending: list[float] = []  # raw points not yet applied
        self._count = 0  # points stored since construction
        self._count_at_fit = 0
        self._refit_due = False
        self._results: Any = None  # statsmodels results: a cache, rebuilt after unpickling

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_results"] = None
        return state

    # --- state updates ------------------------------------------------------------------------

    def _learn(self, value: float) -> None:
        self._count += 1
        self._pending.append(value)
        if len(self._pending) > self.window:
            del self._pending[: len(self._pending) - self.window]

    def _to_model(self, value: float) -> float:
        return math.log1p(value) if self.mode_log1p else value

    def _from_model(self, value: float) -> float:
        return math.expm1(value) if self.mode_log1p else value

    def _trend(self, d: int) -> str | None:
        return "c" if d == 0 else None

    def _fit_one(self, series: list[float], order: tuple[int, int, int]) -> Any:
        model = _sarimax_class()(series, order=order, trend=self._trend(order[1]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return model.fit(disp=False)

    def _search(
        self, series: list[float], start: tuple[int, int, int] | None = None
    ) -> tuple[tuple[int, int, int], Any, bool]:
        """Stepwise AIC search: the best order, its results, and whether any order with AR or MA
        terms could be fitted at all (raises if no order fits).

        With ``start`` (the current order) and the same ``d``, the search starts from it instead
        of the four initial orders: a refit re-checks the neighbourhood of the order in use.
        """
        d = kpss_differences(series, self.max_d)
        allowed = self._order_limits(len(series), d)
        search = _StepwiseSearch(lambda p, q: self._fit_one(series, (p, d, q)), allowed)
        first = 1 if not self.refit and len(series) < 10 else 2  # pmdarima starts short series at 1
        fresh: tuple[tuple[int, int], ...] = ((first, first), (0, 0), (1, 0), (0, 1))
        initial = fresh
        if start is not None and start[1] == d and allowed(start[0], start[2]):
            initial = ((start[0], start[2]),)
        search.attempt_all(initial)
        if search.best is None and len(initial) == 1:
            search.attempt_all(fresh)
        search.climb()
        if search.best is None:
            raise ValueError("no ARIMA order could be fitted")
        _, (p, q), results = search.best
        return (p, d, q), results, search.fitted_with_terms()

    def _order_limits(self, points: int, d: int) -> Callable[[int, int], bool]:
        """Whether ``(p, d, q)`` may be tried on ``points`` points: within ``max_p``, ``max_q``,
        ``max_order``, and (ours) no more parameters than half the usable points, or
        (pmdarima's) ``p, q ≤ ⌊n/3⌋``."""
        usable = points - d
        k_trend = 1 if d == 0 else 0
        third = points // 3

        def allowed(p: int, q: int) -> bool:
            if self.refit:
                fits = p + q + k_trend + 1 <= max(1, usable // 2)
            else:
                fits = p <= third and q <= third
            return (
                0 <= p <= self.max_p and 0 <= q <= self.max_q and p + q <= self.max_order and fits
            )

        return allowed

    def _refit(self, raw: list[float]) -> None:
        self.fits += 1
        self._count_at_fit = self._count  # also on failure: do not retry on every tick
        self._refit_due = False
        log1p = self.log1p  # every refit is a fresh auto-ARIMA: raw first unless log1p was asked
        start = self.order if self.mode_log1p == log1p else None
        series = [math.log1p(v) if log1p else v for v in raw]
        order, results, alternatives = self._search(series, start)
        if not log1p and order[0] == 0 and order[2] == 0 and alternatives:
            # collapsed to a random walk / constant: refit on log1p (spec §7.3)
            log1p = True
            series = [math.log1p(v) for v in raw]
            order, results, _ = self._search(series, self.order if self.mode_log1p else None)
        self.mode_log1p = log1p
        self.order = order
        self._params = [float(v) for v in results.params]
        self._series = series
        self._pending = []
        self._results = results

    def _rebuild(self) -> Any:
        assert self.order is not None and self._params is not None
        model = _sarimax_class()(self._series, order=self.order, trend=self._trend(self.order[1]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return model.filter(self._params)

    def _apply_pending(self) -> None:
        new = [self._to_model(v) for v in self._pending]
        self._pending = []
        if len(self._series) + len(new) > self.window + self.refit_every:
            # keep the per-tick filter cost bounded even when refits keep failing
            self._series = (self._series + new)[-self.window :]
            self._results = self._rebuild()
        else:
            if self._results is None:
                self._results = self._rebuild()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if self.refit:
                    self._results = self._results.append(new, refit=False)
                else:  # pmdarima's update: a few optimiser steps from the parameters in use
                    steps = {"start_params": self._params, "maxiter": max(5, len(new) // 10)}
                    self._results = self._results.append(
                        new, refit=True, fit_kwargs=steps | {"disp": False}
                    )
                    self._params = [float(v) for v in self._results.params]
            self._series.extend(new)
        since_fit = self._count - self._count_at_fit
        if since_fit >= ERROR_REFIT_MIN_POINTS:
            errors = self._results.filter_results.standardized_forecasts_error[0, -since_fit:]
            finite = [float(e) for e in errors if math.isfinite(float(e))]
            if finite and sum(e * e for e in finite) / len(finite) > 4.0:
                self._refit_due = True

    def _due(self) -> bool:
        if self.order is None:
            return True
        if not self.refit:  # the reference: one fit, then updates only (spec §7.3)
            return False
        if self._refit_due:
            return True
        since = self._count - self._count_at_fit
        if since >= self.refit_every:
            return True
        return self._count_at_fit < self.window and self._count >= 2 * self._count_at_fit

    # --- forecast -----------------------------------------------------------------------------

    def _forecast(self) -> float:
        raw = self.values[-self.window :]
        if len(raw) < MIN_POINTS:
            self.fallback_reason = f"fewer than {MIN_POINTS} points"
            return self.last_value()
        if max(raw) == min(raw):
            return raw[-1]  # constant series: auto_arima would forecast 0 (spec §7.3)
        if self._pending and not self._due() and self.order is not None:
            self._apply_pending()
        if self._due():
            try:
                self._refit(raw)
            except Exception as error:
                if self.order is None:
                    raise
                self.fallback_reason = f"refit failed, kept order {self.order}: {error}"[:200]
                if self._pending:
                    self._apply_pending()
        if self._results is None:
            self._results = self._rebuild()
        value = float(self._results.forecast(1)[0])
        return self._from_model(value)
