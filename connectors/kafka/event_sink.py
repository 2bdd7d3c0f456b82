"""Input events to a Kafka topic, as the planner's Kafka input reads them.

One JSON message per event (``Event`` of :mod:`schemas.events`), key = deployment, with an
idempotent producer: what ``flowplanner relay`` forwards from an engine's ZMQ publisher, for a
planner that follows the topic (``kafka://HOST:PORT/TOPIC``). While the broker is away the
producer retries for ever and, once its local queue is full, holds the writer (upstream, an
engine's ZMQ publisher then drops what its buffer cannot hold: sequence gaps); a stop then
drops what is not delivered within ``timeout_s``, saying how many.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from bytewax.outputs import DynamicSink, StatelessSinkPartition
from confluent_kafka import KafkaError, Message, Producer

from connectors.kafka.client import (
    DEFAULT_TIMEOUT_S,
    KafkaConnectorError,
    produce,
    producer_config,
)
from connectors.kafka.sink import NO_DELIVERY_LIMIT
from connectors.stopping import inputs_ended
from schemas import Event

log = logging.getLogger(__name__)


class _EventPartition(StatelessSinkPartition[Event]):
    def __init__(self, producer: Producer, topic: str, where: str, timeout_s: float) -> None:
        self._producer = producer
        self._topic = topic
        self._where = where
        self._timeout_s = timeout_s
        self._failures: list[str] = []
        self._dropped = 0

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self._failures.append(str(error))

    def write_batch(self, items: list[Event]) -> None:
        for index, event in enumerate(items):
            key, value = event.deployment.encode(), event.model_dump_json().encode()
            if not produce(self._producer, self._topic, key, value, self._delivered, inputs_ended):
                self._dropped += len(items) - index  # stopping while the broker is away
                return
        if self._failures:  # refused for good (not for an outage: those are retried for ever)
            raise KafkaConnectorError(f"{self._where}: {self._failures[0]}")

    def close(self) -> None:
        # never raises: bytewax may close a sink while it unwinds an error, and an error
        # raised then aborts the process without a word
        undelivered = self._producer.flush(self._timeout_s) + self._dropped
        if undelivered or self._failures:
            log.error(
                "%d events not delivered to %s: dropped at shutdown%s",
                undelivered + len(self._failures),
                self._where,
                f" ({self._failures[0]})" if self._failures else "",
            )


class KafkaEventSink(DynamicSink[Event]):
    """Events to ``topic``, one JSON message each, key = deployment. The topic must exist (the
    relay creates it before it starts): building the sink asks nothing of the broker, which may
    be away by then.

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
        producer = Producer(producer_config(self.bootstrap, {**NO_DELIVERY_LIMIT, **self.config}))
        where = f"Kafka topic {self.topic} at {self.bootstrap}"
        return _EventPartition(producer, self.topic, where, self.timeout_s)
