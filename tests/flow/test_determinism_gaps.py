"""Gaps in event time: a window that follows silent windows runs every loop that fell due in
one tick, so no decision is made and then hidden, and the ack gate never waits for a decision
nobody received; a tick interval shorter than the merge tolerance still ticks once a window."""

from __future__ import annotations

import json

import pytest
from bytewax.testing import TestingSink, TestingSource

from flows.planner import PlannerSinks, build_flow
from schemas import DecisionAck, DeliveredDecision, PlannerConfig, parse_event
from tests.flow.cluster import run_flow
from tests.flow.runner import run_recorded, write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp, write_stream

BOTH_LOOPS = DECODE_CONFIG | {
    "enable_throughput_scaling": True,
    "throughput_adjustment_interval_seconds": 60,
}


def overloaded_with_gap(acks: dict[float, int] | None = None) -> list[dict]:
    """Two decode engines far past the ITL target (every load tick scales up), silent from
    50 s to 200 s; a clock event closes the window after the gap."""
    ramp = decode_ramp("alpha", engines=2, seconds=210, kv_start=500_000, kv_end=600_000)
    events = [e for e in ramp if e["time"] < 50 or 200 <= e["time"] < 205]
    for at, acked in (acks or {}).items():
        events.append(
            {
                "type": "ack",
                "deployment": "alpha",
                "time": at,
                "payload": {"acked_decision_id": acked},
            }
        )
    events.append({"type": "clock", "deployment": "alpha", "time": 206.0, "payload": {}})
    return sorted(events, key=lambda e: e["time"])


def run_in_process(
    events: list[dict], workers: int, *, gate: bool = False
) -> tuple[list, list, list]:
    decisions, ticks, dead = [], [], []
    flow = build_flow(
        {"alpha": PlannerConfig(**BOTH_LOOPS)},
        [TestingSource([parse_event(json.dumps(e)) for e in events])],
        PlannerSinks([TestingSink(decisions)], [TestingSink(ticks)], [TestingSink(dead)]),
        acks=TestingSource([]) if gate else None,
    )
    run_flow(flow, workers)
    return decisions, ticks, dead


def test_every_loop_due_after_a_gap_runs_in_one_tick_and_its_decision_is_sent(workers):
    decisions, ticks, dead = run_in_process(overloaded_with_gap(), workers)

    assert dead == []
    # one record per window with data, in event time; the gap has none
    assert [t.time for t in ticks] == [5.0 * k for k in range(1, 11)] + [205.0]
    after_gap = ticks[-1]
    # load (due at 55) and throughput (due at 60) were both overdue: both ran, in one tick
    assert after_gap.ran_load and after_gap.ran_throughput
    # the load loop scaled up, as on every tick before the gap, and that decision went out
    assert after_gap.decision is not None and after_gap.decision.reason == "scale_up"
    # ids are consecutive: no id was given to a decision that was never sent
    assert [d.decision_id for d in decisions] == list(range(1, len(decisions) + 1))
    assert decisions[-1] == after_gap.decision


def test_after_a_gap_the_ack_gate_does_not_wait_for_a_decision_nobody_received(workers):
    # decision 1 goes out at 5 s; the others are held until the acknowledgement of 1 (at
    # 48 s, released at the 50 s tick as decision 2), and 2 is acknowledged in the gap
    decisions, ticks, dead = run_in_process(
        overloaded_with_gap({48.0: 1, 120.0: 2}), workers, gate=True
    )

    assert dead == []
    assert [(d.decision_id, d.time) for d in decisions] == [(1, 5.0), (2, 50.0), (3, 205.0)]
    assert ticks[-1].decision == decisions[-1]


def test_a_tick_interval_below_the_merge_tolerance_ticks_once_a_window(tmp_path):
    config = DECODE_CONFIG | {"load_adjustment_interval_seconds": 0.25}
    events = decode_ramp("alpha", engines=2, seconds=3)
    events.append({"type": "clock", "deployment": "alpha", "time": 3.5, "payload": {}})
    stream = write_stream(tmp_path / "s.jsonl", events)
    config_path = write_config(tmp_path / "c.yaml", {"alpha": config})
    ticks = run_recorded(config_path, [stream], tmp_path / "out")["ticks"]
    # one tick per 0.25 s window with data: passes run to 3.0, the clock at 3.5 closes them
    assert [t["time"] for t in ticks] == [0.25 * k for k in range(1, 14)]
    assert all(t["ran_load"] for t in ticks)


@pytest.mark.parametrize("sent_at", [None, 1.7e9, 9e10])
def test_an_acknowledgement_does_not_move_event_time(sent_at, workers):
    # an acknowledgement is a state snapshot for the next tick, whatever time the orchestrator
    # gave it (none, its own Unix clock, far ahead): not a jump of event time, which made
    # every later measurement of a stream on another clock late
    events = overloaded_with_gap()
    decisions, ticks, dead = [], [], []
    untimed = DecisionAck(deployment="alpha", acked_decision_id=1, time=sent_at)
    flow = build_flow(
        {"alpha": PlannerConfig(**BOTH_LOOPS)},
        [TestingSource([parse_event(json.dumps(e)) for e in events])],
        PlannerSinks([TestingSink(decisions)], [TestingSink(ticks)], [TestingSink(dead)]),
        acks=TestingSource([untimed]),
        # decision 1 went out before (the virtual connector's topic holds it): an
        # acknowledgement of a decision never issued is refused
        in_flight={"alpha": DeliveredDecision(deployment="alpha", decision_id=1, time=0.0)},
    )
    run_flow(flow, workers)

    assert dead == []
    assert [t.time for t in ticks] == [5.0 * k for k in range(1, 11)] + [205.0]
    assert decisions and decisions[0].time == 5.0
