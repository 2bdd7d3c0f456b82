"""Reading a decisions topic back: bounded (up to the end seen at start) or following."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from time import monotonic
from typing import Any, NamedTuple

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from pydantic import ValidationError

from connectors.kafka.client import (
    BATCH_SIZE,
    DEFAULT_TIMEOUT_S,
    Bounds,
    KafkaConnectorError,
    PartitionWatch,
    consumer_config,
    list_partitions,
    message_position,
    partition_bounds,
    poll_batch,
)
from connectors.kafka.source import PARTITION_REFRESH_S
from schemas import ScalingDecision, describe_validation_error

log = logging.getLogger(__name__)


class DecisionMessage(NamedTuple):
    """One message of a decisions topic: the decision, or why it could not be read.

    >>> DecisionMessage(0, 7, "llama", None, "empty message").error
    'empty message'
    """

    partition: int
    offset: int
    key: str | None
    decision: ScalingDecision | None
    error: str | None = None


def _decision_message(message: Message) -> DecisionMessage:
    raw_key = message.key()
    key = None if raw_key is None else raw_key.decode(errors="replace")
    value = message.value()
    where = (*message_position(message), key)
    if not value:
        return DecisionMessage(*where, None, "empty message")
    try:
        return DecisionMessage(*where, ScalingDecision.model_validate_json(value))
    except ValidationError as error:
        reason = describe_validation_error(error)
        return DecisionMessage(*where, None, f"not a ScalingDecision: {reason}")


def read_decision_messages(
    bootstrap: str,
    topic: str,
    *,
    follow: bool = False,
    from_beginning: bool = True,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Iterator[DecisionMessage]:
    """Every message of a decisions topic, parsed; bad values come back with an ``error``.

    The reading position is fixed by this call (not by the first ``next``): without ``follow``
    reading stops at the end offsets seen now (and raises if the broker makes no progress for
    ``timeout_s``); with ``follow`` it waits for new decisions forever, and reads a partition
    added to the topic meanwhile from its first offset (found within
    :data:`~connectors.kafka.source.PARTITION_REFRESH_S`, as the planner's event source finds
    one). ``from_beginning=False`` skips what the topic holds now. Order is per partition,
    hence per deployment (the key).
    """
    start = _first if from_beginning else _end
    starts, ends = _ranges(bootstrap, topic, start, config, timeout_s)
    messages = _read(bootstrap, topic, starts, None if follow else ends, config, timeout_s)
    return map(_decision_message, messages)


def last_messages(
    bootstrap: str,
    topic: str,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[Message]:
    """The last message of each partition of an existing topic (none of an empty partition)."""
    starts, ends = _ranges(bootstrap, topic, _last, config, timeout_s)
    return list(_read(bootstrap, topic, starts, ends, config, timeout_s))


def read_messages(
    bootstrap: str,
    topic: str,
    *,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Iterator[Message]:
    """Every message of an existing topic, from its beginning up to its end offsets now (raises
    if the broker makes no progress for ``timeout_s``)."""
    starts, ends = _ranges(bootstrap, topic, _first, config, timeout_s)
    return _read(bootstrap, topic, starts, ends, config, timeout_s)


def _first(bounds: Bounds) -> int:
    return bounds.first


def _end(bounds: Bounds) -> int:
    return bounds.end


def _last(bounds: Bounds) -> int:
    return max(bounds.first, bounds.end - 1)


def _ranges(
    bootstrap: str,
    topic: str,
    start: Callable[[Bounds], int],
    config: Mapping[str, Any] | None,
    timeout_s: float,
) -> tuple[dict[int, int], dict[int, int]]:
    """Where to start reading each partition of an existing topic (``start`` of its first and
    end offsets), and its end offset now."""
    partitions = list_partitions(bootstrap, topic, config=config, timeout_s=timeout_s)
    bounds = partition_bounds(bootstrap, topic, partitions, config=config, timeout_s=timeout_s)
    return {p: start(b) for p, b in bounds.items()}, {p: b.end for p, b in bounds.items()}


def _read(
    bootstrap: str,
    topic: str,
    starts: dict[int, int],
    ends: dict[int, int] | None,
    config: Mapping[str, Any] | None,
    timeout_s: float,
) -> Iterator[Message]:
    # ``ends`` None = follow forever from ``starts``; otherwise read up to ``ends``
    partitions = list(starts)
    if ends is not None:
        partitions = [p for p in partitions if starts[p] < ends[p]]
        if not partitions:
            return iter(())
    errors: list[KafkaError] = []
    consumer = Consumer(
        consumer_config(
            bootstrap, {**(config or {}), "error_cb": errors.append}, partition_eof=ends is not None
        )
    )
    consumer.assign([TopicPartition(topic, p, starts[p]) for p in partitions])
    where = f"{topic} at {bootstrap}"
    watch = None
    if ends is None:  # following: partitions added to the topic are read too
        watch = PartitionWatch(
            bootstrap,
            topic,
            known=partitions,
            interval_s=PARTITION_REFRESH_S,
            config=config,
            timeout_s=timeout_s,
        )
    return _consume(consumer, errors, where, ends, set(partitions), timeout_s, watch)


def _consume(
    consumer: Consumer,
    errors: list[KafkaError],
    where: str,
    ends: dict[int, int] | None,
    pending: set[int],
    timeout_s: float,
    watch: PartitionWatch | None = None,
) -> Iterator[Message]:
    # ``ends`` None = follow forever (and the partitions ``watch`` finds); otherwise stop once
    # every pending partition reached its end.
    warned: set[int] = set()
    if watch is not None:
        watch.start()
    try:
        reading = _Reading(where, ends, pending, timeout_s)
        while reading.unfinished():
            if watch is not None:
                _add_partitions(consumer, watch)
            messages = poll_batch(consumer, BATCH_SIZE, 0.2)
            _check_reports(errors, warned, where)
            reading.polled(messages)
            for message in messages:
                if reading.keep(message):
                    yield message
    finally:
        if watch is not None:
            watch.close()
        consumer.close()


def _check_reports(errors: list[KafkaError], warned: set[int], where: str) -> None:
    """Raise on a fatal error the client reported, warn once per kind (``warned``) of the
    others (librdkafka retries them), and clear the reports."""
    for reported in errors:
        if reported.fatal():
            raise KafkaConnectorError(f"reading {where}: {reported}")
        if reported.code() not in warned:
            warned.add(reported.code())
            log.warning("Kafka trouble reading %s (retrying): %s", where, reported)
    errors.clear()


class _Reading:
    """Where a read of ``where`` stands: following (``ends`` None), or bounded — the
    ``pending`` partitions not yet read up to their ``ends``, and when a poll last brought
    messages (a bounded read making no progress for ``timeout_s`` fails)."""

    def __init__(
        self, where: str, ends: dict[int, int] | None, pending: set[int], timeout_s: float
    ) -> None:
        self.where = where
        self.ends = ends
        self.pending = pending
        self.timeout_s = timeout_s
        self.last_progress = monotonic()

    def unfinished(self) -> bool:
        """Whether to poll again: always when following, else until no partition is pending."""
        return self.ends is None or bool(self.pending)

    def polled(self, messages: list[Message]) -> None:
        """Note a poll's ``messages``; raise if a bounded read has made no progress for too long."""
        if messages:
            self.last_progress = monotonic()
        elif self.ends is not None and monotonic() - self.last_progress > self.timeout_s:
            raise KafkaConnectorError(
                f"reading {self.where}: no progress for {self.timeout_s:g} s "
                f"(partitions {sorted(self.pending)} unfinished)"
            )

    def keep(self, message: Message) -> bool:
        """Whether ``message`` is one to hand on (a record, before its partition's end when
        bounded); a partition reaching its end is no longer pending. A message carrying an
        error other than a partition's EOF raises."""
        error = message.error()
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            raise KafkaConnectorError(f"reading {self.where}: {error}")
        if self.ends is None:
            return error is None
        partition, offset = message_position(message)
        if partition not in self.pending:
            return False
        # An EOF event carries the high watermark as its offset.
        next_offset = offset if error is not None else offset + 1
        if next_offset >= self.ends[partition]:
            self.pending.discard(partition)
        return error is None and offset < self.ends[partition]


