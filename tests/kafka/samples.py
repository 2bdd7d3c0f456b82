"""Sample decisions and raw writes shared by the Kafka tests (the broker is tests/services)."""

from __future__ import annotations

import json
import threading
from functools import partial
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from schemas import ScalingDecision
from tests.decisions import decision

# the Kafka tests' decision: llama at t=100 s, prefill 2 -> 3 and decode 4 -> 4 (any field may
# be given in place of these)
sample_decision = partial(
    decision, time=100.0, num_prefill=3, num_decode=4, current_prefill=2, current_decode=4
)


def topic_partitions(bootstrap: str, topic: str) -> int | None:
    """Partition count of ``topic``, or None when it does not exist (never creates it)."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5)
    found = metadata.topics.get(topic)
    return None if found is None else len(found.partitions)


def write_raw(
    bootstrap: str, topic: str, values: list[bytes | None], partition: int | None = None
) -> None:
    """Write raw values with a plain producer (for input that our own writers never produce)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    errors: list = []
    for value in values:
        kwargs = {} if partition is None else {"partition": partition}
        producer.produce(
            topic, value=value, on_delivery=lambda e, _m: errors.append(e) if e else None, **kwargs
        )
    assert producer.flush(10) == 0 and not errors, errors


def event_line(deployment: str, time: float) -> bytes:
    return json.dumps({"type": "clock", "deployment": deployment, "time": time}).encode()


def write_in_background(
    part: Any, decisions: list[ScalingDecision]
) -> tuple[threading.Thread, list]:
    """Start ``part.write_batch(decisions)`` on a thread (it may wait for a paused broker); the
    list receives ``None`` when it returns, or the exception it raised."""
    outcome: list[BaseException | None] = []

    def write() -> None:
        try:
            part.write_batch(decisions)
            outcome.append(None)
        except BaseException as error:  # the test reports it
            outcome.append(error)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return writer, outcome
