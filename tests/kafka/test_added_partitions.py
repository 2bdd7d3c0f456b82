"""Partitions added to a followed topic while the planner runs are read, from their beginning.

Tansu, the suite's broker, cannot add partitions (it answers CreatePartitions as unsupported),
so these tests run on Apache Kafka 0.9.0.1 (:mod:`tests.services.old_kafka`) and add partitions
as its operators did, with ``kafka-topics.sh --alter``. The watch that lists a topic's
partitions is tried on Tansu too, where a topic it waits for is created.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from bytewax.testing import TestingSink

from connectors.backlog import BACKLOG
from connectors.kafka import KafkaEventSource, ensure_topic
from connectors.kafka import source as source_module
from connectors.kafka.client import Bounds, PartitionWatch, partition_bounds
from connectors.recorded import RecordedSource
from flows.planner import PlannerSinks, build_flow
from schemas import DeadLetter, PlannerConfig, RawEvent, TickRecord
from tests.flow.live_run import HostClock, Outcome, outcome, replay, run_until_interrupted
from tests.flow.streams import DECODE_CONFIG, decode_ramp, write_stream
from tests.kafka.samples import event_line, write_raw
from tests.kafka.test_event_source import poll_until
from tests.services.kafka import BrokerStartError, unique_topic
from tests.services.old_kafka import OLD_BROKER, OldKafka, running_old_kafka
from tests.services.process import free_port, wait_until


@pytest.fixture(scope="module")
def old_kafka() -> Iterator[OldKafka]:
    """Apache Kafka 0.9 and ZooKeeper for this module's tests."""
    try:
        with running_old_kafka() as broker:
            yield broker
    except BrokerStartError as error:
        pytest.fail(str(error), pytrace=False)


def lines(events: list[dict]) -> list[bytes]:
    return [json.dumps(event).encode() for event in events]


def follow_while(
    configs: dict[str, PlannerConfig],
    source: KafkaEventSource,
    workers: int,
    scenario: Callable[[list[TickRecord]], None],
    last_tick: float,
    timeout_s: float = 60.0,
) -> Outcome:
    """Run the planner live over ``source`` while ``scenario(ticks)`` runs beside it, until the
    tick at ``last_tick`` is out; then interrupt the worker (an AssertionError of the scenario,
    or not reaching that tick within ``timeout_s``, is raised after it stopped)."""
    ticks: list[TickRecord] = []
    dead: list[DeadLetter] = []
    sinks = PlannerSinks(ticks=[TestingSink(ticks)], dead_letters=[TestingSink(dead)])
    flow = build_flow(configs, [source], sinks, live=True, host_clock=HostClock())
    failures: list[BaseException] = []

    def drive(finished: threading.Event) -> None:
        try:
            scenario(ticks)
            wait_until(
                lambda: finished.is_set() or any(r.time >= last_tick for r in ticks),
                f"the tick at {last_tick}",
                timeout_s=timeout_s,
            )
        except BaseException as failure:  # reported by the test once the worker stopped
            failures.append(failure)

    run_until_interrupted(flow, drive, workers)
    if failures:
        raise failures[0]
    return outcome(ticks, dead)


SECONDS = 240.0
ADDED_AT = 80.0
"""Events up to this time are on the topic's first partition; the rest go to the one added."""
NOTICED_AT = 160.0
"""Events after this time are written once the worker has read the added partition."""


