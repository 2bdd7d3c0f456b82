"""Each deployment's event time holds for the whole run: an event stamped far ahead is refused
rather than making every later event late, and after a quiet spell (when bytewax forgets a
deployment's closed windows) an old event is still late — the planner never ticks backwards."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.flow.runner import flowplanner, read_jsonl, start_flowplanner, write_config
from tests.flow.streams import DECODE_CONFIG, decode_fpm
from tests.services.process import wait_until

EXAMPLE = Path(__file__).parents[2] / "examples"


def run(tmp_path: Path, stream: Path, tag: str) -> tuple[list[dict], list[dict]]:
    decisions, dead = tmp_path / f"{tag}.out", tmp_path / f"{tag}.dead"
    done = flowplanner(
        "run",
        *("--config", str(EXAMPLE / "decode.yaml"), "--input", str(stream)),
        *("--output", str(decisions), "--dead-letters", str(dead)),
    )
    assert done.returncode == 0, done.stderr
    return read_jsonl(decisions), read_jsonl(dead) if dead.exists() else []


def test_an_event_stamped_far_ahead_is_refused_and_changes_nothing(tmp_path):
    lines = (EXAMPLE / "decode_burst.jsonl").read_text().splitlines()
    clean, dead = run(tmp_path, EXAMPLE / "decode_burst.jsonl", "clean")
    assert clean and dead == []
    poison = json.loads(lines[len(lines) // 2]) | {"time": 9e10}
    poisoned = tmp_path / "poisoned.jsonl"
    lines.insert(len(lines) // 2, json.dumps(poison))
    poisoned.write_text("\n".join(lines) + "\n")

    decisions, dead = run(tmp_path, poisoned, "poisoned")
    assert decisions == clean
    [letter] = dead
    assert letter["reason"].startswith("ahead: event time 90000000000.0 is more than")


def fpm_event(counter: int, at: float) -> bytes:
    kv = 200_000 + 1000 * (counter % 40)
    fpm = decode_fpm("w0", kv, kv // 2000, counter)
    event = {
        "type": "fpm",
        "deployment": "llama",
        "time": at,
        "payload": {"role": "decode", "fpm": fpm},
    }
    return json.dumps(event).encode()


@pytest.mark.services
def test_after_a_quiet_spell_an_old_event_is_late(tmp_path, kafka_bootstrap, kafka_topic):
    config = write_config(tmp_path / "c.yaml", {"llama": DECODE_CONFIG})
    ticks, dead = tmp_path / "ticks.jsonl", tmp_path / "dead.jsonl"
    planner = start_flowplanner(
        "run",
        *("--config", str(config), "--input", f"kafka://{kafka_bootstrap}/{kafka_topic}"),
        *("--ticks", str(ticks), "--dead-letters", str(dead)),
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap})

    def send(counter: int, at: float) -> None:
        producer.produce(kafka_topic, key="llama", value=fpm_event(counter, at))
        assert producer.flush(10) == 0

    try:
        for counter in range(1, 9):
            send(counter, time.time())
            time.sleep(0.25)
        last = time.time()
        # quiet until the host clock has closed every window of those events
        wait_until(
            lambda: ticks.exists() and any(t["time"] > last for t in read_jsonl(ticks)),
            "the windows of the first events to close",
            timeout_s=120,
        )
        old = last - 60.0
        send(100, old)
        send(101, time.time())
        wait_until(lambda: dead.exists() and dead.read_text(), "a dead letter", timeout_s=120)
    finally:
        planner.send_signal(signal.SIGTERM)
        _, err = planner.communicate(timeout=30)
    assert planner.returncode == 0, err
    [letter] = read_jsonl(dead)
    assert letter["reason"] == f"late: event time {old} is behind the planner's watermark"
    times = [t["time"] for t in read_jsonl(ticks)]
    assert times == sorted(set(times))  # never backwards, never twice