def _add_partitions(consumer: Consumer, watch: PartitionWatch) -> None:
    """Read the partitions ``watch`` found added to the topic, each from its first offset."""
    found = watch.added()
    if not found:
        return
    consumer.incremental_assign(
        [TopicPartition(watch.topic, p, bounds.first) for p, bounds in sorted(found.items())]
    )
    log.info(
        "Kafka topic %s has new partitions %s; reading them from their beginning",
        watch.topic,
        sorted(found),
    )


def read_decisions(
    bootstrap: str,
    topic: str,
    *,
    follow: bool = False,
    from_beginning: bool = True,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Iterator[ScalingDecision]:
    """The decisions in a topic (see :func:`read_decision_messages`).

    A message that is not a valid ScalingDecision raises :class:`ValueError` naming its
    partition and offset; use :func:`read_decision_messages` to see such messages instead.
    """
    messages = read_decision_messages(
        bootstrap,
        topic,
        follow=follow,
        from_beginning=from_beginning,
        config=config,
        timeout_s=timeout_s,
    )
    return _only_decisions(messages, topic)


def _only_decisions(messages: Iterator[DecisionMessage], topic: str) -> Iterator[ScalingDecision]:
    for message in messages:
        if message.decision is None:
            raise ValueError(
                f"{topic}/{message.partition} offset {message.offset}: {message.error}"
            )
        yield message.decision
