"""One conformance suite run over every load predictor (as river's estimator checks do).

For each predictor: pickling before and after learning (the unpickled copy continues exactly as
the original), ``clone()`` (same parameters, no state), determinism (bit for bit), empty input,
non-finite input (counts as 0), forecasts never negative nor non-finite, repeated forecasts
without new data return the same value, and ``learn_one`` does not mutate its argument.
"""

from __future__ import annotations

import math
import pickle
import random
from collections.abc import Callable

import numpy as np
import pytest

from operators.predictors import (
    ArimaPredictor,
    ConstantPredictor,
    HoltWintersPredictor,
    KalmanPredictor,
    PeriodicPredictor,
    Predictor,
    SelectorPredictor,
)

FACTORIES: dict[str, Callable[[], Predictor]] = {
    "constant": ConstantPredictor,
    "kalman": KalmanPredictor,
    "kalman_log1p": lambda: KalmanPredictor(log1p=True, min_points=3),
    "arima": lambda: ArimaPredictor(refit_every=12),
    "holt_winters": lambda: HoltWintersPredictor(season_length=6, refit_every=12),
    "holt_winters_log1p": lambda: HoltWintersPredictor(season_length=6, log1p=True),
    "periodic": PeriodicPredictor,
    "selector": lambda: SelectorPredictor(
        candidates=(
            ConstantPredictor(),
            KalmanPredictor(min_points=3),
            HoltWintersPredictor(season_length=6, refit_every=12),
            PeriodicPredictor(),
        )
    ),
    "selector_selection": lambda: SelectorPredictor(
        candidates=(ConstantPredictor(), KalmanPredictor(min_points=3)),
        margin_kinds=("none", "scaled"),
        learning_rate=math.inf,
    ),
}


def load_series(seed: int, count: int = 30) -> list[float]:
    """A daily-ish load with noise and an idle stretch (zeros after traffic was seen)."""
    rng = random.Random(seed)
    out = [100 + 40 * math.sin(2 * math.pi * t / 6) + rng.gauss(0, 8) for t in range(count)]
    out[count // 2] = out[count // 2 + 1] = 0.0
    return [max(0.0, v) for v in out]


def run(predictor: Predictor, series: list[float]) -> list[float]:
    forecasts = []
    for y in series:
        forecasts.append(predictor.forecast())
        predictor.learn_one(y)
    forecasts.append(predictor.forecast())
    return forecasts


@pytest.fixture(params=sorted(FACTORIES))
def factory(request: pytest.FixtureRequest) -> Callable[[], Predictor]:
    return FACTORIES[request.param]


def test_empty_forecasts_zero(factory: Callable[[], Predictor]) -> None:
    p = factory()
    assert p.forecast() == 0.0
    assert p.last_value() == 0.0


def test_deterministic_bit_for_bit(factory: Callable[[], Predictor]) -> None:
    series = load_series(1)
    assert run(factory(), series) == run(factory(), series)


def test_forecasts_finite_and_never_negative(factory: Callable[[], Predictor]) -> None:
    declining = [200.0 * 0.6**t for t in range(14)] + [0.0, 0.0, 0.0]
    for series in (load_series(2), declining):
        forecasts = run(factory(), series)
        assert all(math.isfinite(f) and f >= 0.0 for f in forecasts), forecasts


def test_pickle_before_and_after_learning(factory: Callable[[], Predictor]) -> None:
    series = load_series(3)
    fresh = pickle.loads(pickle.dumps(factory()))
    assert run(fresh, series) == run(factory(), series)
    original = factory()
    run(original, series[:20])
    copy = pickle.loads(pickle.dumps(original))
    assert run(copy, series[20:]) == run(original, series[20:])


def test_clone_has_same_params_and_no_state(factory: Callable[[], Predictor]) -> None:
    trained = factory()
    run(trained, load_series(4))
    clone = trained.clone()
    assert type(clone) is type(trained)
    assert clone.values == []
    assert clone.forecast() == 0.0

    def comparable(params: dict) -> dict:
        return {k: v for k, v in params.items() if k != "candidates"}

    assert comparable(clone.params()) == comparable(trained.params())
    if isinstance(trained, SelectorPredictor):
        assert isinstance(clone, SelectorPredictor)
        assert [type(c) for c in clone.candidates] == [type(c) for c in trained.candidates]
        assert all(not c.values for c in clone.candidates)
    series = load_series(5)
    assert run(clone, series) == run(factory(), series)


def test_non_finite_input_counts_as_zero(factory: Callable[[], Predictor]) -> None:
    p, q = factory(), factory()
    for y in (float("nan"), float("inf"), 50.0, float("-inf"), 60.0, float("nan")):
        p.learn_one(y)
    for y in (50.0, 0.0, 60.0, 0.0):
        q.learn_one(y)
    assert p.values == q.values == [50.0, 0.0, 60.0, 0.0]
    assert p.forecast() == q.forecast()


def test_leading_zeros_skipped_until_reset(factory: Callable[[], Predictor]) -> None:
    p = factory()
    for y in (0, 0, 0):
        p.learn_one(y)
    assert p.values == [] and p.forecast() == 0.0
    p.learn_one(5)
    p.learn_one(0)
    assert p.values == [5.0, 0.0]
    p.reset_idle_skip()
    p.learn_one(0)
    assert p.values == [5.0, 0.0]


def test_repeated_forecast_is_stable(factory: Callable[[], Predictor]) -> None:
    p = factory()
    for y in load_series(6)[:25]:
        p.learn_one(y)
    first = p.forecast()
    assert p.forecast() == first
    assert p.forecast() == first


def test_learn_one_does_not_mutate_input(factory: Callable[[], Predictor]) -> None:
    p = factory()
    value = np.float64(42.5)
    p.learn_one(value)
    assert value == np.float64(42.5)
    assert p.values == [42.5]


def test_holt_winters_log1p_models_log_load_as_prophet_does() -> None:
    """Spec §16.8 (Prophet, which Holt-Winters replaces): log1p stores log1p(99), returns 99;
    the config's flag reaches it (it was ignored)."""
    from operators.predictors import build_single
    from schemas import PlannerConfig

    p = build_single("holt_winters", PlannerConfig(load_predictor_log1p=True))
    assert isinstance(p, HoltWintersPredictor) and p.log1p
    for _ in range(12):
        p.learn_one(99.0)
    assert p.forecast() == pytest.approx(99.0, rel=1e-6)
    # a load growing by a factor a point is a straight line in log space: followed closely
    growth = HoltWintersPredictor(season_length=480, log1p=True)
    raw = HoltWintersPredictor(season_length=480)
    for t in range(30):
        growth.learn_one(10.0 * 1.2**t)
        raw.learn_one(10.0 * 1.2**t)
    expected = 10.0 * 1.2**30
    assert abs(growth.forecast() / expected - 1) < abs(raw.forecast() / expected - 1)
