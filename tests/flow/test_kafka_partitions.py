"""A topic of several partitions replays like the recording it holds: its partitions are
merged by event time, so one partition read ahead of another makes nothing late."""

from __future__ import annotations

import json

from confluent_kafka import Producer

from connectors.kafka import ensure_topic
from tests.flow.runner import flowplanner, read_jsonl, write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp, write_stream


def test_a_partitioned_topic_gives_the_decisions_of_its_recording(
    tmp_path, kafka_bootstrap, kafka_topic
):
    events = decode_ramp("alpha", engines=2, seconds=120)
    # each engine on its own partition (as a producer keyed by engine writes them); the
    # deployment's state snapshots go with the first engine
    partition_of = {"w0": 0, "w1": 1}
    ensure_topic(kafka_bootstrap, kafka_topic, partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for event in events:
        worker = event["payload"].get("fpm", {}).get("worker_id", "w0")
        producer.produce(kafka_topic, json.dumps(event).encode(), partition=partition_of[worker])
    assert producer.flush(30) == 0
    config = write_config(tmp_path / "c.yaml", {"alpha": DECODE_CONFIG})

    def run(source: str, out: str, *options: str) -> tuple[list[dict], list[dict]]:
        done = flowplanner(
            "run",
            *("--config", str(config), "--input", source, *options),
            *("--output", str(tmp_path / f"{out}.jsonl")),
            *("--dead-letters", str(tmp_path / f"{out}-dead.jsonl")),
        )
        assert done.returncode == 0, done.stderr
        dead = tmp_path / f"{out}-dead.jsonl"
        return read_jsonl(tmp_path / f"{out}.jsonl"), read_jsonl(dead) if dead.exists() else []

    recorded, recorded_dead = run(str(write_stream(tmp_path / "s.jsonl", events)), "file")
    assert recorded and recorded_dead == []
    topic = f"kafka://{kafka_bootstrap}/{kafka_topic}?until=end"
    for workers in ("1", "2"):
        decisions, dead = run(topic, f"kafka-{workers}", "-w", workers)
        assert dead == [], dead[:3]  # read side by side, half the forward passes came late
        assert decisions == recorded
