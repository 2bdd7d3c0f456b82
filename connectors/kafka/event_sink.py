"""Input events to a Kafka topic, as the planner's Kafka input reads them.

One JSON message per event (``Event`` of :mod:`schemas.events`), key = deployment, with an
idempotent producer: what ``flowplanner relay`` forwards from an engine's ZMQ publisher, for a
planner that follows the topic (``kafka://HOST:PORT/TOPIC``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bytewax.outputs import DynamicSink, StatelessSinkPartition
from confluent_kafka import KafkaError, Message, Producer

from connectors.kafka.client import (
    DEFAULT_TIMEOUT_S,
    ensure_topic,
    flush,
    produce,
    producer_config,
)
from schemas import Event


class _EventPartition(StatelessSinkPartition[Event]):
    def __init__(self, producer: Producer, topic: str, where: str, timeout_s: float) -> None:
        self._producer = producer
        self._topic = topic
        self._where = where
        self._timeout_s = timeout_s
        self._failures: list[str] = []

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self._failures.append(str(error))

    def write_batch(self, items: list[Event]) -> None:
        for event in items:
            key, value = event.deployment.encode(), event.model_dump_json().encode()
            produce(self._producer, self._topic, key, value, self._delivered)
        if self._failures:  # a message librdkafka gave up on: say so rather than lose more
            flush(self._producer, self._where, self._timeout_s, self._failures, "events")

    def close(self) -> None:
        flush(self._producer, self._where, self._timeout_s, self._failures, "events")


class KafkaEventSink(DynamicSink[Event]):
    """Events to ``topic`` (created if missing), one JSON message each, key = deployment.

    >>> KafkaEventSink("127.0.0.1:9092", "fpm").topic
    'fpm'
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        config: Mapping[str, Any] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.config = dict(config or {})
        self.timeout_s = timeout_s

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _EventPartition:
        ensure_topic(self.bootstrap, self.topic, config=self.config, timeout_s=self.timeout_s)
        producer = Producer(producer_config(self.bootstrap, self.config))
        where = f"Kafka topic {self.topic} at {self.bootstrap}"
        return _EventPartition(producer, self.topic, where, self.timeout_s)
