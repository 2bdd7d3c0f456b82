"""Each deployment's event time holds for the whole run: an event stamped far ahead is refused
rather than making every later event late, and after a quiet spell (when bytewax forgets a
deployment's closed windows) an old event is still late — the planner never ticks backwards."""

from __future__ import annotations

import json
import signal
import time
from datetime import timedelta
from pathlib import Path

import bytewax.operators as op
import pytest
import yaml
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink, TestingSource
from confluent_kafka import Producer

from connectors.pipeline_metrics import dead_letter_kind
from flows.clock import PlannerClock
from flows.horizon import EventHorizon, event_time
from schemas import ClockEvent, InventoryEvent
from tests.flow.cluster import run_flow
from tests.flow.runner import (
    flowplanner,
    read_jsonl,
    run_recorded,
    run_recorded_text,
    start_flowplanner,
    write_config,
)
from tests.flow.streams import DECODE_CONFIG, decode_fpm
from tests.services.process import wait_until

EXAMPLE = Path(__file__).parents[2] / "examples"


def run(tmp_path: Path, stream: Path, tag: str) -> tuple[list[dict], list[dict]]:
    done = run_recorded(EXAMPLE / "decode.yaml", [stream], tmp_path / tag)
    return done["decisions"], done["dead"]


def shifted(lines: list[str], by: float) -> list[str]:
    return [
        json.dumps(json.loads(line) | {"time": json.loads(line)["time"] + by}) for line in lines
    ]


def with_stray(lines: list[str], at: int, time: float) -> list[str]:
    """``lines`` with a copy of forward pass ``lines[at]`` stamped ``time`` inserted before it."""
    return [*lines[:at], json.dumps(json.loads(lines[at]) | {"time": time}), *lines[at:]]


DAY = 24 * 3600.0


@pytest.mark.parametrize(
    ("case", "shift", "stray_at", "stray_time", "how_far"),
    [
        ("mid-stream, far ahead", 0.0, 500, 9e10, "60 s ahead of the events before and after it"),
        # an hour and six days ahead were used (all that followed was late) before the replay
        # held events more than a minute ahead, not only a week
        (
            "mid-stream, an hour ahead",
            0.0,
            500,
            3600.0,
            "60 s ahead of the events before and after it",
        ),
        (
            "mid-stream, six days ahead",
            0.0,
            500,
            6 * 24 * 3600.0,
            "60 s ahead of the events before and after it",
        ),
        ("the first pass, far ahead", 0.0, 2, 9e10, "60 s ahead of the events before and after it"),
        # a first pass an hour ahead was confirmed by the next (within a week): 0 decisions
        (
            "the first pass, an hour ahead",
            0.0,
            2,
            3600.0,
            "60 s ahead of the events before and after it",
        ),
        ("the first pass, far behind", 1.78e9, 2, 1.0, "604800 s from the events around it"),
        # the first pass was a stray too (a week from the second): the third says which is
        (
            "the second pass, far ahead",
            0.0,
            3,
            9e10,
            "60 s ahead of the events before and after it",
        ),
    ],
)
def test_one_stray_timestamp_is_refused_and_changes_nothing(
    tmp_path, case, shift, stray_at, stray_time, how_far
):
    lines = shifted((EXAMPLE / "decode_burst.jsonl").read_text().splitlines(), shift)
    assert json.loads(lines[stray_at])["type"] == "fpm"
    done = run_recorded_text(EXAMPLE / "decode.yaml", "\n".join(lines) + "\n")
    clean = done["decisions"]
    assert clean and done["dead"] == []
    poisoned = tmp_path / "poisoned.jsonl"
    poisoned.write_text("\n".join(with_stray(lines, stray_at, stray_time)) + "\n")

    decisions, dead = run(tmp_path, poisoned, "poisoned")
    assert decisions == clean
    [letter] = dead
    assert letter["reason"] == f"stray: event time {stray_time} is more than {how_far}"
    assert dead_letter_kind(letter["reason"]) == "stray"  # a metric label of its own


def test_a_real_gap_of_days_is_crossed(tmp_path):
    lines = (EXAMPLE / "decode_burst.jsonl").read_text().splitlines()
    once = run_recorded_text(EXAMPLE / "decode.yaml", "\n".join(lines) + "\n")["decisions"]
    twice = tmp_path / "twice.jsonl"
    twice.write_text("\n".join(lines + shifted(lines, 8 * DAY)) + "\n")
    decisions, dead = run(tmp_path, twice, "twice")
    assert dead == []
    assert decisions[: len(once)] == once
    assert any(d["time"] > 8 * DAY for d in decisions)  # the planner goes on after the gap


def test_a_closed_loop_with_sparse_steps_does_not_wait_on_a_held_event(tmp_path):
    # the simulator waits for the tick its last event closes: a step of two minutes with no
    # measurement in it held that clock event for a confirmation that never came (it hung)
    config = yaml.safe_load((EXAMPLE / "planner.yaml").read_text())
    planner = next(iter(config["deployments"].values()))
    planner |= {
        "load_adjustment_interval_seconds": 120,
        "throughput_adjustment_interval_seconds": 240,
    }
    path = tmp_path / "sparse.yaml"
    path.write_text(yaml.safe_dump(config))
    args = ("--synthetic", "poisson", "--rate", "0.005", "--duration", "900", "--quiet")
    done = flowplanner("replay", "--config", str(path), *args, "--decode", "0", "--prefill", "0")
    assert done.returncode == 0, done.stderr


