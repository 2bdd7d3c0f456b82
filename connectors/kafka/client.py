"""Kafka clients as we configure them: consumers without groups, idempotent producers, topics.

The end of a partition is taken from a fetch response's high watermark, not from ListOffsets
alone, because some Kafka-protocol brokers (Tansu 0.6) answer ListOffsets(latest) with the base
offset of the last record batch + 1 instead of the end of the log.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from time import monotonic
from typing import Any, NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from pydantic import BaseModel

log = logging.getLogger(__name__)

REPEAT_INTERVAL_S = 30.0
"""librdkafka logs a failed connection at every retry (about 20 a second per client while a
broker refuses connections); the same message is logged at most once per this many seconds."""

_VARYING = re.compile(r"\d+ ?ms\b|\d+ identical error\(s\) suppressed")
"""Parts of a librdkafka message that differ between repeats of the same event."""


@dataclass(slots=True)
class _Repeats:
    shown_at: float
    held: int = 0


class RepeatedMessageFilter(logging.Filter):
    """Lets the same log message through at most once per ``interval_s``; the next one let
    through after a hold says how many were held back.

    Messages are the same when their level and text match, once the parts that differ between
    retries (durations in ms, librdkafka's own suppression counts) and, for librdkafka's
    ``"%s [%s] %s"`` records, the client's name are set aside: all clients failing to reach one
    broker make one line. A message held back and never repeated after the interval goes
    uncounted. Thread-safe (librdkafka logs from each client's polling thread).

    >>> now = [0.0]
    >>> repeats = RepeatedMessageFilter(30.0, clock=lambda: now[0])
    >>> def record(client: str, ms: int) -> logging.LogRecord:
    ...     text = f"127.0.0.1:9: Connection refused (after {ms}ms in state CONNECT)"
    ...     args = ("FAIL", client, text)
    ...     return logging.LogRecord("kafka", logging.ERROR, "", 0, "%s [%s] %s", args, None)
    >>> [repeats.filter(record(client, ms)) for client, ms in [("c-1", 0), ("c-1", 3), ("p-2", 0)]]
    [True, False, False]
    >>> now[0] = 31.0
    >>> shown = record("c-1", 1)
    >>> repeats.filter(shown), shown.getMessage()
    (True, 'FAIL [c-1] 127.0.0.1:9: Connection refused (after 1ms in state CONNECT) \
(2 more like it in the last 31 s not logged)')
    >>> repeats.held
    2
    """

    MAX_MESSAGES = 1024
    """Distinct messages remembered; past that, those out of their interval are forgotten."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = monotonic) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.clock = clock
        self.held = 0  # messages held back so far
        self._repeats: dict[tuple[int, str], _Repeats] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _shape(record: logging.LogRecord) -> str:
        args = record.args
        if record.msg == "%s [%s] %s" and isinstance(args, tuple) and len(args) == 3:
            text = f"{args[0]} {args[2]}"  # librdkafka: facility, client name, message
        else:
            text = record.getMessage()
        return _VARYING.sub("#", text)

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.levelno, self._shape(record))
        now = self.clock()
        with self._lock:
            repeats = self._repeats.get(key)
            if repeats is not None and now - repeats.shown_at < self.interval_s:
                repeats.held += 1
                self.held += 1
                return False
            if repeats is None and len(self._repeats) >= self.MAX_MESSAGES:
                self._forget(now)
            self._repeats[key] = _Repeats(now)
        if repeats is not None and repeats.held:
            record.msg = (
                f"{record.getMessage()} ({repeats.held} more like it in the last "
                f"{now - repeats.shown_at:.0f} s not logged)"
            )
            record.args = ()
        return True

    def _forget(self, now: float) -> None:
        for key, repeats in list(self._repeats.items()):
            if now - repeats.shown_at >= self.interval_s:
                del self._repeats[key]
        if len(self._repeats) >= self.MAX_MESSAGES:  # all recent: a flood of distinct messages
            self._repeats.clear()


LIBRDKAFKA_REPEATS = RepeatedMessageFilter(REPEAT_INTERVAL_S)
"""The filter of the ``connectors.kafka.librdkafka`` logger, which every client we configure
logs to (a broker outage otherwise floods the log with one line per connection retry)."""

_librdkafka_log = logging.getLogger("connectors.kafka.librdkafka")
_librdkafka_log.addFilter(LIBRDKAFKA_REPEATS)

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
    # Asked a second at a time: a signal handler (a stop while the worker starts) runs between
    # two calls, where one call of timeout_s held it back for all of it.
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            return admin.list_topics(timeout=max(min(left, 1.0), 0.001)).topics
        except KafkaException as error:
            if left <= 1.0:
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
    return _partitions_of(
        _topics(_admin(bootstrap, config), bootstrap, timeout_s), bootstrap, topic
    )


def _partitions_of(topics: dict[str, Any], bootstrap: str, topic: str) -> list[int]:
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
    topic_config: Mapping[str, str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> bool:
    """Create ``topic`` unless it exists; returns whether this call created it.

    ``topic_config`` are the settings of a topic this call creates (``cleanup.policy``,
    ``retention.ms``, ...); an existing topic is left as it is.
    """
    admin = _admin(bootstrap, config)
    if topic in _topics(admin, bootstrap, timeout_s):
        return False
    new = NewTopic(topic, partitions, replication_factor, config=dict(topic_config or {}))
    futures = admin.create_topics([new], request_timeout=timeout_s)
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
    settings = "".join(f", {name}={value}" for name, value in (topic_config or {}).items())
    log.info(
        "created Kafka topic %s on %s (%d partitions%s)", topic, bootstrap, partitions, settings
    )
    return True


def topic_settings(
    bootstrap: str,
    topic: str,
    *,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, str]:
    """The settings of an existing topic as the broker describes them (``cleanup.policy``,
    ``retention.ms``, ...: those it reports); a :class:`KafkaConnectorError` if it cannot."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = _admin(bootstrap, config)
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result(
            timeout=timeout_s
        )
    except (KafkaException, TimeoutError) as error:
        raise KafkaConnectorError(
            f"cannot read the settings of Kafka topic {topic!r} on {bootstrap}: {error}"
        ) from error
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


def message_position(message: Message) -> tuple[int, int]:
    """``(partition, offset)`` of a message a consumer returned (an end-of-partition event
    included: its offset is the end of the partition).

    librdkafka sets both on every consumed message; one without them is a
    :class:`KafkaConnectorError`.

    >>> message_position(Message(topic="t", partition=2, offset=7))
    (2, 7)
    >>> message_position(Message(topic="t"))
    Traceback (most recent call last):
    connectors.kafka.client.KafkaConnectorError: message of t has no partition or offset
    """
    partition, offset = message.partition(), message.offset()
    if partition is None or offset is None:
        raise KafkaConnectorError(f"message of {message.topic()} has no partition or offset")
    return partition, offset


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
            except KafkaException as exc:
                raise KafkaConnectorError(
                    f"cannot read the offsets of {topic}/{partition} on {bootstrap}: {exc}"
                ) from exc
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
                    partition, offset = message_position(message)
                    bounds[partition] = Bounds(bounds[partition].first, offset)
                    pending.discard(partition)
        return bounds
    finally:
        consumer.close()


class PartitionWatch:
    """Lists a topic's partitions again every ``interval_s`` on a thread of its own, and keeps
    the first and end offsets of each partition it had not known (``known`` at the start).

    The reader that follows the topic takes them with :meth:`added`, which never waits for the
    broker: a slow or absent broker delays what the watch finds, never the reads. A listing or
    a bounds request that fails is tried again at the next interval (a warning says so, once
    until one succeeds); a partition counts as known only once its bounds are in hand. The
    admin client is made on the thread: constructing a watch does no I/O, and nothing runs until
    :meth:`start`. :meth:`close` stops the thread; a request in flight may finish after it
    (within ``timeout_s``), and its failure is not logged then.

    >>> watch = PartitionWatch("127.0.0.1:9092", "events", known=[0, 1], interval_s=5.0)
    >>> watch.added(), sorted(watch.known)
    ({}, [0, 1])
    >>> watch.close()
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        known: Iterable[int],
        interval_s: float,
        config: Mapping[str, Any] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.interval_s = interval_s
        self.config = dict(config or {})
        self.timeout_s = timeout_s
        self.known: set[int] = set(known)
        self._found: dict[int, Bounds] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._trouble: str | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"partitions of {topic}", daemon=True
        )

    def start(self) -> PartitionWatch:
        """Start listing (first after one interval); returns the watch."""
        self._thread.start()
        return self

    def added(self) -> dict[int, Bounds]:
        """The partitions found since the last call, with their bounds when found."""
        with self._lock:
            found, self._found = self._found, {}
        return found

    def close(self) -> None:
        """Stop listing; waits briefly for a request in flight."""
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(1.0)

    def _run(self) -> None:
        admin = _admin(self.bootstrap, self.config)
        while not self._stopped.wait(self.interval_s):
            try:
                self._look(admin)
            except Exception as error:  # whatever it is, the next interval tries again
                if self._stopped.is_set():  # closed while the request was in flight
                    return
                if self._trouble is None:
                    log.warning(
                        "cannot list the partitions of %s at %s (trying again every %g s): %s",
                        self.topic,
                        self.bootstrap,
                        self.interval_s,
                        error,
                    )
                self._trouble = str(error)
            else:
                if self._trouble is not None:
                    log.info("listing the partitions of %s again", self.topic)
                self._trouble = None

    def _look(self, admin: AdminClient) -> None:
        topics = _topics(admin, self.bootstrap, self.timeout_s)
        new = [p for p in _partitions_of(topics, self.bootstrap, self.topic) if p not in self.known]
        if not new or self._stopped.is_set():
            return
        bounds = partition_bounds(
            self.bootstrap, self.topic, new, config=self.config, timeout_s=self.timeout_s
        )
        self.known.update(new)
        with self._lock:
            self._found.update(bounds)


def produce(
    producer: Producer,
    topic: str,
    key: bytes,
    value: bytes,
    on_delivery: Callable[[KafkaError | None, Message], None],
    give_up: Callable[[], bool] = lambda: False,
) -> bool:
    """Queue one message, waiting for room when the producer's local queue is full (the broker
    away) — until ``give_up()`` says to stop waiting: then ``False``, the message not queued."""
    while True:
        try:
            producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
        except BufferError:  # local queue full: let deliveries drain, then retry
            if give_up():
                return False
            producer.poll(0.1)
            continue
        producer.poll(0)
        return True


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
    create: bool = True,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> int:
    """Write ``(key, model)`` pairs as JSON with an idempotent producer; returns the count.

    Creates the topic if missing (unless ``create`` is false: the caller checked it exists) and
    raises :class:`KafkaConnectorError` unless every record was acknowledged.
    """
    if create:
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
