"""Poisoned messages on a Kafka event topic — a tombstone (no value), bytes that are not UTF-8,
nesting past the recursion limit, an integer of 5000 digits, an absurd inventory — are dead
letters naming the partition and offset; every valid message is used, so the run decides as
the same events replayed from a file do."""

from __future__ import annotations

import json

from confluent_kafka import Producer

from tests.flow.runner import flowplanner, read_jsonl, write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp


def test_poisoned_messages_are_dead_letters_and_the_rest_decides(
    tmp_path, kafka_bootstrap, kafka_topic
):
    valid = [json.dumps(e).encode() for e in decode_ramp("llama", engines=2, seconds=60)]
    t = json.loads(valid[200])["time"]
    poison = [
        None,  # a tombstone
        b"\xff\xfe{}",
        b'{"type": "clock", "deployment": "llama", "time": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        b'{"type": "clock", "deployment": "llama", "time": ' + b"9" * 5000 + b"}",
        json.dumps(
            {
                "type": "inventory",
                "deployment": "llama",
                "time": t,
                "payload": {"ready_num_decode": 2**62},
            }
        ).encode(),
    ]
    messages = valid[:201] + poison + valid[201:]
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for message in messages:
        producer.produce(kafka_topic, key="llama", value=message)
    assert producer.flush(30) == 0
    config = write_config(tmp_path / "c.yaml", {"llama": DECODE_CONFIG})
    (tmp_path / "clean.jsonl").write_bytes(b"\n".join(valid) + b"\n")

    def run(source: str, name: str) -> tuple[list[dict], list[dict], str]:
        files = [tmp_path / f"{name}.{kind}.jsonl" for kind in ("decisions", "dead")]
        done = flowplanner(
            "run",
            "--config",
            str(config),
            "--input",
            source,
            "--output",
            str(files[0]),
            "--dead-letters",
            str(files[1]),
        )
        assert done.returncode == 0, done.stderr
        return read_jsonl(files[0]), read_jsonl(files[1]), done.stderr

    decisions, dead, stderr = run(f"kafka://{kafka_bootstrap}/{kafka_topic}?until=end", "kafka")
    clean_decisions, clean_dead, _ = run(str(tmp_path / "clean.jsonl"), "clean")

    assert "Traceback" not in stderr
    assert clean_dead == [] and clean_decisions
    assert decisions == clean_decisions
    assert [d["position"] for d in dead] == list(range(201, 206))
    assert {d["source"] for d in dead} == {f"kafka:{kafka_topic}/{dead[0]['source'][-1]}"}
    reasons = [d["reason"] for d in dead]
    assert reasons[0].startswith("invalid event: Invalid JSON: EOF")
    assert reasons[1] == "invalid event: not UTF-8 text: byte 0xff at offset 0 (invalid start byte)"
    assert "recursion limit exceeded" in reasons[2]
    assert "number out of range" in reasons[3]
    assert "implausible" in reasons[4]
    assert f"{len(messages)} events in, 5 dead-lettered" in stderr