@pytest.mark.services
def test_a_partition_added_while_following_is_read_and_decided_on(
    old_kafka: OldKafka, tmp_path: Path, workers: int, request: pytest.FixtureRequest
) -> None:
    topic = unique_topic(request.node.name)
    events = decode_ramp("alpha", engines=2, seconds=SECONDS)
    first = [e for e in events if e["time"] <= ADDED_AT]
    before = [e for e in events if ADDED_AT < e["time"] <= NOTICED_AT]
    after = [e for e in events if e["time"] > NOTICED_AT]
    configs = {"alpha": PlannerConfig.model_validate(DECODE_CONFIG)}
    recorded = replay(configs, RecordedSource([write_stream(tmp_path / "s.jsonl", events)]))
    decisions, ticks, dead = recorded
    assert dead == [] and [d for d in decisions if d["time"] > NOTICED_AT]  # it decides late on
    old_kafka.create_topic(topic)
    old_kafka.write(topic, lines(first), partition=0)

    def add_a_partition(ticks: list[TickRecord]) -> None:
        # the worker has listed the topic's one partition and read it
        wait_until(lambda: any(r.time >= ADDED_AT - 10 for r in ticks), "the first ticks")
        old_kafka.add_partitions(topic, 2)
        # at once: the worker lists partitions every PARTITION_REFRESH_S (1 s)
        old_kafka.write(topic, lines(before), partition=1)
        wait_until(
            lambda: any(r.time > ADDED_AT + 10 for r in ticks),
            "ticks of the added partition's events",
            timeout_s=10 + 4 * source_module.PARTITION_REFRESH_S,
        )
        old_kafka.write(topic, lines(after), partition=1)

    source = KafkaEventSource(old_kafka.bootstrap, topic, config=OLD_BROKER)
    followed = follow_while(configs, source, workers, add_a_partition, ticks[-1]["time"])

    assert followed == recorded
    bounded = KafkaEventSource(old_kafka.bootstrap, topic, until_end=True, config=OLD_BROKER)
    assert replay(configs, bounded) == recorded  # and a restarted worker replays the same


DISCOVERY_LATENESS_S = 2.0
"""The allowed lateness the docs name for a partition added while the worker follows the
topic (README, :data:`connectors.kafka.source.PARTITION_REFRESH_S`): it covers the events
written to it before the worker finds it."""
PACED_SECONDS = 24.0


def write_paced(
    old_kafka: OldKafka, topic: str, events: list[dict], growing: threading.Event
) -> list[float]:
    """Write ``events`` as their engines would, each at its time from now (real-time pace): to
    partition 0, and once ``growing`` is set and partition 1 has a leader, engine w1's forward
    passes to partition 1 — from its first event after that. Returns when each message went to
    partition 1 (monotonic clock)."""
    producer = old_kafka.producer()
    errors: list = []
    moved: list[float] = []
    start = time.monotonic()
    grown = False
    for event in events:
        time.sleep(max(0.0, start + event["time"] - time.monotonic()))
        if growing.is_set() and not grown:  # as soon as it can be written to
            partitions = producer.list_topics(topic, timeout=10).topics[topic].partitions
            grown = 1 in partitions and partitions[1].leader >= 0
        engine = event["payload"]["fpm"]["worker_id"] if event["type"] == "fpm" else None
        partition = int(grown and engine == "w1")
        producer.produce(
            topic,
            value=json.dumps(event).encode(),
            partition=partition,
            on_delivery=lambda e, _m: errors.append(e) if e else None,
        )
        producer.poll(0)
        if partition:
            moved.append(time.monotonic())
    assert producer.flush(30) == 0 and not errors, errors
    return moved


def follow_paced(
    old_kafka: OldKafka,
    topic: str,
    configs: dict[str, PlannerConfig],
    events: list[dict],
    last_tick: float,
) -> tuple[Outcome, list[float]]:
    """Follow ``topic`` (one partition) live on one worker while ``events`` are written to it
    at real-time pace and, once the worker ticked, a partition is added that one engine writes
    to from then on, the other going on with the first — until the tick at ``last_tick``.
    Returns the outcome and when the messages went to the added partition."""
    old_kafka.create_topic(topic)
    growing = threading.Event()
    moved: list[float] = []

    def add_a_partition_meanwhile(ticks: list[TickRecord]) -> None:
        failures: list[BaseException] = []

        def write() -> None:
            try:
                moved.extend(write_paced(old_kafka, topic, events, growing))
            except BaseException as failure:
                failures.append(failure)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        try:
            # the worker has listed the topic's one partition and read it
            wait_until(lambda: ticks, "the first tick", timeout_s=30)
            growing.set()
            old_kafka.add_partitions(topic, 2)
        finally:
            writer.join()
        if failures:
            raise failures[0]

    source = KafkaEventSource(old_kafka.bootstrap, topic, config=OLD_BROKER)
    return follow_while(configs, source, 1, add_a_partition_meanwhile, last_tick), moved


