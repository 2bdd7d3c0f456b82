"""Engines publishing FPMs over ZMQ (a separate process) → the planner flow → decisions, with
a malformed frame (dead-lettered) and a sequence gap (counted) on the way."""

from __future__ import annotations

import json
import multiprocessing as mp
import signal
import time
import urllib.request
from multiprocessing.queues import Queue

from schemas import ForwardPassMetrics
from tests.flow.runner import metrics_port, read_jsonl, start_flowplanner, write_config
from tests.flow.streams import DECODE_CONFIG, decode_fpm
from tests.services.process import wait_until

SECONDS = 20.0


def publish_engines(urls: Queue) -> None:
    """Two decode engines whose KV load climbs, ten passes a second each, in real time; the URL
    they publish on (a free port picked as they bind it) goes to ``urls``."""
    from connectors.zmq_publisher import FpmPublisher

    publisher = FpmPublisher("tcp://127.0.0.1:*")
    urls.put(publisher.url)
    assert publisher.wait_for_subscribers(1, timeout=120.0)  # the planner process is starting
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


def lines_of(path) -> list[dict]:
    """The JSON lines a sink has written so far (none before it creates the file)."""
    return read_jsonl(path) if path.exists() else []


def scrape_with(port: int, line: str) -> str:
    """The exporter's page if it shows ``line``, else an empty string."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return text if line in text else ""


def test_zmq_fpms_drive_decisions(tmp_path, workers):
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
    # Ports are bound by whoever picks them (the engines, the planner's exporter) and passed on:
    # a port picked by the test and bound later by another process may be taken in between.
    spawn = mp.get_context("spawn")
    urls = spawn.Queue()
    engines = spawn.Process(target=publish_engines, args=(urls,))
    engines.start()
    decisions_file, dead_file = tmp_path / "decisions.jsonl", tmp_path / "dead.jsonl"
    err_path, planner = tmp_path / "planner.err", None
    try:
        url = urls.get(timeout=120)
        gaps = f'flowplanner_fpm_sequence_gaps_total{{endpoint="{url}"}}'
        planner = start_flowplanner(
            "run",
            "--config",
            str(config),
            "--input",
            f"zmq+{url}?deployment=alpha&role=decode",
            "--input",
            str(status),
            "--output",
            str(decisions_file),
            "--dead-letters",
            str(dead_file),
            "--metrics-port",
            "0",
            "-w",
            str(workers),
            stderr=err_path,
        )
        port = metrics_port(planner, err_path)
        engines.join(timeout=180)  # for the planner to subscribe (120 s), then 20 s of passes
        assert engines.exitcode == 0, f"the engines ended with {engines.exitcode}"
        # windows close on the system clock: wait for what is asserted below, not a fixed time
        wait_until(
            lambda: any(d["reason"] == "scale_up" for d in lines_of(decisions_file)),
            "a scale-up decision",
        )
        wait_until(lambda: lines_of(dead_file), "the malformed frame's dead letter")
        text = wait_until(lambda: scrape_with(port, gaps), "the gap counter")
    finally:
        if planner is not None:
            planner.send_signal(signal.SIGTERM)
            planner.communicate(timeout=30)
        engines.kill()
    err = err_path.read_text()
    assert engines.exitcode == 0 and planner.returncode == 0, err
    decisions = read_jsonl(decisions_file)
    # the engines' ITL climbs past 60 ms: the planner scales decode up, from live FPMs alone
    assert any(d["reason"] == "scale_up" and d["num_decode"] > 2 for d in decisions), decisions
    (dead,) = read_jsonl(dead_file)
    assert dead["source"] == url and dead["deployment"] == "alpha"
    assert dead["reason"].startswith("undecodable FPM payload (not msgpack)"), dead
    assert f"{gaps} 5.0" in text
