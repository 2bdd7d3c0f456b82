"""Kafka in, Kafka out: a recorded stream published to a real broker drives the planner flow,
its decisions land in a decisions topic, and ``flowplanner decisions`` reads them back."""

from __future__ import annotations

import json

from confluent_kafka import Producer

from tests.flow.runner import flowplanner, read_jsonl, write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp, write_stream


def publish(bootstrap: str, topic: str, lines: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for line in lines:
        producer.produce(topic, key="alpha", value=line.encode())
    assert producer.flush(30) == 0


def test_decisions_written_by_the_flow_are_read_back(tmp_path, kafka_bootstrap, kafka_topic):
    events = decode_ramp("alpha", engines=2, seconds=60)
    lines = [json.dumps(e) for e in events]
    config = write_config(tmp_path / "c.yaml", {"alpha": DECODE_CONFIG})
    stream = write_stream(tmp_path / "s.jsonl", events)
    events_topic, decisions_topic = f"{kafka_topic}-events", f"{kafka_topic}-decisions"
    publish(kafka_bootstrap, events_topic, [*lines, "{broken"])

    # reference: the same stream from a file
    done = flowplanner(
        "run",
        "--config",
        str(config),
        "--input",
        str(stream),
        "--output",
        str(tmp_path / "file.jsonl"),
    )
    assert done.returncode == 0, done.stderr
    expected = read_jsonl(tmp_path / "file.jsonl")
    assert expected

    done = flowplanner(
        "run",
        "--config",
        str(config),
        "--input",
        f"kafka://{kafka_bootstrap}/{events_topic}?until=end",
        "--output",
        f"kafka://{kafka_bootstrap}/{decisions_topic}",
        "--dead-letters",
        str(tmp_path / "dead.jsonl"),
    )
    assert done.returncode == 0, done.stderr
    (dead,) = read_jsonl(tmp_path / "dead.jsonl")
    assert dead["source"].startswith(f"kafka:{events_topic}/") and "Invalid JSON" in dead["reason"]

    shown = flowplanner("decisions", "--bootstrap", kafka_bootstrap, "--topic", decisions_topic)
    assert shown.returncode == 0, shown.stderr
    table = shown.stdout.splitlines()
    rows = [line for line in table if " alpha " in f" {line} "]
    assert len(rows) == len(expected)
    for row, decision in zip(rows, expected, strict=True):
        cells = row.split()
        assert f"{decision['time']:.1f}" in cells
        assert str(decision["decision_id"]) in cells
        assert decision["reason"] in cells
        assert f"{decision['current_decode']}->{decision['num_decode']}" in row
