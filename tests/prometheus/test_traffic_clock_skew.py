"""A host clock ahead of Prometheus' never reads as less demand than there is.

A real Prometheus scrapes a frontend that serves requests at a steady rate; the traffic input
runs with a clock half a window ahead. The input used to evaluate its PromQL at its own clock's
time, so half the window lay in Prometheus' future, where there is no sample yet, and the
demand read about half what it was. A read now asks Prometheus its time (``time()``) and
evaluates there: the skew only shows in the reading's stamp, which stays on the input's clock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink

from connectors.prometheus import PrometheusReading, PrometheusTrafficInput, PrometheusTrafficSource
from connectors.prometheus_api import PrometheusClient, PrometheusSettings
from tests.flow.cluster import run_flow
from tests.prometheus.fleet_exporter import scraped_frontend
from tests.services.prometheus import PrometheusServer

LABELS = ("llama", "ns")
REQUEST_PERIOD_S = 0.02
WINDOW_S = 6.0
SKEW_S = WINDOW_S / 2
"""How far the input's clock is ahead of Prometheus' (and of the frontend's)."""


@dataclass
class SteadyFrontend:
    prometheus: PrometheusServer
    served: list[float]
    """Host times of the requests the frontend served so far."""

    def rate(self) -> float:
        """Requests per second the frontend served on average."""
        return (len(self.served) - 1) / (self.served[-1] - self.served[0])


@pytest.fixture(scope="module")
def frontend() -> Iterator[SteadyFrontend]:
    """A frontend serving a request every 20 ms, for more than a window before the tests."""
    scraped = scraped_frontend(LABELS, REQUEST_PERIOD_S, 1000, 100, scrape_interval="1s")
    with scraped as (prometheus, served):
        time.sleep(WINDOW_S + 2)  # a whole window of steady traffic in the TSDB
        yield SteadyFrontend(prometheus, served)


def test_a_host_clock_ahead_of_prometheus_reads_the_whole_demand(
    frontend: SteadyFrontend, workers: int
) -> None:
    client = PrometheusClient(PrometheusSettings(endpoint=frontend.prometheus.url, timeout_s=5))
    source = PrometheusTrafficSource(
        client, deployment="llama", model=LABELS[0], namespace=LABELS[1], worker_suffix=None
    )
    traffic = PrometheusTrafficInput(
        [source],
        interval_seconds=WINDOW_S,
        first_read_after_seconds=0,
        max_polls=1,
        clock=lambda: time.time() + SKEW_S,
    )
    out: list[PrometheusReading] = []
    flow = Dataflow("traffic_clock_skew_test")
    op.output("out", op.input("traffic", flow, traffic), TestingSink(out))
    before = time.time()

    run_flow(flow, workers)

    [reading] = out
    read_rate = reading.payload.num_req / reading.payload.duration_s
    # increase() extrapolates a little either way; half the window missing read about 0.5
    assert read_rate == pytest.approx(frontend.rate(), rel=0.2)
    assert before + SKEW_S <= reading.time <= time.time() + SKEW_S  # stamped on the clock
