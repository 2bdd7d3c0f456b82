"""Calibration: the timing model reproduces the profile; one request on one engine matches it."""

from __future__ import annotations

import itertools

import pytest

from schemas.profile import PerformanceProfile
from schemas.trace import TraceRequest
from sim.fleet import FleetSim, FleetSpec
from sim.timing import EngineTiming
from tests.sim.lockstep import run


def test_every_profile_point_is_reproduced(h200: PerformanceProfile) -> None:
    t = EngineTiming.from_profile(h200)
    assert h200.prefill is not None and h200.decode is not None
    for isl, ttft in zip(h200.prefill.prefill_isl, h200.prefill.prefill_ttft, strict=True):
        assert t.prefill.ttft_s(int(isl)) * 1000 == pytest.approx(ttft, rel=1e-9)
    m = h200.decode.max_kv_tokens
    for u, c, itl in zip(
        h200.decode.x_kv_usage, h200.decode.y_context_length, h200.decode.z_itl, strict=True
    ):
        kv = u * m
        assert t.decode.itl_s(kv / c, kv) * 1000 == pytest.approx(itl, rel=1e-9)


def test_timing_is_monotone_where_it_matters(h200: PerformanceProfile) -> None:
    t = EngineTiming.from_profile(h200)
    works = [t.prefill.work_s(x) for x in range(0, 20_000, 250)]
    assert works == sorted(works)
    # more requests of the same context never decode faster (batch <= max_num_seqs)
    for ctx in (500, 3000, 9000):
        itls = [t.decode.itl_s(b, b * ctx) for b in range(1, 257) if b * ctx < 945_029]
        assert all(b >= a - 1e-12 for a, b in itertools.pairwise(itls))
    # a prefix-cache hit saves work, a mixed iteration costs at least its prefill part
    assert t.prefill.chunk_s(4000, 1000) < t.prefill.chunk_s(0, 5000)
    assert t.mixed_s(0.01, 64, 64 * 3000) >= t.prefill.overhead_s + 0.01


def _one_request(
    profile: PerformanceProfile, isl: int, osl: int, mode: str, **caps: int
) -> tuple[float, float]:
    spec = FleetSpec(profile=profile, mode=mode, prefill_replicas=1, decode_replicas=1, **caps)
    sim = FleetSim(spec, [TraceRequest(arrival_s=0.0, isl=isl, osl=osl)])
    run(sim, tick_s=1.0)
    res = sim.result()
    assert res.num_finished == 1
    assert res.ttft_ms_p50 is not None and res.itl_ms_p50 is not None
    return res.ttft_ms_p50, res.itl_ms_p50


def _profiled_ttft_ms(profile: PerformanceProfile, isl: float) -> float:
    """The TTFT the profile measured at prefill point ``isl``."""
    assert profile.prefill is not None
    return profile.prefill.prefill_ttft[profile.prefill.prefill_isl.index(isl)]


def _profiled_batch1_itl_ms(profile: PerformanceProfile, context: float) -> float:
    """The ITL the profile measured for one request (kv = context) on row ``context``."""
    d = profile.decode
    assert d is not None
    (itl,) = (
        itl
        for u, c, itl in zip(d.x_kv_usage, d.y_context_length, d.z_itl, strict=True)
        if c == context and round(u * d.max_kv_tokens / c) == 1
    )
    return itl


@pytest.mark.parametrize("mode", ["disagg", "agg"])
def test_one_request_matches_profile_within_1pct(h200: PerformanceProfile, mode: str) -> None:
    # ISL 5185 is a prefill point (TTFT 104.894 ms); its decode context (5185..5204) lies
    # between the rows 2997 (4.427 ms) and 5644 (4.511 ms) at batch 1.
    ttft, itl = _one_request(h200, 5185, 20, mode)
    assert ttft == pytest.approx(_profiled_ttft_ms(h200, 5185), rel=0.01)
    assert itl == pytest.approx(_profiled_batch1_itl_ms(h200, 5644), rel=0.01)
    # ISL 8236 (prefill point, 171.029 ms) with a batch budget that fits it in one pass;
    # decode context ~8240 vs the 8291 row (4.622 ms at batch 1).
    ttft, itl = _one_request(h200, 8236, 20, mode, max_num_batched_tokens=16384)
    assert ttft == pytest.approx(_profiled_ttft_ms(h200, 8236), rel=0.01)
    assert itl == pytest.approx(_profiled_batch1_itl_ms(h200, 8291), rel=0.01)


def test_chunked_prompt_pays_one_overhead_per_chunk(h200: PerformanceProfile) -> None:
    t = EngineTiming.from_profile(h200)
    ttft, _ = _one_request(h200, 8236, 2, "disagg")  # 8192 + 44 tokens
    expected = (t.prefill.ttft_s(8236) + t.prefill.overhead_s) * 1000
    assert ttft == pytest.approx(expected, rel=1e-9)


def test_kv_transfer_delay_adds_to_the_first_gap(h200: PerformanceProfile) -> None:
    base_spec = {"profile": h200, "mode": "disagg"}
    reqs = [TraceRequest(arrival_s=0.0, isl=3000, osl=11)]
    fast = FleetSim(FleetSpec(**base_spec), reqs)
    slow = FleetSim(FleetSpec(**base_spec, kv_transfer_delay_s=0.05), reqs)
    run(fast, tick_s=1.0)
    run(slow, tick_s=1.0)
    a, b = fast.result(), slow.result()
    assert a.ttft_ms_p50 == b.ttft_ms_p50
    assert b.itl_ms_p50 == pytest.approx(a.itl_ms_p50 + 50.0 / 10, rel=1e-6)


def test_decode_keeps_slowing_beyond_the_longest_context_row(h200: PerformanceProfile) -> None:
    """Past the last row (13 585 tokens) ITL grows by the profile's per-KV-token cost.

    Reference: the batch-1 points of the shortest and longest rows (3.37 ms per 100 k KV tokens).
    The profile's fixed-batch KV cost spans 2.8-3.4 ms per 100 k across batches 1-67, hence
    ±20 %: wide enough for that spread, far from 0 (reading the last row unchanged).
    """
    assert h200.decode is not None
    d = EngineTiming.from_profile(h200).decode
    rows = sorted(
        (c, itl)
        for u, c, itl in zip(
            h200.decode.x_kv_usage, h200.decode.y_context_length, h200.decode.z_itl, strict=True
        )
        if round(u * h200.decode.max_kv_tokens / c) == 1
    )
    (c0, itl0), (c_last, itl_last) = rows[0], rows[-1]
    ref_ms_per_kv = (itl_last - itl0) / (c_last - c0)
    for batch in (1, 9, 56):
        at_last = d.itl_s(batch, batch * c_last) * 1000
        far = d.itl_s(batch, batch * 100_000) * 1000
        slope = (far - at_last) / (batch * (100_000 - c_last))
        assert slope == pytest.approx(ref_ms_per_kv, rel=0.2), batch