@pytest.mark.services
def test_a_partition_added_beside_one_still_written_is_decided_on_as_replayed(
    old_kafka: OldKafka,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The worker finds an added partition up to PARTITION_REFRESH_S (plus the time to fetch its
    # offsets) after it was created; what its engine wrote to it meanwhile is behind what the
    # other partition handed on: the documented allowed lateness covers it. (Half the refresh
    # here: at 1 s, the fetch on Kafka 0.9 left the lateness ~0.5 s for a stall of the watch
    # thread or the JVM, which a loaded 2-core machine can take — a delay of 1.8 s failed it.)
    monkeypatch.setattr(source_module, "PARTITION_REFRESH_S", 0.5)
    caplog.set_level(logging.INFO, logger="connectors.kafka.source")
    topic = unique_topic(request.node.name)
    events = decode_ramp("alpha", engines=2, seconds=PACED_SECONDS)
    config = {**DECODE_CONFIG, "allowed_lateness_seconds": DISCOVERY_LATENESS_S}
    configs = {"alpha": PlannerConfig.model_validate(config)}
    recorded = replay(configs, RecordedSource([write_stream(tmp_path / "s.jsonl", events)]))
    decisions, ticks, dead = recorded
    assert decisions and dead == []

    followed, moved = follow_paced(old_kafka, topic, configs, events, ticks[-1]["time"])

    assert followed == recorded
    found = [r for r in caplog.records if "has new partitions [1]" in r.getMessage()]
    assert len(found) == 1 and moved  # the engine wrote to it while the other went on
    bounded = KafkaEventSource(old_kafka.bootstrap, topic, until_end=True, config=OLD_BROKER)
    assert replay(configs, bounded) == recorded


@pytest.mark.services
def test_a_resumed_reader_reads_partitions_added_before_and_after_its_snapshot(
    old_kafka: OldKafka, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setattr(source_module, "PARTITION_REFRESH_S", 0.2)
    topic = unique_topic(request.node.name)
    old_kafka.create_topic(topic)
    old_kafka.write(topic, [event_line("d", t) for t in (1.0, 2.0)], partition=0)
    source = KafkaEventSource(old_kafka.bootstrap, topic, config=OLD_BROKER)
    part = source.build_part("kafka", *source.list_parts(), None)
    try:
        assert [read_at(e) for e in poll_until(part, 2)] == [(0, 0), (0, 1)]
        old_kafka.add_partitions(topic, 2)
        old_kafka.write(topic, [event_line("d", t) for t in (3.0, 4.0)], partition=1)
        assert [read_at(e) for e in poll_until(part, 2)] == [(1, 0), (1, 1)]
        snapshot = part.snapshot()
    finally:
        part.close()
    assert snapshot == {0: (2, 0.0), 1: (2, 4.0)}  # one partition read alone is not merged

    old_kafka.write(topic, [event_line("d", 5.0)], partition=0)
    old_kafka.write(topic, [event_line("d", 6.0)], partition=1)
    old_kafka.add_partitions(topic, 3)  # after the snapshot
    old_kafka.write(topic, [event_line("d", t) for t in (5.5, 7.0)], partition=2)
    # ``start="end"`` applies to a topic read for the first time, not to a partition the
    # snapshot never saw: nothing of it was read
    resumed_source = KafkaEventSource(old_kafka.bootstrap, topic, config=OLD_BROKER, start="end")
    resumed = resumed_source.build_part("kafka", *resumed_source.list_parts(), snapshot)
    try:
        read = [read_at(e) for e in poll_until(resumed, 4)]
        assert resumed.snapshot() == {0: (3, 5.0), 1: (3, 6.0), 2: (2, 7.0)}
    finally:
        resumed.close()
    assert read == [(0, 2), (2, 0), (1, 2), (2, 1)]  # merged by event time

    # a bounded replay keeps ``start`` for a partition its snapshot lacks, as it always did:
    # from the snapshot's positions to the ends, and nothing of partition 2
    replay_source = KafkaEventSource(
        old_kafka.bootstrap, topic, config=OLD_BROKER, start="end", until_end=True
    )
    replayed = replay_source.build_part("kafka", *replay_source.list_parts(), snapshot)
    try:
        assert [read_at(e) for e in read_to_the_end(replayed)] == [(0, 2), (1, 2)]
    finally:
        replayed.close()


def read_to_the_end(part: Any, timeout_s: float = 10.0) -> list[RawEvent]:
    """Every event of a bounded reader, until it stops."""
    items: list[RawEvent] = []
    deadline = time.monotonic() + timeout_s
    while True:
        assert time.monotonic() < deadline, f"still reading after {items}"
        try:
            items.extend(part.next_batch())
        except StopIteration:
            return items


def read_at(event: RawEvent) -> tuple[int, int]:
    """(partition, offset) of a read event."""
    return int(event.source.rsplit("/", 1)[1]), event.position


class HandedWatch(PartitionWatch):
    """The partition watch of a reader under test: it finds the partitions the test hands it
    (:meth:`hand`), when it hands them — no thread lists them."""

    latest: HandedWatch | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._handed: dict[int, Bounds] = {}
        HandedWatch.latest = self

    def start(self) -> HandedWatch:
        return self

    def hand(self, found: dict[int, Bounds]) -> None:
        self._handed.update(found)

    def added(self) -> dict[int, Bounds]:
        found, self._handed = self._handed, {}
        return found


def read_noting_backlog(
    part: Any, count: int, last_of_backlog: tuple[int, int], timeout_s: float = 10.0
) -> tuple[list[tuple[int, int]], list[bool]]:
    """``count`` events of ``part`` as (partition, offset), and whether an input counted as
    behind after each ``next_batch`` called before ``last_of_backlog`` was handed on or
    handing it on."""
    read: list[tuple[int, int]] = []
    behind: list[bool] = []
    deadline = time.monotonic() + timeout_s
    while len(read) < count:
        assert time.monotonic() < deadline, f"only {read} arrived"
        waiting = last_of_backlog not in read
        read.extend(read_at(e) for e in part.next_batch())
        if waiting:
            behind.append(BACKLOG.is_behind)
    return read, behind


@pytest.mark.services
def test_an_added_partition_holds_the_merge_until_it_has_answered_and_its_backlog_is_read(
    old_kafka: OldKafka, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setattr(source_module, "PartitionWatch", HandedWatch)
    topic = unique_topic(request.node.name)
    old_kafka.create_topic(topic)
    old_kafka.write(topic, [event_line("d", t) for t in (1.0, 2.0)], partition=0)
    source = KafkaEventSource(old_kafka.bootstrap, topic, config=OLD_BROKER)
    part = source.build_part("kafka", *source.list_parts(), None)
    watch = HandedWatch.latest
    assert watch is not None

    def bounds(partition: int) -> dict[int, Bounds]:
        return partition_bounds(old_kafka.bootstrap, topic, [partition], config=OLD_BROKER)

    try:
        assert [read_at(e) for e in poll_until(part, 2)] == [(0, 0), (0, 1)]
        assert part.next_batch() == [] and not BACKLOG.is_behind  # its backlog is read
        old_kafka.add_partitions(topic, 4)
        # partition 1 is found holding a backlog, and the first partition has newer events
        # by then: they wait for the backlog, and the reader is behind until it is handed on
        old_kafka.write(topic, [event_line("d", t) for t in (3.0, 4.0, 5.0)], partition=1)
        old_kafka.write(topic, [event_line("d", t) for t in (6.0, 7.0)], partition=0)
        watch.hand(bounds(1))
        read, behind = read_noting_backlog(part, 5, last_of_backlog=(1, 2))
        assert read == [(1, 0), (1, 1), (1, 2), (0, 2), (0, 3)]
        assert behind and all(behind), behind
        assert part.next_batch() == [] and not BACKLOG.is_behind  # it said it caught up

        # partition 2 is found empty and written to before the consumer first fetches it
        # (about a second after it is assigned): its event still comes before the newer ones
        old_kafka.write(topic, [event_line("d", t) for t in (8.0, 9.0)], partition=0)
        found_empty = bounds(2)
        assert found_empty == {2: Bounds(0, 0)}
        old_kafka.write(topic, [event_line("d", 7.5)], partition=2)
        watch.hand(found_empty)
        read, behind = read_noting_backlog(part, 3, last_of_backlog=(2, 0))
        assert read == [(2, 0), (0, 4), (0, 5)]
        assert behind and all(behind), behind
        assert part.next_batch() == [] and not BACKLOG.is_behind

        # partition 3 is found empty and stays so: its end-of-partition answer lets go
        old_kafka.write(topic, [event_line("d", t) for t in (10.0, 11.0)], partition=0)
        watch.hand(bounds(3))
        assert [read_at(e) for e in poll_until(part, 2)] == [(0, 6), (0, 7)]
        assert part.next_batch() == [] and not BACKLOG.is_behind
    finally:
        part.close()


def follow_with_handed_watch(
    bootstrap: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, HandedWatch]:
    """A following reader of ``topic`` (on Tansu: one partition, events at 1 and 2 on it,
    read) whose partition watch is a :class:`HandedWatch`."""
    monkeypatch.setattr(source_module, "PartitionWatch", HandedWatch)
    ensure_topic(bootstrap, topic, partitions=1)
    write_raw(bootstrap, topic, [event_line("d", t) for t in (1.0, 2.0)], partition=0)
    source = KafkaEventSource(bootstrap, topic)
    part = source.build_part("kafka", *source.list_parts(), None)
    assert HandedWatch.latest is not None
    assert [read_at(e) for e in poll_until(part, 2)] == [(0, 0), (0, 1)]
    assert part.next_batch() == [] and not BACKLOG.is_behind
    return part, HandedWatch.latest


def read_while(part: Any, until: Callable[[list[tuple[int, int]]], bool]) -> list[tuple[int, int]]:
    """Events of ``part`` as (partition, offset), read until ``until(read)`` holds."""
    read: list[tuple[int, int]] = []
    deadline = time.monotonic() + 10
    while not until(read):
        assert time.monotonic() < deadline, f"only {read} arrived"
        read.extend(read_at(e) for e in part.next_batch())
        time.sleep(0.01)
    return read


def hold_warnings(caplog: pytest.LogCaptureFixture, partition: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "connectors.kafka.source"
        and r.levelno == logging.WARNING
        and re.search(rf"partition {partition}\b", r.getMessage())
    ]


def test_a_partition_found_empty_that_never_answers_lets_go_of_the_topic_after_a_bound(
    kafka_bootstrap: str,
    kafka_topic: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a partition found empty whose leader is lost before the consumer first fetches it: the
    # consumer never answers for it (here: one the broker does not have). The topic holds
    # behind it only up to ADDED_PARTITION_WAIT_S, then goes on, saying so
    caplog.set_level(logging.WARNING, logger="connectors.kafka.source")
    monkeypatch.setattr(source_module, "ADDED_PARTITION_WAIT_S", 0.5)
    part, watch = follow_with_handed_watch(kafka_bootstrap, kafka_topic, monkeypatch)
    try:
        watch.hand({7: Bounds(0, 0)})
        write_raw(kafka_bootstrap, kafka_topic, [event_line("d", t) for t in (3.0, 4.0)], 0)
        assert read_while(part, lambda read: len(read) >= 2) == [(0, 2), (0, 3)]
        assert part.next_batch() == [] and not BACKLOG.is_behind  # it caught up
        write_raw(kafka_bootstrap, kafka_topic, [event_line("d", 5.0)], partition=0)
        assert read_while(part, lambda read: len(read) >= 1) == [(0, 4)]  # as it arrives
    finally:
        part.close()
    said = hold_warnings(caplog, 7)
    assert len(said) == 1 and "may come late" in said[0] and kafka_topic in said[0], said


def test_a_partition_holding_a_backlog_that_never_answers_holds_the_topic_and_is_warned_of(
    kafka_bootstrap: str,
    kafka_topic: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # found holding messages, it is not let go after ADDED_PARTITION_WAIT_S (they would all be
    # late): the topic waits for it, and after TOPIC_WAIT_WARNING_S the reader says so, once
    caplog.set_level(logging.WARNING, logger="connectors.kafka.source")
    monkeypatch.setattr(source_module, "ADDED_PARTITION_WAIT_S", 0.2)
    monkeypatch.setattr(source_module, "TOPIC_WAIT_WARNING_S", 0.2)
    part, watch = follow_with_handed_watch(kafka_bootstrap, kafka_topic, monkeypatch)
    try:
        watch.hand({7: Bounds(0, 5)})
        write_raw(kafka_bootstrap, kafka_topic, [event_line("d", t) for t in (3.0, 4.0)], 0)
        read = read_while(part, lambda _: bool(hold_warnings(caplog, 7)))
        # many times both bounds later, still held and behind, and said only once
        later = time.monotonic() + 1.5
        read += read_while(part, lambda _: time.monotonic() > later)
        assert read == [] and BACKLOG.is_behind
    finally:
        part.close()
    said = hold_warnings(caplog, 7)
    assert len(said) == 1 and "held behind it" in said[0] and kafka_topic in said[0], said
    assert "5 messages" in said[0]


def test_the_partition_watch_tries_again_until_it_finds_partitions(
    kafka_bootstrap: str, kafka_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    # on Tansu: a topic that does not exist yet has no partitions to list
    caplog.set_level(logging.INFO, logger="connectors.kafka.client")
    watch = PartitionWatch(kafka_bootstrap, kafka_topic, known=[], interval_s=0.05).start()
    try:
        wait_until(lambda: "cannot list the partitions" in caplog.text, "a warning", timeout_s=10)
        time.sleep(0.5)  # ten more tries, all failing
        assert watch.added() == {}
        ensure_topic(kafka_bootstrap, kafka_topic, partitions=2)
        found = wait_until(watch.added, "the topic's partitions", timeout_s=10)
    finally:
        watch.close()
    assert found == {0: Bounds(0, 0), 1: Bounds(0, 0)}
    said = [r.getMessage() for r in caplog.records if r.name == "connectors.kafka.client"]
    assert len([m for m in said if m.startswith("cannot list the partitions")]) == 1, said
    assert f"listing the partitions of {kafka_topic} again" in said
    assert watch.added() == {} and watch.known == {0, 1}


def test_a_closed_watch_says_nothing_of_the_request_it_had_in_flight(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # no broker on the port: the listing in flight when the watch closes waits out its timeout,
    # longer than close waits for it, and fails after
    caplog.set_level(logging.INFO, logger="connectors.kafka.client")
    bootstrap = f"127.0.0.1:{free_port()}"
    # (a timeout well beyond the sleep: a stall of the test's thread must not outlast it)
    watch = PartitionWatch(bootstrap, "t", known=[], interval_s=0.05, timeout_s=8.0).start()
    time.sleep(0.3)  # its first listing is under way
    watch.close()
    assert "cannot list the partitions" not in caplog.text
    wait_until(
        lambda: not [t for t in threading.enumerate() if t.name == "partitions of t"],
        "the watch's thread to end",
        timeout_s=30,
    )
    assert [r.getMessage() for r in caplog.records if r.name == "connectors.kafka.client"] == []
