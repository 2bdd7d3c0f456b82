"""Predictor behaviour: the reference cases of spec §16.8 and cases of our own."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from operators.predictors import (
    ArimaPredictor,
    ConstantPredictor,
    HoltWintersPredictor,
    KalmanPredictor,
    PeriodicPredictor,
    SelectorPredictor,
    build_predictor,
    season_length,
)
from operators.predictors.arima import ERROR_REFIT_MIN_POINTS
from operators.predictors.loss import ForecastScore
from schemas import PlannerConfig

# --- constant (§16.8) ---------------------------------------------------------------------------


def test_constant_reference_cases() -> None:
    assert ConstantPredictor().forecast() == 0.0
    p = ConstantPredictor()
    for y in (10, 20, 30):
        p.learn_one(y)
    assert p.forecast() == 30.0
    p = ConstantPredictor()
    for y in (0, 0):
        p.learn_one(y)
    assert p.values == [] and p.forecast() == 0.0
    p = ConstantPredictor()
    for y in (5, 0):
        p.learn_one(y)
    assert p.values == [5.0, 0.0] and p.forecast() == 0.0
    p = ConstantPredictor()
    for y in (10, float("nan")):
        p.learn_one(y)
    assert p.forecast() == 0.0


# --- Kalman (§16.8: q_level 1e-4, q_trend 1e-5, r 0.1, min points 3) ---------------------------


def kalman(log1p: bool = False) -> KalmanPredictor:
    return KalmanPredictor(q_level=1e-4, q_trend=1e-5, r=0.1, min_points=3, log1p=log1p)


def test_kalman_empty_is_zero() -> None:
    assert kalman().forecast() == 0.0


@pytest.mark.parametrize("log1p", [False, True])
def test_kalman_never_negative_on_declining_series(log1p: bool) -> None:
    fresh, cached = kalman(log1p), kalman(log1p)
    for y in (10, 15, 20, 15, 10, 5, 2, 1, 0):
        fresh.learn_one(y)
        cached.forecast()  # the cached path: predict, then update that prediction
        cached.learn_one(y)
        assert fresh.forecast() >= 0.0
        assert cached.forecast() >= 0.0
    assert fresh.forecast() == cached.forecast()


def test_kalman_min_points_and_cache() -> None:
    p = kalman()
    p.learn_one(10)
    assert p.forecast() == 10.0 and p._predicted is None
    p.learn_one(20)
    assert p.forecast() == 20.0 and p._predicted is None  # below min points: no cache
    p.learn_one(30)
    first = p.forecast()
    assert p._predicted is not None  # now the forecast is a cached predict step
    assert first == pytest.approx(40.0, abs=0.01)  # level 30 + trend 10
    assert p.forecast() == first  # two calls without new data: same value, filter not advanced


def test_kalman_predicts_once_per_interval() -> None:
    """Forecasting between observations must not change what the filter learns."""
    with_forecasts, without = kalman(), kalman()
    for y in (3, 8, 12, 20, 26, 31, 30, 42):
        with_forecasts.forecast()
        with_forecasts.forecast()
        with_forecasts.learn_one(y)
        without.learn_one(y)
    assert with_forecasts.forecast() == without.forecast()


def test_kalman_reference_defaults_from_config() -> None:
    p = build_predictor(PlannerConfig(load_predictor="kalman"))
    assert isinstance(p, KalmanPredictor)
    assert (p.q_level, p.q_trend, p.r, p.min_points) == (1.0, 0.1, 10.0, 5)


def reference_kalman(series: list[float], q_level: float, q_trend: float, r: float) -> float:
    """Spec §7.4 with matrices (filterpy's order): x0 = [z0, 0], P0 = 1000·I, then per point
    predict (x = Fx, P = FPFᵀ + Q) and update (Joseph form); the forecast is one more predict."""
    f = np.array([[1.0, 1.0], [0.0, 1.0]])
    h = np.array([[1.0, 0.0]])
    q = np.diag([q_level, q_trend])
    x = np.array([series[0], 0.0])
    cov = 1000.0 * np.eye(2)
    for z in series[1:]:
        x, cov = f @ x, f @ cov @ f.T + q
        s = h @ cov @ h.T + r
        k = cov @ h.T / s
        x = x + (k * (z - h @ x)).ravel()
        i_kh = np.eye(2) - k @ h
        cov = i_kh @ cov @ i_kh.T + r * (k @ k.T)
    return float((f @ x)[0])


def test_kalman_default_variances_match_a_matrix_filter() -> None:
    """Defaults q_level 1, q_trend 0.1, r 10, kalman_min_points 5 (spec §7.4), checked
    against an independent matrix implementation of the same filter."""
    p = build_predictor(PlannerConfig(load_predictor="kalman"))
    series = [120.0, 131.0, 125.0, 150.0, 162.0, 158.0, 171.0, 190.0, 185.0, 200.0]
    for n, y in enumerate(series, start=1):
        p.learn_one(y)
        if n < 5:  # below kalman_min_points: the last value, nothing cached
            assert p.forecast() == y and p._predicted is None
        else:
            expected = reference_kalman(series[:n], q_level=1.0, q_trend=0.1, r=10.0)
            assert abs(p.forecast() - expected) < 1e-9 * expected
    # a different r really changes the answer (the defaults are what is being checked)
    other = reference_kalman(series, q_level=1.0, q_trend=0.1, r=1.0)
    assert abs(p.forecast() - other) > 0.1


# --- ARIMA (§7.3) -------------------------------------------------------------------------------


def test_arima_below_five_points_is_last_value() -> None:
    p = ArimaPredictor()
    for y in (3, 9, 4, 7):
        p.learn_one(y)
    assert p.forecast() == 7.0
    assert p.fits == 0 and p.fallback_reason == "fewer than 5 points"


def test_arima_constant_series_shortcut() -> None:
    p = ArimaPredictor()
    for _ in range(8):
        p.learn_one(42)
    assert p.forecast() == 42.0 and p.fits == 0


def test_arima_collapsed_order_falls_back_to_log1p() -> None:
    rng = random.Random(2)
    noise = [100 + rng.gauss(0, 5) for _ in range(12)]
    raw_order, _, alternatives = ArimaPredictor()._search(noise)
    assert alternatives  # AR/MA orders were fitted and lost on AIC
    assert raw_order[0] == 0 and raw_order[2] == 0  # white noise: auto-ARIMA collapses
    p = ArimaPredictor()
    for y in noise:
        p.learn_one(y)
    p.forecast()
    assert p.mode_log1p is True  # refitted on log1p
    rng = random.Random(0)
    level, walk = 500.0, []
    for _ in range(20):
        level += rng.gauss(0, 20)
        walk.append(level)
    q = ArimaPredictor()
    for y in walk:
        q.learn_one(y)
    q.forecast()
    assert q.order is not None and (q.order[0], q.order[2]) != (0, 0)
    assert q.mode_log1p is False
    assert ArimaPredictor(log1p=True).mode_log1p is True


def test_arima_forced_collapse_on_few_points_keeps_raw_values() -> None:
    p = ArimaPredictor()
    for y in (10, 30, 20, 40, 25):
        p.learn_one(y)
    p.forecast()
    assert p.order is not None and (p.order[0], p.order[2]) == (0, 0)  # nothing else allowed
    assert p.mode_log1p is False


def test_arima_learns_an_ar_process_and_updates_without_refitting() -> None:
    rng = random.Random(3)
    p = ArimaPredictor(refit_every=1000)
    x = 0.0
    series = []
    for _ in range(80):
        x = 0.8 * x + rng.gauss(0, 1)
        series.append(100 + 10 * x)
    for y in series[:60]:
        p.learn_one(y)
    p.forecast()
    fits = p.fits
    assert p.order is not None and p.order[0] >= 1  # an AR term was found
    errors_model, errors_last = [], []
    for y in series[60:]:
        f = p.forecast()
        errors_model.append(abs(y - f))
        errors_last.append(abs(y - p.last_value()))
        p.learn_one(y)
    assert p.fits == fits  # later points were appended, not refitted
    assert len(p._series) <= p.window + p.refit_every
    assert sum(errors_model) < sum(errors_last)  # mean reversion beats "last value"


def sarimax_aic(series: list[float], order: tuple[int, int, int]) -> float:
    """AIC of one order, fitted independently of the predictor (same model: SARIMAX with an
    intercept when d = 0)."""
    import warnings

    from statsmodels.tsa.statespace.sarimax import SARIMAX

    model = SARIMAX(series, order=order, trend="c" if order[1] == 0 else None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(model.fit(disp=False).aic)


@pytest.mark.parametrize(
    ("shape", "d"),
    [("ar", 0), ("linear", 1), ("quadratic", 2)],
)
def test_arima_stepwise_aic_search_with_kpss_differences(shape: str, d: int) -> None:
    """Spec §7.3: d from the KPSS unit-root test (up to 2), then a stepwise AIC search: the
    chosen order's AIC is no worse than any of the four starting orders nor any neighbour."""
    rng = random.Random(3)
    x, series = 0.0, []
    for t in range(60):
        x = 0.7 * x + rng.gauss(0, 1)
        trend = {"ar": 0.0, "linear": 5.0 * t, "quadratic": 0.5 * t * t}[shape]
        series.append(100 + trend + 10 * x)
    order, results, _ = ArimaPredictor()._search(series)
    assert order[1] == d
    best = sarimax_aic(series, order)
    assert abs(float(results.aic) - best) < 1e-6 * abs(best)
    p0, _, q0 = order
    others = {(2, 2), (0, 0), (1, 0), (0, 1)}
    others |= {(p0 + dp, q0 + dq) for dp in (-1, 0, 1) for dq in (-1, 0, 1)}
    for p, q in sorted(others - {(p0, q0)}):
        if p >= 0 and q >= 0 and p + q <= 5:
            assert best <= sarimax_aic(series, (p, d, q)) + 1e-6, (order, (p, q))


def test_arima_updates_apply_the_fitted_parameters_without_refitting() -> None:
    """Between refits a new point is appended with the parameters of the last fit (spec
    §7.3 ``model.update``): the forecast equals a fresh filter of the whole series with those
    fixed parameters, and the default schedule refits rarely (6 fits in 130 ticks)."""
    import warnings

    from statsmodels.tsa.statespace.sarimax import SARIMAX

    rng = random.Random(3)
    p = ArimaPredictor()
    x, fit_ticks = 0.0, []
    for t in range(130):
        x = 0.8 * x + rng.gauss(0, 1)
        fits = p.fits
        forecast = p.forecast()
        if p.fits != fits:
            fit_ticks.append(t)
        elif p.order is not None:
            assert p.order is not None and p._params is not None
            model = SARIMAX(p._series, order=p.order, trend="c" if p.order[1] == 0 else None)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                expected = float(model.filter(p._params).forecast(1)[0])
            if p.mode_log1p:  # the model runs on log1p values (spec §7.3 fallback)
                expected = math.expm1(expected)
            assert abs(forecast - expected) < 1e-9 * abs(expected)
        p.learn_one(100 + 10 * x)
    # doubling while the window fills (5, 10, ..), one error-triggered refit (17), then every
    # refit_every = 48 points (68 → 116)
    assert fit_ticks == [5, 10, 17, 34, 68, 116]


def test_arima_refits_when_the_error_grows() -> None:
    p = ArimaPredictor(refit_every=1000)
    rng = random.Random(5)
    assert ERROR_REFIT_MIN_POINTS < 12
    for _ in range(40):
        p.learn_one(100 + rng.gauss(0, 2))
    p.forecast()
    fits = p.fits
    for _ in range(12):  # a regime change: ten times the noise around a new level
        p.forecast()
        p.learn_one(300 + rng.gauss(0, 20))
    p.forecast()
    assert p.fits > fits


# --- Holt-Winters (ours) ------------------------------------------------------------------------


def sine(t: int, period: int = 24) -> float:
    return 100 + 50 * math.sin(2 * math.pi * t / period)


def test_holt_winters_sine_within_5_percent_after_two_periods() -> None:
    p = HoltWintersPredictor(season_length=24)
    for t in range(48):
        p.learn_one(sine(t))
    for t in range(48, 72):
        assert p.forecast() == pytest.approx(sine(t), rel=0.05)
        p.learn_one(sine(t))
    assert p.seasonal in ("add", "mul") and p.fits <= 3  # no refit on every point


def test_holt_winters_follows_a_step_within_three_intervals() -> None:
    p = HoltWintersPredictor(season_length=24)
    for t in range(72):
        p.forecast()
        p.learn_one(sine(t))
    forecasts = []
    for t in range(72, 76):  # the level steps up by 100 on top of the season
        forecasts.append(p.forecast())
        p.learn_one(sine(t) + 100)
    assert forecasts[0] == pytest.approx(sine(72), rel=0.05)  # the step itself is not foreseen
    assert forecasts[3] == pytest.approx(sine(75) + 100, rel=0.05)  # after 3 intervals: followed


def test_holt_winters_without_two_seasons_is_holt() -> None:
    p = HoltWintersPredictor(season_length=24)
    for t in range(20):
        p.learn_one(50 + 2 * t)
    assert p.forecast() == pytest.approx(90, rel=0.05)  # the trend is followed
    assert p.seasonal is None


def test_holt_winters_season_length_from_config() -> None:
    cfg = PlannerConfig(
        load_predictor="holt_winters",
        throughput_adjustment_interval_seconds=600,
        seasonal_period_seconds=86400,
    )
    assert season_length(cfg) == 144
    assert build_predictor(cfg).season_length == 144


# --- periodic (ours) ----------------------------------------------------------------------------


def bursts(count: int, period: float, seed: int) -> list[float]:
    """On/off load: a burst of about 300 requests every ``period`` intervals, noise around it."""
    rng = random.Random(seed)
    out = []
    for t in range(count):
        phase = (t % period) / period
        out.append(max(0.0, (300.0 if phase < 0.4 else 40.0) + rng.gauss(0, 40)))
    return out


def test_periodic_finds_a_cycle_that_is_not_a_whole_number_of_intervals() -> None:
    series = bursts(160, period=4.8, seed=3)  # as the Azure code trace: 290 s at 60 s
    p = PeriodicPredictor()
    errors, mean_errors = [], []
    for t, y in enumerate(series):
        if t >= 40:
            errors.append(abs(p.forecast() - y))
            mean_errors.append(abs(sum(p.values) / len(p.values) - y))
            assert p.period in (5, 10, 14, 15, 19, 24, 29, 34, 38, 43, 48, 53)  # multiples of 4.8
        p.learn_one(y)
    assert sum(errors) < 0.7 * sum(mean_errors)


def test_periodic_without_a_cycle_forecasts_the_mean() -> None:
    rng = random.Random(11)
    p = PeriodicPredictor()
    for _ in range(200):
        p.learn_one(100 + rng.gauss(0, 10))
    assert p.forecast() == pytest.approx(sum(p.values) / len(p.values))
    assert p.period is None
    short = PeriodicPredictor()
    for y in (10, 30, 10, 30):  # fewer than min_points: the mean, no cycle yet
        short.learn_one(y)
    assert short.forecast() == 20.0 and short.period is None


def test_periodic_keeps_one_window() -> None:
    p = PeriodicPredictor(window=48)
    for t in range(200):
        p.learn_one(sine(t, period=6))
    assert len(p.values) == 48
    assert p.forecast() == pytest.approx(sine(200, period=6), rel=0.05) and p.period == 6


# --- selector (ours) ----------------------------------------------------------------------------


def selector(season: int = 24) -> SelectorPredictor:
    return SelectorPredictor(
        candidates=(
            ConstantPredictor(),
            ArimaPredictor(),
            KalmanPredictor(),
            HoltWintersPredictor(season_length=season),
        )
    )


def production_selector(season: int = 24) -> SelectorPredictor:
    """The selector as ``load_predictor: selector`` builds it (every candidate), with a season
    of ``season`` intervals."""
    config = PlannerConfig(
        load_predictor="selector",
        throughput_adjustment_interval_seconds=60,
        seasonal_period_seconds=60 * season,
    )
    p = build_predictor(config)
    assert isinstance(p, SelectorPredictor) and len(p.candidates) == 5
    return p


def test_selector_sine_within_5_percent_after_two_periods() -> None:
    p = production_selector()
    for t in range(48):
        p.learn_one(sine(t))
    for t in range(48, 72):  # the whole third period
        assert p.forecast() == pytest.approx(sine(t), rel=0.05), p.chosen
        p.learn_one(sine(t))


def test_selector_follows_a_step_within_three_intervals() -> None:
    rng = random.Random(11)
    p = production_selector()
    for _ in range(40):
        p.learn_one(100 + rng.uniform(-3, 3))
    forecasts = []
    for _ in range(6):
        forecasts.append(p.forecast())
        p.learn_one(200 + rng.uniform(-3, 3))
    assert forecasts[0] < 110  # the step itself cannot be foreseen
    for late in forecasts[3:]:  # three intervals after the step: followed, and it stays
        assert late == pytest.approx(200, rel=0.05), p.chosen


def test_selector_picks_the_lowest_recent_loss() -> None:
    """Alternating load: the 'last value' is always wrong, the mean is right."""
    p = SelectorPredictor(candidates=(ConstantPredictor(), KalmanPredictor(r=1e6, min_points=2)))
    for t in range(40):
        p.learn_one(100 if t % 2 else 200)
    p.forecast()
    assert p.chosen is not None and p.chosen.startswith("kalman")


def test_selector_lifts_forecasts_under_asymmetric_loss() -> None:
    """With noisy load the selector forecasts above the middle (under-forecasts cost 3x)."""
    rng = random.Random(2)
    p = SelectorPredictor(candidates=(ConstantPredictor(), KalmanPredictor(r=100.0)))
    under = 0
    for t in range(120):
        y = 100 + rng.gauss(0, 10)
        if t >= 60:
            under += p.forecast() < y
        p.learn_one(y)
    assert under / 60 < 0.4  # an unbiased forecast is under about half the time


def test_selector_records_candidate_fallbacks() -> None:
    p = selector()
    for y in (5, 6):
        p.learn_one(y)
    # all still at the last value; the ``scaled`` margins already lift it (scale = |6 - 5|)
    assert 6.0 < p.forecast() < 7.0
    assert p.candidate_forecasts == [6.0, 6.0, 6.0, 6.0]
    q = SelectorPredictor(candidates=(ArimaPredictor(),), margin_kinds=("none", "scaled"))
    for y in (5, 6):
        q.learn_one(y)
    assert q.forecast() > 6.0
    assert q.fallback_reason == "arima: fewer than 5 points"


def test_selector_options_never_forecast_negative_load() -> None:
    """A series falling to 0 learns a negative margin (every residual is -10); an option's
    forecast is floored at 0, so no option (and no mix of them) asks for negative capacity."""
    p = SelectorPredictor(
        candidates=(ConstantPredictor(),), margin_kinds=("none", "quantile"), min_margin_points=2
    )
    for y in (50, 40, 30, 20, 10):
        p.learn_one(y)
    assert p.option_forecasts() == [10.0, 0.0]  # the last value, and 10 + (-10)
    p.learn_one(0)
    options = p.option_forecasts()
    assert options == [0.0, 0.0]  # 0 + (-10) is floored
    assert p.forecast() >= 0.0


def test_selector_rejects_unknown_margin_kind() -> None:
    with pytest.raises(ValueError, match="margin_kinds"):
        SelectorPredictor(margin_kinds=("median",))


def test_build_predictor_kinds() -> None:
    for kind, cls in (
        ("constant", ConstantPredictor),
        ("arima", ArimaPredictor),
        ("kalman", KalmanPredictor),
        ("holt_winters", HoltWintersPredictor),
        ("periodic", PeriodicPredictor),
        ("selector", SelectorPredictor),
    ):
        assert isinstance(build_predictor(PlannerConfig(load_predictor=kind)), cls)
    sel = build_predictor(PlannerConfig(load_predictor="selector", load_predictor_log1p=True))
    assert sel.candidates[1].log1p and sel.candidates[2].log1p


def test_exploding_model_forecast_falls_back_to_last_value() -> None:
    class Exploding(ConstantPredictor):
        def _forecast(self) -> float:
            return 1e12

    p = Exploding()
    for y in (100, 120, 110):
        p.learn_one(y)
    assert p.forecast() == 110.0
    assert p.fallback_reason is not None and p.fallback_reason.startswith("implausible")


def test_failing_model_falls_back_to_last_value() -> None:
    class Failing(ConstantPredictor):
        def _forecast(self) -> float:
            raise RuntimeError("singular matrix")

    p = Failing()
    p.learn_one(7)
    assert p.forecast() == 7.0
    assert p.fallback_reason == "RuntimeError: singular matrix"


def test_selector_mix_beats_its_best_option_where_selection_cannot() -> None:
    """Mean-reverting load (AR(1), φ = 0.5): the last value and the mean forecast equally well,
    their average better than both (error variance σ² instead of 4σ²/3)."""
    rng = random.Random(5)
    candidates = lambda: (  # noqa: E731
        ConstantPredictor(),
        KalmanPredictor(q_level=1e-3, q_trend=1e-9, r=1e4, min_points=2),
    )
    mix = SelectorPredictor(candidates=candidates())
    pick = SelectorPredictor(candidates=candidates(), learning_rate=math.inf)
    scores = {"mix": ForecastScore(), "pick": ForecastScore()}
    options = {name: ForecastScore() for name in mix.option_names}
    y = 100.0
    for t in range(600):
        y = 100 + 0.5 * (y - 100) + rng.gauss(0, 10)
        forecast, picked = mix.forecast(), pick.forecast()
        if t >= 50:
            scores["mix"].add(y, forecast)
            scores["pick"].add(y, picked)
            for name, value in zip(mix.option_names, mix.option_forecasts(), strict=True):
                options[name].add(y, value)
            assert picked in pick.option_forecasts()  # selection forecasts one option
            assert sum(mix.weights or []) == pytest.approx(1.0)
        mix.learn_one(y)
        pick.learn_one(y)
    best_option = min(s.loss for s in options.values())
    assert scores["mix"].loss < 0.95 * best_option
    assert scores["mix"].loss < 0.95 * scores["pick"].loss


def test_selector_rejects_a_non_positive_learning_rate() -> None:
    with pytest.raises(ValueError, match="learning_rate"):
        SelectorPredictor(learning_rate=0.0)


def test_the_reference_keeps_an_exploding_forecast() -> None:
    # the plausibility fallback is ours (forecast_plausibility_factor); the reference uses
    # whatever its model forecasts (clamped at 0)
    class Exploding(ConstantPredictor):
        def _forecast(self) -> float:
            return 1e12

    p = Exploding()
    p.plausible_factor = None
    for y in (100, 120, 110):
        p.learn_one(y)
    assert p.forecast() == 1e12 and p.fallback_reason is None
    assert p.clone().plausible_factor is None


@pytest.mark.parametrize("kind", ["constant", "arima", "kalman", "selector"])
def test_the_plausibility_factor_comes_from_the_config(kind: str) -> None:
    ours = build_predictor(PlannerConfig(load_predictor=kind))
    reference = build_predictor(PlannerConfig(load_predictor=kind).reference_variant())
    loose = build_predictor(PlannerConfig(load_predictor=kind, forecast_plausibility_factor=10))
    assert (ours.plausible_factor, reference.plausible_factor, loose.plausible_factor) == (
        3.0,
        None,
        10.0,
    )
    for predictor in (ours, reference, loose):  # the selector's candidates follow it
        for candidate in getattr(predictor, "candidates", ()):
            assert candidate.plausible_factor == predictor.plausible_factor


def test_reference_arima_fits_once_then_only_updates() -> None:
    """Spec §7.3: the first forecast on five or more points fits; later ones never refit, they
    append the new points to that model. The refit schedule is ours (``arima_refits``)."""
    rng = random.Random(3)
    reference = build_predictor(PlannerConfig(load_predictor="arima").reference_variant())
    ours = build_predictor(PlannerConfig(load_predictor="arima"))
    assert isinstance(reference, ArimaPredictor) and not reference.refit
    assert isinstance(ours, ArimaPredictor) and ours.refit
    x = 0.0
    for _ in range(60):
        x = 0.8 * x + rng.gauss(0, 1)
        for p in (reference, ours):
            p.forecast()
            p.learn_one(100 + 10 * x)
    reference.forecast()
    assert reference.fits == 1 and ours.fits > 1
    assert reference.order is not None and len(reference._series) == 60  # all appended


PMDARIMA_RAMP = [51.74, 63.19, 72.39, 83.63, 93.52, 104.34, 113.92, 124.48, 134.12, 144.56, 154.25]
"""pmdarima 2.1.1's one-step forecasts of the ramp 10, 20, .., 150 from its fifth point on, as the
reference drives it (``auto_arima`` with its defaults once, then ``model.update`` per point):
order (1, 0, 1), chosen on five points."""


def test_reference_arima_updates_its_parameters_as_pmdarima_does() -> None:
    """pmdarima's ``update`` takes a few optimiser steps from the parameters in use, and its
    search allows p, q ≤ ⌊n/3⌋ (from (1, 1) below ten points). The emulation appended with the
    first fit's parameters and allowed only (0, 0, 0) on five points: it forecast 30.0 (the
    mean of the first five) for every later point of a ramp to 150."""
    reference = build_predictor(PlannerConfig(load_predictor="arima").reference_variant())
    assert isinstance(reference, ArimaPredictor)
    reference.plausible_factor = None
    forecasts = []
    for y in range(10, 160, 10):
        reference.learn_one(y)
        forecasts.append(reference.forecast())
    assert reference.order == (1, 0, 1) and reference.fits == 1
    assert forecasts[4:] == pytest.approx(PMDARIMA_RAMP, abs=0.01)
