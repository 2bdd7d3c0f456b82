"""Engines publishing FPMs over ZMQ (a separate process) → the planner flow → decisions, with
a malformed frame (dead-lettered) and a sequence gap (counted) on the way."""

from __future__ import annotations

import json
import multiprocessing as mp
import signal
import time
import urllib.request

from schemas import ForwardPassMetrics
from tests.flow.runner import read_jsonl, start_flowplanner, write_config
from tests.flow.streams import DECODE_CONFIG, decode_fpm
from tests.services.process import free_port

SECONDS = 20.0


def publish_engines(url: str) -> None:
    """Two decode engines whose KV load climbs, ten passes a second each, in real time."""
    from connectors.zmq_publisher import FpmPublisher

    publisher = FpmPublisher(url)
    assert publisher.wait_for_subscribers(1, timeout=30.0)
    start, counter, corrupted, skipped = time.time(), 0, False, False
    while (elapsed := time.time() - start) < SECONDS:
        kv = int(250_000 + 30_000 * elapsed)
        for worker in ("w0", "w1"):
            counter += 1
            publisher.publish(
                ForwardPassMetrics.model_validate(decode_fpm(worker, kv, kv // 2000, counter))
            )
        if elapsed > 3 and not corrupted:
            publisher.publish_payload(b"\xc1 not msgpack")  # a malformed frame
            corrupted = True
        if elapsed > 4 and not skipped:
            publisher.skip(5)  # five messages lost on the way
            skipped = True
        time.sleep(0.1)


def test_zmq_fpms_drive_decisions(tmp_path):
    url = f"tcp://127.0.0.1:{free_port()}"
    config = write_config(tmp_path / "c.yaml", {"alpha": DECODE_CONFIG})
    status = tmp_path / "status.jsonl"  # what the DGD would say: two ready decode engines
    status.write_text(
        json.dumps(
            {
                "type": "inventory",
                "deployment": "alpha",
                "time": time.time(),
                "payload": {"ready_num_decode": 2, "expected_num_decode": 2},
            }
        )
        + "\n"
    )
    port = free_port()
    planner = start_flowplanner(
        "run",
        "--config",
        str(config),
        "--input",
        f"zmq+{url}?deployment=alpha&role=decode",
        "--input",
        str(status),
        "--output",
        str(tmp_path / "decisions.jsonl"),
        "--dead-letters",
        str(tmp_path / "dead.jsonl"),
        "--metrics-port",
        str(port),
    )
    engines = mp.get_context("spawn").Process(target=publish_engines, args=(url,))
    engines.start()
    try:
        engines.join(timeout=90)
        time.sleep(7.0)  # the last windows close on the system clock
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    finally:
        planner.send_signal(signal.SIGTERM)
        _, err = planner.communicate(timeout=30)
        engines.kill()
    assert engines.exitcode == 0 and planner.returncode == 0, err
    decisions = read_jsonl(tmp_path / "decisions.jsonl")
    # the engines' ITL climbs past 60 ms: the planner scales decode up, from live FPMs alone
    assert any(d["reason"] == "scale_up" and d["num_decode"] > 2 for d in decisions), decisions
    (dead,) = read_jsonl(tmp_path / "dead.jsonl")
    assert dead["source"] == url and dead["deployment"] == "alpha"
    assert dead["reason"].startswith("undecodable FPM payload (not msgpack)"), dead
    text = metrics.decode()
    assert f'flowplanner_fpm_sequence_gaps_total{{endpoint="{url}"}} 5.0' in text
