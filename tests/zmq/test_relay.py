"""``flowplanner relay``: an engine's ZMQ publisher → a Kafka topic → the planner.

Real processes throughout: the relay CLI subscribes to a real ZMQ publisher and writes to a
real broker (Tansu); the planner CLI then reads the topic. Every forward pass published
reaches the planner's ticks, attributed to its engine; a frame that is not a forward pass is
a dead letter of the relay, never forwarded; SIGTERM stops the relay cleanly.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from connectors.kafka import ensure_topic, list_partitions, partition_bounds
from connectors.zmq_publisher import FpmPublisher
from schemas import ForwardPassMetrics, FpmBatchEvent, FpmEvent, parse_event
from tests.flow.runner import flowplanner, read_jsonl, start_flowplanner, write_config
from tests.flow.streams import DECODE_CONFIG, decode_fpm
from tests.services.kafka import tansu_process
from tests.services.process import pause, wait_until

pytestmark = pytest.mark.services

PASSES = 20
"""Per engine, of two engines."""


def topic_events(bootstrap: str, topic: str) -> list[FpmEvent | FpmBatchEvent]:
    bounds = partition_bounds(bootstrap, topic, list_partitions(bootstrap, topic))
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    consumer.assign([TopicPartition(topic, p, b.first) for p, b in bounds.items()])
    events = []
    try:
        for _ in range(sum(b.end - b.first for b in bounds.values())):
            message = consumer.poll(10)
            assert message is not None and message.error() is None
            events.append(parse_event(message.value()))
    finally:
        consumer.close()
    return events


def passes(events: list) -> list[tuple[str, int]]:
    """(worker, counter_id) of every forward pass the events carry."""
    out = []
    for event in events:
        if isinstance(event, FpmBatchEvent):
            batch = event.payload
            out += [(batch.worker_id, batch.fpm(i).counter_id) for i in range(len(batch.rows))]
        else:
            out.append((event.payload.fpm.worker_id, event.payload.fpm.counter_id))
    return out


def start_relay(
    publisher: FpmPublisher, topic: str, err: Path, *options: str
) -> subprocess.Popen[str]:
    """``flowplanner relay`` from ``publisher`` (alpha's decode engine) to ``kafka://topic``."""
    port = publisher.url.rsplit(":", 1)[1]
    source = f"zmq+tcp://127.0.0.1:{port}?deployment=alpha&role=decode"
    return start_flowplanner(
        "relay", "--from", source, "--to", f"kafka://{topic}", *options, stderr=err
    )


def test_the_relay_forwards_every_pass_and_only_passes(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic: str
) -> None:
    ensure_topic(kafka_bootstrap, kafka_topic)
    with FpmPublisher("tcp://127.0.0.1:0") as publisher:
        err_path = tmp_path / "relay.err"
        relay = start_relay(
            publisher, f"{kafka_bootstrap}/{kafka_topic}", err_path, "--metrics-port", "0"
        )
        try:
            assert publisher.wait_for_subscribers(1, 120), err_path.read_text()
            expected = []  # the publisher numbers the passes (counter_id = its sequence)
            for step in range(1, PASSES + 1):
                for engine in ("w0", "w1"):
                    fpm = decode_fpm(engine, kv=40_000 + 900 * step, n=20, counter=0)
                    expected.append((engine, publisher.publish(ForwardPassMetrics(**fpm))))
            publisher.publish_payload(b"not msgpack")
            wait_until(
                lambda: len(passes(topic_events(kafka_bootstrap, kafka_topic))) >= 2 * PASSES,
                "every pass on the topic",
                timeout_s=60,
            )
            undecodable = 'flowplanner_dead_letters_total{kind="undecodable"}'
            wait_until(  # counted on the relay's own port, as the README says
                lambda: relay_metric(err_path, undecodable) == 1.0, "the dead letter counted"
            )
        finally:
            relay.send_signal(signal.SIGTERM)
            relay.communicate(timeout=60)
    err = (tmp_path / "relay.err").read_text()
    assert relay.returncode == 0, err
    assert "stopped by SIGTERM" in err
    letters = [line.split(": ", 1)[1] for line in err.splitlines() if "dead-letter" in line]
    (dead,) = [json.loads(letter) for letter in letters]  # said, and kept out of the topic
    assert dead["reason"].startswith("undecodable FPM payload (not msgpack)")
    assert (dead["deployment"], dead["position"]) == ("alpha", 2 * PASSES)
    events = topic_events(kafka_bootstrap, kafka_topic)
    assert sorted(passes(events)) == sorted(expected)
    assert {e.deployment for e in events} == {"alpha"}

    # the planner reads the relayed passes like any input events
    last = max(e.time for e in events)
    tail = {"type": "clock", "deployment": "alpha", "time": last + 10.0, "payload": {}}
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(kafka_topic, key="alpha", value=json.dumps(tail).encode())
    assert producer.flush(30) == 0
    capabilities = {"decode": {"num_gpu": 1, "max_kv_tokens": 2_000_000}}
    # the passes came within a second: the engines stay alive through the tick after them
    alpha = {**DECODE_CONFIG, "capabilities": capabilities, "engine_silence_seconds": 60}
    config = write_config(tmp_path / "c.yaml", {"alpha": alpha})
    ticks, dead_letters = tmp_path / "ticks.jsonl", tmp_path / "dead.jsonl"
    done = flowplanner(
        "run",
        "--config",
        str(config),
        "--input",
        f"kafka://{kafka_bootstrap}/{kafka_topic}?until=end",
        "--ticks",
        str(ticks),
        "--dead-letters",
        str(dead_letters),
    )
    assert done.returncode == 0, done.stderr
    assert not dead_letters.exists() or read_jsonl(dead_letters) == []
    seen = {engine["worker_id"] for tick in read_jsonl(ticks) for engine in tick["engines"]}
    assert seen == {"w0", "w1"}
    assert time.time() - last < 600  # stamped on receipt, by the relay's clock


METRICS = re.compile(r"flowplanner relay: metrics on http://[^:]+:(\d+)/metrics")


def relayed_in(err: Path) -> float:
    """The relay's count of messages read from ZMQ, from its own /metrics (0 before it serves)."""
    return relay_metric(err, 'flowplanner_events_in_total{source="zmq"}')


def relay_metric(err: Path, sample: str) -> float:
    """One sample of the relay's own /metrics (0 before it serves or while it has none)."""
    port = METRICS.search(err.read_text())
    if port is None:
        return 0.0
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port[1]}/metrics", timeout=10).read()
    except OSError as error:  # the relay is gone: say why
        raise AssertionError(err.read_text()) from error
    found = re.search(re.escape(sample.encode()) + rb" (\S+)", text)
    return float(found[1]) if found else 0.0


