"""Kafka clients as we configure them: consumers without groups, idempotent producers, topics.

The end of a partition is taken from a fetch response's high watermark, not from ListOffsets
alone, because some Kafka-protocol brokers (Tansu 0.6) answer ListOffsets(latest) with the base
offset of the last record batch + 1 instead of the end of the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from time import monotonic
from typing import Any, NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pydantic import BaseModel

log = logging.getLogger(__name__)
_librdkafka_log = logging.getLogger("connectors.kafka.librdkafka")

BATCH_SIZE = 1000
"""Messages per consume call / source batch (bytewax throughput collapses with tiny batches)."""

DEFAULT_TIMEOUT_S = 10.0
"""Default time allowed for one broker request (metadata, offsets, topic creation, flush)."""


class KafkaConnectorError(RuntimeError):
    """The broker could not be reached, refused a request, or lost a message.

    >>> str(KafkaConnectorError("cannot reach Kafka at 127.0.0.1:9"))
    'cannot reach Kafka at 127.0.0.1:9'
    """


class TopicNotFoundError(KafkaConnectorError):
    """The broker answered, but the topic does not exist (a live reader may wait for it).

    >>> isinstance(TopicNotFoundError("Kafka topic 'events' does not exist"), KafkaConnectorError)
    True
    """


def _base_config(bootstrap: str, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": _librdkafka_log}
    config.update(extra or {})
    return config


def consumer_config(
    bootstrap: str, extra: Mapping[str, Any] | None = None, *, partition_eof: bool = False
) -> dict[str, Any]:
    """Configuration of our consumers: explicit assignment, no commits, optional EOF events.

    Bounded reads (``partition_eof``) want the end-of-partition answer at once, so the broker
    may hold an empty fetch only briefly; following reads wait up to 100 ms for new data.

    >>> cfg = consumer_config("127.0.0.1:9092", partition_eof=True)
    >>> cfg["enable.auto.commit"], cfg["fetch.wait.max.ms"]
    (False, 10)
    """
    config = _base_config(bootstrap, None)
    config.update(
        {
            # Required by librdkafka, never used: we assign() partitions and commit nothing.
            "group.id": "flowplanner-unused",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": partition_eof,
            "fetch.wait.max.ms": 10 if partition_eof else 100,
            # A position that fell off the start of the log (retention) resumes at the oldest
            # message kept rather than silently skipping to the newest.
            "auto.offset.reset": "earliest",
        }
    )
    config.update(extra or {})
    return config


def producer_config(bootstrap: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Configuration of our producers: idempotent, acknowledged by all in-sync replicas.

    >>> cfg = producer_config("127.0.0.1:9092")
    >>> cfg["enable.idempotence"], cfg["acks"]
    (True, 'all')
    """
    config = _base_config(bootstrap, None)
    config.update({"enable.idempotence": True, "acks": "all"})
    config.update(extra or {})
    return config


def _admin(bootstrap: str, extra: Mapping[str, Any] | None) -> AdminClient:
    return AdminClient(_base_config(bootstrap, extra))


def _topics(admin: AdminClient, bootstrap: str, timeout_s: float) -> dict[str, Any]:
    # Listing ALL topics never auto-creates one (naming a topic in a metadata request may).
    try:
        return admin.list_topics(timeout=timeout_s).topics
    except KafkaException as error:
        raise KafkaConnectorError(
            f"cannot reach Kafka at {bootstrap} within {timeout_s:g} s: {error}"
        ) from error


