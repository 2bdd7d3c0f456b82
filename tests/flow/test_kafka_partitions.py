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


def test_a_replay_split_between_a_topic_and_a_recording_gives_the_decisions_of_one_recording(
    tmp_path, kafka_bootstrap, kafka_topic
):
    """Separate inputs of a replay are merged by event time too (connectors.merged): the
    deployment's state snapshots and one engine in a topic, the other engine in a recording."""
    events = decode_ramp("alpha", engines=2, seconds=120)
    in_topic = [e for e in events if e["payload"].get("fpm", {}).get("worker_id") != "w0"]
    in_file = [e for e in events if e["payload"].get("fpm", {}).get("worker_id") == "w0"]
    assert in_topic and in_file and any(e["type"] != "fpm" for e in in_topic)
    ensure_topic(kafka_bootstrap, kafka_topic)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for event in in_topic:
        producer.produce(kafka_topic, json.dumps(event).encode())
    assert producer.flush(30) == 0
    config = write_config(tmp_path / "c.yaml", {"alpha": DECODE_CONFIG})

    def run(out: str, *inputs: str, workers: str = "1") -> tuple[list[dict], list[dict]]:
        done = flowplanner(
            "run",
            *("--config", str(config), "-w", workers),
            *(arg for source in inputs for arg in ("--input", source)),
            *("--output", str(tmp_path / f"{out}.jsonl")),
            *("--dead-letters", str(tmp_path / f"{out}-dead.jsonl")),
        )
        assert done.returncode == 0, done.stderr
        dead = tmp_path / f"{out}-dead.jsonl"
        return read_jsonl(tmp_path / f"{out}.jsonl"), read_jsonl(dead) if dead.exists() else []

    whole, whole_dead = run("whole", str(write_stream(tmp_path / "all-events.jsonl", events)))
    assert whole and whole_dead == []
    topic = f"kafka://{kafka_bootstrap}/{kafka_topic}?until=end"
    part = str(write_stream(tmp_path / "w0.jsonl", in_file))
    for workers in ("1", "2"):
        for order, inputs in (("file-first", (part, topic)), ("topic-first", (topic, part))):
            decisions, dead = run(f"{order}-{workers}", *inputs, workers=workers)
            assert dead == [], (order, workers, dead[:3])
            assert decisions == whole, (order, workers)
