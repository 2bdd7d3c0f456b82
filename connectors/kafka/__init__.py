"""Kafka I/O: the event source, the decision sink and the decision reader (confluent-kafka).

* :class:`KafkaEventSource` — a bytewax source over every partition of a topic (one bytewax
  partition per topic, its partitions merged by event time), yielding each message undecoded
  as ``RawEvent(source="kafka:<topic>/<partition>", position=offset, data=value)``; the flow
  decodes and dead-letters. The resume state is, per partition, the offset after the last
  message handed on, so a recovered run continues exactly where its snapshot was taken.
  Bounded mode (``until_end=True``) stops at the end offsets seen when the reader starts;
  follow mode reads forever.
* :class:`KafkaTraceSource` — the same over a frontend's ``dynamo.request.trace.v1`` topic:
  each ``request_end`` becomes a typed request event of one deployment, a malformed message a
  dead letter.
* :class:`KafkaDecisionSink` — a bytewax sink of ``ScalingDecision``: idempotent producer
  (``enable.idempotence``, ``acks=all``), key = deployment (so one deployment's decisions stay
  in order on one partition), value = the decision's JSON. Creates the topic if missing. Every
  batch is flushed before the sink returns and any delivery failure raises.
* :func:`read_decisions` / :func:`read_decision_messages` — read a decisions topic back
  (bounded or following), e.g. for ``flowplanner decisions`` or an external orchestrator.

Nothing here joins a consumer group: partitions are assigned explicitly and positions live in
bytewax's recovery state (or are not kept at all, for the reader).

See ``client.py`` for how the end of a partition is found (a Tansu quirk).
"""

from connectors.kafka.client import (
    BATCH_SIZE,
    DEFAULT_TIMEOUT_S,
    Bounds,
    KafkaConnectorError,
    TopicNotFoundError,
    consumer_config,
    ensure_topic,
    list_partitions,
    message_position,
    partition_bounds,
    produce_json,
    producer_config,
)
from connectors.kafka.decisions import (
    DecisionMessage,
    last_messages,
    read_decision_messages,
    read_decisions,
    read_messages,
)
from connectors.kafka.sink import KafkaDecisionSink
from connectors.kafka.source import KafkaEventSource, KafkaTopicSource, KafkaTraceSource
from connectors.kafka.url import KafkaUrl

__all__ = [
    "BATCH_SIZE",
    "DEFAULT_TIMEOUT_S",
    "Bounds",
    "DecisionMessage",
    "KafkaConnectorError",
    "KafkaDecisionSink",
    "KafkaEventSource",
    "KafkaTopicSource",
    "KafkaTraceSource",
    "KafkaUrl",
    "TopicNotFoundError",
    "consumer_config",
    "ensure_topic",
    "last_messages",
    "list_partitions",
    "message_position",
    "partition_bounds",
    "produce_json",
    "producer_config",
    "read_decision_messages",
    "read_decisions",
    "read_messages",
]
