"""Failed reads are unknown traffic, never zero demand (spec §17 item 4), against real servers."""

from __future__ import annotations

import time
import uuid

from prometheus_client import REGISTRY

from connectors.prometheus import PrometheusTrafficSource
from connectors.prometheus_api import PrometheusClient, PrometheusSettings
from schemas import TrafficObservation
from tests.prometheus.fleet_exporter import FleetExporter
from tests.services.prometheus import prometheus_server

STARTED = 'dynamo_frontend_requests_started_total{model="m",dynamo_namespace="ns"}'


def unknown_count(deployment: str, reason: str) -> float:
    labels = {"deployment": deployment, "reason": reason}
    return REGISTRY.get_sample_value("flowplanner_traffic_unknown_total", labels) or 0.0


def test_a_frontend_that_stops_answering_is_unknown_not_idle() -> None:
    exporter = FleetExporter()
    exporter.started.labels("m", "ns")
    exporter.isl.labels("m", "ns")
    exporter.osl.labels("m", "ns")
    exporter.router_started.labels("ns")
    target = exporter.serve()
    try:
        with prometheus_server({"fleet": [target]}) as prometheus:
            client = PrometheusClient(PrometheusSettings(endpoint=prometheus.url, timeout_s=5))
            frontend = PrometheusTrafficSource(
                client, deployment=f"f-{uuid.uuid4().hex[:8]}", model="m", namespace="ns"
            )
            router = PrometheusTrafficSource(
                client, deployment=f"r-{uuid.uuid4().hex[:8]}", namespace="ns",
                metrics_source="router",
            )  # fmt: skip
            prometheus.wait_for_scrapes("fleet", count=4)

            # alive and quiet: a confirmed idle window, NaN lengths normalised (read at a
            # scrape that succeeded: one that timed out on a loaded machine makes it stale)
            at = prometheus.scrape_after(STARTED, since=time.time())
            assert frontend.observe(30.0, at=at) == TrafficObservation(
                duration_s=30.0, num_req=0, isl=0, osl=0
            )

            exporter.stop()
            prometheus.wait_for('up{job="fleet"}', lambda r: r and r[0]["value"][1] == "0")

            # the same window now holds only zeros from a target that stopped answering
            assert frontend.observe(30.0) is None
            assert frontend.last_unknown_reason == (
                "1 dynamo_frontend_requests_started_total series stopped being scraped "
                "within the window"
            )
            assert unknown_count(frontend.deployment, "stale_series") == 1
            assert router.observe(30.0) is None
            assert "stopped being scraped" in (router.last_unknown_reason or "")

        # Prometheus itself is gone
        assert frontend.observe(30.0) is None
        assert (frontend.last_unknown_reason or "").startswith(
            "query failed: cannot query Prometheus"
        )
        assert unknown_count(frontend.deployment, "query_failed") == 1
    finally:
        exporter.stop()
