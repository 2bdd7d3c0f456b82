"""The closed-loop benchmark's per-minute loads (the hindsight row's input)."""

from __future__ import annotations

import pytest

from bench.closed_loop import hindsight_replicas, minute_loads
from flows.scenario import Scenario, fleet_spec
from schemas import PlannerConfig
from schemas.trace import TraceRequest

SPEC = fleet_spec(PlannerConfig(mode="agg"))


def test_minutes_follow_the_replay_clock_and_cover_the_whole_replay() -> None:
    arrivals = [(90.0, 100, 10), (100.0, 300, 30), (179.9, 200, 20), (180.0, 50, 5)]
    requests = [TraceRequest(arrival_s=t, isl=i, osl=o) for t, i, o in arrivals]
    scenario = Scenario(requests, SPEC, end_s=360.0)
    assert minute_loads(scenario) == [
        (0.0, 0.0, 0.0),  # before the first arrival: minutes count from the clock's 0
        (2 / 60, 200.0, 20.0),
        (1 / 60, 200.0, 20.0),  # 179.9 s is still minute 2
        (1 / 30, 50.0, 5.0),  # 180 s opens minute 3, which the trace's span (210 s) covers 30 s of
        (0.0, 0.0, 0.0),  # padded with idle minutes up to end_s
        (0.0, 0.0, 0.0),
    ]


def test_an_empty_replay_has_idle_minutes() -> None:
    assert minute_loads(Scenario([], SPEC, end_s=120.0)) == [(0.0, 0.0, 0.0)] * 2


def steady(rate_rps: float, span_s: float, isl: int = 500, osl: int = 50) -> list[TraceRequest]:
    count = round(rate_rps * span_s)
    return [TraceRequest(arrival_s=i / rate_rps, isl=isl, osl=osl) for i in range(count)]


@pytest.mark.parametrize("span_s", [90.0, 141.0, 180.0])
def test_the_last_partial_minute_counts_over_the_span_the_trace_covers(span_s: float) -> None:
    # a steady 40 req/s that stops part-way through a minute: that minute is just as busy
    scenario = Scenario(steady(40.0, span_s), SPEC)
    rates = [rps for rps, _, _ in minute_loads(scenario)]
    busy = rates[: int(-(-span_s // 60))]
    assert busy == pytest.approx([40.0] * len(busy))
    assert rates[len(busy) :] == [0.0] * (len(rates) - len(busy))


def test_the_hindsight_plan_keeps_the_fleet_of_a_steady_load_to_its_last_minute() -> None:
    config = PlannerConfig(mode="disagg")
    scenario = Scenario(steady(50.0, 150.0, isl=2000, osl=300), fleet_spec(config))
    # minute 2 is half covered, at the same rate: it needs the same fleet; minute 3 is idle
    assert hindsight_replicas(scenario, config) == [(2, 2), (2, 2), (2, 2), (1, 1)]
