"""State snapshots and the event horizon: in a replay a snapshot's time is data, so one stray
snapshot timestamp must not move event time, and a snapshot must not overtake a held
measurement; live, the snapshots waiting for a deployment's first measurement stay few."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink, TestingSource

from flows.clock import PlannerClock
from flows.horizon import EventHorizon, event_time, is_state_snapshot
from schemas import (
    AckEvent,
    CapabilitiesEvent,
    ClockEvent,
    EngineCapabilities,
    InventoryEvent,
    WorkerCapabilities,
)
from tests.flow.cluster import run_flow
from tests.flow.runner import run_recorded

EXAMPLE = Path(__file__).parents[2] / "examples"
BURST = (EXAMPLE / "decode_burst.jsonl").read_text().splitlines()
DAY = 24 * 3600.0
INVENTORY = {"ready_num_decode": 2, "expected_num_decode": 2}  # as the file's own


def inventory_line(at: float) -> str:
    return json.dumps(
        {"type": "inventory", "deployment": "llama", "time": at, "payload": INVENTORY}
    )


def run(tmp_path: Path, lines: list[str], tag: str) -> tuple[list[dict], list[dict]]:
    stream = tmp_path / f"{tag}.jsonl"
    stream.write_text("\n".join(lines) + "\n")
    done = run_recorded(EXAMPLE / "decode.yaml", [stream], tmp_path / tag)
    return done["decisions"], done["dead"]


def first_fpm(lines: list[str], after: int = 0) -> int:
    return next(i for i, line in enumerate(lines) if i >= after and '"fpm"' in line)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> list[dict]:
    decisions, dead = run(tmp_path_factory.mktemp("clean"), BURST, "clean")
    assert decisions and dead == []
    return decisions


@pytest.mark.parametrize("where", ["mid-stream", "before the first measurement"])
def test_a_stray_snapshot_is_refused_and_changes_nothing(tmp_path, clean, where):
    at = 200 if where == "mid-stream" else 1
    lines = [*BURST[:at], inventory_line(9e10), *BURST[at:]]
    decisions, dead = run(tmp_path, lines, "stray")
    assert decisions == clean
    assert [letter["reason"] for letter in dead] == [
        "stray: event time 90000000000.0 is more than 60 s ahead of the events before and after it"
    ]


def alone(lines: list[str]) -> list[str]:
    """``lines`` without the second engine's first pass: the first pass, held until the next
    confirms it, is then confirmed by a later one (an inventory may come between them)."""
    first = first_fpm(lines)
    second = first_fpm(lines, first + 1)
    assert json.loads(lines[second])["time"] == json.loads(lines[first])["time"]
    return lines[:second] + lines[second + 1 :]


def with_inventory_after_first_pass(lines: list[str]) -> list[str]:
    first = first_fpm(lines)
    after = json.loads(lines[first])["time"] + 0.05  # newer than the held first pass
    return [*lines[: first + 1], inventory_line(after), *lines[first + 1 :]]


def test_a_snapshot_does_not_overtake_the_held_first_measurement(tmp_path):
    control, dead = run(tmp_path, alone(BURST), "control")
    assert control and dead == []
    decisions, dead = run(tmp_path, with_inventory_after_first_pass(alone(BURST)), "overtaken")
    assert dead == []
    assert decisions == control


def test_a_snapshot_does_not_overtake_a_measurement_held_after_a_gap(tmp_path):
    later = [
        json.dumps(json.loads(line) | {"time": json.loads(line)["time"] + 8 * DAY})
        for line in alone(BURST)
    ]
    control, dead = run(tmp_path, BURST + later, "control")
    assert any(d["time"] > 8 * DAY for d in control) and dead == []
    decisions, dead = run(tmp_path, BURST + with_inventory_after_first_pass(later), "overtaken")
    assert dead == []
    assert decisions == control


def test_live_snapshots_waiting_for_the_first_measurement_collapse(workers):
    # a DGD polled every 10 s for 1000 polls before the deployment's first forward pass: one
    # capabilities (merged) and one inventory wait, not 2000 snapshots; every acknowledgement
    # waits (the gate judges each: a stale one read last must not erase a valid one)
    now = time.time()
    polls = []
    for i in range(1000):
        at = now - 20_000 + 10 * i
        power = EngineCapabilities(gpu_power_limit_w=700 - i % 2)
        polls += [
            CapabilitiesEvent(deployment="d", time=at, payload=WorkerCapabilities(decode=power)),
            InventoryEvent(
                deployment="d",
                time=at,
                payload={"ready_num_decode": 1 + i % 3, "expected_num_decode": 3},
            ),
            AckEvent(deployment="d", time=at, payload={"acked_decision_id": i}),
        ]
    card = CapabilitiesEvent(
        deployment="d",
        time=now - 10,
        payload=WorkerCapabilities(decode=EngineCapabilities(num_gpu=2)),
    )
    events = [*polls[:1500], card, *polls[1500:], ClockEvent(deployment="d", time=now - 5)]
    flow = Dataflow("live_waiting")
    keyed = op.key_on("key", op.input("in", flow, TestingSource(events)), lambda e: e.deployment)
    clock = PlannerClock(event_time, timedelta(0), timedelta(seconds=5), is_state=is_state_snapshot)
    out: list = []
    op.output("out", EventHorizon(clock, live=True).apply("horizon", keyed), TestingSink(out))
    run_flow(flow, workers)
    released = [event for _key, event in out]
    acks = [e.payload.acked_decision_id for e in released if isinstance(e, AckEvent)]
    assert acks == list(range(1000))  # every one, in order
    assert sorted(type(e).__name__ for e in released if not isinstance(e, AckEvent)) == [
        "CapabilitiesEvent",
        "ClockEvent",
        "InventoryEvent",
    ]
    assert {e.time for e in released} == {now - 5}  # at the first measurement's time
    by_type = {type(e).__name__: e for e in released}
    assert by_type["InventoryEvent"].payload.ready_num_decode == 1 + 999 % 3
    decode = by_type["CapabilitiesEvent"].payload.decode  # merged: the card and the last poll
    assert (decode.num_gpu, decode.gpu_power_limit_w) == (2, 700 - 999 % 2)


def test_a_live_snapshot_stamped_past_the_host_clock_is_placed_not_refused(workers):
    """Another host's clock 10 minutes ahead stamps an inventory: a snapshot never moves event
    time, so it is placed at the newest measurement — used, not refused as ``ahead`` (only a
    measurement that far past the host clock is)."""
    now = time.time()
    skewed = InventoryEvent(deployment="d", time=now + 600, payload=INVENTORY)
    stray = ClockEvent(deployment="d", time=now + 600)
    events = [ClockEvent(deployment="d", time=now), skewed, stray]
    flow = Dataflow("live_ahead")
    keyed = op.key_on("key", op.input("in", flow, TestingSource(events)), lambda e: e.deployment)
    clock = PlannerClock(event_time, timedelta(0), timedelta(seconds=5), is_state=is_state_snapshot)
    out: list = []
    horizon = EventHorizon(clock, live=True, window_s=5.0)
    op.output("out", horizon.apply("horizon", keyed), TestingSink(out))
    run_flow(flow, workers)
    released = [item for _key, item in out]
    assert [type(e).__name__ for e in released[:2]] == ["ClockEvent", "InventoryEvent"]
    assert released[1].time == pytest.approx(now, abs=1e-3)  # (µs: bytewax's clock)
    assert released[1].payload == skewed.payload
    assert released[2].reason.startswith("ahead: ")  # the measurement is refused


def test_a_live_measurement_a_little_ahead_of_the_host_clock_is_refused(workers):
    """One request from a host whose clock runs 2 minutes fast: used (the bound was 5 minutes),
    it moved event time 2 minutes ahead and every real event until the host clock caught up
    was late; a replay of the same stream holds it and refuses it as a stray. Within 5 s plus
    the allowed lateness (hosts' skew), a measurement is used."""
    now = time.time()
    events = [
        ClockEvent(deployment="d", time=now - 1),
        ClockEvent(deployment="d", time=now + 120),  # the fast host
        ClockEvent(deployment="d", time=now + 6.5),  # 1.5 s skew beside a 2 s lateness: used
        ClockEvent(deployment="d", time=now + 7),
    ]
    flow = Dataflow("live_a_little_ahead")
    keyed = op.key_on("key", op.input("in", flow, TestingSource(events)), lambda e: e.deployment)
    clock = PlannerClock(event_time, timedelta(seconds=2), timedelta(seconds=5))
    out: list = []
    horizon = EventHorizon(clock, live=True, window_s=5.0)
    op.output("out", horizon.apply("horizon", keyed), TestingSink(out))
    run_flow(flow, workers)
    released = [item for _key, item in out]
    assert [getattr(e, "reason", "used")[:6] for e in released] == ["used", "ahead:"] + ["used"] * 2
