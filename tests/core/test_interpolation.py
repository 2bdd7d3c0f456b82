"""Classic-path profile interpolators (reference spec §6.2) against the shipped H200 profile
and small synthetic sweeps whose answers are known by hand."""

from __future__ import annotations

import itertools
import pickle
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.interpolate import interp1d

from connectors.profiles import load_profile
from operators.interpolation import DecodeInterpolator, PrefillInterpolator
from schemas.profile import DecodeProfile, PerformanceProfile, PrefillProfile

SHIPPED = Path(__file__).resolve().parents[1] / "data/profiles/h200_llama3.1-8b-fp8_tp1"


@pytest.fixture(scope="module")
def shipped() -> PerformanceProfile:
    return load_profile(SHIPPED)


@pytest.fixture(scope="module")
def prefill(shipped: PerformanceProfile) -> PrefillInterpolator:
    assert shipped.prefill is not None
    return PrefillInterpolator(shipped.prefill)


@pytest.fixture(scope="module")
def decode(shipped: PerformanceProfile) -> DecodeInterpolator:
    assert shipped.decode is not None
    return DecodeInterpolator(shipped.decode)


# -- prefill -----------------------------------------------------------------------------------


def test_prefill_is_exact_at_the_profiled_points(
    shipped: PerformanceProfile, prefill: PrefillInterpolator
) -> None:
    p = shipped.prefill
    assert p is not None
    for isl, ttft, thpt in zip(p.prefill_isl, p.prefill_ttft, p.prefill_thpt_per_gpu, strict=True):
        assert prefill.interpolate_ttft(isl) == pytest.approx(ttft, rel=1e-12)
        assert prefill.interpolate_thpt_per_gpu(isl) == pytest.approx(thpt, rel=1e-12)


def test_prefill_is_the_scipy_cubic_interp1d_curve(
    shipped: PerformanceProfile, prefill: PrefillInterpolator
) -> None:
    p = shipped.prefill
    assert p is not None
    ttft = interp1d(p.prefill_isl, p.prefill_ttft, kind="cubic")
    thpt = interp1d(p.prefill_isl, p.prefill_thpt_per_gpu, kind="cubic")
    for isl in np.linspace(100, 16372, 401):
        assert prefill.interpolate_ttft(isl) == pytest.approx(float(ttft(isl)), rel=1e-12)
        assert prefill.interpolate_thpt_per_gpu(isl) == pytest.approx(float(thpt(isl)), rel=1e-12)


def test_prefill_clamps_isl_to_the_profiled_range(
    shipped: PerformanceProfile, prefill: PrefillInterpolator
) -> None:
    p = shipped.prefill
    assert p is not None
    assert (prefill.min_isl, prefill.max_isl) == (100.0, 16372.0)
    for below in (99.0, 1.0, 0.0, -5000.0):
        assert prefill.interpolate_ttft(below) == prefill.interpolate_ttft(100)
        assert prefill.interpolate_thpt_per_gpu(below) == prefill.interpolate_thpt_per_gpu(100)
    for above in (16373.0, 50_000.0, 1e12):
        assert prefill.interpolate_ttft(above) == prefill.interpolate_ttft(16372)
        assert prefill.interpolate_thpt_per_gpu(above) == prefill.interpolate_thpt_per_gpu(16372)
    # the clamped answers are the profile's own end points
    ends = sorted(zip(p.prefill_isl, p.prefill_ttft, strict=True))
    assert prefill.interpolate_ttft(0) == pytest.approx(ends[0][1], rel=1e-12)
    assert prefill.interpolate_ttft(1e6) == pytest.approx(ends[-1][1], rel=1e-12)


