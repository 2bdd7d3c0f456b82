"""Prometheus readings in a live planner flow: a real Prometheus scrapes a frontend exporter the
test drives, and the real bytewax runtime runs the planner on one worker and on two.

A reading is taken on this host's clock. Beside forward passes stamped on receipt (ZMQ, the
setup deploy/kubernetes/flowplanner.yaml ships) the passes move event time on while its
queries run, so at the default ``allowed_lateness_seconds: 0`` every reading was dead-lettered
as late and the throughput loop never saw traffic. Without forward passes, the readings are the
deployment's only clock and must keep moving event time.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from bytewax.testing import TestingSink

from connectors.prometheus import PrometheusTrafficInput, PrometheusTrafficSource
from connectors.prometheus_api import PrometheusClient, PrometheusSettings
from connectors.zmq_publisher import FpmPublisher
from connectors.zmq_source import ZmqFpmSource
from flows.commands.run import preload
from flows.planner import PlannerSinks, build_flow
from schemas import DeadLetter, ForwardPassMetrics, PlannerConfig, TickRecord
from tests.flow.cluster import run_flow
from tests.flow.streams import DECODE_CONFIG, decode_fpm
from tests.prometheus.fleet_exporter import scraped_frontend
from tests.services.prometheus import PrometheusServer

PROFILE = Path(__file__).resolve().parents[1] / "data/profiles/h200_llama3.1-8b-fp8_tp1"
LABELS = ("llama-3", "dynamo_llama")
ISL, OSL = 3000, 150
PASS_PERIOD_S = 0.005
"""An engine's passes come every 5 ms: several are stamped while one reading's queries run."""


@pytest.fixture(scope="module")
def frontend() -> Iterator[PrometheusServer]:
    """A Prometheus scraping a frontend that serves a request every 20 ms while tests run."""
    with scraped_frontend(LABELS, 0.02, ISL, OSL) as (prometheus, _served):
        prometheus.wait_for("dynamo_frontend_requests_started_total > 0", bool)
        yield prometheus


def traffic_input(
    prometheus: PrometheusServer, deployment: str, interval_s: float, reads: int
) -> PrometheusTrafficInput:
    """The ``prometheus://`` input of ``deployment``: ``reads`` reads, the first after 0.5 s."""
    client = PrometheusClient(PrometheusSettings(endpoint=prometheus.url, timeout_s=5))
    source = PrometheusTrafficSource(
        client, deployment=deployment, model=LABELS[0], namespace="dynamo-llama", worker_suffix=None
    )
    return PrometheusTrafficInput(
        [source], interval_s, first_read_after_seconds=0.5, max_polls=reads
    )


def traffic_letters(dead: list[DeadLetter]) -> list[str]:
    return [letter.reason for letter in dead if '"type":"traffic"' in (letter.raw or "")]


def saw_the_frontend(record: TickRecord) -> bool:
    """The throughput loop of ``record``'s tick ran on a reading of the frontend's traffic."""
    diagnostics = record.diagnostics
    lengths = (diagnostics.predicted_isl, diagnostics.predicted_osl)
    decided = diagnostics.throughput_decision_reason in {"set_lower_bound", "scale"}
    return decided and lengths == pytest.approx((ISL, OSL))


@dataclass
class Engine:
    """A decode engine publishing a pass every :data:`PASS_PERIOD_S` on a thread of its own."""

    url: str
    stop: threading.Event

    @classmethod
    def start(cls) -> Engine:
        urls: queue.Queue[str] = queue.Queue()
        stop = threading.Event()

        def publish() -> None:
            with FpmPublisher("tcp://127.0.0.1:*") as publisher:  # one thread owns the socket
                urls.put(publisher.url)
                publisher.wait_for_subscribers(1, timeout=60)
                counter = 0
                while not stop.wait(PASS_PERIOD_S):
                    counter += 1
                    kv = 200_000 + 1000 * (counter % 40)
                    fpm = decode_fpm("w0", kv, kv // 2000, counter)
                    publisher.publish(ForwardPassMetrics.model_validate(fpm))

        threading.Thread(target=publish, daemon=True).start()
        return cls(urls.get(timeout=30), stop)


def test_readings_beside_passes_stamped_on_receipt_are_never_late(
    frontend: PrometheusServer, workers: int
) -> None:
    config = PlannerConfig.model_validate(
        DECODE_CONFIG
        | {
            "enable_throughput_scaling": True,
            "load_adjustment_interval_seconds": 1,
            "throughput_adjustment_interval_seconds": 2,
            "load_predictor": "constant",
        }
    )
    engine = Engine.start()
    passes = ZmqFpmSource({engine.url: ("llama", "decode")}, stop_after=1000)  # ≥ 5 s of them
    traffic = traffic_input(frontend, "llama", interval_s=2, reads=3)
    ticks: list[TickRecord] = []
    dead: list[DeadLetter] = []
    sinks = PlannerSinks(ticks=[TestingSink(ticks)], dead_letters=[TestingSink(dead)])
    try:
        run_flow(build_flow({"llama": config}, [passes, traffic], sinks, live=True), workers)
    finally:
        engine.stop.set()

    assert traffic_letters(dead) == []  # before the fix, every one was late
    throughput = [r for r in ticks if r.ran_throughput]
    assert throughput, "no throughput tick"
    # the throughput loop ran on the readings (a tick whose window no read fell in has none)
    assert any(saw_the_frontend(record) for record in throughput)


def test_readings_are_the_clock_of_a_throughput_only_deployment(
    frontend: PrometheusServer, workers: int
) -> None:
    # no forward passes: the profile's bootstrap is its perf model, and each reading, ahead of
    # the one before, moves event time on and closes the window before it
    config = PlannerConfig(
        mode="decode",
        optimization_target="sla",
        enable_load_scaling=False,
        enable_throughput_scaling=True,
        throughput_adjustment_interval_seconds=1,
        load_predictor="constant",
        profile_results_dir=str(PROFILE),
    )
    bootstrap, _ = preload({"llama": config})
    # 8 reads for 2 ticks: on a loaded machine a 250 ms scrape can time out, and a read
    # right after one finds the series stale (unknown traffic: no reading, no clock)
    traffic = traffic_input(frontend, "llama", interval_s=1, reads=8)
    ticks: list[TickRecord] = []
    dead: list[DeadLetter] = []
    sinks = PlannerSinks(ticks=[TestingSink(ticks)], dead_letters=[TestingSink(dead)])

    run_flow(
        build_flow({"llama": config}, [traffic], sinks, live=True, bootstrap=bootstrap), workers
    )

    assert dead == []
    throughput = [r for r in ticks if r.ran_throughput]
    assert len(throughput) >= 2 and all(saw_the_frontend(record) for record in throughput)
