"""The closed-loop benchmark's per-minute loads (the hindsight row's input)."""

from __future__ import annotations

from bench.closed_loop import minute_loads
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
        (1 / 60, 50.0, 5.0),  # 180 s opens minute 3
        (0.0, 0.0, 0.0),  # padded with idle minutes up to end_s
        (0.0, 0.0, 0.0),
    ]


def test_an_empty_replay_has_idle_minutes() -> None:
    assert minute_loads(Scenario([], SPEC, end_s=120.0)) == [(0.0, 0.0, 0.0)] * 2
