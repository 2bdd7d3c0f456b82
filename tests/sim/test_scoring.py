"""Scores of a run: what the README's benchmark columns mean."""

from __future__ import annotations

import pytest

from sim.engines import SimRequest
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
