"""Perf models against the reference acceptance cases (spec §16.2) and exact least squares.

Numbers marked "derived" in the spec are computed from the formulas with an exact OLS fit; they are
asserted tightly here. Where collinear training data makes the split between features ambiguous,
the reference (sklearn / lstsq) takes the minimum-norm split, and so do the derivations below.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from operators.perf import (
    MIN_WALL_TIME_S,
    AggPerfModel,
    BucketedSampleStore,
    DecodePerfModel,
    MovingAverage,
    PrefillPerfModel,
    least_squares,
)
from operators.perf.agg import balanced_batch_limit
from schemas import ForwardPassMetrics, QueuedRequestMetrics, ScheduledRequestMetrics


def prefill_fpm(tokens: int, wall: float = 0.01, num: int = 1) -> ForwardPassMetrics:
    return ForwardPassMetrics(
        wall_time=wall,
        scheduled_requests=ScheduledRequestMetrics(
            num_prefill_requests=num, sum_prefill_tokens=tokens
        ),
    )


def decode_fpm(num: int, kv: int, wall: float = 0.01) -> ForwardPassMetrics:
    return ForwardPassMetrics(
        wall_time=wall,
        scheduled_requests=ScheduledRequestMetrics(
            num_decode_requests=num, sum_decode_kv_tokens=kv
        ),
    )


def agg_fpm(
    prefill: int, kv: int, wall: float, num_prefill: int = 1, num_decode: int = 10
) -> ForwardPassMetrics:
    return ForwardPassMetrics(
        wall_time=wall,
        scheduled_requests=ScheduledRequestMetrics(
            num_prefill_requests=num_prefill,
            sum_prefill_tokens=prefill,
            num_decode_requests=num_decode,
            sum_decode_kv_tokens=kv,
        ),
    )


def case3_prefill(min_observations: int = 3) -> PrefillPerfModel:
    """§16.2 case 3: tokens {500..2500}, wall = 0.001 t + 0.002."""
    model = PrefillPerfModel(max_num_fpm_samples=50, min_observations=min_observations)
    for t in (500, 1000, 1500, 2000, 2500):
        model.add_observation(prefill_fpm(t, 0.001 * t + 0.002))
    return model


def case11_decode() -> DecodePerfModel:
    """§16.2 case 11: (n, kv) = (5,5000)…(40,40000), wall = 1e-5 kv + 0.001."""
    model = DecodePerfModel(max_num_fpm_samples=50)
    for n in (5, 10, 20, 30, 40):
        model.add_observation(decode_fpm(n, 1000 * n, 1e-5 * 1000 * n + 0.001))
    return model


def case12_agg() -> AggPerfModel:
    """§16.2 case 12: (p, d) = (100,1000)…(500,5000), wall = 0.001 p + 0.0001 d + 0.001."""
    model = AggPerfModel(max_num_fpm_samples=50)
    for i in range(1, 6):
        p, d = 100 * i, 1000 * i
        model.add_observation(agg_fpm(p, d, 0.001 * p + 0.0001 * d + 0.001))
    return model


# -- §16.2 cases 1-8: prefill ------------------------------------------------------------------


def test_case1_empty_prefill_model_is_not_ready() -> None:
    model = PrefillPerfModel(max_num_fpm_samples=50, min_observations=5, bucket_count=16)
    assert not model.has_sufficient_data()
    assert model.estimate_next_ttft(0, 2048) is None
    assert model.find_best_engine_prefill_rps(500, 1000) == (0.0, 0.0)
    assert not model.is_ready and model.coefficients is None
    assert model.predict_one({"sum_prefill_tokens": 1000}) == 0.0  # documented: 0.0 = not ready


def test_case2_heartbeat_is_not_a_sample() -> None:
    model = PrefillPerfModel(max_num_fpm_samples=50)
    model.add_observation(prefill_fpm(100, wall=0.0))
    assert model.num_observations == 0
    assert model.avg_isl == 100.0  # moving averages are updated even by heartbeats


def test_case3_estimate_next_ttft_of_average_request() -> None:
    model = case3_prefill(min_observations=3)
    assert model.has_sufficient_data()
    # derived: avg_isl 1500 → one chunk → 0.001 * 1500 + 0.002
    assert model.estimate_next_ttft(0, 2048) == pytest.approx(1.502, rel=1e-12)


def test_case3_min_observations_gate() -> None:
    model = PrefillPerfModel(max_num_fpm_samples=50, min_observations=3)
    model.add_observation(prefill_fpm(500, 0.502))
    model.add_observation(prefill_fpm(1000, 1.002))
    assert not model.has_sufficient_data() and model.estimate_next_ttft(0, 2048) is None
    assert "insufficient" in (model.rejection_reason or "")
    model.add_observation(prefill_fpm(1500, 1.502))
    assert model.has_sufficient_data() and model.is_ready


def test_case4_chunked_prefill_of_a_long_queue() -> None:
    model = PrefillPerfModel(max_num_fpm_samples=50)
    for t in (100, 200, 300, 400, 500):
        model.add_observation(prefill_fpm(t, 0.001 * t))
    # derived: 5000 queued + avg 300 → chunks 2048 + 2048 + 1204 → 5.300 s
    assert model.estimate_next_ttft(5000, 2048) == pytest.approx(5.3, rel=1e-9)


def test_case5_avg_isl() -> None:
    model = PrefillPerfModel(max_num_fpm_samples=50)
    for t in (1000, 2000, 3000):
        model.add_observation(prefill_fpm(t))
    assert model.avg_isl == 2000.0
    model.add_observation(prefill_fpm(3000, num=2))  # 1500 tokens per request
    assert model.avg_isl == pytest.approx((1000 + 2000 + 3000 + 1500) / 4)
    assert model.avg_num_prefill == pytest.approx(5 / 4)


def test_case6_best_engine_prefill_rps() -> None:
    model = case3_prefill()
    rps, ttft_ms = model.find_best_engine_prefill_rps(ttft_sla_ms=2000, isl=1000)
    assert rps == pytest.approx(1 / 1.002, rel=1e-12)  # derived 0.99800
    assert ttft_ms == pytest.approx(1002.0, rel=1e-12)
    assert model.find_best_engine_prefill_rps(ttft_sla_ms=2000, isl=0) == (0.0, 0.0)
    # SLA missed: the rate is still returned, the caller compares ttft_ms with its SLA.
    assert model.find_best_engine_prefill_rps(ttft_sla_ms=500, isl=1000)[1] == pytest.approx(1002)


def test_case6_chunked_isl() -> None:
    model = case3_prefill()
    # isl == mbt is a single pass; isl > mbt is full chunks + tail: 2 * pred(2048) + pred(904)
    assert model.find_best_engine_prefill_rps(1e9, 2048, 2048)[1] == pytest.approx(2050.0)
    rps, ttft_ms = model.find_best_engine_prefill_rps(1e9, 5000, 2048)
    assert ttft_ms == pytest.approx(2 * 2050.0 + 906.0, rel=1e-12)
    assert rps == pytest.approx(1 / 5.006, rel=1e-12)


def test_case7_load_benchmark_fpms() -> None:
    model = PrefillPerfModel(max_num_fpm_samples=50)
    fpms = [prefill_fpm(t, 0.001 * t + 0.002) for t in (500, 1000, 1500, 2000, 2500)]
    model.load_benchmark_fpms(fpms)
    assert model.num_observations == 5 and model.has_sufficient_data()
    assert model.estimate_next_ttft(0, 2048) is not None


def case8_prefill() -> PrefillPerfModel:
    model = PrefillPerfModel(max_num_fpm_samples=50)
    for t in range(500, 4001, 500):
        model.add_observation(prefill_fpm(t, 0.001 * t))
    return model


def test_case8_kv_hit_rate_discount() -> None:
    model = case3_prefill()
    assert model.estimate_next_ttft(3000, 2048, None) == model.estimate_next_ttft(3000, 2048, 0.0)
    model = case8_prefill()
    no_hit = model.estimate_next_ttft(4000, 100_000, 0.0)
    half = model.estimate_next_ttft(4000, 100_000, 0.5)
    assert no_hit == pytest.approx(6.25, rel=1e-9)  # derived: (4000 + 2250) tokens
    assert half == pytest.approx(3.125, rel=1e-9)
    assert half / no_hit < 0.75


@pytest.mark.parametrize(
    ("hit", "same_as"), [(1.5, 0.95), (-0.3, 0.0), (float("nan"), 0.0), (math.inf, 0.95)]
)
def test_case8_kv_hit_rate_clamp(hit: float, same_as: float) -> None:
    model = case8_prefill()
    assert model.estimate_next_ttft(4000, 100_000, hit) == model.estimate_next_ttft(
        4000, 100_000, same_as
    )
    assert model.estimate_next_ttft(4000, 100_000, 0.95) == pytest.approx(0.3125, rel=1e-9)


def test_estimate_next_ttft_needs_positive_mbt_and_is_zero_for_no_work() -> None:
    model = case3_prefill()
    assert model.estimate_next_ttft(1000, 0) is None
    empty = PrefillPerfModel(min_observations=1)
    empty.learn_one({"sum_prefill_tokens": 100}, 0.1)
    assert empty.avg_isl == 0.0  # learn_one bypasses the FPM moving averages
    assert empty.estimate_next_ttft(0, 2048) == 0.0


# -- §16.2 case 9: retirement ----------------------------------------------------------------


def test_case9_retirement_prefill_increasing() -> None:
    model = PrefillPerfModel(max_num_fpm_samples=10, bucket_count=4)
    for i in range(1, 21):
        model.add_observation(prefill_fpm(100 * i, 0.001 * i))
    assert model.num_observations == 10
    kept = [x[0] for x, _ in model.samples.samples()]
    assert kept[-1] == 2000.0  # the newest sample is never the one retired


def test_case9_retirement_keeps_the_sparse_end() -> None:
    model = PrefillPerfModel(max_num_fpm_samples=6, bucket_count=16)
    for t in (100, 110, 120, 5000, 5100, 5200, 105):
        model.add_observation(prefill_fpm(t, 0.001 * t))
    assert model.num_observations == 6
    kept = [x[0] for x, _ in model.samples.samples()]
    assert kept == [110.0, 120.0, 5000.0, 5100.0, 5200.0, 105.0]  # oldest small one retired


def test_case9_retirement_decode_identical_samples() -> None:
    model = DecodePerfModel(max_num_fpm_samples=10)
    for _ in range(15):
        model.add_observation(decode_fpm(32, 32_000, 0.3))
    model.add_observation(decode_fpm(1, 1000, 0.011))
    assert model.num_observations == 10
    assert ((1.0, 1000.0), 0.011) in model.samples.samples()


def test_case9_retirement_agg() -> None:
    model = AggPerfModel(max_num_fpm_samples=8, bucket_count=16)
    for i in range(12):
        model.add_observation(agg_fpm(100 * (i % 4 + 1), 1000 * (i % 3 + 1), 0.01 + 0.001 * i))
    assert model.num_observations == 8
    assert model.samples.buckets_per_axis == 4  # isqrt(16) per axis


def test_retirement_tie_goes_to_the_bucket_with_the_oldest_sample() -> None:
    store = BucketedSampleStore(ndim=1, max_samples=4, buckets_per_axis=3)
    for v in (0.0, 100.0, 1.0, 99.0):  # low: [0, 1], high: [100, 99]
        store.add((v,), 0.1)
    store.add((2.0,), 0.1)  # low is fattest (3): its oldest (0.0) goes
    assert [x[0] for x, _ in store.samples()] == [100.0, 1.0, 99.0, 2.0]
    store.add((50.0,), 0.1)  # low [1, 2] and high [100, 99] tie; high holds the oldest sample
    assert [x[0] for x, _ in store.samples()] == [1.0, 99.0, 2.0, 50.0]
    assert store.bucket_sizes() == {(0,): 2, (1,): 1, (2,): 1}


def test_rebucketing_when_bounds_widen() -> None:
    store = BucketedSampleStore(ndim=1, max_samples=10, buckets_per_axis=2)
    store.add((0.0,), 0.1)
    store.add((10.0,), 0.1)
    assert store.bucket_sizes() == {(0,): 1, (1,): 1}
    store.add((100.0,), 0.1)  # bounds now [0, 100]: 0 and 10 share bucket 0
    assert store.bucket_sizes() == {(0,): 2, (1,): 1}


# -- §16.2 cases 10-11: decode ---------------------------------------------------------------


def test_case10_decode_estimate_next_itl() -> None:
    model = DecodePerfModel(max_num_fpm_samples=50)
    for n, kv in ((5, 1000), (10, 2000), (15, 3000), (20, 4000), (25, 5000)):
        model.add_observation(decode_fpm(n, kv, 0.0001 * kv + 0.0005 * n + 0.001))
    # kv = 200 n is collinear: minimum-norm split of 0.0205 s per request along (1, 200).
    # Next request: n = avg 15 + 1, kv = 3000 + avg 200 → 0.001 + 0.0205 * (16 + 200·3200)/40001.
    assert model.estimate_next_itl(3000, 0) == pytest.approx(0.329, rel=1e-9)


def test_case10_avg_decode_length() -> None:
    model = DecodePerfModel(max_num_fpm_samples=50)
    for kv in (1000, 2000, 3000):
        model.add_observation(decode_fpm(10, kv))
    assert model.avg_decode_length == pytest.approx(200.0, abs=1e-9)
    assert model.avg_num_decode == 10.0
    assert model.max_observed_kv == 3000


def test_case11_best_engine_decode_rps() -> None:
    model = case11_decode()
    rps, itl_ms = model.find_best_engine_decode_rps(itl_ms=50, context_length=1000, osl=150)
    # derived: kv_cap 40000 / 1000 = 40, best batch 4 → 0.001 + 4·0.01 = 41 ms
    assert itl_ms == pytest.approx(41.0, rel=1e-6)
    assert rps == pytest.approx(4 / (150 * 0.041), rel=1e-6)  # 0.6504
    assert model.find_best_engine_decode_rps(50, 0, 150) == (0.0, 0.0)
    assert model.find_best_engine_decode_rps(50, 1000, 0) == (0.0, 0.0)
    assert model.find_best_engine_decode_rps(0, 1000, 150) == (0.0, 0.0)


def test_case11_throughput_context_length_of_traffic() -> None:
    """§16.3 case 11 (derived): ctx = 1000 + 150/2 → kv_cap 37, batch 4, ITL 44 ms, rps 0.606."""
    rps, itl_ms = case11_decode().find_best_engine_decode_rps(50, 1075, 150)
    assert itl_ms == pytest.approx(44.0, rel=1e-6)
    assert rps == pytest.approx(4 / (150 * 0.044), rel=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "batch"),
    [
        ({"max_kv_tokens": 3000}, 3),  # KV holds 3 contexts of 1000
        ({"max_num_seqs": 2}, 2),
        ({"max_kv_tokens": 100_000, "max_num_seqs": 0}, 4),  # 0 = unset
        ({"accept_length": 2.0}, 9),  # ITL = (1 + 10 bs) ms / 2 <= 50 → bs 9
        ({"accept_length": 2.0, "max_kv_tokens": 8000}, 8),
    ],
)
def test_decode_batch_caps_and_accept_length(kwargs: dict[str, float], batch: int) -> None:
    rps, itl_ms = case11_decode().find_best_engine_decode_rps(50, 1000, 150, **kwargs)  # type: ignore[arg-type]
    accept = kwargs.get("accept_length", 1.0)
    forward_s = 0.001 + 0.01 * batch
    assert itl_ms == pytest.approx(1000 * forward_s / accept, rel=1e-6)
    assert rps == pytest.approx(batch * accept / (150 * forward_s), rel=1e-6)


@pytest.mark.parametrize("accept", [0.5, float("nan"), math.inf])
def test_decode_invalid_accept_length_means_one(accept: float) -> None:
    model = case11_decode()
    assert model.find_best_engine_decode_rps(
        50, 1000, 150, accept_length=accept
    ) == model.find_best_engine_decode_rps(50, 1000, 150)


def test_decode_sla_missed_at_batch_one_returns_batch_one() -> None:
    rps, itl_ms = case11_decode().find_best_engine_decode_rps(5, 1000, 150)
    assert itl_ms == pytest.approx(11.0, rel=1e-6)
    assert rps == pytest.approx(1 / (150 * 0.011), rel=1e-6)


def test_decode_batch_whose_itl_equals_the_sla_is_chosen() -> None:
    # protects: decode capacity uses the largest batch with ITL <= SLA (spec §3.4) — a batch
    # exactly at the SLA counts; the tie is the model's own ITL of batch 4 (41 ms)
    model = case11_decode()
    tie_ms = 1000.0 * model.predict_one({"num_decode_requests": 4, "sum_decode_kv_tokens": 4000})
    assert tie_ms == pytest.approx(41.0)
    rps, itl_ms = model.find_best_engine_decode_rps(tie_ms, 1000, 150)
    assert (itl_ms, rps) == (tie_ms, 4 / (150 * tie_ms / 1000.0))
    _, itl_below = model.find_best_engine_decode_rps(math.nextafter(tie_ms, 0.0), 1000, 150)
    assert itl_below == pytest.approx(31.0)  # batch 3


def test_decode_default_batch_cap_without_kv_information() -> None:
    model = DecodePerfModel(min_observations=2)
    model.learn_one({"num_decode_requests": 1, "sum_decode_kv_tokens": 1000}, 0.002)
    model.learn_one({"num_decode_requests": 2, "sum_decode_kv_tokens": 2000}, 0.003)
    assert model.max_observed_kv == 0  # learn_one does not feed the KV statistics
    rps, itl_ms = model.find_best_engine_decode_rps(1e9, 1000, 100)
    assert itl_ms == pytest.approx(1000 * (0.001 + 0.001 * 256), rel=1e-6)  # batch 256
    assert rps == pytest.approx(256 / (100 * (0.001 + 0.001 * 256)), rel=1e-6)


# -- §16.2 case 12: agg ----------------------------------------------------------------------


def test_case12_agg_estimates() -> None:
    model = case12_agg()
    # d = 10 p is collinear: min-norm split of 0.002 s per prefill token along (1, 10).
    # TTFT: avg_isl 300 in one chunk at decode kv 3000 → 0.001 + 0.002 (300 + 30000) / 101
    assert model.estimate_next_ttft(0, 2048, 3000) == pytest.approx(0.601, rel=1e-9)
    # ITL: avg prefill 300 per pass, kv 3000 + avg decode length 300
    expected_itl = 0.001 + 0.002 * (300 + 3300 * 10) / 101
    assert model.estimate_next_itl(3000, 0) == pytest.approx(expected_itl, rel=1e-9)
    assert model.avg_isl == 300 and model.avg_prefill_tokens == 300
    assert model.avg_decode_length == 300 and model.avg_num_decode == 10
    assert model.avg_num_prefill == 1


def test_case12_agg_best_rps() -> None:
    model = case12_agg()
    rps, ttft_ms, itl_ms = model.find_best_engine_agg_rps(2048, 150, 4096, 500, 50)
    # batch 1 already misses the 50 ms ITL: its rate is returned (caller compares)
    forward_s = 0.001 + 0.002 * (2048 / 150 + 10 * (2048 + 75)) / 101
    assert itl_ms == pytest.approx(1000 * forward_s, rel=1e-9)
    assert rps == pytest.approx(1 / (150 * forward_s), rel=1e-9)
    assert ttft_ms > 0
    assert AggPerfModel().find_best_engine_agg_rps(2048, 150, 4096, 500, 50) == (0.0, 0.0, 0.0)
    with_hit = model.find_best_engine_agg_rps(2048, 150, 4096, 500, 50, kv_hit_rate=0.6)
    assert with_hit[0] >= rps
    no_hit = model.find_best_engine_agg_rps(4000, 200, 8192, 10_000, 10_000)
    high_hit = model.find_best_engine_agg_rps(4000, 200, 8192, 10_000, 10_000, kv_hit_rate=0.8)
    assert high_hit[0] > no_hit[0]


def agg_grid_model() -> AggPerfModel:
    """Non-collinear agg training: wall = 0.005 + 1e-5 p + 1e-7 d on a 4x4 grid."""
    model = AggPerfModel()
    for p in (0, 512, 1024, 2048):
        for d in (0, 50_000, 100_000, 200_000):
            model.add_observation(agg_fpm(p, d, 0.005 + 1e-5 * p + 1e-7 * d))
    return model


def test_agg_fit_recovers_both_slopes() -> None:
    coefficients = agg_grid_model().coefficients
    assert coefficients is not None
    assert coefficients["sum_prefill_tokens"] == pytest.approx(1e-5, rel=1e-9)
    assert coefficients["sum_decode_kv_tokens"] == pytest.approx(1e-7, rel=1e-9)
    assert coefficients["intercept"] == pytest.approx(0.005, rel=1e-9)


def test_agg_balance_is_the_literal_test_of_the_errata() -> None:
    # isl / (mbt - x) <= osl  ⇔  x <= mbt - isl / osl = 8172 (not osl·mbt/(isl+osl) = 390)
    assert balanced_batch_limit(4000, 200, 8192, hard_cap=10_000) == 8172
    assert balanced_batch_limit(4000, 200, 8192, hard_cap=500) == 500
    assert balanced_batch_limit(4000, 2, 4096, hard_cap=4095) == 2096
    assert balanced_batch_limit(4000, 200, 8192, hard_cap=10_000, accept_length=2.0) == 8152
    assert balanced_batch_limit(1000, 1, 512, hard_cap=511) == 1  # even 1 fails → 1
    assert balanced_batch_limit(10, 100, 1, hard_cap=1) == 1


def test_agg_rate_never_admits_more_prefill_than_the_token_budget() -> None:
    """Decode egress at a big batch would need 41 prompts of 1000 tokens per pass with mbt 512;
    the admission cap keeps the claimed rate physically possible."""
    model = agg_grid_model()
    rps, ttft_ms, itl_ms = model.find_best_engine_agg_rps(1000, 10, 512, 1e9, 1e9)
    assert rps > 0
    assert rps * 1000 * itl_ms / 1000 <= 512  # prefill tokens admitted per pass
    assert ttft_ms > 0


def test_agg_sla_bound_batch() -> None:
    model = agg_grid_model()
    isl, osl, mbt = 1000, 500, 4096
    rps, ttft_ms, itl_ms = model.find_best_engine_agg_rps(isl, osl, mbt, 1e9, 20.0)
    assert itl_ms <= 20.0 and ttft_ms > 0
    # the returned point is the largest batch meeting 20 ms: batch + 1 must break it
    ctx = isl + osl / 2
    forward = lambda bs: 0.005 + 1e-5 * min(bs * isl / osl, mbt) + 1e-7 * bs * ctx  # noqa: E731
    batch = max(bs for bs in range(1, 1000) if 1000 * forward(bs) <= 20.0)
    assert itl_ms == pytest.approx(1000 * forward(batch), rel=1e-9)
    assert rps == pytest.approx(batch / (osl * forward(batch)), rel=1e-9)


@pytest.mark.parametrize(
    ("isl", "osl", "mbt"), [(4000, 200, 8192), (300, 600, 1024), (900, 9, 512)]
)
def test_agg_best_rate_is_the_best_of_every_batch(isl: int, osl: int, mbt: int) -> None:
    """The sweep stops early once admission falls below the best rate; what it returns must be
    the best over every batch up to the caps, computed here batch by batch."""
    model = agg_grid_model()
    rps, _, itl_ms = model.find_best_engine_agg_rps(isl, osl, mbt, 1e9, 1e9)
    ctx = isl + osl / 2
    forward = lambda bs: 0.005 + 1e-5 * min(bs * isl / osl, mbt) + 1e-7 * bs * ctx  # noqa: E731
    cap = min(1024, balanced_batch_limit(isl, osl, mbt, hard_cap=mbt - 1))
    rates = {
        bs: min(bs / (osl * forward(bs)), (mbt - bs) / (isl * forward(bs)))
        for bs in range(1, cap + 1)
    }
    batch = max(rates, key=rates.__getitem__)
    assert 1 < batch < cap  # an interior optimum: the batches past it were worth skipping
    assert rps == pytest.approx(rates[batch], rel=1e-9)
    assert itl_ms == pytest.approx(1000 * forward(batch), rel=1e-9)


# -- exact least squares, rejection, relaxable features --------------------------------------


def lstsq_with_intercept(xs: list[tuple[float, ...]], ys: list[float]) -> np.ndarray:
    design = np.column_stack([np.asarray(xs, dtype=float), np.ones(len(xs))])
    return np.linalg.lstsq(design, np.asarray(ys), rcond=None)[0]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fit_is_exact_least_squares_on_the_retained_samples(seed: int) -> None:
    rng = random.Random(seed)
    models = [
        PrefillPerfModel(max_num_fpm_samples=32),
        DecodePerfModel(max_num_fpm_samples=32),
        AggPerfModel(max_num_fpm_samples=32),
    ]
    for _ in range(200):  # far more than retained: retirement runs all the time
        p, n, kv = rng.randint(1, 8192), rng.randint(1, 256), rng.randint(100, 500_000)
        noise = rng.gauss(0.0, 0.001)
        models[0].add_observation(prefill_fpm(p, 0.01 + 2e-5 * p + abs(noise)))
        models[1].add_observation(decode_fpm(n, kv, 0.005 + 1e-4 * n + 5e-8 * kv + abs(noise)))
        models[2].add_observation(agg_fpm(p, kv, 0.005 + 2e-5 * p + 5e-8 * kv + abs(noise)))
    for model in models:
        assert model.num_observations == 32
        retained = model.samples.samples()
        expected = lstsq_with_intercept([x for x, _ in retained], [y for _, y in retained])
        got = model.coefficients
        assert got is not None
        values = [got[name] for name in model.feature_names] + [got["intercept"]]
        np.testing.assert_allclose(values, expected, rtol=1e-8, atol=1e-13)
        x = dict(zip(model.feature_names, retained[0][0], strict=True))
        assert model.predict_one(x) == pytest.approx(
            float(np.dot(expected[:-1], retained[0][0]) + expected[-1])
        )


def test_negative_slope_rejects_prefill_and_agg() -> None:
    prefill = PrefillPerfModel()
    for t in (500, 1000, 1500, 2000, 2500):
        prefill.add_observation(prefill_fpm(t, 3.0 - 0.001 * t))
    assert not prefill.is_ready and prefill.coefficients is None
    assert "sum_prefill_tokens" in (prefill.rejection_reason or "")
    assert prefill.estimate_next_ttft(0, 2048) is None
    assert prefill.find_best_engine_prefill_rps(500, 1000) == (0.0, 0.0)

    agg = AggPerfModel()
    for p, d in ((100, 5000), (200, 1000), (300, 4000), (400, 2000), (500, 3000)):
        agg.add_observation(agg_fpm(p, d, 1.0 + 0.001 * p - 0.0001 * d))
    assert not agg.is_ready
    assert "sum_decode_kv_tokens" in (agg.rejection_reason or "")
    assert agg.estimate_next_itl(1000, 0) is None
    assert agg.find_best_engine_agg_rps(1000, 100, 2048, 500, 50) == (0.0, 0.0, 0.0)


def test_decode_negative_kv_slope_rejects() -> None:
    model = DecodePerfModel()
    for n, kv in ((1, 5000), (2, 1000), (3, 4000), (4, 2000), (5, 3000)):
        model.add_observation(decode_fpm(n, kv, 1.0 + 0.01 * n - 0.0001 * kv))
    assert not model.is_ready
    assert model.estimate_next_itl(0, 0) is None
    assert model.find_best_engine_decode_rps(50, 1000, 100) == (0.0, 0.0)


def test_decode_negative_batch_slope_is_clipped_to_zero() -> None:
    """Spec §3.1: the relaxable slope is clipped; the rest of the full fit stands (an earlier
    constrained refit on kv alone could turn the kv slope negative and reject the model)."""
    model = DecodePerfModel()
    rows = [(1, 1000), (8, 2000), (2, 3000), (6, 4000), (3, 5000), (9, 6000)]
    for n, kv in rows:
        model.add_observation(decode_fpm(n, kv, 0.1 + 1e-5 * kv - 0.005 * n))
    unconstrained = lstsq_with_intercept(
        [(float(n), float(kv)) for n, kv in rows], [0.1 + 1e-5 * kv - 0.005 * n for n, kv in rows]
    )
    assert unconstrained[0] < 0  # the data really has a negative batch slope
    coefficients = model.coefficients
    assert coefficients is not None and model.is_ready
    assert coefficients["num_decode_requests"] == 0.0
    assert coefficients["sum_decode_kv_tokens"] == pytest.approx(unconstrained[1], rel=1e-9)
    assert coefficients["intercept"] == pytest.approx(unconstrained[2], rel=1e-9)


def test_clipping_never_rejects_a_fit_whose_other_slopes_are_positive() -> None:
    model = DecodePerfModel()
    # the batch grows with the context and costs -0.2 ms per request: without the batch
    # feature the kv slope alone comes out negative
    rows = [(10, 1000), (22, 2000), (28, 3000), (42, 4000), (48, 5000), (62, 6000)]
    for n, kv in rows:
        model.add_observation(decode_fpm(n, kv, 0.02 + 1e-6 * kv - 2e-4 * n))
    assert model.is_ready
    assert model.coefficients["num_decode_requests"] == 0.0
    assert model.coefficients["sum_decode_kv_tokens"] == pytest.approx(1e-6)


def test_roundoff_of_a_true_zero_slope_does_not_reject() -> None:
    """An agg engine whose time does not depend on decode KV has slope 0 ± round-off."""
    model = AggPerfModel()
    rng = random.Random(4)  # with this seed lstsq gives the kv slope as -1.9e-23
    for _ in range(20):
        p, d = rng.randint(1, 4000), rng.randint(1, 100_000)
        model.add_observation(agg_fpm(p, d, 0.003 + 1e-5 * p))
    assert model.is_ready
    coefficients = model.coefficients
    assert coefficients is not None
    assert coefficients["sum_decode_kv_tokens"] * 100_000 == pytest.approx(0.0, abs=1e-9)


def test_least_squares_collinear_is_minimum_norm() -> None:
    fit = least_squares([(1.0, 2.0), (2.0, 4.0), (3.0, 6.0)], [1.0, 2.0, 3.0]).fit
    assert fit is not None
    # y = x1 = x2 / 2 → minimum-norm (c1, c2) ∝ (1, 2) with c1 + 2 c2 = 1 → (0.2, 0.4)
    assert fit.coefficients == pytest.approx((0.2, 0.4), rel=1e-9)
    assert fit.intercept == pytest.approx(0.0, abs=1e-12)


def test_predictions_are_floored_at_one_microsecond() -> None:
    model = PrefillPerfModel()
    for t in (1000, 2000, 3000, 4000, 5000):
        model.add_observation(prefill_fpm(t, 0.001 * t - 0.9))  # intercept -0.9 s
    assert model.predict_one({"sum_prefill_tokens": 0}) == MIN_WALL_TIME_S
    assert model.find_best_engine_prefill_rps(500, 1) == pytest.approx(
        (1 / MIN_WALL_TIME_S, 1000 * MIN_WALL_TIME_S)
    )


# -- moving averages ---------------------------------------------------------------------------


def test_moving_average_skips_leading_zeros_then_keeps_zeros() -> None:
    avg = MovingAverage(window=4)
    for v in (0, 0, 0):
        avg.update(v)
    assert len(avg) == 0 and avg.get() == 0.0
    for v in (8, 0, 0, 0):
        avg.update(v)
    assert avg.get() == 2.0
    avg.update(0)
    assert avg.get() == 0.0


def test_moving_average_is_exact_after_a_long_history() -> None:
    rng = random.Random(11)
    avg = MovingAverage(window=64)
    for _ in range(20_000):
        avg.update(rng.choice([0.0, rng.random() * 1e5, 7.0]))
    for _ in range(64):
        avg.update(0.0)
    assert avg.get() == 0.0  # river's incremental rolling mean reads ~-5e-10 here
    for _ in range(64):
        avg.update(1500.0)
    assert avg.get() == 1500.0


def test_decode_heartbeats_pull_the_batch_average_down_once_traffic_was_seen() -> None:
    model = DecodePerfModel(max_num_fpm_samples=4)
    model.add_observation(decode_fpm(0, 0, wall=0.0))  # idle before traffic: skipped
    assert model.avg_num_decode == 0.0
    model.add_observation(decode_fpm(8, 8000))
    model.add_observation(decode_fpm(0, 0, wall=0.0))
    assert model.avg_num_decode == 4.0
    assert model.avg_decode_length == 1000.0  # per-request length ignores empty passes
    assert model.num_observations == 1


def test_queued_requests_do_not_feed_the_regression() -> None:
    model = PrefillPerfModel(min_observations=1)
    fpm = ForwardPassMetrics(
        wall_time=0.05,
        scheduled_requests=ScheduledRequestMetrics(num_prefill_requests=1, sum_prefill_tokens=100),
        queued_requests=QueuedRequestMetrics(num_prefill_requests=9, sum_prefill_tokens=90_000),
    )
    model.add_observation(fpm)
    assert model.samples.samples() == [((100.0,), 0.05)]
