"""Scores of a run: what the README's benchmark columns mean."""

from __future__ import annotations

import pytest

from schemas.trace import TraceRequest
from sim.engines import SimRequest
from sim.fleet import FleetSim, FleetSpec
from sim.scoring import score


def run_of(requests: list[SimRequest], duration_s: float):
    return score(
        spec_ttft_ms=500.0,
        spec_itl_ms=50.0,
        requests=requests,
        num_trace_requests=len(requests),
        rejected=0,
        actions=[],
        gpu_seconds={"decode": duration_s},
        duration_s=duration_s,
    )


def test_a_starved_request_counts_in_the_ttft_percentiles_at_its_wait() -> None:
    served = []
    for i in range(9):
        r = SimRequest(i, float(i), 100, 2)
        r.first_token, r.finish = i + 0.1, i + 0.12
        served.append(r)
    starved = SimRequest(9, 0.0, 100, 2)  # arrived at 0, no first token by the end (100 s)
    result = run_of([*served, starved], duration_s=100.0)
    assert result.sla_attainment == pytest.approx(0.9)
    assert result.ttft_ms_p50 == pytest.approx(100.0)
    # left out, the p99 would be 100 ms: the starved request waited 100 000 ms at least
    assert result.ttft_ms_p99 > 90_000.0


def test_a_request_rejected_at_arrival_is_left_out_of_the_ttft_percentiles(h200) -> None:
    # one over-context request at 0 and nine normal ones, over an hour: it used to count in
    # the TTFT percentiles with a "wait" of 3600 s (mean 360 024 ms, p99 3 276 002 ms)
    reqs = [TraceRequest(arrival_s=0.0, isl=200_000, osl=10)]
    reqs += [TraceRequest(arrival_s=1.0 + i, isl=500, osl=20) for i in range(9)]
    sim = FleetSim(FleetSpec(profile=h200, mode="agg"), reqs)
    sim.advance(3600.0)
    result = sim.result()
    assert (result.num_rejected, result.num_finished, result.num_sla_good) == (1, 9, 9)
    assert result.sla_attainment == pytest.approx(0.9)  # still not SLA-good
    assert result.ttft_ms_p99 < 500.0 and result.ttft_ms_mean < 500.0
