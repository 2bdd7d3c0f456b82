"""KafkaEventSource inside real bytewax runs, against a real broker (Tansu)."""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.recovery import init_db_dir
from bytewax.testing import TestingSink, poll_next_batch

from connectors.kafka import KafkaEventSource, ensure_topic
from connectors.kafka import source as source_module
from schemas import RawEvent
from tests.flow.cluster import run_flow
from tests.kafka.samples import event_line, write_raw
from tests.services.kafka import tansu_process
from tests.services.process import free_port, pause, wait_until


def read_all(source: KafkaEventSource, workers: int, recovery: Path | None = None) -> list:
    out: list = []
    flow = Dataflow("events_in")
    op.output("out", op.input("kafka", flow, source), TestingSink(out))
    run_flow(flow, workers, recovery=recovery)
    return out


def two_partition_topic(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    ensure_topic(bootstrap, topic, partitions=2)
    written = {
        0: [event_line("llama", t) for t in range(5)] + [b"{not json"],
        1: [event_line("qwen", t) for t in range(3)],
    }
    for partition, values in written.items():
        write_raw(bootstrap, topic, values, partition=partition)
    return written


def test_bounded_source_reads_every_message_once(
    kafka_bootstrap: str, kafka_topic: str, workers: int
) -> None:
    written = two_partition_topic(kafka_bootstrap, kafka_topic)
    out = read_all(KafkaEventSource(kafka_bootstrap, kafka_topic, until_end=True), workers)
    assert all(isinstance(item, RawEvent) for item in out)
    expected = [
        RawEvent(f"kafka:{kafka_topic}/{partition}", offset, value)
        for partition, values in written.items()
        for offset, value in enumerate(values)
    ]
    assert sorted(out) == sorted(expected)  # undecoded: the invalid line is the flow's to judge
    for partition in written:  # each partition arrives in offset order
        positions = [e.position for e in out if e.source.endswith(f"/{partition}")]
        assert positions == sorted(positions)


def test_partitions_are_merged_by_event_time(
    kafka_bootstrap: str, kafka_topic: str, workers: int
) -> None:
    two_partition_topic(kafka_bootstrap, kafka_topic)
    out = read_all(KafkaEventSource(kafka_bootstrap, kafka_topic, until_end=True), workers)
    # least (time, partition) first; the broken line keeps the time of the line before it
    assert [(e.source[-1], e.position) for e in out] == [
        ("0", 0),
        ("1", 0),
        ("0", 1),
        ("1", 1),
        ("0", 2),
        ("1", 2),
        ("0", 3),
        ("0", 4),
        ("0", 5),
    ]


def test_a_partition_read_far_ahead_pauses_and_the_merge_holds(
    kafka_bootstrap: str, kafka_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source_module, "MERGE_QUEUE", 3)
    ensure_topic(kafka_bootstrap, kafka_topic, partitions=2)
    for partition in (0, 1):
        times = [t + partition / 2 for t in range(40)]
        write_raw(kafka_bootstrap, kafka_topic, [event_line("d", t) for t in times], partition)
    source = KafkaEventSource(kafka_bootstrap, kafka_topic, until_end=True, batch_size=7)
    (name,) = source.list_parts()
    part = source.build_part("k", name, None)
    read: list[RawEvent] = []
    try:
        with pytest.raises(StopIteration):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                read.extend(part.next_batch())
    finally:
        part.close()
    assert [(e.source[-1], e.position) for e in read] == [
        (p, offset) for offset in range(40) for p in "01"
    ]
    assert part.snapshot() == {0: (40, 39.0), 1: (40, 39.5)}


def test_bounded_source_resumes_from_its_snapshot(
    kafka_bootstrap: str, kafka_topic: str, tmp_path: Path, workers: int
) -> None:
    init_db_dir(tmp_path, 1)
    written = two_partition_topic(kafka_bootstrap, kafka_topic)
    source = KafkaEventSource(kafka_bootstrap, kafka_topic, until_end=True)
    first = read_all(source, workers, recovery=tmp_path)
    assert len(first) == sum(len(v) for v in written.values())

    write_raw(kafka_bootstrap, kafka_topic, [event_line("llama", 99.0)], partition=0)
    write_raw(kafka_bootstrap, kafka_topic, [event_line("qwen", 98.0)], partition=1)
    second = read_all(source, workers, recovery=tmp_path)
    assert sorted((e.source, e.position) for e in second) == [
        (f"kafka:{kafka_topic}/0", 6),
        (f"kafka:{kafka_topic}/1", 3),
    ]
    assert read_all(source, workers, recovery=tmp_path) == []


def test_bounded_partition_stops_at_the_end_seen_when_it_starts(
    kafka_bootstrap: str, kafka_topic: str
) -> None:
    ensure_topic(kafka_bootstrap, kafka_topic)
    write_raw(kafka_bootstrap, kafka_topic, [event_line("llama", t) for t in (1.0, 2.0)])
    source = KafkaEventSource(kafka_bootstrap, kafka_topic, until_end=True)
    part = source.build_part("k", *source.list_parts(), None)
    write_raw(kafka_bootstrap, kafka_topic, [event_line("llama", 3.0)])  # after the start
    read: list[RawEvent] = []
    deadline = time.monotonic() + 10
    try:
        while True:
            assert time.monotonic() < deadline, f"no end after {read}"
            read.extend(part.next_batch())
    except StopIteration:
        pass
    finally:
        part.close()
    assert [e.position for e in read] == [0, 1]
    assert part.snapshot() == {0: (2, 0.0)}  # one partition: no merge, no merge time


def test_start_at_end_skips_what_is_already_there(
    kafka_bootstrap: str, kafka_topic: str, workers: int
) -> None:
    two_partition_topic(kafka_bootstrap, kafka_topic)
    source = KafkaEventSource(kafka_bootstrap, kafka_topic, until_end=True, start="end")
    assert read_all(source, workers) == []


def test_following_partition_sees_new_messages_and_snapshots_the_next_offset(
    kafka_bootstrap: str, kafka_topic: str
) -> None:
    ensure_topic(kafka_bootstrap, kafka_topic)
    write_raw(kafka_bootstrap, kafka_topic, [event_line("llama", 1.0)])
    source = KafkaEventSource(kafka_bootstrap, kafka_topic)  # follow mode
    assert source.list_parts() == [kafka_topic]  # one bytewax partition per topic
    part = source.build_part("kafka", kafka_topic, None)
    try:
        assert [e.position for e in poll_until(part, 1)] == [0]
        write_raw(kafka_bootstrap, kafka_topic, [event_line("llama", t) for t in (2.0, 3.0)])
        assert [e.position for e in poll_until(part, 2)] == [1, 2]
        assert part.snapshot() == {0: (3, 0.0)}
        assert part.next_batch() == []  # nothing new: empty batch, no end of input
        assert part.next_awake() is not None  # and it asks to be woken later, not spun
    finally:
        part.close()
    resumed = source.build_part("kafka", kafka_topic, {0: (2, 0.0)})
    try:
        assert [e.position for e in poll_until(resumed, 1)] == [2]
    finally:
        resumed.close()


def poll_until(part, count: int, timeout_s: float = 10.0) -> list[RawEvent]:
    items: list[RawEvent] = []
    deadline = time.monotonic() + timeout_s
    while len(items) < count:
        assert time.monotonic() < deadline, f"only {items} arrived"
        items.extend(poll_next_batch(part))
    return items


def test_following_source_waits_for_a_topic_that_does_not_exist_yet(
    kafka_bootstrap: str, kafka_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A live planner may start before the producers created its topic (the compose stack's
    # planner starts beside the fleet that creates it); it waits, saying so, as consumers do,
    # and the reader returns at once each time it is asked: the flow's other inputs go on.
    caplog.set_level(logging.WARNING, logger="connectors.kafka.source")
    source = KafkaEventSource(kafka_bootstrap, kafka_topic)  # follow mode
    assert source.list_parts() == [kafka_topic]
    assert f"Kafka topic '{kafka_topic}' does not exist on {kafka_bootstrap}" in caplog.text
    part = source.build_part("kafka", kafka_topic, None)
    try:
        assert part.next_batch() == []
        assert part.next_awake() is not None  # asks again later, not in a tight loop
        assert part.snapshot() == {}
        ensure_topic(kafka_bootstrap, kafka_topic, partitions=2)
        write_raw(kafka_bootstrap, kafka_topic, [event_line("llama", 1.0)], partition=1)
        assert [(e.source[-1], e.position) for e in poll_until(part, 1)] == [("1", 0)]
    finally:
        part.close()


def test_a_broker_away_while_the_topic_is_awaited_is_asked_again(
    kafka_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    # a broker restarting or a network blip while a following source waits for its topic was
    # a KafkaConnectorError out of next_batch: the whole live worker stopped, its other inputs
    # (ZMQ, DGD) and their decisions with it; the topic, once it exists, rides outages out
    caplog.set_level(logging.WARNING, logger="connectors.kafka.source")
    with tansu_process() as (bootstrap, broker):
        part = KafkaEventSource(bootstrap, kafka_topic, timeout_s=1.0).build_part(
            "kafka", kafka_topic, None
        )
        try:
            # until the broker has said: no such topic yet (a first answer slower than 1 s,
            # on a loaded machine, reads as "cannot reach", the reason the pause must bring)
            wait_until(
                lambda: part.next_batch() == [] and "to be created" in caplog.text,
                "the broker to say the topic does not exist yet",
            )
            pause(broker)
            try:
                caplog.clear()
                assert part.next_batch() == []  # no answer within 1 s: asked again later
                assert "cannot reach Kafka" in caplog.text and "asking again" in caplog.text
                assert part.next_awake() is not None
            finally:
                broker.send_signal(signal.SIGCONT)
            ensure_topic(bootstrap, kafka_topic)
            write_raw(bootstrap, kafka_topic, [event_line("llama", 1.0)])
            assert [e.position for e in poll_until(part, 1)] == [0]
        finally:
            part.close()


def test_missing_topic_stops_the_run_with_a_clear_error(
    kafka_bootstrap: str, kafka_topic: str, workers: int
) -> None:
    with pytest.raises(Exception) as caught:
        read_all(KafkaEventSource(kafka_bootstrap, kafka_topic, until_end=True), workers)
    assert f"Kafka topic '{kafka_topic}' does not exist on {kafka_bootstrap}" in _chain(
        caught.value
    )


def test_unreachable_broker_stops_the_run_with_a_clear_error(workers: int) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    with pytest.raises(Exception) as caught:
        read_all(KafkaEventSource(bootstrap, "events", until_end=True, timeout_s=1.0), workers)
    assert f"cannot reach Kafka at {bootstrap}" in _chain(caught.value)


def _chain(error: BaseException | None) -> str:
    # bytewax wraps exceptions raised in connectors; the message is somewhere in the chain.
    text = []
    while error is not None:
        text.append(str(error))
        error = error.__cause__ or error.__context__
    return "\n".join(text)
