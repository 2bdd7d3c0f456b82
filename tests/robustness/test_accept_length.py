"""A speculative accept length is at most ``speculative_nextn + 1`` (spec §5.5): a request or
traffic observation reporting more than ``MAX_ACCEPT_LENGTH`` is a dead letter, and the mean
accept length of a window stays finite whatever its records hold. (Two requests with
``accept_length=1e308`` overflowed the window's mean to ``inf``: the flow panicked and the run
ended without a decision.)"""

from __future__ import annotations

import math

from operators.deployment import DeploymentPlanner
from operators.window import TickWindow
from schemas import MAX_ACCEPT_LENGTH, PlannerConfig, RequestRecord
from tests.flow.streams import DECODE_CONFIG, decode_ramp
from tests.robustness.inline_flow import run_lines

CONFIG = PlannerConfig(**DECODE_CONFIG)


def requests(seconds: int, accept_length: float) -> list[dict]:
    return [
        {
            "type": "request",
            "deployment": "llama",
            "time": t + 0.5,
            "payload": {
                "request_id": f"r{t}",
                "isl": 2000,
                "osl": 200,
                "accept_length": accept_length,
            },
        }
        for t in range(seconds)
    ]


def stream(extra: list[dict]) -> list[dict]:
    events = decode_ramp("llama", engines=2, seconds=70) + requests(70, 2.5) + extra
    return sorted(events, key=lambda e: e["time"])  # stable: extras after same-time events


def test_absurd_accept_lengths_are_dead_letters_and_change_nothing():
    absurd = requests(2, 1e308)
    for event in absurd:
        event["time"] += 40.0
        event["payload"]["request_id"] += "-absurd"
    above = requests(1, MAX_ACCEPT_LENGTH + 0.5)[0] | {"time": 50.25}

    clean = run_lines({"llama": CONFIG}, stream([]))
    mixed = run_lines({"llama": CONFIG}, stream([*absurd, above]))

    reasons = [letter.reason for letter in mixed.dead]
    assert len(reasons) == 3, reasons
    assert (
        reasons.count(
            "invalid event: request.payload: Value error, accept_length = 1e+308 is implausible "
            "(above MAX_ACCEPT_LENGTH = 1025)"
        )
        == 2
    ), reasons
    assert "accept_length = 1025.5 is implausible" in reasons[2]
    assert mixed.counted == {"invalid": 3}
    assert clean.decisions, "the ramp scales"
    assert mixed.decisions == clean.decisions
    assert [r.observed_traffic for r in mixed.ticks] == [r.observed_traffic for r in clean.ticks]


def test_the_mean_accept_length_of_records_built_inside_stays_finite():
    # A record built inside (the simulator, a trace reader) is not held to the event ceilings.
    planner = DeploymentPlanner("llama", CONFIG, window_s=5.0)
    huge = RequestRecord(request_id="a", isl=2000, osl=200, accept_length=1e308)
    planner.on_window(5.0, TickWindow(requests=[huge, huge.model_copy(update={"request_id": "b"})]))
    traffic = planner.traffic_over(30.0, 5.0)
    assert traffic is not None and traffic.num_req == 2
    assert traffic.accept_length == MAX_ACCEPT_LENGTH
    assert math.isfinite(traffic.accept_length)
