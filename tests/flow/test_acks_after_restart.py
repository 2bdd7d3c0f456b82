"""A restarted worker behind the virtual connector reads the whole acknowledgement topic before
its deployment's first forward pass: every acknowledgement read then counts, in order — a stale
one, or one never issued, read after the real one must not erase it (the worker then held its
next decision for ``scaling_max_wait_seconds``)."""

from __future__ import annotations

import json
import time

import pytest
from bytewax.testing import TestingSink, TestingSource

from connectors.virtual import ReadAck
from flows.planner import PlannerSinks, build_flow
from schemas import AckEvent, DeliveredDecision, PlannerConfig, parse_event
from schemas.decision import DecisionAck
from tests.flow.cluster import run_flow
from tests.flow.live_run import HostClock
from tests.flow.streams import DECODE_CONFIG, decode_ramp


def restarted(
    acks: list[int], workers: int, acknowledged: dict[str, int] | None = None
) -> tuple[list[tuple[int, float]], list[str]]:
    base = float(int((time.time() - 300.0) // 5 * 5))  # a live run: recent event times
    in_flight = DeliveredDecision(
        deployment="alpha", decision_id=3, time=base + 100.0, num_decode=4
    )
    ramp = decode_ramp("alpha", engines=2, seconds=120)
    events = [parse_event(json.dumps(e | {"time": e["time"] + base})) for e in ramp]
    read_back = [
        AckEvent(deployment="alpha", time=0.0, payload={"acked_decision_id": n}) for n in acks
    ]
    decisions: list = []
    dead: list = []
    flow = build_flow(
        {"alpha": PlannerConfig(**DECODE_CONFIG)},
        [TestingSource(read_back + events)],
        PlannerSinks(decisions=[TestingSink(decisions)], dead_letters=[TestingSink(dead)]),
        live=True,
        acks=TestingSource([]),
        host_clock=HostClock(),
        delivered={"alpha": in_flight},
        in_flight={"alpha": in_flight},
        acknowledged=acknowledged,
    )
    run_flow(flow, workers)
    return [(d.decision_id, d.time - base) for d in decisions], [d.reason for d in dead]


@pytest.mark.parametrize(
    ("acks", "refused"),
    [([1, 2, 3], 0), ([1, 2, 3, 99], 1), ([1, 2, 3, 2], 0)],
    ids=["acknowledged", "then-never-issued", "then-stale"],
)
def test_every_acknowledgement_read_back_counts(acks, refused, workers):
    sent, dead = restarted(acks, workers)
    assert sent[:1] == [(4, 105.0)]  # decision 3 was acknowledged: the next goes out at once
    assert len([r for r in dead if "never issued" in r]) == refused


@pytest.mark.parametrize(("acknowledged", "first"), [({"alpha": 3}, 105.0), ({"alpha": 9}, None)])
def test_an_acknowledgement_the_topic_held_at_start_counts_before_any_tick(
    acknowledged, first, workers
):
    # read at start (flowplanner run: connectors.virtual.newest_acks), not in the stream: a
    # recording read back faster than the acknowledgement topic ticked past it (a held
    # decision was sent, or not, by that race); one never issued is left to the stream
    sent, dead = restarted([], workers, acknowledged)
    assert sent[:1] == ([(4, first)] if first is not None else [])
    assert dead == []


def test_a_refused_acknowledgement_names_the_message_it_was_read_from(workers):
    # its dead letter said source "acks" (or "typed"), no offset, and a raw line rebuilt by
    # the planner: an orchestrator could not find the message it wrote
    def read(deployment: str, acked: int, offset: int) -> ReadAck:
        raw = json.dumps({"deployment": deployment, "acked_decision_id": acked})
        return ReadAck(DecisionAck.model_validate_json(raw), "kafka:acks/0", offset, raw)

    events = [parse_event(json.dumps(e)) for e in decode_ramp("alpha", engines=2, seconds=30)]
    dead: list = []
    flow = build_flow(
        {"alpha": PlannerConfig(**DECODE_CONFIG)},
        [TestingSource(events)],
        PlannerSinks(dead_letters=[TestingSink(dead)]),
        acks=TestingSource([read("alpha", 99, 7), read("nobody", 1, 8)]),
    )
    run_flow(flow, workers)
    assert sorted((d.source, d.position, d.raw) for d in dead) == [
        ("kafka:acks/0", 7, '{"deployment": "alpha", "acked_decision_id": 99}'),
        ("kafka:acks/0", 8, '{"deployment": "nobody", "acked_decision_id": 1}'),
    ]