def test_prefill_throughput_stays_positive_between_points(
    shipped: PerformanceProfile, prefill: PrefillInterpolator
) -> None:
    p = shipped.prefill
    assert p is not None
    thpt = [prefill.interpolate_thpt_per_gpu(isl) for isl in range(100, 16373, 7)]
    # the cubic curve never undershoots the smallest profiled value (the one at ISL 100)
    assert min(thpt) == pytest.approx(min(p.prefill_thpt_per_gpu))
    assert min(p.prefill_thpt_per_gpu) == p.prefill_thpt_per_gpu[p.prefill_isl.index(100.0)]


def test_prefill_accepts_unsorted_points() -> None:
    isl, ttft, thpt = [1000, 2000, 3000, 4000, 5000], [20, 35, 60, 80, 110], [3, 4, 5, 6, 5]
    order = [3, 0, 4, 2, 1]
    shuffled = PrefillInterpolator(
        PrefillProfile(
            prefill_isl=[isl[i] for i in order],
            prefill_ttft=[ttft[i] for i in order],
            prefill_thpt_per_gpu=[thpt[i] for i in order],
        )
    )
    ordered = PrefillInterpolator(
        PrefillProfile(prefill_isl=isl, prefill_ttft=ttft, prefill_thpt_per_gpu=thpt)
    )
    for x in (1000, 1500, 2750, 4999):
        assert shuffled.interpolate_ttft(x) == ordered.interpolate_ttft(x)
        assert shuffled.interpolate_thpt_per_gpu(x) == ordered.interpolate_thpt_per_gpu(x)


@pytest.mark.parametrize(
    ("isl", "message"),
    [
        ([100, 200, 300], "at least 4 points"),
        ([100, 200, 200, 300], "distinct"),
    ],
)
def test_prefill_rejects_profiles_a_cubic_cannot_fit(isl: list[float], message: str) -> None:
    profile = PrefillProfile(
        prefill_isl=isl, prefill_ttft=[1.0] * len(isl), prefill_thpt_per_gpu=[1.0] * len(isl)
    )
    with pytest.raises(ValueError, match=message):
        PrefillInterpolator(profile)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_prefill_rejects_non_finite_isl(prefill: PrefillInterpolator, bad: float) -> None:
    with pytest.raises(ValueError, match="isl must be finite"):
        prefill.interpolate_ttft(bad)


# -- decode: a planar sweep, answers known by hand ----------------------------------------------


def _planar_itl(kv: Any, ctx: Any) -> Any:
    return 5.0 + 20.0 * kv + 0.001 * ctx


@pytest.fixture(scope="module")
def planar() -> DecodeInterpolator:
    """ITL = 5 + 20·kv + 0.001·ctx ms, throughput = 10 000·kv; samples on kv {0.1..0.9} ×
    ctx {1000, 2000, 3000, 4000}; a 101-point grid (kv step 0.01, ctx step 40 tokens)."""
    kvs, ctxs = [0.1, 0.3, 0.5, 0.7, 0.9], [1000.0, 2000.0, 3000.0, 4000.0]
    points = [(kv, ctx) for ctx in ctxs for kv in kvs]
    profile = DecodeProfile(
        x_kv_usage=[kv for kv, _ in points],
        y_context_length=[ctx for _, ctx in points],
        z_itl=[_planar_itl(kv, ctx) for kv, ctx in points],
        z_thpt_per_gpu=[10_000.0 * kv for kv, _ in points],
        max_kv_tokens=400_000,
    )
    return DecodeInterpolator(profile, resolution=101)


