"""PrometheusTrafficSource against a real Prometheus scraping a fleet exporter the test drives.

Values are exact: counters start at 0 in the window and the queries are evaluated at the time
of the newest scrape, so Prometheus' ``increase()`` extrapolates nothing (spec §10.2 queries).
"""

from __future__ import annotations

import socket
import statistics
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink, TestingSource
from prometheus_client import REGISTRY

from connectors.prometheus import PrometheusTrafficInput, PrometheusTrafficSource
from connectors.prometheus_api import PrometheusClient, PrometheusSettings
from schemas import PlannerConfig, TrafficEvent, TrafficObservation
from tests.flow.cluster import run_flow
from tests.prometheus.fleet_exporter import FleetExporter
from tests.services.prometheus import PrometheusServer, prometheus_server

WINDOW_S = 600.0  # reaches back before the exporter started: every series begins at 0

LLAMA_ISL = [3000, 2000, 5000, 1000]
LLAMA_OSL = [150, 250, 100, 300]
FALLBACK_ISL = [700, 900]
FALLBACK_OSL = [40, 60]
ROUTER_ISL = [1200, 1800, 2400]
ROUTER_OSL = [80, 120, 160]


@dataclass
class Fleet:
    exporter: FleetExporter
    prometheus: PrometheusServer
    at: float  # time of the newest scrape

    def source(self, **kwargs: object) -> PrometheusTrafficSource:
        client = PrometheusClient(PrometheusSettings(endpoint=self.prometheus.url, timeout_s=5))
        kwargs.setdefault("deployment", f"dep-{uuid.uuid4().hex[:8]}")
        kwargs.setdefault("worker_suffix", None)
        return PrometheusTrafficSource(client, **kwargs)  # type: ignore[arg-type]


def unknown_count(deployment: str, reason: str) -> float:
    labels = {"deployment": deployment, "reason": reason}
    return REGISTRY.get_sample_value("flowplanner_traffic_unknown_total", labels) or 0.0


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    exporter = FleetExporter()
    prod = "dynamo_prod"
    series = [("Llama-3", prod), ("llama-3", prod), ("Llama-3", "staging"), ("mistral", prod)]
    series += [("idle-model", prod), ("nolengths", prod)]
    for labels in series:
        exporter.started.labels(*labels)
        exporter.completed.labels(*labels)
    for labels in [("Llama-3", prod), ("idle-model", prod), ("fallback", prod)]:
        exporter.isl.labels(*labels)
        exporter.osl.labels(*labels)
    exporter.completed.labels("fallback", prod)
    for namespace in (prod, "other"):
        exporter.router_started.labels(namespace)
        exporter.router_completed.labels(namespace)
        exporter.router_isl.labels(namespace)
        exporter.router_osl.labels(namespace)
    exporter.router_completed.labels("legacy_ns")
    exporter.router_isl.labels("legacy_ns")
    exporter.router_osl.labels("legacy_ns")
    exporter.kv_hit_rate.labels(prod)
    exporter.kv_hit_rate.labels("dynamo_prod_abc123")
    target = exporter.serve()
    try:
        # 1 s scrapes (and timeouts): the bytewax input reads at now, and a read right after
        # a scrape that timed out on a loaded machine finds the series stale
        with prometheus_server({"fleet": [target]}, "1s") as prometheus:
            prometheus.wait_for_scrapes("fleet", count=2)  # zeros are in the TSDB first

            exporter.started.labels("Llama-3", prod).inc(30)
            exporter.completed.labels("Llama-3", prod).inc(28)
            exporter.started.labels("llama-3", prod).inc(10)  # same model, other spelling
            exporter.started.labels("Llama-3", "staging").inc(100)  # other namespace
            exporter.started.labels("mistral", prod).inc(50)  # other model
            exporter.started.labels("nolengths", prod).inc(5)
            exporter.completed.labels("fallback", prod).inc(7)
            for isl, osl in zip(LLAMA_ISL, LLAMA_OSL, strict=True):
                exporter.isl.labels("Llama-3", prod).observe(isl)
                exporter.osl.labels("Llama-3", prod).observe(osl)
            for isl, osl in zip(FALLBACK_ISL, FALLBACK_OSL, strict=True):
                exporter.isl.labels("fallback", prod).observe(isl)
                exporter.osl.labels("fallback", prod).observe(osl)
            exporter.router_started.labels(prod).inc(12)
            exporter.router_completed.labels(prod).inc(11)
            exporter.router_started.labels("other").inc(99)
            exporter.router_completed.labels("legacy_ns").inc(4)
            for _ in range(4):
                exporter.router_isl.labels("legacy_ns").observe(1000)
                exporter.router_osl.labels("legacy_ns").observe(50)
            for isl, osl in zip(ROUTER_ISL, ROUTER_OSL, strict=True):
                exporter.router_isl.labels(prod).observe(isl)
                exporter.router_osl.labels(prod).observe(osl)
            for rate in (0.25, 0.5, 0.75):
                exporter.kv_hit_rate.labels(prod).observe(rate)  # mean 0.5
            for rate in (0.2, 0.3):
                exporter.kv_hit_rate.labels("dynamo_prod_abc123").observe(rate)  # mean 0.25

            newest = 'dynamo_component_router_kv_hit_rate_count{dynamo_namespace="dynamo_prod"}'
            at = prometheus.scrape_after(newest, since=time.time())
            yield Fleet(exporter, prometheus, at)
    finally:
        exporter.stop()


