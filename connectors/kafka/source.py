"""Bytewax sources over Kafka topics: one bytewax partition per topic partition."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Literal, TypeVar

from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from pydantic import ValidationError

from connectors.kafka.client import (
    BATCH_SIZE,
    DEFAULT_TIMEOUT_S,
    KafkaConnectorError,
    TopicNotFoundError,
    consumer_config,
    list_partitions,
    message_position,
    partition_bounds,
)
from connectors.pipeline_metrics import EVENTS_IN
from connectors.traces import DYNAMO_SCHEMA, TraceFormatError, dynamo_request_event
from schemas import DeadLetter, RawEvent, RequestEvent, describe_validation_error

X = TypeVar("X")

log = logging.getLogger(__name__)

IDLE_POLL = timedelta(milliseconds=20)
"""How long a source partition sleeps after a poll that returned nothing."""

TOPIC_POLL_S = 0.5
"""How often a following source asks again for a topic that does not exist yet."""

TOPIC_WAIT_WARNING_S = 30.0
"""How often a following source repeats that it is still waiting for its topic."""

RECENT_REQUEST_IDS = 100_000
"""How many request ids per partition a trace source remembers to spot a redelivered one."""


class _PartitionReader(StatefulSourcePartition[X, int]):
    """One assigned partition; its state is the next offset to read."""

    def __init__(
        self,
        config: dict[str, Any],
        topic: str,
        partition: int,
        start: int,
        end: int | None,
        batch_size: int,
        convert: Callable[[Message], X | None],
        where: str,
    ) -> None:
        self._errors: list[KafkaError] = []
        self._consumer = Consumer({**config, "error_cb": self._errors.append})
        self._topic = topic
        self._partition = partition
        self._next = start
        self._end = end
        self._batch_size = batch_size
        self._convert = convert
        self._where = where
        self._warned: set[int] = set()
        self._awake: datetime | None = None
        self._done = end is not None and end <= start
        self._consumer.assign([TopicPartition(topic, partition, start)])

    def _check_errors(self) -> None:
        errors = list(self._errors)
        self._errors.clear()
        for error in errors:
            if error.fatal():
                raise KafkaConnectorError(f"fatal Kafka error on {self._where}: {error}")
            if error.code() not in self._warned:  # librdkafka retries; say so once per kind
                self._warned.add(error.code())
                log.warning("Kafka trouble on %s (retrying): %s", self._where, error)

    def next_batch(self) -> list[X]:
        if self._done:
            raise StopIteration
        messages = self._consumer.consume(self._batch_size, 0)
        self._check_errors()
        batch: list[X] = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaConnectorError(f"Kafka error reading {self._where}: {error}")
                if self._end is not None and message_position(message)[1] >= self._end:
                    self._done = True
                continue
            _partition, offset = message_position(message)
            if self._end is not None and offset >= self._end:
                self._done = True
                break
            item = self._convert(message)
            if item is not None:
                batch.append(item)
            self._next = offset + 1
        if self._end is not None and self._next >= self._end:
            self._done = True
        if batch:
            EVENTS_IN.labels(source="kafka").inc(len(batch))
        self._awake = None if messages else datetime.now(UTC) + IDLE_POLL
        return batch

    def next_awake(self) -> datetime | None:
        return self._awake

    def snapshot(self) -> int:
        return self._next

    def close(self) -> None:
        self._consumer.close()


class KafkaTopicSource(FixedPartitionedSource[X, int], Generic[X]):
    """Base of our Kafka sources: one bytewax partition per topic partition.

    Subclasses say how a message becomes an item (:meth:`convert`; ``None`` skips a message that
    is no input, its offset still counts as read). ``until_end=True`` stops
    each partition at its end offset when the partition is built (bounded replay); otherwise
    the source follows the topic forever. ``start`` applies only without resume state.
    Constructing one does no I/O; the broker is first asked in ``list_parts``. A following
    source whose topic does not exist yet waits for it (a warning says so, and lists the
    topics there are), as a Kafka consumer does; a bounded one stops with the error.

    >>> class Values(KafkaTopicSource[bytes]):
    ...     def convert(self, message):
    ...         return message.value()
    >>> Values("127.0.0.1:9092", "raw", start="end").start
    'end'
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        until_end: bool = False,
        start: Literal["beginning", "end"] = "beginning",
        batch_size: int = BATCH_SIZE,
        config: Mapping[str, Any] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if start not in ("beginning", "end"):
            raise ValueError(f"start must be 'beginning' or 'end', got {start!r}")
        self.bootstrap = bootstrap
        self.topic = topic
        self.until_end = until_end
        self.start = start
        self.batch_size = batch_size
        self.config = dict(config or {})
        self.timeout_s = timeout_s

    def convert(self, message: Message) -> X | None:
        """Turn one Kafka message into a dataflow item (``None``: not an input)."""
        raise NotImplementedError

    def list_parts(self) -> list[str]:
        warned_at: float | None = None
        while True:
            try:
                partitions = list_partitions(self.bootstrap, self.topic, **self._requests())
            except TopicNotFoundError as error:
                if self.until_end:  # a replay of a topic that is not there: a wrong name
                    raise
                now = time.monotonic()
                if warned_at is None or now - warned_at >= TOPIC_WAIT_WARNING_S:
                    log.warning("%s; waiting for it to be created", error)
                    warned_at = now
                time.sleep(TOPIC_POLL_S)
                continue
            return [str(p) for p in partitions]

    def _requests(self) -> dict[str, Any]:
        return {"config": self.config, "timeout_s": self.timeout_s}

    def build_part(
        self, step_id: str, for_part: str, resume_state: int | None
    ) -> _PartitionReader[X]:
        partition = int(for_part)
        bounds = None
        if self.until_end or resume_state is None:
            bounds = partition_bounds(self.bootstrap, self.topic, [partition], **self._requests())[
                partition
            ]
        if resume_state is not None:
            start = resume_state
        else:
            assert bounds is not None
            start = bounds.end if self.start == "end" else bounds.first
        return _PartitionReader(
            consumer_config(self.bootstrap, self.config, partition_eof=self.until_end),
            self.topic,
            partition,
            start,
            bounds.end if self.until_end and bounds is not None else None,
            self.batch_size,
            self.convert,
            f"{self.topic}/{partition} at {self.bootstrap}",
        )


