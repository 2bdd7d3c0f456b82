"""Reading a decisions topic back: bounded (up to the end seen at start) or following."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from time import monotonic
from typing import Any, NamedTuple

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition
from pydantic import ValidationError

from connectors.kafka.client import (
    BATCH_SIZE,
    DEFAULT_TIMEOUT_S,
    KafkaConnectorError,
    consumer_config,
    end_offsets,
    list_partitions,
    validation_summary,
)
from schemas import ScalingDecision

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
    where = (message.partition(), message.offset(), key)
    if not value:
        return DecisionMessage(*where, None, "empty message")
    try:
        return DecisionMessage(*where, ScalingDecision.model_validate_json(value))
    except ValidationError as error:
        return DecisionMessage(*where, None, f"not a ScalingDecision: {validation_summary(error)}")


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

    Without ``follow``, reading stops at the end offsets seen when it starts (and raises if the
    broker makes no progress for ``timeout_s``); with ``follow`` it waits for new decisions
    forever. ``from_beginning=False`` skips what is already in the topic. Order is per
    partition, hence per deployment (the key).
    """
    requests = {"config": config, "timeout_s": timeout_s}
    partitions = list_partitions(bootstrap, topic, **requests)
    ends: dict[int, int] = {}
    if not (follow and from_beginning):
        ends = end_offsets(bootstrap, topic, partitions, **requests)
    if not follow and not from_beginning:
        return
    starts = {p: OFFSET_BEGINNING if from_beginning else ends[p] for p in partitions}
    pending = set() if follow else set(partitions)
    errors: list[KafkaError] = []
    warned: set[int] = set()
    consumer = Consumer(
        consumer_config(
            bootstrap, {**(config or {}), "error_cb": errors.append}, partition_eof=True
        )
    )
    try:
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in partitions])
        last_progress = monotonic()
        while follow or pending:
            messages = consumer.consume(BATCH_SIZE, 0.2)
            for error in list(errors):
                if error.fatal():
                    raise KafkaConnectorError(f"reading {topic} at {bootstrap}: {error}")
                if error.code() not in warned:
                    warned.add(error.code())
                    log.warning("Kafka trouble reading %s at %s: %s", topic, bootstrap, error)
            errors.clear()
            if messages:
                last_progress = monotonic()
            elif not follow and monotonic() - last_progress > timeout_s:
                raise KafkaConnectorError(
                    f"reading {topic} at {bootstrap}: no progress for {timeout_s:g} s "
                    f"(partitions {sorted(pending)} unfinished)"
                )
            for message in messages:
                error = message.error()
                partition = message.partition()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaConnectorError(f"reading {topic} at {bootstrap}: {error}")
                    if not follow and message.offset() >= ends[partition]:
                        pending.discard(partition)
                    continue
                if partition not in pending and not follow:
                    continue
                if not follow and message.offset() >= ends[partition]:
                    pending.discard(partition)
                    continue
                yield _decision_message(message)
                if not follow and message.offset() + 1 >= ends[partition]:
                    pending.discard(partition)
    finally:
        consumer.close()


def read_decisions(
    bootstrap: str,
    topic: str,
    follow: bool = False,
    from_beginning: bool = True,
    *,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Iterator[ScalingDecision]:
    """The decisions in a topic (see :func:`read_decision_messages`).

    A message that is not a valid ScalingDecision raises :class:`ValueError` naming its
    partition and offset; use :func:`read_decision_messages` to see such messages instead.
    """
    for message in read_decision_messages(
        bootstrap,
        topic,
        follow=follow,
        from_beginning=from_beginning,
        config=config,
        timeout_s=timeout_s,
    ):
        if message.decision is None:
            raise ValueError(
                f"{topic}/{message.partition} offset {message.offset}: {message.error}"
            )
        yield message.decision
