"""A frontend's ``dynamo.request.trace.v1`` topic as the planner's traffic input: the shipped
sample trace is published to a real broker, and every finished request it holds is counted
in the throughput loop's observed traffic of the interval in which it finished."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
from confluent_kafka import Producer

from connectors.traces import dynamo_request_event
from tests.flow.runner import flowplanner, read_jsonl, write_config

SAMPLE = Path(__file__).resolve().parents[1] / "data/traces/dynamo_request_trace_v1_sample.jsonl.gz"
INTERVAL_S = 60
CONFIG = {
    "mode": "decode",
    "optimization_target": "sla",
    "enable_load_scaling": False,
    "enable_throughput_scaling": True,
    "throughput_adjustment_interval_seconds": INTERVAL_S,
}


def publish(bootstrap: str, topic: str, messages: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for message in messages:  # one key: one partition, in event-time order
        producer.produce(topic, key="qwen", value=message)
    assert producer.flush(30) == 0


def test_finished_requests_of_a_trace_topic_are_the_observed_traffic(
    tmp_path, kafka_bootstrap, kafka_topic
):
    lines = gzip.decompress(SAMPLE.read_bytes()).splitlines()
    ends = [e for e in (dynamo_request_event(line, "qwen") for line in lines) if e is not None]
    assert len(lines) == 61 and len(ends) == 17  # the rest are tool calls
    # requests that finish after the sample: event time passes the end of its last interval
    after = [(math.floor(ends[-1].time / INTERVAL_S) + 1) * INTERVAL_S + 5 * k for k in (0, 1)]
    closers = [
        {
            "schema": "dynamo.request.trace.v1",
            "event_type": "request_end",
            "event_time_unix_ms": at * 1000,
            "request": {"input_tokens": 10, "output_tokens": 1, "request_received_ms": 0},
        }
        for at in after
    ]
    broken = [
        b"{not json",
        b'{"type": "clock", "deployment": "qwen", "time": 1}',  # our envelope, wrong topic
        json.dumps(
            {
                "schema": "dynamo.request.trace.v1",
                "event_type": "request_end",
                "event_time_unix_ms": 1779163100000,
                "request": {"input_tokens": 10, "request_received_ms": 1779163090000},
            }
        ).encode(),
        lines[0].replace(b'"kv_hit_rate":0.0', b'"kv_hit_rate":1.5'),
        lines[0].replace(b'"kv_hit_rate":0.0', b'"kv_hit_rate":1' + b"0" * 400),  # no float
    ]
    publish(
        kafka_bootstrap,
        kafka_topic,
        [*lines[:5], *broken, *lines[5:], *(json.dumps(c).encode() for c in closers)],
    )

    config = write_config(tmp_path / "c.yaml", {"qwen": CONFIG})
    done = flowplanner(
        "run",
        "--config",
        str(config),
        "--input",
        f"kafka://{kafka_bootstrap}/{kafka_topic}?until=end&format=dynamo-trace&deployment=qwen",
        "--ticks",
        str(tmp_path / "ticks.jsonl"),
        "--dead-letters",
        str(tmp_path / "dead.jsonl"),
    )
    assert done.returncode == 0, done.stderr

    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [d["position"] for d in dead] == [5, 6, 7, 8, 9]
    assert len({d["source"] for d in dead}) == 1
    assert dead[0]["source"].startswith(f"kafka:{kafka_topic}/")
    assert "invalid JSON" in dead[0]["reason"]
    assert "not a dynamo.request.trace.v1 event" in dead[1]["reason"]
    assert "missing request.output_tokens" in dead[2]["reason"]
    assert "kv_hit_rate: Input should be less than or equal to 1" in dead[3]["reason"]
    assert "request.kv_hit_rate must be finite" in dead[4]["reason"]

    # each throughput tick observes the requests that finished in the interval before it
    ticks = [t for t in read_jsonl(tmp_path / "ticks.jsonl") if t["ran_throughput"]]
    finished = [e.time for e in ends] + after
    expected = [sum(t["time"] - INTERVAL_S <= f < t["time"] for f in finished) for t in ticks]
    assert [t["observed_traffic"]["num_req"] for t in ticks] == expected
    assert len(ticks) == 3 and expected == [2, 9, 3]
    for tick in ticks[:2]:  # the last interval also holds the first closer
        requests = [e.payload for e in ends if tick["time"] - INTERVAL_S <= e.time < tick["time"]]
        observed = tick["observed_traffic"]
        assert observed["isl"] == pytest.approx(sum(r.isl for r in requests) / len(requests))
        assert observed["osl"] == pytest.approx(sum(r.osl for r in requests) / len(requests))