def test_snapshots_waiting_behind_a_held_event_at_the_end_are_used(tmp_path):
    # the input ends on a clock event minutes past the data (held) and an inventory after it
    # (waiting behind it): nothing follows to contradict either, so neither is a dead letter
    lines = (EXAMPLE / "decode_burst.jsonl").read_text().splitlines()
    inventory = json.loads(lines[1]) | {"time": 400.0}
    ending = [json.dumps({"type": "clock", "deployment": "llama", "time": 300.0})]
    stream = tmp_path / "ending.jsonl"
    stream.write_text("\n".join([*lines, *ending, json.dumps(inventory)]) + "\n")
    _, dead = run(tmp_path, stream, "ending")
    assert dead == []


def test_a_sparse_recording_that_moves_on_by_minutes_loses_nothing(tmp_path):
    # every event more than a minute past the one before is held, and the next one confirms it
    lines = (EXAMPLE / "decode_burst.jsonl").read_text().splitlines()
    once = run_recorded_text(EXAMPLE / "decode.yaml", "\n".join(lines) + "\n")["decisions"]
    spread = [*lines, *shifted(lines, 600.0), *shifted(lines, 1300.0)]
    sparse = tmp_path / "sparse.jsonl"
    sparse.write_text("\n".join(spread) + "\n")
    decisions, dead = run(tmp_path, sparse, "sparse")
    assert dead == []
    assert decisions[: len(once)] == once
    assert any(d["time"] > 1300.0 for d in decisions)


def fpm_event(counter: int, at: float) -> bytes:
    kv = 200_000 + 1000 * (counter % 40)
    fpm = decode_fpm("w0", kv, kv // 2000, counter)
    event = {
        "type": "fpm",
        "deployment": "llama",
        "time": at,
        "payload": {"role": "decode", "fpm": fpm},
    }
    return json.dumps(event).encode()


@pytest.mark.services
def test_after_a_quiet_spell_an_old_event_is_late(tmp_path, kafka_bootstrap, kafka_topic):
    config = write_config(tmp_path / "c.yaml", {"llama": DECODE_CONFIG})
    ticks, dead = tmp_path / "ticks.jsonl", tmp_path / "dead.jsonl"
    planner = start_flowplanner(
        "run",
        *("--config", str(config), "--input", f"kafka://{kafka_bootstrap}/{kafka_topic}"),
        *("--ticks", str(ticks), "--dead-letters", str(dead)),
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap})

    def send(counter: int, at: float) -> None:
        producer.produce(kafka_topic, key="llama", value=fpm_event(counter, at))
        assert producer.flush(10) == 0

    try:
        for counter in range(1, 9):
            last = time.time()  # the newest event time: a window without events never ticks,
            send(counter, last)  # so the first tick after it is the end of its window
            time.sleep(0.25)
        # quiet until the host clock has closed every window of those events
        wait_until(
            lambda: ticks.exists() and any(t["time"] > last for t in read_jsonl(ticks)),
            "the windows of the first events to close",
            timeout_s=120,
        )
        closed = min(t["time"] for t in read_jsonl(ticks) if t["time"] > last)
        old, delayed = last - 60.0, (last + closed) / 2  # the second is newer than any seen,
        send(100, delayed)  # but inside a window the host clock has closed
        send(101, old)
        send(102, time.time())
        wait_until(lambda: len(read_jsonl(dead)) == 2 if dead.exists() else False, "two letters")
    finally:
        planner.send_signal(signal.SIGTERM)
        _, err = planner.communicate(timeout=30)
    assert planner.returncode == 0, err
    assert [letter["reason"] for letter in read_jsonl(dead)] == [
        f"late: event time {t} is behind the planner's watermark" for t in (delayed, old)
    ]
    times = [t["time"] for t in read_jsonl(ticks)]
    assert times == sorted(set(times))  # never backwards, never twice


def test_live_a_snapshot_never_moves_event_time(workers):
    # an orchestrator whose clock runs 30 s ahead: its inventory is placed at the newest
    # measurement, and the measurements after it are not late; an untimed one before the first
    # measurement waits for it
    now = time.time()
    inventory = {"ready_num_decode": 2, "expected_num_decode": 2}
    snapshot = InventoryEvent(deployment="d", time=0.0, payload=inventory)
    events = [snapshot, *(ClockEvent(deployment="d", time=now - 10 + k) for k in (0, 1))]
    events += [snapshot.model_copy(update={"time": now + 30})]
    events += [ClockEvent(deployment="d", time=now - 10 + k) for k in (2, 3)]
    flow = Dataflow("live_snapshots")
    keyed = op.key_on("key", op.input("in", flow, TestingSource(events)), lambda e: e.deployment)
    clock = PlannerClock(event_time, timedelta(seconds=1), timedelta(seconds=5))
    out: list = []
    op.output("out", EventHorizon(clock, live=True).apply("horizon", keyed), TestingSink(out))
    run_flow(flow, workers)
    assert [(type(e).__name__, e.time) for _key, e in out] == [
        ("InventoryEvent", now - 10),  # waited for the first measurement
        ("ClockEvent", now - 10),
        ("ClockEvent", now - 9),
        ("InventoryEvent", now - 9),  # not 30 s ahead: at the newest measurement
        ("ClockEvent", now - 8),
        ("ClockEvent", now - 7),
    ]