def list_partitions(
    bootstrap: str,
    topic: str,
    *,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[int]:
    """Partition numbers of an existing topic; raises :class:`TopicNotFoundError` if missing."""
    topics = _topics(_admin(bootstrap, config), bootstrap, timeout_s)
    metadata = topics.get(topic)
    if metadata is None:
        known = ", ".join(sorted(topics)) or "none"
        raise TopicNotFoundError(
            f"Kafka topic {topic!r} does not exist on {bootstrap} (topics: {known})"
        )
    if metadata.error is not None:
        raise KafkaConnectorError(f"Kafka topic {topic!r} on {bootstrap}: {metadata.error.str()}")
    return sorted(metadata.partitions)


def ensure_topic(
    bootstrap: str,
    topic: str,
    *,
    partitions: int = 1,
    replication_factor: int = 1,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> bool:
    """Create ``topic`` unless it exists; returns whether this call created it."""
    admin = _admin(bootstrap, config)
    if topic in _topics(admin, bootstrap, timeout_s):
        return False
    futures = admin.create_topics(
        [NewTopic(topic, partitions, replication_factor)], request_timeout=timeout_s
    )
    try:
        futures[topic].result(timeout=timeout_s)
    except KafkaException as error:
        if error.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False  # somebody else (another worker) created it meanwhile
        raise KafkaConnectorError(
            f"cannot create Kafka topic {topic!r} on {bootstrap}: {error}"
        ) from error
    except TimeoutError as error:
        raise KafkaConnectorError(
            f"cannot create Kafka topic {topic!r} on {bootstrap} within {timeout_s:g} s"
        ) from error
    log.info("created Kafka topic %s on %s (%d partitions)", topic, bootstrap, partitions)
    return True


def poll_batch(consumer: Consumer, max_messages: int, timeout_s: float) -> list[Message]:
    """Wait up to ``timeout_s`` for a first message, then take what else is ready (no wait).

    (``Consumer.consume(n, timeout)`` waits the whole timeout unless ``n`` messages arrive.)
    """
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    return [first, *consumer.consume(max_messages - 1, 0)] if max_messages > 1 else [first]


class Bounds(NamedTuple):
    """Offsets of a partition: its first message and the offset after its last one.

    >>> Bounds(first=0, end=12).end
    12
    """

    first: int
    end: int


def partition_bounds(
    bootstrap: str,
    topic: str,
    partitions: Iterable[int],
    *,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[int, Bounds]:
    """First and end offsets of each partition, right now.

    ListOffsets gives a first answer; the end of a partition that is not empty is then
    confirmed by fetching its last batch and taking the high watermark of that fetch (see the
    module doc). Starting consumers at a concrete first offset also avoids librdkafka's slow
    resolution of the logical ``OFFSET_BEGINNING``.
    """
    consumer = Consumer(consumer_config(bootstrap, config, partition_eof=True))
    try:
        bounds: dict[int, Bounds] = {}
        probes = []
        for partition in partitions:
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=timeout_s, cached=False
                )
            except KafkaException as error:
                raise KafkaConnectorError(
                    f"cannot read the offsets of {topic}/{partition} on {bootstrap}: {error}"
                ) from error
            bounds[partition] = Bounds(low, high)
            if high > low:
                probes.append(TopicPartition(topic, partition, high - 1))
        if probes:
            consumer.assign(probes)
            pending = {probe.partition for probe in probes}
            deadline = monotonic() + timeout_s
            while pending:
                if monotonic() > deadline:
                    raise KafkaConnectorError(
                        f"no end-of-partition answer for {topic} partitions {sorted(pending)} "
                        f"from {bootstrap} within {timeout_s:g} s"
                    )
                for message in poll_batch(consumer, BATCH_SIZE, 0.1):
                    error = message.error()
                    if error is None:
                        continue
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaConnectorError(f"reading {topic} on {bootstrap}: {error}")
                    partition = message.partition()
                    bounds[partition] = Bounds(bounds[partition].first, message.offset())
                    pending.discard(partition)
        return bounds
    finally:
        consumer.close()


def produce(
    producer: Producer,
    topic: str,
    key: bytes,
    value: bytes,
    on_delivery: Callable[[KafkaError | None, Message], None],
) -> None:
    """Queue one message, waiting for room when the producer's local queue is full."""
    while True:
        try:
            producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
        except BufferError:  # local queue full: let deliveries drain, then retry
            producer.poll(0.1)
            continue
        producer.poll(0)
        return


def flush(producer: Producer, where: str, timeout_s: float, failures: list[str], what: str) -> None:
    """Wait for every queued message; raise if one is unacknowledged or ``failures`` is set."""
    remaining = producer.flush(timeout_s)
    if remaining:
        raise KafkaConnectorError(
            f"{remaining} {what} not acknowledged by {where} within {timeout_s:g} s"
        )
    if failures:
        raise KafkaConnectorError(
            f"{len(failures)} {what} could not be written to {where}: {failures[0]}"
        )


def produce_json(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[str, BaseModel]],
    *,
    partitions: int = 1,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> int:
    """Write ``(key, model)`` pairs as JSON with an idempotent producer; returns the count.

    Creates the topic if missing and raises :class:`KafkaConnectorError` unless every record
    was acknowledged.
    """
    ensure_topic(bootstrap, topic, partitions=partitions, config=config, timeout_s=timeout_s)
    producer = Producer(producer_config(bootstrap, config))
    failures: list[str] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failures.append(str(error))

    count = 0
    for key, model in records:
        produce(producer, topic, key.encode(), model.model_dump_json().encode(), on_delivery)
        count += 1
    flush(producer, f"Kafka topic {topic} at {bootstrap}", timeout_s, failures, "records")
    return count
