"""Speculative-decoding accept length from a real Prometheus (spec §10.2, §5.5).

Engine metrics are served by an exporter the test drives; values are exact because the
queries run at the time of the newest scrape over a window reaching back before the exporter
started (counters start at 0, gauges hold one value throughout).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from connectors.prometheus import PrometheusTrafficSource
from connectors.prometheus_api import PrometheusClient, PrometheusSettings
from tests.services.prometheus import PrometheusServer, prometheus_server

WINDOW_S = 600.0
ENGINE = ["dynamo_namespace", "dynamo_endpoint", "model", "worker_id"]


@dataclass
class Engines:
    prometheus: PrometheusServer
    at: float

    def source(self, **kwargs: object) -> PrometheusTrafficSource:
        client = PrometheusClient(PrometheusSettings(endpoint=self.prometheus.url, timeout_s=5))
        kwargs.setdefault("deployment", f"dep-{uuid.uuid4().hex[:8]}")
        kwargs.setdefault("worker_suffix", None)
        return PrometheusTrafficSource(client, **kwargs)  # type: ignore[arg-type]


def serve_text_format(registry: CollectorRegistry) -> ThreadingHTTPServer:
    """Serve ``registry`` in the classic text format only, as vLLM and SGLang do: the client's
    OpenMetrics output (which Prometheus would negotiate) spells ``vllm:x`` as ``vllm_x``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def engines() -> Iterator[Engines]:
    registry = CollectorRegistry()
    accepted = Counter("vllm:spec_decode_num_accepted_tokens", "", ENGINE, registry=registry)
    drafts = Counter("vllm:spec_decode_num_drafts", "", ENGINE, registry=registry)
    sglang = Gauge("sglang:spec_accept_length", "", ENGINE, registry=registry)
    frontend = Counter("dynamo_frontend_requests_started", "", ["model", "dynamo_namespace"],
                       registry=registry)  # fmt: skip
    frontend.labels("m", "ns")
    # gauges hold their value from the first scrape on: the average over time is exact
    sglang.labels("ns", "generate", "m", "w1").set(3.0)
    sglang.labels("ns", "generate", "m", "w2").set(2.0)
    sglang.labels("ns", "clear_kv_blocks", "m", "w1").set(9.0)  # another endpoint: ignored
    sglang.labels("other", "generate", "m", "w1").set(5.0)  # another namespace: ignored
    for labels in (("ns", "generate", "m", "w1"), ("ns", "generate", "m", "w2")):
        accepted.labels(*labels)
        drafts.labels(*labels)
    accepted.labels("other", "generate", "m", "w1")
    drafts.labels("other", "generate", "m", "w1")
    httpd = serve_text_format(registry)
    try:
        target = f"127.0.0.1:{httpd.server_address[1]}"
        with prometheus_server({"engines": [target]}) as prometheus:
            prometheus.wait_for_scrapes("engines", count=2)  # zeros are in the TSDB first
            accepted.labels("ns", "generate", "m", "w1").inc(30)
            drafts.labels("ns", "generate", "m", "w1").inc(20)
            accepted.labels("ns", "generate", "m", "w2").inc(15)
            drafts.labels("ns", "generate", "m", "w2").inc(10)  # ns: 1 + 45/30 = 2.5
            accepted.labels("other", "generate", "m", "w1").inc(1)
            drafts.labels("other", "generate", "m", "w1").inc(100)
            newest = (
                'vllm:spec_decode_num_drafts_total{dynamo_namespace="ns",worker_id="w2",'
                'dynamo_endpoint="generate"}'
            )
            yield Engines(prometheus, prometheus.scrape_after(newest, since=time.time()))
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_vllm_accept_length_is_one_plus_accepted_per_draft(engines: Engines) -> None:
    source = engines.source(namespace="ns", model="m", spec_decode_backend="vllm")
    assert source.accept_length(WINDOW_S, at=engines.at) == 2.5
    observation = source.observe(WINDOW_S, at=engines.at)
    assert observation is not None and observation.accept_length == 2.5
    assert (observation.num_req, observation.isl, observation.osl) == (0, 0, 0)  # idle frontend


def test_sglang_accept_length_averages_the_generate_endpoints(engines: Engines) -> None:
    source = engines.source(namespace="ns", spec_decode_backend="sglang")
    assert source.accept_length(WINDOW_S, at=engines.at) == 2.5


def test_accept_length_is_unknown_without_a_backend_or_series(engines: Engines) -> None:
    assert engines.source(namespace="ns").accept_length(WINDOW_S, at=engines.at) is None
    assert engines.source(namespace="ns", model="m").observe(
        WINDOW_S, at=engines.at
    ).accept_length is None  # fmt: skip
    for backend in ("vllm", "sglang", "trtllm"):  # trtllm: no series at all
        ghost = engines.source(namespace="ghost", spec_decode_backend=backend)
        assert ghost.accept_length(WINDOW_S, at=engines.at) is None, backend
