"""The control API of a live ``flowplanner run``: limits PUT over HTTP reach the planner as
``limits`` events and hold from its next tick; a change the config would refuse is a dead
letter; the API answers what it has accepted, and refuses what it cannot use."""

from __future__ import annotations

import json
import re
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from confluent_kafka import Producer

from tests.flow.runner import read_jsonl, start_flowplanner, write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp
from tests.services.process import wait_until


def call(url: str, method: str = "GET", body: bytes | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def engines_reporting(bootstrap: str, topic: str, stop: threading.Event) -> threading.Thread:
    """Two decode engines reporting their forward passes as they happen (a ramping load)."""

    def report() -> None:
        producer = Producer({"bootstrap.servers": bootstrap})
        start = time.time()
        for event in decode_ramp("alpha", engines=2, seconds=300):
            event["time"] += start
            while not stop.is_set() and time.time() < event["time"]:
                stop.wait(0.05)
            if stop.is_set():
                break
            producer.produce(topic, key="alpha", value=json.dumps(event).encode())
            producer.poll(0)
        producer.flush(10)

    thread = threading.Thread(target=report, daemon=True)
    thread.start()
    return thread


def test_limits_put_over_http_hold_from_the_next_tick(tmp_path: Path, kafka_bootstrap, kafka_topic):
    config = write_config(tmp_path / "c.yaml", {"alpha": DECODE_CONFIG})
    stop = threading.Event()
    engines = engines_reporting(kafka_bootstrap, kafka_topic, stop)
    out, dead, err = (tmp_path / name for name in ("decisions.jsonl", "dead.jsonl", "w.err"))
    worker = start_flowplanner(
        "run",
        *("--config", str(config), "--input", f"kafka://{kafka_bootstrap}/{kafka_topic}"),
        *("--output", str(out), "--dead-letters", str(dead), "--control-port", "0"),
        stderr=err,
    )
    try:
        found = wait_until(
            lambda: re.search(r"control API on (http://127\.0\.0\.1:\d+)/", err.read_text()),
            "the control API's address",
            timeout_s=60,
        )
        api = f"{found.group(1)}/deployments"
        assert call(f"{api}/alpha/limits") == (200, {"deployment": "alpha", "limits": {}})
        assert call(f"{api}/beta/limits", "PUT", b'{"min_endpoint": 2}')[0] == 404
        assert call(f"{api}/alpha/limits", "PUT", b"{oops")[0] == 400
        status, reply = call(f"{api}/alpha/limits", "PUT", b'{"decode_min_endpoint": 0}')
        assert status == 422 and "greater than or equal to 1" in reply["error"]
        assert call(f"{api}/alpha/limits", "POST", b"{}")[0] == 405
        big = b'{"min_endpoint": 2' + b" " * 5000 + b"}"
        assert call(f"{api}/alpha/limits", "PUT", big)[0] == 413
        with socket.create_connection(("127.0.0.1", int(found.group(1).rsplit(":", 1)[1]))) as raw:
            raw.sendall(b"PUT /deployments/alpha/limits HTTP/1.1\r\nContent-Length: -1\r\n\r\n")
            assert raw.recv(100).startswith(b"HTTP/1.0 411")

        def decided(count: int) -> list[dict]:
            records = read_jsonl(out) if out.exists() else []
            return records if len(records) >= count else []

        status, reply = call(f"{api}/alpha/limits", "PUT", b'{"decode_min_endpoint": 6}')
        assert (status, reply["limits"]) == (202, {"decode_min_endpoint": 6})
        raised = wait_until(
            lambda: [d for d in decided(1) if d["num_decode"] == 6],
            "a decision at the raised floor",
            timeout_s=120,
        )
        assert raised

        status, reply = call(f"{api}/alpha/limits", "PUT", b'{"decode_min_endpoint": 20}')
        assert status == 202  # accepted for the planner, which refuses it: 20 GPUs > 16
        refused = wait_until(
            lambda: dead.exists() and [d for d in read_jsonl(dead) if d["source"] == "limits"],
            "the refused limits' dead letter",
            timeout_s=60,
        )
        assert "max_gpu_budget 16 is below the 20 GPUs" in refused[0]["reason"]
        assert call(f"{api}/alpha/limits")[1]["limits"] == {"decode_min_endpoint": 20}
    finally:
        stop.set()
        engines.join(timeout=15)
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    assert worker.returncode == 0, err.read_text()
    assert all(d["num_decode"] != 20 for d in read_jsonl(out))
