"""The closed-loop benchmark's hindsight row: its replica schedule for any start-up delay, and
the schedule applied at its own times by ``run_schedule``."""

from __future__ import annotations

import itertools
import random

import pytest

from bench.closed_loop import MINUTE, hindsight_schedule
from flows.scenario import Scenario, fleet_spec, run_schedule
from schemas import PlannerConfig
from schemas.trace import TraceRequest


def target_at(schedule: list[tuple[float, int, int]], t: float) -> tuple[int, int]:
    """The (prefill, decode) replicas the schedule asks for at time ``t``."""
    return [(p, d) for at, p, d in schedule if at <= t][-1]


def wanted_at(plan: list[tuple[int, int]], t: float, delay_s: float) -> tuple[int, int]:
    """Every minute's plan, held from one start-up before the minute starts to its end."""
    covering = [
        need
        for m, need in enumerate(plan)
        if m * MINUTE - delay_s <= t < (m + 1) * MINUTE or (m == len(plan) - 1 and t >= m * MINUTE)
    ]
    return (max(p for p, _ in covering), max(d for _, d in covering))


@pytest.mark.parametrize("delay_s", [0.0, 30.0, 60.0, 62.0, 90.0, 150.0, 200.0])
def test_each_minute_is_asked_for_one_start_up_ahead_and_held_to_its_end(delay_s: float) -> None:
    rng = random.Random(int(delay_s))
    for _ in range(20):
        plan = [(rng.randint(1, 4), rng.randint(1, 6)) for _ in range(rng.randint(1, 9))]
        schedule = hindsight_schedule(plan, delay_s)
        assert schedule[0][0] == 0.0
        assert all(a[1:] != b[1:] and a[0] < b[0] for a, b in itertools.pairwise(schedule))
        for t in range(0, len(plan) * 60 + 60):
            assert target_at(schedule, t) == wanted_at(plan, t, delay_s), (plan, t)


def test_a_start_up_over_a_minute_keeps_a_busy_minute_from_being_cancelled() -> None:
    # the busy minute 5 is asked for at 300 - 150 = 150 s and never dropped before it ends
    plan = [(1, 1), (1, 5), (1, 1), (1, 1), (1, 1), (1, 7), (1, 1)]
    assert hindsight_schedule(plan, 150.0) == [
        (0.0, 1, 5),
        (120.0, 1, 1),
        (150.0, 1, 7),
        (360.0, 1, 1),
    ]


def test_a_schedule_entry_applies_at_its_own_time_not_at_the_next_step() -> None:
    spec = fleet_spec(PlannerConfig(mode="disagg"), startup_delay_s=60.0)
    requests = [TraceRequest(arrival_s=float(t), isl=100, osl=5) for t in range(0, 200, 30)]
    scenario = Scenario(requests, spec)
    # asked for at 57 s (between two 5 s steps), the replicas are ready by 117 s, before 120 s
    out = run_schedule(scenario, [(0.0, 1, 1), (57.0, 1, 5)], name="hindsight")
    ready = {sample["time"]: sample["ready_decode"] for sample in out.fleet.samples}
    assert ready[115.0] == 1
    assert ready[120.0] == 5