def test_decode_grid_reproduces_a_planar_sweep_inside_the_samples(
    planar: DecodeInterpolator,
) -> None:
    # ctx 2000 (row 50), 100 requests → kv 0.5 (column 50)
    assert planar.grid_index(100, 2000) == (50, 50)
    assert planar.interpolate_itl(100, 2000) == pytest.approx(17.0, rel=1e-9)
    assert planar.interpolate_thpt_per_gpu(100, 2000) == pytest.approx(5000.0, rel=1e-9)
    # kv 0.3 at ctx 3200: 37.5 requests × 3200 / 400 000 = 0.3 → column 30, row 80
    assert planar.grid_index(37.5, 3200) == (30, 80)
    assert planar.interpolate_itl(37.5, 3200) == pytest.approx(5 + 6 + 3.2, rel=1e-7)
    assert planar.interpolate_thpt_per_gpu(37.5, 3200) == pytest.approx(3000.0, rel=1e-7)
    # every cell inside the samples (kv 0.1..0.9 = columns 10..90, ctx 1000..4000 = rows
    # 25..100), to the tolerance of scipy's iterative Clough-Tocher gradient estimate
    kv, ctx = np.meshgrid(planar.xi[10:91], planar.yi[25:])
    np.testing.assert_allclose(planar.itl_grid[25:, 10:91], _planar_itl(kv, ctx), rtol=1e-7)
    np.testing.assert_allclose(planar.thpt_grid[25:, 10:91], 10_000.0 * kv, rtol=1e-7)


def test_decode_fills_cells_outside_the_samples_with_the_nearest_sample(
    planar: DecodeInterpolator,
) -> None:
    # kv 1.0 at ctx 4000 is outside the hull (kv ≤ 0.9): nearest sample (0.9, 4000)
    assert planar.interpolate_itl(1e9, 4000) == _planar_itl(0.9, 4000)
    assert planar.interpolate_thpt_per_gpu(1e9, 4000) == 9000.0
    # the (0, 0) corner: nearest sample (0.1, 1000) — context dominates the raw distance
    assert planar.interpolate_itl(0, 0) == _planar_itl(0.1, 1000)
    assert not np.isnan(planar.itl_grid).any()
    assert not np.isnan(planar.thpt_grid).any()


def test_decode_find_best_scans_for_the_highest_kv_meeting_the_itl(
    planar: DecodeInterpolator,
) -> None:
    # ctx 2000: ITL = 7 + 20·kv ⇒ kv ≤ 0.5 meets 17 ms; 0.5 is a grid column
    thpt, itl, kv = planar.find_best_throughput_per_gpu(17.0 + 1e-9, 2000)
    assert kv == pytest.approx(0.5)
    assert itl == pytest.approx(17.0, rel=1e-9)
    assert thpt == pytest.approx(5000.0, rel=1e-9)
    # 16.9 ms ⇒ kv ≤ 0.495 ⇒ the 0.49 column
    assert planar.find_best_throughput_per_gpu(16.9, 2000)[2] == pytest.approx(0.49)
    # nothing meets 1 ms: the kv = 0 cell, whose ITL (nearest sample) is reported above target
    thpt, itl, kv = planar.find_best_throughput_per_gpu(1.0, 2000)
    assert (kv, itl, thpt) == (0.0, _planar_itl(0.1, 2000), 1000.0)


# -- decode: the shipped profile --------------------------------------------------------------


def test_decode_grid_is_the_reference_grid(decode: DecodeInterpolator) -> None:
    assert decode.itl_grid.shape == decode.thpt_grid.shape == (100, 100)
    assert decode.xi[0] == 0.0 and decode.xi[-1] == 1.0
    assert decode.yi[0] == 0.0 and decode.yi[-1] == 13585.0
    assert decode.max_kv_tokens == 945029
    assert np.isfinite(decode.itl_grid).all() and np.isfinite(decode.thpt_grid).all()
    # kv = 100·2997/945029 = 0.3171 → column round(31.40) = 31; row round(2997·99/13585) = 22
    assert decode.grid_index(100, 2997) == (31, 22)
    assert decode.interpolate_itl(100, 2997) == decode.itl_grid[22, 31]
    assert decode.interpolate_thpt_per_gpu(100, 2997) == decode.thpt_grid[22, 31]


