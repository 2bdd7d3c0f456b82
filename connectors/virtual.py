"""Virtual connector over Kafka: decisions out, acknowledgements back.

For environments the planner does not drive itself (no Kubernetes DGD), the planner publishes
its ScalingDecisions to a topic (:class:`connectors.kafka.KafkaDecisionSink`) and an external
orchestrator applies them and answers on an acknowledgement topic with
``{"deployment": ..., "acked_decision_id": ...}`` (:class:`schemas.decision.DecisionAck`, key =
deployment). :func:`send_ack` (and ``flowplanner ack``) is the orchestrator's side;
:class:`AckSource` brings the acknowledgements into the dataflow, where
:class:`operators.ack_gate.AckGate` holds new decisions until the previous one is acknowledged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from confluent_kafka import Message
from pydantic import ValidationError

from connectors.kafka import (
    DEFAULT_TIMEOUT_S,
    KafkaConnectorError,
    KafkaTopicSource,
    TopicNotFoundError,
    last_messages,
    message_position,
    produce_json,
    read_messages,
)
from schemas.decision import DeadLetter, DecisionAck, ScalingDecision
from schemas.errors import describe_validation_error


def send_ack(
    bootstrap: str,
    topic: str,
    deployment: str,
    decision_id: int,
    *,
    time: float | None = None,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> DecisionAck:
    """Acknowledge that ``deployment``'s decisions up to ``decision_id`` were applied.

    Writes one DecisionAck (key = deployment) with an idempotent producer; returns it once the
    broker acknowledged it, raises :class:`connectors.kafka.KafkaConnectorError` otherwise.
    The topic must exist — the planner creates its acknowledgement topic when it starts, so a
    missing one is a wrong name — and must not hold decisions: an acknowledgement written to
    the decisions topic would reach no planner, be read back as a foreign decision, and, the
    topic being compacted by deployment, could one day replace the deployment's newest
    decision. Invalid arguments raise ``pydantic.ValidationError`` before anything is sent.
    """
    ack = DecisionAck(deployment=deployment, acked_decision_id=decision_id, time=time)
    try:
        held = held_instead(bootstrap, topic, "acknowledgements", config, timeout_s)
    except TopicNotFoundError as error:
        raise TopicNotFoundError(
            f"{error}; the planner creates its acknowledgement topic (the ?acks= of its "
            "virtual+kafka:// output) when it starts"
        ) from None
    if held is not None:
        raise KafkaConnectorError(
            f"Kafka topic {topic} at {bootstrap} holds {held}: acknowledgements go to the "
            "topic named by the output's ?acks="
        )
    produce_json(
        bootstrap, topic, [(deployment, ack)], create=False, config=config, timeout_s=timeout_s
    )
    return ack


def held_instead(
    bootstrap: str,
    topic: str,
    expected: str,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> str | None:
    """What an existing topic holds, judged by each partition's last message, when that is
    another kind of the planner's messages than ``expected`` (:func:`planner_messages`)."""
    for message in last_messages(bootstrap, topic, config=config, timeout_s=timeout_s):
        held = planner_messages(message.value())
        if held not in (None, expected):
            return held
    return None


def planner_messages(raw: bytes | None) -> str | None:
    """What a topic whose last message is ``raw`` holds, if it is one the planner writes or
    reads: acknowledgements, scaling decisions or planner input events; None for anything
    else (let be: a bad message someone wrote is a dead letter or an ERROR row, not a wrong
    topic). ``ack`` and ``decisions`` refuse a topic that holds another kind.

    >>> planner_messages(b'{"deployment": "d", "acked_decision_id": 4}')
    'acknowledgements'
    >>> planner_messages(b'{"type": "clock", "deployment": "d", "time": 5.0}')
    'planner input events'
    >>> planner_messages(b'not json') is None
    True
    """
    if not raw:
        return None
    if isinstance(parse_ack(raw, "", 0), DecisionAck):
        return "acknowledgements"
    try:
        ScalingDecision.model_validate_json(raw)
        return "scaling decisions"
    except ValidationError:
        pass
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if isinstance(value, dict) and {"type", "deployment", "time"} <= value.keys():
        return "planner input events"
    return None


def parse_ack(raw: bytes | None, source: str, position: int) -> DecisionAck | DeadLetter:
    """One acknowledgement message, or a dead letter saying why it is not one.

    >>> parse_ack(b'{"deployment": "d", "acked_decision_id": 4}', "kafka:acks/0", 9)
    DecisionAck(schema_version=1, deployment='d', acked_decision_id=4, time=None)
    >>> parse_ack(b'{"deployment": "d"}', "kafka:acks/0", 10).reason
    'invalid acknowledgement: acked_decision_id: Field required'
    """
    if not raw:
        return DeadLetter(source=source, position=position, reason="invalid acknowledgement: empty")
    try:
        return DecisionAck.model_validate_json(raw)
    except ValidationError as error:
        return DeadLetter(
            source=source,
            position=position,
            reason=f"invalid acknowledgement: {describe_validation_error(error)}",
            raw=raw.decode(errors="replace"),
        )


def newest_acks(
    bootstrap: str,
    topic: str,
    *,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, int]:
    """Per deployment, the highest decision id the acknowledgement topic acknowledges now
    (messages that are no acknowledgement are passed over; none for a topic not there yet).

    A restarted worker starts its gates from them: read in the flow, beside inputs read back
    faster than the topic (a recording), an acknowledgement that was there all along came after
    the ticks it should have released, and whether a held decision was sent depended on that
    race.
    """
    newest: dict[str, int] = {}
    try:
        messages = read_messages(bootstrap, topic, config=config, timeout_s=timeout_s)
        for message in messages:
            ack = parse_ack(message.value(), topic, 0)
            if isinstance(ack, DecisionAck):
                newest[ack.deployment] = max(newest.get(ack.deployment, 0), ack.acked_decision_id)
    except TopicNotFoundError:
        return {}
    return newest


class ReadAck(NamedTuple):
    """An acknowledgement as read from its topic: where (``source``, ``position``) and the
    message as text, so a refusal can name it.

    >>> raw = '{"deployment": "llama", "acked_decision_id": 3}'
    >>> read = ReadAck(DecisionAck.model_validate_json(raw), "kafka://k:9092/acks", 41, raw)
    >>> f"{read.source}@{read.position}: #{read.ack.acked_decision_id}"
    'kafka://k:9092/acks@41: #3'
    """

    ack: DecisionAck
    source: str
    position: int
    raw: str


class AckSource(KafkaTopicSource[ReadAck | DeadLetter]):
    """Acknowledgements from a Kafka topic: ReadAck items, or DeadLetter for bad messages.

    Same partitioning, resume state and modes as
    :class:`connectors.kafka.KafkaEventSource`. Reading from the beginning is the usual choice:
    the gate keeps the highest id per deployment, so old acknowledgements are harmless.

    >>> AckSource("127.0.0.1:9092", "acks", until_end=True).topic
    'acks'
    """

    def convert(self, message: Message) -> ReadAck | DeadLetter:
        partition, offset = message_position(message)
        source, raw = f"kafka:{message.topic()}/{partition}", message.value()
        ack = parse_ack(raw, source, offset)
        if isinstance(ack, DeadLetter):
            return ack
        return ReadAck(ack, source, offset, (raw or b"").decode(errors="replace").strip())
