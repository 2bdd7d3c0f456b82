"""The decision sink: ScalingDecisions to a Kafka topic, keyed by deployment."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from bytewax.outputs import DynamicSink, StatelessSinkPartition
from confluent_kafka import KafkaError, Message, Producer

from connectors.kafka.client import (
    TopicNotFoundError,
    ensure_topic,
    flush,
    produce,
    producer_config,
)
from connectors.kafka.decisions import read_decision_messages
from connectors.pipeline_metrics import DECISION_DELIVERY_WAITS
from schemas import DeliveredDecision, ScalingDecision

NO_DELIVERY_LIMIT = {"message.timeout.ms": 0}
"""librdkafka retries a message for ``message.timeout.ms`` (0 = for ever) before failing it."""


log = logging.getLogger(__name__)


class _DecisionSinkPartition(StatelessSinkPartition[ScalingDecision]):
    def __init__(self, producer: Producer, topic: str, where: str, timeout_s: float) -> None:
        self._producer = producer
        self._topic = topic
        self._where = where
        self._timeout_s = timeout_s

    def _deliver(self, failures: list[str]) -> None:
        """Wait until every queued decision is acknowledged, however long the broker is away.

        Nothing is dropped and nothing is reordered (the producer retries until delivery); a
        decision the broker refuses (``failures``, filled by the delivery callback) raises.
        """
        waited = 0.0
        while remaining := self._producer.flush(self._timeout_s):
            if failures:
                break
            waited += self._timeout_s
            DECISION_DELIVERY_WAITS.labels(sink=self._where).inc()
            log.warning(
                "%d decisions wait for %s (%g s so far): retrying until it answers",
                remaining,
                self._where,
                waited,
            )
        flush(self._producer, self._where, self._timeout_s, failures, "decisions")

    def write_batch(self, items: list[ScalingDecision]) -> None:
        failures: list[str] = []

        def on_delivery(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                key = (message.key() or b"").decode(errors="replace")
                failures.append(f"deployment {key!r}: {error}")

        for item in items:
            if not isinstance(item, ScalingDecision):
                raise TypeError(
                    f"KafkaDecisionSink takes ScalingDecision items, got {type(item).__name__}"
                )
            produce(
                self._producer,
                self._topic,
                item.deployment.encode(),
                item.model_dump_json().encode(),
                on_delivery,
            )
        self._deliver(failures)

    def close(self) -> None:
        flush(self._producer, self._where, self._timeout_s, [], "decisions")


class KafkaDecisionSink(DynamicSink[ScalingDecision]):
    """Scaling decisions to a Kafka topic: key = deployment, value = the decision's JSON.

    The producer is idempotent (``enable.idempotence=true``, ``acks=all``), so retries never
    duplicate or reorder a deployment's decisions. The topic is created with ``partitions``
    partitions if it does not exist. Each batch is delivered before ``write_batch`` returns:
    while the broker is unreachable the sink waits (a warning every ``timeout_s``, and
    ``flowplanner_decision_delivery_waits_total``) and the planner with it, keeping its state,
    rather than failing the run — a restarted worker would replay its inputs and send their
    decisions again. A decision the broker refuses raises :class:`KafkaConnectorError`, and so
    does one that outlives a ``message.timeout.ms`` given in ``config`` (by default there is
    no limit). Closing waits at most ``timeout_s``. :meth:`delivered` reads back, per
    deployment, the newest decision the topic holds, so a restarted planner resumes after it.

    >>> sink = KafkaDecisionSink("127.0.0.1:9092", "decisions", partitions=3)
    >>> sink.topic, sink.partitions
    ('decisions', 3)
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, Any] | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.config = dict(config or {})
        self.timeout_s = timeout_s

    def delivered(self) -> list[DeliveredDecision]:
        """The newest decision of each deployment in the topic (none if it does not exist).

        Messages that are not decisions are passed over (counted in a warning).
        """
        try:
            messages = read_decision_messages(
                self.bootstrap, self.topic, config=self.config, timeout_s=self.timeout_s
            )
        except TopicNotFoundError:
            return []
        held = []
        foreign = 0
        for message in messages:
            if message.decision is None:
                foreign += 1
            else:
                held.append(DeliveredDecision.of(message.decision))
        if foreign:
            log.warning("%d messages of Kafka topic %s are not decisions", foreign, self.topic)
        return list(DeliveredDecision.newest(held).values())

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _DecisionSinkPartition:
        ensure_topic(
            self.bootstrap,
            self.topic,
            partitions=self.partitions,
            replication_factor=self.replication_factor,
            config=self.config,
            timeout_s=self.timeout_s,
        )
        producer = Producer(producer_config(self.bootstrap, {**NO_DELIVERY_LIMIT, **self.config}))
        where = f"Kafka topic {self.topic} at {self.bootstrap}"
        return _DecisionSinkPartition(producer, self.topic, where, self.timeout_s)