def test_decode_clamps_queries_to_the_grid_edges(
    shipped: PerformanceProfile, decode: DecodeInterpolator
) -> None:
    p = shipped.decode
    assert p is not None
    samples = sorted(zip(p.y_context_length, p.x_kv_usage, p.z_itl, p.z_thpt_per_gpu, strict=True))
    # beyond kv 1 and the longest context: the corner cell holds the nearest sample, the most
    # loaded one at the longest context (0.963, 13585)
    longest = samples[-1]
    assert (longest[0], round(longest[1], 3)) == (13585.0, 0.963)
    assert decode.grid_index(1e9, 1e9) == (99, 99)
    assert decode.interpolate_itl(1e9, 1e9) == longest[2]
    assert decode.interpolate_thpt_per_gpu(1e9, 1e9) == longest[3]
    # no load, no context: the (0, 0) cell, the least loaded sample at the shortest context
    # (0.00037, 350)
    shortest = samples[0]
    assert (shortest[0], round(shortest[1], 5)) == (350.0, 0.00037)
    assert decode.grid_index(-5, -100) == (0, 0)
    assert decode.interpolate_itl(0, 0) == shortest[2]
    assert decode.interpolate_thpt_per_gpu(0, 0) == shortest[3]


def _profile_rows(profile: DecodeProfile) -> dict[float, list[tuple[float, float]]]:
    rows: dict[float, list[tuple[float, float]]] = defaultdict(list)
    for kv, ctx, itl in zip(
        profile.x_kv_usage, profile.y_context_length, profile.z_itl, strict=True
    ):
        rows[ctx].append((kv, itl))
    return {ctx: sorted(row) for ctx, row in rows.items()}


def test_decode_itl_is_monotone_in_kv_usage_where_the_data_is(
    shipped: PerformanceProfile, decode: DecodeInterpolator
) -> None:
    assert shipped.decode is not None
    rows = _profile_rows(shipped.decode)
    monotone_rows = [
        ctx for ctx, row in rows.items() if all(a[1] < b[1] for a, b in itertools.pairwise(row))
    ]
    assert monotone_rows == [2997.0, 5644.0, 8291.0, 10938.0, 13585.0]  # 350 is not
    for ctx in monotone_rows:
        kv_lo, kv_hi = rows[ctx][0][0], rows[ctx][-1][0]
        concurrencies = np.linspace(kv_lo, kv_hi, 200) * decode.max_kv_tokens / ctx
        itl = [decode.interpolate_itl(c, ctx) for c in concurrencies]
        assert all(a <= b for a, b in itertools.pairwise(itl)), ctx
        # and it spans the data's range at that context
        assert itl[0] == pytest.approx(rows[ctx][0][1], rel=0.1)
        assert itl[-1] == pytest.approx(rows[ctx][-1][1], rel=0.1)


@pytest.mark.parametrize("ctx", [2997.0, 5644.0, 8291.0, 13585.0])
@pytest.mark.parametrize("target", [10.0, 15.0, 20.0, 30.0])
def test_decode_find_best_is_the_last_cell_meeting_the_itl(
    decode: DecodeInterpolator, ctx: float, target: float
) -> None:
    thpt, itl, kv = decode.find_best_throughput_per_gpu(target, ctx)
    ix, iy = round(kv * 99), decode.grid_index(0, ctx)[1]
    assert (thpt, itl) == (decode.thpt_grid[iy, ix], decode.itl_grid[iy, ix])
    assert itl <= target
    assert (decode.itl_grid[iy, ix + 1 :] > target).all()


def test_decode_find_best_stays_within_the_data_bracket(decode: DecodeInterpolator) -> None:
    # at ctx 2997 the data has 15.48 ms at kv 0.3076 and 22.13 ms at kv 0.4598
    thpt, _, kv = decode.find_best_throughput_per_gpu(20.0, 2997)
    assert 0.3076 < kv < 0.4598
    assert 6101.49 < thpt < 6370.91  # the data's throughputs at those two samples


