"""The piecewise perf-model basis (``PlannerConfig.perf_model_basis = "piecewise"``).

Checked against independent solvers: ``numpy.linalg.lstsq`` on the hinge basis
``[1, x, max(0, x - k_j)]`` (the unconstrained least squares, which the fit must equal whenever
that is already non-decreasing) and ``scipy.optimize.lsq_linear`` (bounded least squares, BVLS)
on the segment-slope basis with a free intercept (the constrained optimum otherwise). Knots are
recomputed here from their definition, not read from the model.
"""

from __future__ import annotations

import math
import pickle
import random

import numpy as np
import pytest
from scipy.optimize import lsq_linear

from operators.perf import AggPerfModel, DecodePerfModel, PrefillPerfModel
from operators.perf.basis import (
    monotone_least_squares,
    non_negative_least_squares,
    segment_knots,
    segment_slope_columns,
)
from operators.state_machine import PlannerStateMachine
from schemas import ForwardPassMetrics, PlannerConfig, ScheduledRequestMetrics
from tests.core.test_perf_conformance import answers, fpms

TOKENS = "sum_prefill_tokens"


def prefill_fpm(tokens: int, wall: float) -> ForwardPassMetrics:
    return ForwardPassMetrics(
        wall_time=wall,
        scheduled_requests=ScheduledRequestMetrics(
            num_prefill_requests=1, sum_prefill_tokens=tokens
        ),
    )


def trained(
    samples: list[tuple[float, float]], basis: str = "piecewise", **params: int
) -> PrefillPerfModel:
    model = PrefillPerfModel(basis=basis, **params)  # type: ignore[arg-type]
    for tokens, wall in samples:
        model.learn_one({TOKENS: tokens}, wall)
    return model


def expected_knots(values: np.ndarray, max_segments: int) -> np.ndarray:
    """Definition: order statistics u[floor(j (n-1) / m + 1/2)] of the distinct values."""
    distinct = np.unique(values)
    m = min(max_segments, len(distinct) - 1)
    return distinct[np.floor(np.arange(m + 1) * (len(distinct) - 1) / m + 0.5).astype(int)]


def hinge_design(x: np.ndarray, knots: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones_like(x), x, *(np.maximum(0.0, x - k) for k in knots[1:-1])])


def predictions(model: PrefillPerfModel, xs: np.ndarray) -> np.ndarray:
    return np.array([model.predict_one({TOKENS: float(v)}) for v in xs])


