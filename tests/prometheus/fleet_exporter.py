"""A stand-in for a Dynamo frontend and router: their metrics, driven by the test, over HTTP.

The metric names and labels are the reference's (spec §10.1); a real Prometheus scrapes them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from tests.services.prometheus import PrometheusServer, prometheus_server

LENGTH_BUCKETS = (128, 512, 1024, 4096, 16384)
RATE_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1.0)


class FleetExporter:
    """Frontend and router metrics of a fake fleet, served on a free loopback port."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        frontend = ["model", "dynamo_namespace"]
        router = ["dynamo_namespace"]
        r = self.registry
        self.started = Counter("dynamo_frontend_requests_started", "", frontend, registry=r)
        self.completed = Counter("dynamo_frontend_requests", "", frontend, registry=r)
        self.isl = Histogram(
            "dynamo_frontend_input_sequence_tokens", "", frontend, buckets=LENGTH_BUCKETS,
            registry=r,
        )  # fmt: skip
        self.osl = Histogram(
            "dynamo_frontend_output_sequence_tokens", "", frontend, buckets=LENGTH_BUCKETS,
            registry=r,
        )  # fmt: skip
        self.router_started = Counter(
            "dynamo_component_router_requests_started", "", router, registry=r
        )
        self.router_completed = Counter("dynamo_component_router_requests", "", router, registry=r)
        self.router_isl = Histogram(
            "dynamo_component_router_input_sequence_tokens", "", router, buckets=LENGTH_BUCKETS,
            registry=r,
        )  # fmt: skip
        self.router_osl = Histogram(
            "dynamo_component_router_output_sequence_tokens", "", router, buckets=LENGTH_BUCKETS,
            registry=r,
        )  # fmt: skip
        self.kv_hit_rate = Histogram(
            "dynamo_component_router_kv_hit_rate", "", router, buckets=RATE_BUCKETS, registry=r
        )
        self._server = None

    def serve(self) -> str:
        """Start serving; returns the scrape target ``127.0.0.1:PORT``."""
        httpd, thread = start_http_server(0, addr="127.0.0.1", registry=self.registry)
        self._server = (httpd, thread)
        return f"127.0.0.1:{httpd.server_address[1]}"

    def stop(self) -> None:
        """Stop answering scrapes (the port closes)."""
        if self._server is not None:
            httpd, thread = self._server
            httpd.shutdown()
            httpd.server_close()
            thread.join(5)
            self._server = None


@contextlib.contextmanager
def scraped_frontend(
    labels: tuple[str, str],
    period_s: float,
    isl: float,
    osl: float,
    scrape_interval: str = "250ms",
) -> Iterator[tuple[PrometheusServer, list[float]]]:
    """A Prometheus scraping a frontend that serves one request (started and completed, of
    ``isl``/``osl`` tokens) every ``period_s`` on a thread from its second scrape on; yields
    the server and the host times the requests were served at (growing while the block runs).

    A scrape times out at ``scrape_interval``, and a read right after a failed one finds the
    series stale: tests that read at Prometheus' now, on a loaded machine, want 1 s.
    """
    exporter = FleetExporter()
    for metric in (exporter.started, exporter.completed, exporter.isl, exporter.osl):
        metric.labels(*labels)
    served: list[float] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.wait(period_s):
            exporter.started.labels(*labels).inc()
            exporter.completed.labels(*labels).inc()
            exporter.isl.labels(*labels).observe(isl)
            exporter.osl.labels(*labels).observe(osl)
            served.append(time.time())

    target = exporter.serve()
    thread = threading.Thread(target=serve, daemon=True)
    try:
        with prometheus_server({"frontend": [target]}, scrape_interval) as prometheus:
            prometheus.wait_for_scrapes("frontend", count=2)
            thread.start()
            yield prometheus, served
    finally:
        stop.set()
        exporter.stop()
