"""A window Prometheus does not hold from its start is unknown traffic, not the part it holds.

A Prometheus that starts without its saved storage (or comes back after being away) has only
the end of the window, and ``increase()`` over it reads that end as the whole window's demand:
a second after a restart, a few percent of it. Against a real Prometheus scraping a frontend
and a router that the test drives: such a read is unknown (``partial_window``) until
Prometheus has held a whole window, while a frontend that joins within the window, beside one
held from its start, is simply counted.
"""

from __future__ import annotations

import time
import uuid

from connectors.prometheus import MetricsSource, PrometheusTrafficSource
from connectors.prometheus_api import PrometheusClient, PrometheusSettings
from tests.prometheus.fleet_exporter import FleetExporter
from tests.prometheus.test_traffic_failures import unknown_count
from tests.services.prometheus import PrometheusServer, prometheus_server

STARTED = 'dynamo_frontend_requests_started_total{model="m",dynamo_namespace="ns"}'
SCRAPE = "1s"
WINDOW_S = 4.0
"""A window of a few 1 s scrapes."""


def serve(exporter: FleetExporter, requests: int, router: bool = True) -> None:
    """``requests`` requests of 1000 / 100 tokens through the frontend (and the router)."""
    roles = [(exporter.started, exporter.completed, exporter.isl, exporter.osl, ("m", "ns"))]
    if router:
        roles.append((exporter.router_started, exporter.router_completed, exporter.router_isl,
                      exporter.router_osl, ("ns",)))  # fmt: skip
    for started, completed, isl, osl, labels in roles:
        started.labels(*labels).inc(requests)
        completed.labels(*labels).inc(requests)
        for _ in range(requests):
            isl.labels(*labels).observe(1000)
            osl.labels(*labels).observe(100)


def sources(
    prometheus: PrometheusServer, kinds: tuple[MetricsSource, ...] = ("frontend", "router")
) -> list[PrometheusTrafficSource]:
    client = PrometheusClient(PrometheusSettings(endpoint=prometheus.url, timeout_s=5))
    tag = uuid.uuid4().hex[:8]
    return [
        PrometheusTrafficSource(
            client,
            deployment=f"{kind}-{tag}",
            model="m",
            namespace="ns",
            metrics_source=kind,
            worker_suffix=None,
        )
        for kind in kinds
    ]


def hold_a_whole_window(prometheus: PrometheusServer) -> None:
    """Wait until the last WINDOW_S seconds begin after Prometheus' second scrape."""
    prometheus.wait_for_scrapes("fleet", count=2)
    scraped = time.time()
    time.sleep(WINDOW_S + 1.0)
    assert time.time() - WINDOW_S > scraped


def test_a_prometheus_started_within_the_window_reads_unknown_until_it_holds_one() -> None:
    exporter = FleetExporter()
    serve(exporter, 5000)  # the fleet served these before this Prometheus started
    target = exporter.serve()
    try:
        with prometheus_server({"fleet": [target]}, SCRAPE) as prometheus:
            prometheus.wait_for_scrapes("fleet", count=2)
            serve(exporter, 10)
            at = prometheus.scrape_after(STARTED, since=time.time())
            raw = prometheus.scalar(f"increase({STARTED}[30s])", at)
            assert raw is not None and 10 <= raw < 100  # what it would have taken as demand

            for source in sources(prometheus):
                assert source.observe(30.0, at=at) is None, source.metrics_source
                assert "from the window's start" in (source.last_unknown_reason or "")
                assert unknown_count(source.deployment, "partial_window") == 1

            hold_a_whole_window(prometheus)
            serve(exporter, 7)
            at = prometheus.scrape_after(STARTED, since=time.time())
            for source in sources(prometheus):
                observation = source.observe(WINDOW_S, at=at)
                assert observation is not None, source.last_unknown_reason
                # increase() extrapolates back to the window's start, by up to 1.1 scrapes
                assert 7 <= observation.num_req <= 7 * WINDOW_S / (WINDOW_S - 1.1)
                assert (observation.isl, observation.osl) == (1000, 100)
    finally:
        exporter.stop()


def test_a_frontend_joining_within_the_window_is_counted_beside_one_held_from_its_start() -> None:
    held, joining = FleetExporter(), FleetExporter()
    held.started.labels("m", "ns")  # at 0 from the first scrape on
    targets = [held.serve(), joining.serve()]  # the joining one has no series yet
    try:
        with prometheus_server({"fleet": targets}, SCRAPE) as prometheus:
            hold_a_whole_window(prometheus)
            serve(joining, 30, router=False)  # served before its first scrape: not seen
            joined = f'{STARTED[:-1]},instance="{targets[1]}"}}'
            prometheus.scrape_after(joined, since=time.time())
            serve(held, 5, router=False)
            serve(joining, 2, router=False)
            at = prometheus.scrape_after(joined, since=time.time())
            prometheus.scrape_after(f'{STARTED[:-1]},instance="{targets[0]}"}}', since=at - 0.5)

            (frontend,) = sources(prometheus, ("frontend",))
            observation = frontend.observe(WINDOW_S, at=at)
            assert observation is not None, frontend.last_unknown_reason
            assert 7 <= observation.num_req < 30
    finally:
        held.stop()
        joining.stop()