def test_a_stop_while_the_broker_is_away_says_what_it_drops(tmp_path: Path) -> None:
    # the relay's sink raised at shutdown: the process aborted in a Rust panic, or said it had
    # stopped cleanly while the passes it held were lost without a word; and a sink that asked
    # the broker for its topic as the dataflow started failed the relay when it was away then
    err = tmp_path / "relay.err"
    with tansu_process() as (bootstrap, broker), FpmPublisher("tcp://127.0.0.1:0") as publisher:
        relay = start_relay(publisher, f"{bootstrap}/fpm", err, "--metrics-port", "0")
        try:
            assert publisher.wait_for_subscribers(1, 120), err.read_text()
            pause(broker)
            for step in range(1, 11):
                fpm = decode_fpm("w0", kv=40_000 + 900 * step, n=20, counter=0)
                publisher.publish(ForwardPassMetrics(**fpm))
            wait_until(lambda: relayed_in(err) >= 10, "the relay to read the passes")
            relay.send_signal(signal.SIGTERM)
            relay.wait(timeout=120)
        finally:
            broker.send_signal(signal.SIGCONT)
            if relay.poll() is None:
                relay.kill()
                relay.wait()
    text = err.read_text()
    assert relay.returncode == 0, text
    dropped = re.search(rf"(\d+) events not delivered to Kafka topic fpm at {bootstrap}", text)
    assert dropped and int(dropped[1]) >= 1, text
    assert "dropped at shutdown" in text and "panicked" not in text and "Traceback" not in text
    assert "stopped by SIGTERM" in text


@pytest.mark.parametrize(
    ("source", "to", "message"),
    [
        ("zmq+tcp://127.0.0.1:5?deployment=a", "kafka://h:9/t", "give ?deployment=D&role="),
        ("zmq+tcp://127.0.0.1:5?deployment=a&role=agg", "kafka://h:9/t", "role=prefill|decode"),
        ("zmq+tcp://:5?deployment=a&role=decode", "kafka://h:9/t", "HOST:PORT"),
        ("tcp://127.0.0.1:5?deployment=a&role=decode", "kafka://h:9/t", "zmq+tcp:// or zmq+ipc"),
        ("zmq+tcp://127.0.0.1:5?deployment=a&role=decode", "kafka://h", "kafka://HOST:PORT/TOPIC"),
    ],
)
def test_bad_addresses_are_refused_before_anything_starts(source: str, to: str, message: str):
    done = flowplanner("relay", "--from", source, "--to", to)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
