"""An operator's live run: a slow poller among the inputs must not stall the whole dataflow.

bytewax only starts a new epoch (10 s in ``flowplanner run``) once every input partition has
been scheduled again, so a partition that asks to sleep until its next poll — the Prometheus
traffic input's first read is one throughput interval (180 s) away, the DGD inventory poll 10 s
— held every other input back: FPMs stopped being read and the planner stopped ticking after
the first epoch, silently, at 100 % CPU, until the poller woke up.
"""

from __future__ import annotations

import itertools
import json
import signal
import threading
import time
from pathlib import Path

from connectors.zmq_publisher import FpmPublisher
from schemas import ForwardPassMetrics
from tests.flow.runner import read_jsonl, start_flowplanner, write_config
from tests.flow.streams import DECODE_CONFIG, decode_fpm
from tests.kube.apiserver import ApiServer
from tests.kube.conftest import api_client, create_dgd, register_dgd_crd
from tests.services.prometheus import prometheus_server

EPOCH_S = 10.0
"""bytewax's default epoch interval, which ``flowplanner run`` keeps."""
PAST_TWO_EPOCHS_S = 2.5 * EPOCH_S
DEADLINE_S = 180.0
"""For the planner to start and tick over two epochs: generous, for a loaded machine (a passing
run ends as soon as the ticks span two epochs; a stalled input shows as a gap, not as time)."""
MAX_GAP_S = 5.0
"""Windows are 1 s and the engine publishes ten passes a second: every window has data."""


def publish_decode_load(publisher: FpmPublisher, stop: threading.Event) -> None:
    """One decode engine, ten forward passes a second, until ``stop``."""
    with publisher:
        publisher.wait_for_subscribers(1, timeout=DEADLINE_S)  # the planner is starting
        counter = 0
        while not stop.is_set():
            counter += 1
            fpm = decode_fpm("w0", 300_000, 150, counter)
            publisher.publish(ForwardPassMetrics.model_validate(fpm))
            time.sleep(0.1)


def tick_times(ticks: Path) -> list[float]:
    """Event times of the ticks written so far."""
    if not ticks.exists():
        return []
    return [json.loads(line)["time"] for line in ticks.read_text().splitlines() if line.strip()]


def tick_span(ticks: Path) -> float:
    """Event seconds between the first and the last tick written so far."""
    times = tick_times(ticks)
    return max(times) - min(times) if times else 0.0


def longest_gap(ticks: Path) -> float:
    """Longest event-time gap between consecutive ticks: FPMs are stamped when they are read,
    and a window without data does not tick, so a stalled input shows as a gap."""
    times = sorted(tick_times(ticks))
    return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


def test_planner_keeps_ticking_while_the_traffic_poller_waits(tmp_path):
    config = write_config(
        tmp_path / "c.yaml",
        {
            "alpha": {
                **DECODE_CONFIG,
                "enable_throughput_scaling": True,
                "load_adjustment_interval_seconds": 1,
                "throughput_adjustment_interval_seconds": 180,  # the first read: 180 s away
            }
        },
    )
    inventory = tmp_path / "inventory.jsonl"
    inventory.write_text(
        json.dumps(
            {
                "type": "inventory",
                "deployment": "alpha",
                "time": time.time(),
                "payload": {"ready_num_decode": 1, "expected_num_decode": 1},
            }
        )
        + "\n"
    )
    # What Prometheus holds does not matter here (the first read is 180 s away), so it scrapes
    # nothing, and the planner serves its metrics on a port it picks itself.
    with prometheus_server({}) as prometheus:
        traffic = f"prometheus://{prometheus.url.removeprefix('http://')}?deployment=alpha"
        span, gap, err = run_live(tmp_path, config, "--input", traffic, "--input", str(inventory))
    assert span >= PAST_TWO_EPOCHS_S and gap <= MAX_GAP_S, err


def run_live(tmp_path: Path, config: Path, *args: str) -> tuple[float, float, str]:
    """Run the planner on one live decode engine (+ ``args``) until its ticks span two epochs
    of event time (or the deadline); returns that span, the longest gap between ticks and
    a message naming them and the last tick."""
    ticks = tmp_path / "ticks.jsonl"
    stop = threading.Event()
    # bound before the planner starts (a port picked now and bound later may be taken by then)
    publisher = FpmPublisher("tcp://127.0.0.1:*")
    url = publisher.url
    engine = threading.Thread(target=publish_decode_load, args=(publisher, stop), daemon=True)
    planner = start_flowplanner(
        "run",
        "--config",
        str(config),
        "--input",
        f"zmq+{url}?deployment=alpha&role=decode",
        *args,
        "--ticks",
        str(ticks),
        "--output",
        str(tmp_path / "decisions.jsonl"),
        "--metrics-port",
        "0",  # a port the planner picks: one picked here could be taken before it binds it
    )
    engine.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while tick_span(ticks) < PAST_TWO_EPOCHS_S and time.monotonic() < deadline:
            if planner.poll() is not None:
                break
            time.sleep(0.5)
    finally:
        stop.set()
        planner.send_signal(signal.SIGTERM)
        _, err = planner.communicate(timeout=30)
        engine.join(timeout=10)
    assert planner.returncode == 0, err
    span, gap = tick_span(ticks), longest_gap(ticks)
    last = read_jsonl(ticks)[-1] if ticks.exists() else None
    return span, gap, f"ticks over {span:g} s of event time, longest gap {gap:g} s; last: {last}"


def test_planner_keeps_ticking_between_slow_dgd_inventory_polls(tmp_path):
    config = write_config(
        tmp_path / "c.yaml",
        {
            "alpha": {
                **DECODE_CONFIG,
                "mode": "disagg",
                "ttft_ms": 500,
                "load_adjustment_interval_seconds": 1,
            }
        },
    )
    with ApiServer() as server:
        client = api_client(server.url)
        register_dgd_crd(client)
        dgd = create_dgd(server, client)
        target = f"dgd://{dgd.namespace}/{dgd.name}?deployment=alpha&host={server.url}&interval=30"
        try:
            span, gap, err = run_live(tmp_path, config, "--output", target)
        finally:
            client.close()
    assert span >= PAST_TWO_EPOCHS_S and gap <= MAX_GAP_S, err
    # the status was read back at start and still is every 30 s: the inventory is known
    assert any(t["ready_decode"] == 1 for t in read_jsonl(tmp_path / "ticks.jsonl"))
