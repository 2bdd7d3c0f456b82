"""A worker following several topics merges their histories by event time when it (re)starts.

Each followed topic is read back from its beginning. Read side by side, whichever topic the
runtime or the broker served first moved the deployment's event time on, and most of the
other's history was late (379 of 399 requests in a review's test). ``flowplanner run`` now
reads its history inputs — followed topics, bounded ones, recordings — as one input merged by
event time while any of them reads back what it held at start (connectors.merged), then each
goes on as its messages arrive. Here each of two engines' forward passes are in a topic of
their own, as relays per engine pool would write them.
"""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path
from typing import Any

import pytest
from bytewax.inputs import StatefulSourcePartition

import connectors.kafka.source as kafka_source
from connectors.kafka import KafkaEventSource
from connectors.kafka.client import list_partitions
from connectors.merged import MergedSource
from connectors.recorded import RecordedSource
from flows.endpoints import wire
from schemas import PlannerConfig
from tests.flow.live_run import HostClock, live_until, publish, replay
from tests.flow.streams import DECODE_CONFIG, decode_ramp, write_stream

SECONDS = 300.0


def engine_of(event: dict) -> str | None:
    return event["payload"]["fpm"]["worker_id"] if event["type"] == "fpm" else None


@pytest.mark.services
def test_two_followed_topics_decide_as_their_replay(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic: str
) -> None:
    events = decode_ramp("alpha", engines=2, seconds=SECONDS)
    engines = sorted({e for e in map(engine_of, events) if e is not None})
    first = [e for e in events if engine_of(e) in (None, engines[0])]
    second = [e for e in events if engine_of(e) == engines[1]]
    topics = [f"{kafka_topic}-a", f"{kafka_topic}-b"]
    publish(kafka_bootstrap, topics[0], first)
    publish(kafka_bootstrap, topics[1], second)
    configs = {"alpha": PlannerConfig.model_validate(DECODE_CONFIG)}
    recorded = replay(configs, RecordedSource([write_stream(tmp_path / "s.jsonl", events)]))
    assert recorded[0] and recorded[2] == []

    inputs = wire([f"kafka://{kafka_bootstrap}/{t}" for t in topics], [], configs).inputs
    assert [type(s) for s in inputs] == [MergedSource]
    followed = live_until(configs, inputs, HostClock(), recorded[1][-1]["time"], SECONDS)

    assert followed == recorded


def clock(time: float) -> dict:
    return {"type": "clock", "deployment": "alpha", "time": time}


def times(batch: list) -> list[float]:
    return [json.loads(item.data)["time"] for item in batch]


def read(part: StatefulSourcePartition, count: int, timeout_s: float = 30.0) -> list[float]:
    """Poll ``part`` as a worker does until it handed on ``count`` events."""
    got: list[float] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += times(part.next_batch())
        time.sleep(0.01)
    return got


@pytest.mark.services
def test_a_resumed_merge_holds_a_stray_in_the_history_it_reads_back(
    kafka_bootstrap: str, kafka_topic: str
) -> None:
    """Resumed from a snapshot taken while both topics were live, the lanes read back what came
    meanwhile as history again: a stray far ahead keeps its lane's place (connectors.merge_keys)
    instead of holding the rest of its topic behind the other's."""
    topics = [f"{kafka_topic}-a", f"{kafka_topic}-b"]
    for topic in topics:
        publish(kafka_bootstrap, topic, [clock(1000.0 + i) for i in range(10)])

    def merged() -> MergedSource:
        return MergedSource([KafkaEventSource(kafka_bootstrap, t, batch_size=5) for t in topics])

    source = merged()
    [name] = source.list_parts()
    part = source.build_part("in", name, None)
    assert len(read(part, 20)) == 20
    state = pickle.loads(pickle.dumps(part.snapshot()))
    part.close()
    first = [clock(1010.0 + i) for i in range(20)]  # written while the worker is down
    first[2] = clock(9e8)
    publish(kafka_bootstrap, topics[0], first)
    publish(kafka_bootstrap, topics[1], [clock(1010.5 + i) for i in range(20)])

    resumed = merged()
    resumed.list_parts()
    part = resumed.build_part("in", name, state)
    got = read(part, 40)
    part.close()

    timed = [t for t in got if t != 9e8]
    assert len(got) == 40 and timed == sorted(timed)


@pytest.mark.services
def test_a_topic_not_created_yet_is_asked_for_at_its_own_pace(
    kafka_bootstrap: str, kafka_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside a topic with history, a followed topic that does not exist yet is looked for every
    half second (TOPIC_POLL_S), as it is read alone — not at every poll of the merge (each look
    lists the cluster's topics)."""
    present, missing = f"{kafka_topic}-a", f"{kafka_topic}-later"
    publish(kafka_bootstrap, present, [clock(1000.0 + i) for i in range(10)])
    looks: list[float] = []

    def counted(*args: Any, **kwargs: Any) -> list[int]:
        looks.append(time.monotonic())
        return list_partitions(*args, **kwargs)

    monkeypatch.setattr(kafka_source, "list_partitions", counted)
    source = MergedSource(
        [KafkaEventSource(kafka_bootstrap, present), KafkaEventSource(kafka_bootstrap, missing)]
    )
    [name] = source.list_parts()
    part = source.build_part("in", name, None)
    assert read(part, 10) == [1000.0 + i for i in range(10)]
    since = len(looks)
    read(part, 1, timeout_s=2.0)  # nothing more comes: two seconds of polls
    part.close()
    assert len(looks) - since <= 2.0 / kafka_source.TOPIC_POLL_S + 1