def convex_samples(seed: int, count: int = 64) -> list[tuple[float, float]]:
    """A per-pass floor plus super-linear work, with a little noise (non-decreasing fit)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        t = float(rng.randint(50, 8192))
        out.append((t, 0.018 + 1.6e-5 * t + 1.2e-9 * t * t + rng.gauss(0.0, 2e-4)))
    return out


# -- knots ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("count", "segments"), [(2, 16), (17, 16), (40, 16), (64, 4), (5, 1)])
def test_knots_are_evenly_spaced_order_statistics(count: int, segments: int) -> None:
    rng = np.random.default_rng(count)
    values = rng.integers(0, 9000, size=count).astype(float)
    values = np.concatenate([values, values[: count // 3]])  # duplicates do not count twice
    knots = segment_knots(values.tolist(), segments)
    np.testing.assert_array_equal(knots, expected_knots(values, segments))
    assert knots[0] == values.min() and knots[-1] == values.max()
    assert np.all(np.diff(knots) > 0)


def test_knots_of_the_profile_grid_are_its_points() -> None:
    isl = [100.0 + 1017.0 * i for i in range(17)]
    assert segment_knots(isl, 16) == tuple(isl)
    assert segment_knots(isl, 8) == tuple(isl[::2])


# -- exact least squares -----------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("bucket_count", [16, 4])
def test_fit_is_the_least_squares_fit_on_the_hinge_basis(seed: int, bucket_count: int) -> None:
    """Convex data: the unconstrained fit is non-decreasing, so the model IS it."""
    model = trained(convex_samples(seed), bucket_count=bucket_count)
    retained = model.samples.samples()
    x = np.array([v[0] for v, _ in retained])
    y = np.array([w for _, w in retained])
    knots = expected_knots(x, bucket_count)
    design = hinge_design(x, knots)
    solution = np.linalg.lstsq(design, y, rcond=None)[0]
    segment_slopes = np.cumsum(solution[1:])
    assert np.all(segment_slopes > 0)  # precondition: the unconstrained fit is monotone
    probe = np.concatenate([x, np.linspace(0, 12_000, 97)])
    expected = np.maximum(1e-6, hinge_design(probe, knots) @ solution)
    np.testing.assert_allclose(predictions(model, probe), expected, rtol=1e-9)
    coefficients = model.coefficients
    assert coefficients is not None
    names = [TOKENS, *(f"{TOKENS}>{k:.15g}" for k in knots[1:-1])]
    assert list(coefficients) == [*names, "intercept"]
    np.testing.assert_allclose(
        [coefficients[n] for n in ["intercept", *names]], solution, rtol=1e-7, atol=1e-12
    )


def wavy_samples(seed: int) -> list[tuple[float, float]]:
    """Non-monotone data (a dip mid-range): the unconstrained fit has a negative segment."""
    rng = random.Random(seed)
    out = []
    for _ in range(64):
        t = float(rng.randint(100, 8000))
        out.append((t, 0.08 + 2e-5 * t - 0.06 * math.exp(-(((t - 4000) / 1000) ** 2))))
    return out


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_non_monotone_data_gets_the_constrained_least_squares_fit(seed: int) -> None:
    model = trained(wavy_samples(seed))
    retained = model.samples.samples()
    x = np.array([v[0] for v, _ in retained])
    y = np.array([w for _, w in retained])
    knots = expected_knots(x, 16)
    unconstrained = np.linalg.lstsq(hinge_design(x, knots), y, rcond=None)[0]
    assert np.min(np.cumsum(unconstrained[1:])) < 0  # precondition: it would decrease somewhere
    # independent solver: BVLS with a free intercept and non-negative segment slopes
    phi = np.column_stack([np.ones_like(x), segment_slope_columns(x, tuple(knots))])
    lower = np.array([-np.inf] + [0.0] * (phi.shape[1] - 1))
    reference = lsq_linear(phi, y, bounds=(lower, np.inf), method="bvls", tol=1e-15).x
    ours = predictions(model, x)
    assert np.sum((ours - y) ** 2) <= np.sum((phi @ reference - y) ** 2) * (1 + 1e-9)
    np.testing.assert_allclose(ours, phi @ reference, rtol=1e-6)
    grid = np.linspace(0.0, 16_000.0, 1601)
    assert np.all(np.diff(predictions(model, grid)) >= 0.0)


def test_exactly_linear_data_gives_the_linear_model() -> None:
    samples = [(float(t), 0.002 + 1e-3 * t) for t in range(100, 3300, 100)]
    linear, piecewise = trained(samples, "linear"), trained(samples)
    coefficients = piecewise.coefficients
    assert coefficients is not None and linear.coefficients is not None
    hinges = {k: v for k, v in coefficients.items() if ">" in k}
    assert len(hinges) == 15 and set(hinges.values()) == {0.0}
    assert coefficients[TOKENS] == pytest.approx(linear.coefficients[TOKENS], rel=1e-12)
    assert coefficients["intercept"] == pytest.approx(linear.coefficients["intercept"], rel=1e-9)
    probe = np.linspace(0, 10_000, 101)
    np.testing.assert_allclose(
        predictions(piecewise, probe), predictions(linear, probe), rtol=1e-9, atol=1e-12
    )
    assert piecewise.estimate_next_ttft(5000, 2048) == pytest.approx(
        linear.estimate_next_ttft(5000, 2048), rel=1e-12
    )


def test_extrapolation_continues_the_end_segments_and_is_floored() -> None:
    # 20 ms floor, then 1e-5 s/token up to 1000 and 3e-5 s/token from 1000 to 2000 (exact data)
    samples = [(t, 0.02 + 1e-5 * min(t, 1000) + 3e-5 * max(0, t - 1000)) for t in (0, 1000, 2000)]
    model = trained([(float(t), w) for t, w in samples], min_observations=3)
    assert model.predict_one({TOKENS: 3000}) == pytest.approx(0.02 + 0.01 + 0.06, rel=1e-12)
    steep = trained([(1000.0, 0.001), (2000.0, 0.011), (3000.0, 0.05)], min_observations=3)
    # below the smallest sample the first segment goes on: 0.001 - 1e-5 · 900 < 0 → 1 µs
    assert steep.predict_one({TOKENS: 100}) == 1e-6


def test_decreasing_data_is_rejected_as_by_the_linear_model() -> None:
    samples = [(float(t), 0.5 - 1e-4 * t) for t in (500, 1000, 1500, 2000, 2500)]
    linear, piecewise = trained(samples, "linear"), trained(samples)
    assert not piecewise.is_ready and piecewise.coefficients is None
    assert piecewise.rejection_reason == linear.rejection_reason
    assert "negative coefficients" in (piecewise.rejection_reason or "")
    assert piecewise.estimate_next_ttft(0, 2048) is None
    assert piecewise.find_best_engine_prefill_rps(500, 1000) == (0.0, 0.0)


def test_min_observations_and_a_single_distinct_value() -> None:
    model = trained([(1000.0, 0.03)] * 4)
    assert not model.is_ready and "insufficient" in (model.rejection_reason or "")
    model.learn_one({TOKENS: 1000}, 0.05)
    # one distinct value: no segment, the mean (as the minimum-norm linear fit)
    assert model.is_ready and model.predict_one({TOKENS: 9999}) == pytest.approx(0.034)
    assert model.coefficients == {TOKENS: 0.0, "intercept": pytest.approx(0.034)}


def test_batched_capacity_search_matches_brute_force() -> None:
    model = trained(convex_samples(7))
    for isl in (300.0, 1000.0, 2500.0):
        rps, ttft_ms = model.find_best_engine_prefill_rps(120, isl, 8192, 256)
        best = max(
            (
                b
                for b in range(1, int(8192 // isl) + 1)
                if 1000 * model.predict_one({TOKENS: b * isl}) <= 120
            ),
            default=1,
        )
        wall = model.predict_one({TOKENS: best * isl})
        assert rps == pytest.approx(best / wall, rel=1e-12)
        assert ttft_ms == pytest.approx(1000 * wall, rel=1e-12)


def test_non_negative_least_squares_matches_bvls_on_random_problems() -> None:
    rng = np.random.default_rng(11)
    for _ in range(200):
        n, k = int(rng.integers(3, 40)), int(rng.integers(1, 12))
        a = rng.normal(size=(n, k)) * 10.0 ** rng.uniform(-3, 3, size=k)
        b = rng.normal(size=n)
        z = non_negative_least_squares(a, b)
        reference = lsq_linear(a, b, bounds=(0, np.inf), method="bvls", tol=1e-15).x
        assert np.all(z >= 0)
        ours, theirs = np.linalg.norm(a @ z - b), np.linalg.norm(a @ reference - b)
        assert ours <= theirs * (1 + 1e-9) + 1e-12


def test_monotone_fit_validates_its_input() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        monotone_least_squares([], [], (4,))
    with pytest.raises(ValueError, match="max_segments"):
        monotone_least_squares([(1.0,), (2.0,)], [0.1, 0.2], (4, 4))
    with pytest.raises(ValueError, match="max_segments"):
        segment_knots([1.0, 2.0], 0)


# -- the model interface -----------------------------------------------------------------------


def test_pickle_clone_and_determinism_under_the_piecewise_basis() -> None:
    model = PrefillPerfModel(max_num_fpm_samples=32, basis="piecewise")
    model.load_benchmark_fpms(fpms(0))
    assert model.is_ready
    restored = pickle.loads(pickle.dumps(model))
    assert answers(restored) == answers(model)
    twin = model.clone()
    assert twin.basis == "piecewise" and twin._get_params()["basis"] == "piecewise"
    assert twin.num_observations == 0
    twin.load_benchmark_fpms(fpms(0))
    assert answers(twin) == answers(model)  # bit for bit
    for cls in (PrefillPerfModel, DecodePerfModel, AggPerfModel):
        assert "basis" not in cls()._get_params()  # linear models keep the reference params


def test_prefill_piecewise_differs_from_linear_on_curved_data() -> None:
    samples = convex_samples(9)
    linear, piecewise = trained(samples, "linear"), trained(samples)
    assert answers(piecewise) != answers(linear)


def test_unknown_basis_is_rejected() -> None:
    with pytest.raises(ValueError, match="basis"):
        PrefillPerfModel(basis="cubic")  # type: ignore[arg-type]


def test_planner_builds_its_models_with_the_configured_basis() -> None:
    config = PlannerConfig(optimization_target="sla", perf_model_basis="piecewise")
    machine = PlannerStateMachine(config)
    assert machine.prefill_model is not None and machine.prefill_model.basis == "piecewise"
    assert machine.decode_model is not None and machine.decode_model.basis == "linear"  # always
    reference = PlannerStateMachine(config.reference_variant())
    assert reference.prefill_model is not None and reference.prefill_model.basis == "linear"
    agg = PlannerStateMachine(PlannerConfig(mode="agg", optimization_target="sla"))
    assert agg.agg_model is not None and agg.agg_model.basis == "linear"


def test_a_linear_fit_below_zero_at_short_prompts_is_warned_of_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A TTFT growing with the square of the prompt has a straight-line fit with a negative
    intercept: short prompts are then priced at the 1 µs floor. The warning names where, once
    while it lasts; the piecewise basis, and a linear profile, are not warned of."""
    convex = [(t, 0.02 + 2e-8 * t * t) for t in (500, 1000, 2000, 4000, 8000, 16000)]
    model = trained(convex, basis="linear")
    with caplog.at_level("WARNING", logger="operators.perf.regression"):
        assert model.predict_one({TOKENS: 100}) == 1e-6
        first = model.coefficients
        model.learn_one({TOKENS: 16000}, convex[-1][1])  # a refit, still below zero
        assert model.predict_one({TOKENS: 100}) == 1e-6 and model.coefficients != first
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert first is not None
    intercept = first["intercept"]
    zero = -intercept / first[TOKENS]
    assert f"{TOKENS} < {zero:.4g}" in warnings[0] and "perf_model_basis: piecewise" in warnings[0]
    assert intercept < 0 and 500 < zero < 16000

    caplog.clear()
    with caplog.at_level("WARNING", logger="operators.perf.regression"):
        piecewise = trained(convex)
        assert piecewise.predict_one({TOKENS: 500}) == pytest.approx(convex[0][1], rel=1e-9)
        linear = trained([(t, 0.02 + 1e-5 * t) for t, _ in convex], basis="linear")
        assert linear.predict_one({TOKENS: 100}) == pytest.approx(0.021)
    assert caplog.records == []
