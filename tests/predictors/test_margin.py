"""The learned margins of the selector (operators/predictors/margin.py)."""

from __future__ import annotations

import math
import pickle
import random

import pytest

from operators.predictors.margin import QuantileMargin, ScaledMargin, gaussian_z, quantile


def under_rate(margin: QuantileMargin | ScaledMargin, residuals: list[float]) -> float:
    """Share of residuals above the margin in force before each one (the forecast was under)."""
    under = 0
    for r in residuals:
        under += r > margin.margin()
        margin.update(r)
    return under / len(residuals)


def test_gaussian_z_is_the_normal_quantile_over_the_mean_absolute_value() -> None:
    rng = random.Random(1)
    draws = [rng.gauss(0, 1) for _ in range(20_000)]
    mean_abs = sum(abs(d) for d in draws) / len(draws)
    assert quantile(draws, 0.75) / mean_abs == pytest.approx(gaussian_z(0.75), abs=0.03)


@pytest.mark.parametrize("factory", [QuantileMargin, ScaledMargin])
def test_margins_cover_three_quarters_of_noise(factory: type) -> None:
    """w = 3: the margin should leave about a quarter of the points above it."""
    rng = random.Random(2)
    for noise in (lambda: rng.gauss(0, 10), lambda: rng.expovariate(0.1) - 10):
        rate = under_rate(factory(), [noise() for _ in range(3000)])
        assert 0.2 < rate < 0.3, (factory.__name__, rate)


def test_scaled_margin_follows_a_volatility_regime_quickly() -> None:
    rng = random.Random(3)
    m = ScaledMargin()
    for _ in range(200):
        m.update(rng.gauss(0, 1))
    calm = m.margin()
    for _ in range(12):  # two half-lives of a bursty spell
        m.update(rng.gauss(0, 10))
    assert m.margin() > 4 * calm
    q = QuantileMargin()
    for _ in range(200):
        q.update(rng.gauss(0, 1))
    for _ in range(12):
        q.update(rng.gauss(0, 10))
    assert q.margin() < m.margin()  # a window of 48 residuals is still mostly calm


def test_scaled_margin_clips_an_isolated_outlier_but_not_a_shift() -> None:
    m = ScaledMargin(scale_half_life=6.0, scale_clip=3.0)
    for r in (1.0, -1.0) * 50:
        m.update(r)
    assert m.scale == pytest.approx(1.0)
    m.update(1000.0)  # an outage's edge: counts as 3 times the scale
    decay = 0.5 ** (1 / 6)
    assert m.scale == pytest.approx(decay + (1 - decay) * 3.0)
    m.update(1.0)
    before = m.scale
    m.update(1000.0)
    m.update(1000.0)
    assert m.scale < 2 * before  # two in a row are still clipped
    m.update(1000.0)  # the third in a row: the volatility changed
    assert m.scale > 50 * before


def test_margins_ignore_non_finite_residuals_and_pickle() -> None:
    for m in (QuantileMargin(min_points=1), ScaledMargin()):
        for r in (2.0, float("nan"), -1.0, float("inf"), 3.0):
            m.update(r)
        copy = pickle.loads(pickle.dumps(m))
        assert math.isfinite(m.margin()) and copy.margin() == m.margin()
        copy.update(5.0)
        m.update(5.0)
        assert copy.margin() == m.margin()


def test_no_margin_without_evidence() -> None:
    assert QuantileMargin().margin() == 0.0 == ScaledMargin().margin()
    m = ScaledMargin()
    m.update(0.0)  # a perfect forecast gives no scale yet
    assert m.margin() == 0.0
    q = QuantileMargin(min_points=16)
    for r in range(15):
        q.update(float(r))
    assert q.margin() == 0.0
    q.update(15.0)
    assert q.margin() == pytest.approx(11.25)
