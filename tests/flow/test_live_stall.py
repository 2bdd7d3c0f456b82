"""A live worker whose host stalls after it caught up loses nothing of what queued meanwhile.

Live, the host clock moves event time on once the inputs have been quiet for five seconds. A
worker stopped for ten seconds (``SIGSTOP``: a paused VM, a throttled container) while a
producer goes on writing to the topic it follows wakes up to a host clock ten seconds on and a
topic full of events from those ten seconds: they are not late, because nobody read the topic
meanwhile, so it was never quiet (:mod:`connectors.backlog`). The worker then decides what a
replay of the topic decides.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from connectors.kafka import ensure_topic
from connectors.kafka.source import KafkaEventSource
from schemas import PlannerConfig
from tests.flow.live_run import replay
from tests.flow.runner import metrics_port, read_jsonl, start_flowplanner, write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp
from tests.services.process import wait_until

SECONDS = 35.0
"""Of forward passes, produced in real time (8 a second)."""

STALL_AT, STALL_S = 15.0, 10.0
"""When (seconds into the stream) and for how long the worker is stopped."""


def produce_in_real_time(bootstrap: str, topic: str, events: list[dict]) -> None:
    """Each event at the host time it is stamped with."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for event in events:
        time.sleep(max(0.0, event["time"] - time.time()))
        producer.produce(topic, key=event["deployment"], value=json.dumps(event).encode())
        producer.poll(0)
    assert producer.flush(30) == 0


@pytest.mark.services
def test_a_host_stall_after_catching_up_loses_nothing(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic: str
) -> None:
    ensure_topic(kafka_bootstrap, kafka_topic, partitions=1)
    config = write_config(tmp_path / "c.yaml", {"alpha": DECODE_CONFIG})
    ticks, dead, err = tmp_path / "ticks.jsonl", tmp_path / "dead.jsonl", tmp_path / "err"
    worker = start_flowplanner(
        "run",
        "--config",
        str(config),
        "--input",
        f"kafka://{kafka_bootstrap}/{kafka_topic}",
        "--output",
        str(tmp_path / "decisions.jsonl"),
        "--ticks",
        str(ticks),
        "--dead-letters",
        str(dead),
        "--metrics-port",
        "0",
        stderr=err,
    )
    try:
        metrics_port(worker, err)  # it runs and follows the (empty) topic
        start = time.time() // 5 * 5 + 5  # windows are aligned to multiples of 5 s
        events = decode_ramp("alpha", engines=2, seconds=SECONDS)
        for event in events:
            event["time"] += start
        producer = threading.Thread(
            target=produce_in_real_time, args=(kafka_bootstrap, kafka_topic, events)
        )
        producer.start()

        def last_tick() -> float:
            records = read_jsonl(ticks) if ticks.exists() else []
            return max((r["time"] for r in records), default=0.0)

        # the worker keeps up with the stream: it ticked the window before the stall
        wait_until(lambda: last_tick() >= start + STALL_AT - 5, "a live tick", timeout_s=60)
        time.sleep(max(0.0, start + STALL_AT - time.time()))
        worker.send_signal(signal.SIGSTOP)
        time.sleep(STALL_S)
        worker.send_signal(signal.SIGCONT)
        producer.join()
        # the stream's last window closes once the topic has been quiet for 5 s
        wait_until(lambda: last_tick() >= start + SECONDS + 5, "the last tick", timeout_s=60)
    finally:
        worker.send_signal(signal.SIGCONT)
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    assert worker.returncode == 0, err.read_text()

    late = [r["reason"] for r in read_jsonl(dead)] if dead.exists() else []
    assert late == []  # without the stall rule: the events of the first 5 s of the stall
    configs = {"alpha": PlannerConfig.model_validate(DECODE_CONFIG)}
    decisions, expected, _ = replay(
        configs, KafkaEventSource(kafka_bootstrap, kafka_topic, until_end=True)
    )
    assert decisions
    # the replay leaves the last window open (its input ended, event time did not)
    got = [r for r in read_jsonl(ticks) if r["time"] <= expected[-1]["time"]]
    assert got == expected