def test_decode_find_best_scans_past_a_non_monotone_bump(decode: DecodeInterpolator) -> None:
    # ctx 350: ITL rises to ~46 ms at kv ~0.4 then falls back to ~42.6 ms at high KV usage
    _, itl, kv = decode.find_best_throughput_per_gpu(43.0, 350)
    assert kv == 1.0 and itl <= 43.0
    iy = decode.grid_index(0, 350)[1]
    assert (decode.itl_grid[iy] > 43.0).any()  # a bisection would have stopped at the bump


@pytest.mark.parametrize("target", [15.0, 20.0, 25.0, 30.0])
def test_decode_longer_contexts_give_less_throughput_at_the_same_itl(
    decode: DecodeInterpolator, target: float
) -> None:
    contexts = (2997, 5644, 8291, 10938, 13585)  # the profiled contexts above 350
    thpt = [decode.find_best_throughput_per_gpu(target, ctx)[0] for ctx in contexts]
    assert all(a > b for a, b in itertools.pairwise(thpt))


def test_decode_answers_beyond_every_itl_and_below_every_itl(decode: DecodeInterpolator) -> None:
    iy = decode.grid_index(0, 2997)[1]
    assert decode.find_best_throughput_per_gpu(1000.0, 2997) == (
        decode.thpt_grid[iy, 99],
        decode.itl_grid[iy, 99],
        1.0,
    )
    thpt, itl, kv = decode.find_best_throughput_per_gpu(1.0, 2997)
    assert kv == 0.0 and itl > 1.0 and thpt == decode.thpt_grid[iy, 0]


def test_decode_is_deterministic_and_pickles(
    shipped: PerformanceProfile, decode: DecodeInterpolator
) -> None:
    assert shipped.decode is not None
    again = DecodeInterpolator(shipped.decode)
    assert np.array_equal(again.itl_grid, decode.itl_grid)
    assert np.array_equal(again.thpt_grid, decode.thpt_grid)
    restored = pickle.loads(pickle.dumps(decode))
    assert restored.find_best_throughput_per_gpu(20.0, 5000) == (
        decode.find_best_throughput_per_gpu(20.0, 5000)
    )
    with pytest.raises(ValueError, match="read-only"):
        decode.itl_grid[0, 0] = 0.0


def test_prefill_pickles(prefill: PrefillInterpolator) -> None:
    restored = pickle.loads(pickle.dumps(prefill))
    assert restored.interpolate_ttft(3000) == prefill.interpolate_ttft(3000)


def _decode_profile(ctxs: list[float], kvs: list[float]) -> DecodeProfile:
    n = len(ctxs)
    return DecodeProfile(
        x_kv_usage=kvs,
        y_context_length=ctxs,
        z_itl=[10.0] * n,
        z_thpt_per_gpu=[100.0] * n,
        max_kv_tokens=1000,
    )


@pytest.mark.parametrize(
    ("profile", "resolution", "message"),
    [
        (_decode_profile([1000.0] * 4, [0.1, 0.2, 0.3, 0.4]), 100, "cannot be triangulated"),
        (_decode_profile([1000.0, 2000.0], [0.1, 0.2]), 100, "cannot be triangulated"),
        (_decode_profile([0.0, 0.0, 0.0], [0.1, 0.2, 0.3]), 100, "context length > 0"),
        (_decode_profile([1000.0, 2000.0, 1000.0], [0.1, 0.2, 0.3]), 1, "resolution"),
    ],
)
def test_decode_rejects_profiles_it_cannot_grid(
    profile: DecodeProfile, resolution: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        DecodeInterpolator(profile, resolution=resolution)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_decode_rejects_non_finite_queries(decode: DecodeInterpolator, bad: float) -> None:
    with pytest.raises(ValueError, match="must be finite"):
        decode.interpolate_itl(bad, 3000)
    with pytest.raises(ValueError, match="must be finite"):
        decode.interpolate_itl(10, bad)
    with pytest.raises(ValueError, match="must be finite"):
        decode.find_best_throughput_per_gpu(bad, 3000)
