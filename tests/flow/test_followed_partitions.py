"""A followed topic of several partitions decides what its replay and its recording decide.

The partitions are merged by event time; events of equal time on different partitions come in
partition order, not in the order they were produced. A state snapshot stamped with the time of
a tick boundary may so come before the measurements of its time: live, it must still land in
the window a replay puts it in (its own), not in the one before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.kafka.source import KafkaEventSource
from connectors.recorded import RecordedSource
from schemas import PlannerConfig
from tests.flow.live_run import HostClock, live_until, publish, replay
from tests.flow.streams import DECODE_CONFIG, decode_ramp, write_stream

SECONDS = 300.0


def with_inventory_changes(events: list[dict], every_s: float) -> list[dict]:
    """``events`` with an inventory snapshot after the forward passes of every ``every_s``-th
    second (a tick boundary), the ready decode engines going 3, 2, 3, …"""
    out: list[dict] = []
    for i, event in enumerate(events):
        out.append(event)
        time = event["time"]
        last_of_its_time = i + 1 == len(events) or events[i + 1]["time"] != time
        if event["type"] == "fpm" and last_of_its_time and time % every_s == 0 and time < SECONDS:
            ready = 3 if (time // every_s) % 2 else 2
            payload = {"ready_num_decode": ready, "expected_num_decode": ready}
            out.append(
                {"type": "inventory", "deployment": "alpha", "time": time, "payload": payload}
            )
    return out


@pytest.mark.services
def test_a_followed_partitioned_topic_decides_as_its_replay(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic: str
) -> None:
    events = with_inventory_changes(decode_ramp("alpha", engines=2, seconds=SECONDS), 20.0)
    # snapshots on partition 0, forward passes on 1: merged on equal times, a snapshot comes
    # before the forward passes it was produced after
    publish(kafka_bootstrap, kafka_topic, events, [int(e["type"] == "fpm") for e in events])
    configs = {"alpha": PlannerConfig.model_validate(DECODE_CONFIG)}
    recorded = replay(configs, RecordedSource([write_stream(tmp_path / "s.jsonl", events)]))
    decisions, ticks, dead = recorded
    assert decisions and dead == []
    assert len({t["ready_decode"] for t in ticks}) == 2  # the snapshots change the ticks
    assert replay(configs, KafkaEventSource(kafka_bootstrap, kafka_topic, until_end=True)) == (
        recorded
    )

    followed = live_until(
        configs,
        [KafkaEventSource(kafka_bootstrap, kafka_topic)],
        HostClock(),
        ticks[-1]["time"],
        last_event=SECONDS,
    )

    assert followed == recorded


@pytest.mark.services
def test_a_stray_in_one_partitions_backlog_costs_one_dead_letter(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic: str
) -> None:
    """A followed topic's backlog is merged as its replay is: a forward pass stamped an hour
    ahead on one partition keeps its place there (connectors.merge_keys), instead of holding
    the rest of its partition back behind the other's events, which would all be late."""
    events = decode_ramp("alpha", engines=2, seconds=120.0)
    configs = {"alpha": PlannerConfig.model_validate(DECODE_CONFIG)}
    recorded = replay(configs, RecordedSource([write_stream(tmp_path / "s.jsonl", events)]))
    at = next(i for i, e in enumerate(events) if e["type"] == "fpm" and e["time"] >= 40.0)
    stray = events[at] | {"time": events[at]["time"] + 3600.0}
    poisoned = [*events[:at], stray, *events[at:]]
    engines = sorted({e["payload"]["fpm"]["worker_id"] for e in events if e["type"] == "fpm"})
    publish(  # one engine's passes on each partition; the stray on the first engine's
        kafka_bootstrap,
        kafka_topic,
        poisoned,
        [
            int(e["type"] == "fpm" and e["payload"]["fpm"]["worker_id"] != engines[0])
            for e in poisoned
        ],
    )
    decisions, ticks, dead = live_until(
        configs,
        [KafkaEventSource(kafka_bootstrap, kafka_topic)],
        HostClock(),
        recorded[1][-1]["time"],
        last_event=120.0,
    )
    assert (decisions, ticks) == recorded[:2] and recorded[0]
    assert [reason.split(":")[0] for reason in dead] == ["stray"]
