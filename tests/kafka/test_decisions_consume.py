"""The read loop behind the decisions readers (``_consume``), on a scripted consumer, for only
what a real broker cannot be made to do on cue: report a fatal error, stall at an exact point of
a bounded read, hand on a message carrying an error. Everything a broker can do — bounded reads
that stop at the ends seen at the start, following, partitions added while following, an
unreachable broker — is tested against a real Tansu broker (test_decision_sink.py,
test_decisions_cli.py, test_decisions_follow_added.py, test_added_partitions.py)."""

from __future__ import annotations

import logging
from itertools import islice
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, KafkaError, Message

import connectors.kafka.decisions as decisions
from connectors.kafka import KafkaConnectorError

WHERE = "decisions at k:9092"


def record(partition: int, offset: int) -> Message:
    return Message(topic="decisions", partition=partition, offset=offset, value=b"{}")


class ScriptedConsumer:
    """Answers poll ``n`` with batch ``n`` of ``polls`` (none left: nothing came), the client's
    error reports for that poll (``reports``) appended to ``errors`` first; each poll is 0.2 s
    of ``clock``."""

    def __init__(
        self,
        polls: list[list[Message]],
        errors: list[KafkaError],
        reports: dict[int, list[KafkaError]] | None = None,
        clock: list[float] | None = None,
    ) -> None:
        self.polls, self.errors, self.reports = list(polls), errors, reports or {}
        self.clock = clock if clock is not None else [0.0]
        self.calls: list[str] = []
        self.rest: list[Message] = []

    def poll(self, timeout_s: float) -> Message | None:
        self.errors.extend(self.reports.get(self.calls.count("poll"), []))
        self.calls.append("poll")
        self.clock[0] += timeout_s
        batch = self.polls.pop(0) if self.polls else []
        self.rest = batch[1:]
        return batch[0] if batch else None

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        rest, self.rest = self.rest, []
        return rest

    def close(self) -> None:
        self.calls.append("close")


def consume(
    consumer: ScriptedConsumer,
    ends: dict[int, int] | None,
    timeout_s: float = 10.0,
) -> Any:
    pending = set(ends or {})
    return decisions._consume(
        cast(Consumer, consumer),
        consumer.errors,
        WHERE,
        ends,
        pending,
        timeout_s,
    )


def positions(messages: Any) -> list[tuple[int, int]]:
    return [(m.partition(), m.offset()) for m in messages]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [0.0]
    monkeypatch.setattr(decisions, "monotonic", lambda: now[0])  # time is data here
    return now


def test_retriable_reports_are_warned_once_per_kind_and_a_fatal_one_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    down = KafkaError(KafkaError._TRANSPORT, "broker down")
    slow = KafkaError(KafkaError._TIMED_OUT, "timed out")
    fatal = KafkaError(KafkaError._FATAL, "fenced", fatal=True)
    reports = {0: [down, down], 1: [down, slow], 3: [fatal, slow]}
    consumer = ScriptedConsumer([], [], reports)
    with pytest.raises(KafkaConnectorError) as raised:
        list(consume(consumer, {0: 1}))
    assert str(raised.value) == f"reading {WHERE}: {fatal}"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"Kafka trouble reading {WHERE} (retrying): {down}",
        f"Kafka trouble reading {WHERE} (retrying): {slow}",
    ]
    assert consumer.calls == ["poll"] * 4 + ["close"]


def test_a_bounded_read_without_progress_for_its_timeout_raises(clock: list[float]) -> None:
    consumer = ScriptedConsumer([[record(1, 0)]], [], clock=clock)
    with pytest.raises(KafkaConnectorError) as raised:
        list(consume(consumer, {0: 3, 1: 1}, timeout_s=0.5))
    assert str(raised.value) == (
        f"reading {WHERE}: no progress for 0.5 s (partitions [0] unfinished)"
    )
    # a record at 0.2 s; nothing at 0.4, 0.6 (0.4 s without) and 0.8 (0.6 s without)
    assert consumer.calls == ["poll"] * 4 + ["close"]


def test_a_message_carrying_an_error_raises() -> None:
    gone = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "no such partition")
    message = Message(topic="decisions", partition=0, offset=0, error=gone)
    consumer = ScriptedConsumer([[record(0, 0), message]], [])
    reader = consume(consumer, {0: 5})
    assert positions(islice(reader, 1)) == [(0, 0)]
    with pytest.raises(KafkaConnectorError, match=f"^reading {WHERE}: .*no such partition"):
        next(reader)
    assert consumer.calls == ["poll", "close"]