class KafkaEventSource(KafkaTopicSource[RawEvent]):
    """Planner input events from a Kafka topic, undecoded (the flow validates them).

    Each message becomes ``RawEvent(f"kafka:{topic}/{partition}", offset, value)``.

    >>> source = KafkaEventSource("127.0.0.1:9092", "events", until_end=True)
    >>> source.topic, source.until_end, source.batch_size
    ('events', True, 1000)
    """

    def convert(self, message: Message) -> RawEvent:
        partition, offset = message_position(message)
        value = message.value()
        return RawEvent(
            f"kafka:{message.topic()}/{partition}", offset, b"" if value is None else value
        )


class KafkaTraceSource(KafkaTopicSource[RequestEvent | DeadLetter]):
    """Finished requests of one deployment from a ``dynamo.request.trace.v1`` topic.

    Each ``request_end`` message becomes a :class:`schemas.RequestEvent` of ``deployment`` (see
    :func:`connectors.traces.dynamo_request_event`), which the flow aggregates into its traffic
    windows; the schema's other events (tool calls) are skipped; a malformed message becomes a
    dead letter naming the problem, the topic, partition and offset. A producer that retries
    can write one request twice: a ``request_end`` whose ``request_id`` is among the last
    :data:`RECENT_REQUEST_IDS` of its partition is a ``duplicate`` dead letter, not a second
    request, as a trace file's repeated ids are skipped. (The memory is the process's: after a
    restart, a copy of a request read before it counts again.)

    >>> source = KafkaTraceSource("127.0.0.1:9092", "requests", deployment="qwen")
    >>> source.topic, source.deployment, source.start
    ('requests', 'qwen', 'beginning')
    """

    def __init__(self, bootstrap: str, topic: str, *, deployment: str, **options: Any) -> None:
        super().__init__(bootstrap, topic, **options)
        self.deployment = deployment
        # per partition, the offset of each recent request id (one partition, one reader)
        self._recent: dict[int, OrderedDict[str, int]] = {}

    def convert(self, message: Message) -> RequestEvent | DeadLetter | None:
        partition, offset = message_position(message)
        where = f"kafka:{message.topic()}/{partition}"
        value = message.value() or b""
        try:
            event = dynamo_request_event(value, self.deployment, where, offset)
        except TraceFormatError as error:
            reason = f"invalid {DYNAMO_SCHEMA} event: {error.reason}"
        except ValidationError as error:
            reason = f"invalid {DYNAMO_SCHEMA} event: {describe_validation_error(error)}"
        else:
            first = self._first_offset(partition, event, offset)
            if first is None:
                return event
            assert event is not None
            reason = (
                f"duplicate request_end of request {event.payload.request_id!r} "
                f"(first at offset {first})"
            )
        return DeadLetter(
            source=where,
            position=offset,
            reason=reason,
            raw=value.decode(errors="replace").strip(),
            deployment=self.deployment,
        )

    def _first_offset(self, partition: int, event: RequestEvent | None, offset: int) -> int | None:
        """The offset of an earlier message of this event's request, remembering this one."""
        if event is None or event.payload.request_id is None:
            return None
        recent = self._recent.setdefault(partition, OrderedDict())
        request_id = event.payload.request_id
        first = recent.get(request_id)
        if first is not None:
            return first
        recent[request_id] = offset
        if len(recent) > RECENT_REQUEST_IDS:
            recent.popitem(last=False)
        return None
