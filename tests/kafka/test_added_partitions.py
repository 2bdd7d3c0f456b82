"""Partitions added to a followed topic while the planner runs are read, from their beginning.

Tansu, the suite's broker, cannot add partitions (it answers CreatePartitions as unsupported),
so these tests run on Apache Kafka 0.9.0.1 (:mod:`tests.services.old_kafka`) and add partitions
as its operators did, with ``kafka-topics.sh --alter``. The watch that lists a topic's
partitions is tried on Tansu too, where a topic it waits for is created.
"""

from __future__ import annotations

import _thread
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from bytewax.errors import BytewaxRuntimeError
from bytewax.testing import TestingSink

from connectors.kafka import KafkaEventSource, ensure_topic
from connectors.kafka import source as source_module
from connectors.kafka.client import Bounds, PartitionWatch
from connectors.recorded import RecordedSource
from flows.planner import PlannerSinks, build_flow
from schemas import DeadLetter, PlannerConfig, RawEvent, TickRecord
from tests.flow.cluster import run_flow
from tests.flow.live_run import HostClock, Outcome, interrupted, outcome, replay
from tests.flow.streams import DECODE_CONFIG, decode_ramp, write_stream
from tests.kafka.samples import event_line
from tests.kafka.test_event_source import poll_until
from tests.services.kafka import BrokerStartError, unique_topic
from tests.services.old_kafka import OLD_BROKER, OldKafka, running_old_kafka
from tests.services.process import wait_until


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
    finished = threading.Event()
    failures: list[BaseException] = []

    def drive() -> None:
        try:
            scenario(ticks)
            wait_until(
                lambda: finished.is_set() or any(r.time >= last_tick for r in ticks),
                f"the tick at {last_tick}",
                timeout_s=timeout_s,
            )
        except BaseException as failure:  # reported by the test once the worker stopped
            failures.append(failure)
        if not finished.is_set():
            _thread.interrupt_main()

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    try:
        run_flow(flow, workers)
    except (KeyboardInterrupt, BytewaxRuntimeError) as stopped:
        assert interrupted(stopped), stopped
    else:
        raise AssertionError("a live run ended by itself")
    finally:
        finished.set()
        driver.join()
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
        # at once: the worker lists partitions every PARTITION_REFRESH_S (5 s)
        old_kafka.write(topic, lines(before), partition=1)
        wait_until(
            lambda: any(r.time > ADDED_AT + 10 for r in ticks),
            "ticks of the added partition's events",
            timeout_s=4 * source_module.PARTITION_REFRESH_S,
        )
        old_kafka.write(topic, lines(after), partition=1)

    source = KafkaEventSource(old_kafka.bootstrap, topic, config=OLD_BROKER)
    followed = follow_while(configs, source, workers, add_a_partition, ticks[-1]["time"])

    assert followed == recorded
    bounded = KafkaEventSource(old_kafka.bootstrap, topic, until_end=True, config=OLD_BROKER)
    assert replay(configs, bounded) == recorded  # and a restarted worker replays the same


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


def read_at(event: RawEvent) -> tuple[int, int]:
    """(partition, offset) of a read event."""
    return int(event.source.rsplit("/", 1)[1]), event.position


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