def test_frontend_traffic_counts_matching_series_only(fleet: Fleet) -> None:
    source = fleet.source(model="LLAMA-3", namespace="dynamo-prod")

    observation = source.observe(WINDOW_S, at=fleet.at)

    assert observation == TrafficObservation(
        duration_s=WINDOW_S,
        num_req=40,  # requests STARTED (offered load), both spellings of the model
        isl=statistics.mean(LLAMA_ISL),
        osl=statistics.mean(LLAMA_OSL),
        kv_hit_rate=0.5,
    )


def test_kv_hit_rate_prefers_the_worker_suffixed_namespace(fleet: Fleet) -> None:
    suffixed = fleet.source(model="Llama-3", namespace="dynamo-prod", worker_suffix="abc123")
    missing_suffix = fleet.source(model="Llama-3", namespace="dynamo-prod", worker_suffix="zzz")

    assert suffixed.observe(WINDOW_S, at=fleet.at).kv_hit_rate == 0.25
    assert missing_suffix.observe(WINDOW_S, at=fleet.at).kv_hit_rate == 0.5  # base namespace
    assert fleet.source(model="Llama-3", namespace="nowhere").kv_hit_rate(WINDOW_S) is None


def test_completed_requests_are_the_fallback_count(fleet: Fleet) -> None:
    observation = fleet.source(model="fallback", namespace="dynamo_prod").observe(
        WINDOW_S, at=fleet.at
    )

    assert observation is not None
    assert (observation.num_req, observation.isl, observation.osl) == (
        7,
        statistics.mean(FALLBACK_ISL),
        statistics.mean(FALLBACK_OSL),
    )


def test_an_idle_window_normalises_nan_lengths_to_zero(fleet: Fleet) -> None:
    observation = fleet.source(model="idle-model", namespace="dynamo-prod").observe(
        WINDOW_S, at=fleet.at
    )

    assert observation is not None
    assert (observation.num_req, observation.isl, observation.osl) == (0, 0, 0)


def test_requests_without_lengths_are_unknown_not_zero(fleet: Fleet) -> None:
    source = fleet.source(model="nolengths", namespace="dynamo-prod")

    assert source.observe(WINDOW_S, at=fleet.at) is None
    assert source.last_unknown_reason == "ISL is missing while 5 requests arrived"
    assert unknown_count(source.deployment, "lengths_unknown") == 1


def test_no_matching_series_is_unknown_not_zero_demand(fleet: Fleet) -> None:
    source = fleet.source(model="ghost", namespace="dynamo-prod")

    assert source.observe(WINDOW_S, at=fleet.at) is None
    assert source.last_unknown_reason == "no dynamo_frontend request counter series match"
    assert unknown_count(source.deployment, "no_data") == 1


def test_router_source_reads_by_namespace(fleet: Fleet) -> None:
    router = fleet.source(namespace="dynamo-prod", metrics_source="router")
    legacy = fleet.source(namespace="legacy-ns", metrics_source="router")

    observation = router.observe(WINDOW_S, at=fleet.at)

    assert observation == TrafficObservation(
        duration_s=WINDOW_S,
        num_req=12,
        isl=statistics.mean(ROUTER_ISL),
        osl=statistics.mean(ROUTER_OSL),
        kv_hit_rate=0.5,
    )
    fallback = legacy.observe(WINDOW_S, at=fleet.at)
    assert fallback is not None  # only requests_total exists there
    assert (fallback.num_req, fallback.isl, fallback.osl) == (4, 1000, 50)


