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

from pathlib import Path

import pytest

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
