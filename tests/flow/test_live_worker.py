"""``flowplanner run`` as a long-lived worker on live Kafka inputs: the virtual connector holds
decisions until the orchestrator acknowledges them, and SIGTERM stops the worker cleanly."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer

from connectors.kafka import read_decisions
from tests.flow.runner import (
    flowplanner,
    metrics_port,
    read_jsonl,
    start_flowplanner,
    write_config,
)
from tests.flow.streams import DECODE_CONFIG, decode_ramp
from tests.services.process import wait_until


def decisions_on(bootstrap: str, topic: str) -> list:
    try:
        return list(read_decisions(bootstrap, topic))
    except Exception:  # the topic appears with the first decision
        return []


def wait_for_decisions(bootstrap: str, topic: str, count: int) -> list:
    def enough() -> list:
        seen = decisions_on(bootstrap, topic)
        return seen if len(seen) >= count else []

    # the first wait includes the worker's start: minutes on a loaded machine
    return wait_until(enough, f"{count} decisions on {topic}", timeout_s=120, interval_s=0.5)


def last_tick_time(ticks: Path) -> float:
    records = read_jsonl(ticks) if ticks.exists() else []
    return max((r["time"] for r in records), default=float("-inf"))


def test_virtual_connector_holds_until_ack_and_sigterm_stops(
    tmp_path, kafka_bootstrap, kafka_topic, workers
):
    events_topic, decisions, acks = (f"{kafka_topic}-{x}" for x in ("ev", "dec", "ack"))
    # the flat scale-down rule without a stabilization window makes the first decision a
    # consolidation of the idle start (2 -> 1); the later ones, as the load climbs past the
    # target, a scale-up (2 -> 3): a different target, which the gate must hold until the
    # first is acknowledged
    flat = {"scale_down_rule": "flat", "scale_down_stabilization_seconds": 0}
    config = write_config(tmp_path / "c.yaml", {"alpha": {**DECODE_CONFIG, **flat}})
    # a minute-long recording that happened just now, starting on a tick boundary (windows are
    # aligned to multiples of 5 s of Unix time; a first window holding a sliver of data would
    # leave the first tick without enough samples to decide)
    start = time.time() // 5 * 5 - 120.0
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    recording = decode_ramp("alpha", engines=2, seconds=60)
    for event in recording:
        event["time"] += start
        producer.produce(events_topic, key="alpha", value=json.dumps(event).encode())
    assert producer.flush(30) == 0

    ticks, err_path = tmp_path / "ticks.jsonl", tmp_path / "worker.err"
    worker = start_flowplanner(
        "run",
        "--config",
        str(config),
        "--input",
        f"kafka://{kafka_bootstrap}/{events_topic}",
        "--output",
        f"virtual+kafka://{kafka_bootstrap}/{decisions}?acks={acks}",
        "--metrics-port",
        "0",
        "--ticks",
        str(ticks),
        "--dead-letters",
        str(tmp_path / "dead.jsonl"),
        "-w",
        str(workers),
        stderr=err_path,
    )
    try:
        port = metrics_port(worker, err_path)
        first = wait_for_decisions(kafka_bootstrap, decisions, 1)
        assert [d.decision_id for d in first] == [1]
        # the recording's last events (at +60 s) fall in the window [+60, +65), whose tick record
        # is stamped with its end: once it is written every window has ticked, the rest are held
        wait_until(
            lambda: last_tick_time(ticks) >= start + 65.0,
            "the recording's last tick",
            timeout_s=120,
        )
        assert len(list(read_decisions(kafka_bootstrap, decisions))) == 1

        done = flowplanner(
            "ack",
            "--bootstrap",
            kafka_bootstrap,
            "--topic",
            acks,
            "--deployment",
            "alpha",
            "--decision-id",
            "1",
        )
        assert done.returncode == 0, done.stderr
        both = wait_for_decisions(kafka_bootstrap, decisions, 2)
        assert [d.decision_id for d in both] == [1, 2], [
            (
                t["time"],
                t["decision"] and t["decision"]["decision_id"],
                t["diagnostics"]["load_decision_reason"],
            )
            for t in read_jsonl(ticks)
        ] + [(tmp_path / "dead.jsonl").read_text()]
        assert "until decision 1 was acknowledged" in both[1].note
        # the released decision is the newest intent, made after the first one
        assert both[1].time > both[0].time
        # the worker exports the planner's gauges and its pipeline counters
        scraped = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        text = scraped.decode()
        assert 'dynamo_planner_num_decode_replicas{deployment="alpha"} 2.0' in text
        # the recorded events and 1 acknowledgement came in from Kafka
        events_in = float(len(recording) + 1)
        assert f'flowplanner_events_in_total{{source="kafka"}} {events_in}' in text
        assert 'flowplanner_decisions_out_total{deployment="alpha"} 2.0' in text
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    err = err_path.read_text()
    assert worker.returncode == 0, err
    assert "stopped by SIGTERM" in err
    assert "panicked" not in err  # the inputs ended: the runtime did not unwind on an interrupt