def test_from_config_uses_the_metrics_source_setting(fleet: Fleet) -> None:
    config = PlannerConfig(throughput_metrics_source="router")
    client = PrometheusClient(PrometheusSettings(endpoint=fleet.prometheus.url))
    source = PrometheusTrafficSource.from_config(
        "d", config, model=None, namespace="dynamo-prod", client=client
    )
    assert source.observe(WINDOW_S, at=fleet.at).num_req == 12


def test_the_bytewax_input_polls_and_yields_traffic_events(fleet: Fleet, workers: int) -> None:
    good = fleet.source(model="Llama-3", namespace="dynamo-prod")
    ghost = fleet.source(model="ghost", namespace="dynamo-prod")
    out: list[TrafficEvent] = []
    flow = Dataflow("traffic_input_test")
    traffic = PrometheusTrafficInput(
        [good, ghost], interval_seconds=WINDOW_S, first_read_after_seconds=0, max_polls=1
    )
    op.output("out", op.input("traffic", flow, traffic), TestingSink(out))
    before = time.time()

    run_flow(flow, workers)

    assert [e.deployment for e in out] == [good.deployment]  # the ghost's read is unknown
    # read at "now", a little after the newest scrape: increase() extrapolates the count upward
    assert out[0].payload.num_req >= 40
    assert out[0].payload.isl == pytest.approx(statistics.mean(LLAMA_ISL))
    assert before <= out[0].time <= time.time()
    assert out[0].payload.duration_s == WINDOW_S
    assert unknown_count(ghost.deployment, "no_data") == 1


def test_a_prometheus_that_does_not_answer_is_reported_at_start(caplog) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
    client = PrometheusClient(PrometheusSettings(endpoint=endpoint, timeout_s=2.0))
    source = PrometheusTrafficSource(client, deployment="llama")
    traffic = PrometheusTrafficInput([source], interval_seconds=180)
    traffic.build_part("traffic", "llama", None)  # what bytewax does when the flow starts
    traffic.probes[endpoint].result(timeout=30)  # the probe runs in the background
    assert f"llama: Prometheus at {endpoint} does not answer" in caplog.text
    assert "first read in 180 s" in caplog.text


PROBE_TIMEOUT_S = 4.0


def test_the_startup_probe_runs_once_per_endpoint_and_holds_up_no_input(
    caplog: pytest.LogCaptureFixture, workers: int
) -> None:
    """A Prometheus that accepts connections and never answers (a blackholed one) used to be
    probed once per deployment, in series, inside build_part: the flow's other inputs waited
    deployments × the request timeout for their first item."""
    with socket.socket() as hole:  # connections are accepted (backlog), never answered
        hole.bind(("127.0.0.1", 0))
        hole.listen(16)
        endpoint = f"http://127.0.0.1:{hole.getsockname()[1]}"
        settings = PrometheusSettings(endpoint=endpoint, timeout_s=PROBE_TIMEOUT_S)
        sources = [
            PrometheusTrafficSource(PrometheusClient(settings), deployment=f"d{i}")
            for i in range(6)
        ]
        traffic = PrometheusTrafficInput(sources, interval_seconds=3600, max_polls=0)
        first_item: list[float] = []
        flow = Dataflow("traffic_startup_probe_test")
        other = op.input("other", flow, TestingSource([1]))
        merged = op.merge("merged", other, op.input("traffic", flow, traffic))
        op.inspect("first", merged, lambda _step, _item: first_item.append(time.time()))
        op.output("out", merged, TestingSink([]))

        run_flow(flow, workers)
        [probe] = traffic.probes.values()
        probe.result(timeout=60)

    warnings = [r for r in caplog.records if "does not answer" in r.getMessage()]
    [warning] = warnings  # one probe for the six deployments: one warning naming them all
    assert warning.getMessage().startswith(
        f"d0, d1, d2, d3, d4, d5: Prometheus at {endpoint} does not answer"
    )
    assert "took longer than 4 s" in warning.getMessage()
    assert first_item[0] < warning.created  # the other input did not wait for the probe
