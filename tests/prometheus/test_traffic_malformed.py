"""Malformed Prometheus answers are unknown traffic with a reason, never an exception or zero.

A real HTTP server (stdlib ``http.server`` on a loopback port) answers the Prometheus query API
with crafted bodies a real Prometheus would not produce — a truncated body, a broken status line,
responses of the wrong shape, a request count that is NaN, infinite or negative — which is what a
proxy, a half-dead sidecar or a buggy federation layer can put in front of the planner. After
each bad answer a good one must give an observation again.
"""

from __future__ import annotations

import json
import logging
import queue
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink
from prometheus_client import REGISTRY

from connectors.http_deadline import Deadline
from connectors.prometheus import PrometheusTrafficInput, PrometheusTrafficSource
from connectors.prometheus_api import PrometheusClient, PrometheusSettings
from schemas import TrafficEvent, TrafficObservation
from tests.flow.cluster import run_flow

LABELS = {"model": "llama", "dynamo_namespace": "ns"}
TRUNCATED = "truncated"  # headers promise 1000 bytes, the body stops after 15
BAD_STATUS_LINE = "bad status line"  # not HTTP at all
TRICKLED_BODY = "trickled body"  # a good answer, one byte of its body every TRICKLE_S
TRICKLED_HEADERS = "trickled headers"  # the same, one byte of its headers every TRICKLE_S
TRICKLE_S = 0.3

Answer = tuple[int, object] | str
Responder = Callable[[str], Answer]


def vector(*samples: tuple[object, object]) -> dict[str, object]:
    result = [{"metric": metric, "value": [1000.0, value]} for metric, value in samples]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def frontend(num_req: object = "10", isl_sum: str = "10000", osl_sum: str = "1000") -> Responder:
    """A frontend with ``num_req`` started requests whose 10 finished ones have these length
    sums (by default: mean ISL 1000 and OSL 100)."""

    def answer(promql: str) -> Answer:
        if "timestamp(" in promql:  # the coverage check: the series is held from the start
            return 200, vector((LABELS, "1"))
        if "unless" in promql:  # the stale-series check: none went stale
            return 200, vector()
        if "requests_started_total" in promql:
            return 200, vector((LABELS, num_req))
        for name, total in (
            ("input_sequence_tokens", isl_sum),
            ("output_sequence_tokens", osl_sum),
        ):
            if f"{name}_sum" in promql:
                return 200, vector((LABELS, total))
            if f"{name}_count" in promql:
                return 200, vector((LABELS, "10"))
        return 200, vector()  # no KV hit rate series

    return answer


GOOD = TrafficObservation(duration_s=60.0, num_req=10, isl=1000, osl=100)


def first_query(bad: Answer) -> Responder:
    """The request-count query gets ``bad``; every other query a good frontend answer."""
    good = frontend()

    def answer(promql: str) -> Answer:
        is_count = "requests_started_total" in promql and "unless" not in promql
        return bad if is_count else good(promql)

    return answer


PROMETHEUS_TIME = (
    200,
    {"status": "success", "data": {"resultType": "scalar", "result": [1000, "1000"]}},
)
"""What a Prometheus answers ``time()`` with (at 1000 s: the time the tests read at)."""


class CraftedPrometheus:
    """A loopback HTTP server answering ``/api/v1/query`` with whatever ``responder`` says,
    and ``time()`` (a read's first query, when it is not given a time) with ``time_answer``."""

    def __init__(self) -> None:
        self.responder: Responder = frontend()
        self.time_answer: Answer = PROMETHEUS_TIME
        # one (bytes written before the client hung up, bytes of the whole trickled answer)
        # per trickled answer, put when it ends
        self.trickled: queue.Queue[tuple[int, int]] = queue.Queue()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                promql = query["query"][0]
                answer = server.time_answer if promql == "time()" else server.responder(promql)
                self.close_connection = True
                if answer == BAD_STATUS_LINE:
                    self.wfile.write(b"garbage, not HTTP\r\n\r\n")
                    return
                if answer in (TRICKLED_BODY, TRICKLED_HEADERS):
                    self.trickle(answer == TRICKLED_HEADERS)
                    return
                if answer == TRUNCATED:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "1000")
                    self.end_headers()
                    self.wfile.write(b'{"status":"succ')
                    return
                status, body = answer
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def trickle(self, headers_too: bool) -> None:
                data = json.dumps(vector((LABELS, "10"))).encode()
                head = (
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(data)
                )
                if not headers_too:
                    self.wfile.write(head)
                    head = b""
                trickled = head + data
                written = 0
                try:
                    for i in range(len(trickled)):
                        self.wfile.write(trickled[i : i + 1])
                        self.wfile.flush()
                        written += 1
                        time.sleep(TRICKLE_S)
                except OSError:  # the client gave up
                    pass
                server.trickled.put((written, len(trickled)))

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self._thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self._thread.join()


@pytest.fixture(scope="module")
def prometheus() -> Iterator[CraftedPrometheus]:
    server = CraftedPrometheus()
    try:
        yield server
    finally:
        server.stop()


def new_source(prometheus: CraftedPrometheus) -> PrometheusTrafficSource:
    client = PrometheusClient(PrometheusSettings(endpoint=prometheus.url, timeout_s=5))
    return PrometheusTrafficSource(
        client,
        deployment=f"dep-{uuid.uuid4().hex[:8]}",
        model="llama",
        namespace="ns",
        worker_suffix=None,
    )


def unknown_count(deployment: str, reason: str) -> float:
    labels = {"deployment": deployment, "reason": reason}
    return REGISTRY.get_sample_value("flowplanner_traffic_unknown_total", labels) or 0.0


NULL_DATA = {"status": "success", "data": None}
NO_RESULT = {"status": "success", "data": {"resultType": "vector"}}
NO_VALUE = {"status": "success", "data": {"resultType": "vector", "result": [{"metric": LABELS}]}}
NO_METRIC = {"status": "success", "data": {"resultType": "vector", "result": [{"value": [0, "1"]}]}}

BAD_ANSWERS = {
    "truncated body": (first_query(TRUNCATED), "query_failed", "IncompleteRead"),
    "bad status line": (first_query(BAD_STATUS_LINE), "query_failed", "BadStatusLine"),
    "data null": (first_query((200, NULL_DATA)), "query_failed", "data is None"),
    "no result": (first_query((200, NO_RESULT)), "query_failed", "vector result is None"),
    "no value": (first_query((200, NO_VALUE)), "query_failed", "sample value is None"),
    "no metric": (first_query((200, NO_METRIC)), "query_failed", "sample labels are None"),
    "value not a number": (frontend(num_req="abc"), "query_failed", "'abc' is not a number"),
    "null model label": (
        first_query((200, vector(({"model": None, "dynamo_namespace": "ns"}, "3")))),
        "query_failed",
        "label 'model' is None, not a string",
    ),
    "length query truncated": (
        lambda q: TRUNCATED if "output_sequence_tokens_count" in q else frontend()(q),
        "query_failed",
        "IncompleteRead",
    ),
    "count NaN": (frontend(num_req="NaN"), "bad_count", "request count is NaN, not a count"),
    "count +Inf": (frontend(num_req="+Inf"), "bad_count", "request count is +Inf, not a count"),
    "count negative": (frontend(num_req="-5"), "bad_count", "request count is -5, not a count"),
    # well-formed numbers no real fleet reports: a histogram sum that went down, absurd sizes
    "negative ISL": (frontend(isl_sum="-10000"), "bad_length", "ISL is -1000, not a length"),
    "negative OSL": (frontend(osl_sum="-5"), "bad_length", "OSL is -0.5, not a length"),
    "huge ISL": (frontend(isl_sum="1e300"), "implausible", "isl = 1e+299 is implausible"),
    "huge count": (frontend(num_req="1e300"), "implausible", "num_req = 1e+300 over duration_s"),
    "integer beyond a float": (
        first_query((200, vector((LABELS, 10**400)))),  # a JSON number, not a string
        "query_failed",
        "is not a number (too large for a float)",
    ),
}


@pytest.mark.parametrize("case", list(BAD_ANSWERS))
def test_a_malformed_answer_is_unknown_with_a_reason_then_a_good_one_reads_again(
    prometheus: CraftedPrometheus, case: str
) -> None:
    responder, reason, explanation = BAD_ANSWERS[case]
    source = new_source(prometheus)
    source.last_unknown_reason = "an older reason"

    prometheus.responder = responder
    assert source.observe(60.0, at=1000.0) is None
    assert unknown_count(source.deployment, reason) == 1
    assert source.last_unknown_reason is not None
    assert source.last_unknown_reason != "an older reason"
    assert explanation in source.last_unknown_reason

    prometheus.responder = frontend()
    assert source.observe(60.0, at=1000.0) == GOOD
    assert source.last_unknown_reason is None
    assert unknown_count(source.deployment, reason) == 1  # the good read counted nothing


ROUTER_COUNT = "sum(increase(dynamo_component_router_requests_started_total"
TWO_SERIES = vector(({"dynamo_namespace": "ns", "pod": "a"}, "5"), ({"pod": "b"}, "500"))


def router(two_series_in: str) -> Responder:
    """A router of 10 requests (mean ISL 1000, OSL 100, KV hit rate 0.5, accept length 2)
    whose queries containing ``two_series_in`` answer two series, where an aggregation
    without ``by`` has one."""

    def answer(promql: str) -> Answer:
        if two_series_in in promql:
            return 200, TWO_SERIES
        if "timestamp(" in promql:  # the coverage checks: held from the window's start
            return 200, vector(({}, "1"))
        if "unless" in promql:  # the stale-series checks: none went stale
            return 200, vector()
        for part, value in (
            (ROUTER_COUNT, "10"),
            ("input_sequence_tokens_sum", "10000"),
            ("output_sequence_tokens_sum", "1000"),
            ("kv_hit_rate_sum", "5"),
            ("_count", "10"),
            ("spec_decode", "2"),  # vllm: 1 + accepted / drafts
        ):
            if part in promql:
                return 200, vector(({}, value))
        return 200, vector()

    return answer


def new_router_source(prometheus: CraftedPrometheus) -> PrometheusTrafficSource:
    source = new_source(prometheus)
    source.metrics_source = "router"
    source.spec_decode_backend = "vllm"
    return source


@pytest.mark.parametrize(
    "query",
    [ROUTER_COUNT, "unless", "input_sequence_tokens_sum", "output_sequence_tokens_count"],
    ids=["request count", "stale series", "ISL sum", "OSL count"],
)
def test_several_series_for_one_sum_are_malformed_not_the_first_one(
    prometheus: CraftedPrometheus, query: str
) -> None:
    """Several series answering a query that aggregates into one used to read as the first."""
    source = new_router_source(prometheus)
    prometheus.responder = router(two_series_in=query)

    assert source.observe(60.0, at=1000.0) is None

    assert unknown_count(source.deployment, "query_failed") == 1
    assert "malformed response: 2 series" in (source.last_unknown_reason or "")
    prometheus.responder = router(two_series_in="no query")
    good = TrafficObservation(
        duration_s=60.0, num_req=10, isl=1000, osl=100, kv_hit_rate=0.5, accept_length=2
    )
    assert source.observe(60.0, at=1000.0) == good


@pytest.mark.parametrize(
    "query", ["kv_hit_rate_sum", "spec_decode_num_drafts"], ids=["hit rate", "accept length"]
)
def test_several_series_leave_the_hit_rate_or_accept_length_unknown(
    prometheus: CraftedPrometheus, query: str
) -> None:
    source = new_router_source(prometheus)
    prometheus.responder = router(two_series_in=query)

    observation = source.observe(60.0, at=1000.0)

    assert observation is not None and observation.num_req == 10
    unknown = observation.kv_hit_rate if "kv" in query else observation.accept_length
    assert unknown is None


@pytest.mark.parametrize(
    "answer", [(200, vector()), (200, vector((LABELS, "NaN")))], ids=["no sample", "NaN"]
)
def test_a_read_without_a_prometheus_time_is_unknown(
    prometheus: CraftedPrometheus, answer: Answer
) -> None:
    source = new_source(prometheus)
    prometheus.responder = frontend()
    prometheus.time_answer = answer
    try:
        assert source.observe(60.0) is None
    finally:
        prometheus.time_answer = PROMETHEUS_TIME

    assert unknown_count(source.deployment, "query_failed") == 1
    assert "query 'time()': malformed response" in (source.last_unknown_reason or "")
    assert source.observe(60.0) == GOOD


def test_an_idle_window_still_reads_zero_with_nan_lengths(prometheus: CraftedPrometheus) -> None:
    def idle(promql: str) -> Answer:
        if "timestamp(" in promql:
            return 200, vector((LABELS, "1"))
        if "unless" in promql:
            return 200, vector()
        if "_sum" in promql or "_count" in promql or "requests_started_total" in promql:
            return 200, vector((LABELS, "0"))
        return 200, vector()

    source = new_source(prometheus)
    prometheus.responder = idle
    assert source.observe(60.0, at=1000.0) == TrafficObservation(
        duration_s=60.0, num_req=0, isl=0, osl=0
    )
    assert source.last_unknown_reason is None


def test_the_bytewax_input_counts_a_truncated_answer_as_unknown(
    prometheus: CraftedPrometheus, workers: int
) -> None:
    source = new_source(prometheus)
    source.last_unknown_reason = "an older reason"
    prometheus.responder = first_query(TRUNCATED)
    out: list[TrafficEvent] = []
    flow = Dataflow("traffic_malformed_test")
    traffic = PrometheusTrafficInput(
        [source], interval_seconds=60.0, first_read_after_seconds=0, max_polls=1
    )
    op.output("out", op.input("traffic", flow, traffic), TestingSink(out))

    run_flow(flow, workers)

    assert out == []
    assert unknown_count(source.deployment, "query_failed") == 1
    assert "IncompleteRead" in (source.last_unknown_reason or "")


@pytest.mark.parametrize("trickled", [TRICKLED_BODY, TRICKLED_HEADERS])
def test_an_answer_trickling_in_is_cut_off_at_the_request_timeout(
    prometheus: CraftedPrometheus, trickled: str
) -> None:
    """The timeout bounds the whole request, not each socket read: an endpoint (or proxy)
    sending a byte every 0.3 s used to hold a query with a 1 s timeout for as long as it
    trickled, the traffic poller with it."""
    source = new_source(prometheus)
    source.client = PrometheusClient(PrometheusSettings(endpoint=prometheus.url, timeout_s=1))
    prometheus.responder = first_query(trickled)

    assert source.observe(60.0, at=1000.0) is None

    assert unknown_count(source.deployment, "query_failed") == 1
    assert "took longer than 1 s" in (source.last_unknown_reason or "")
    # the server stops trickling at its first write after the client hung up (a second or so)
    written, whole = prometheus.trickled.get(timeout=30)
    assert written < whole / 2  # a generous ceiling: cut off, not read to the end

    prometheus.responder = frontend()  # the next query gets a fresh deadline
    assert source.observe(60.0, at=1000.0) == GOOD


def test_a_request_failing_as_its_deadline_passes_was_cut_off_by_it() -> None:
    """A socket timeout set to the time left fires as the deadline does, often before the
    timer thread runs: such a failure read as "TimeoutError: timed out" instead of "took
    longer than 4 s" (CI, the start-up probe of a blackholed Prometheus)."""
    deadline = Deadline(0.02)
    deadline._timer.cancel()  # its thread not yet scheduled when the socket timeout fires
    time.sleep(0.03)
    deadline.cancel()  # the request is over
    assert deadline.expired
    deadline = Deadline(60.0)
    deadline.cancel()
    assert not deadline.expired


def test_the_startup_probe_reports_an_integer_beyond_a_float(
    prometheus: CraftedPrometheus, caplog: pytest.LogCaptureFixture
) -> None:
    """The start-up probe catches PrometheusQueryError only: the value too large for a float
    (an OverflowError before) must be one, or it would not be reported."""
    source = new_source(prometheus)
    prometheus.responder = lambda promql: (200, vector(({}, 10**400)))
    traffic = PrometheusTrafficInput([source], interval_seconds=60.0)
    with caplog.at_level(logging.WARNING, logger="connectors.prometheus"):
        partition = traffic.build_part("traffic", source.deployment, None)
        traffic.probes[prometheus.url].result(timeout=30)  # the probe runs in the background
    partition.close()
    [warning] = [r.getMessage() for r in caplog.records if source.deployment in r.getMessage()]
    assert "does not answer" in warning and "too large for a float" in warning


HUNG_READ = """
    import socket, time
    from datetime import UTC, datetime
    from connectors.prometheus import PrometheusTrafficSource, _TrafficPartition
    from connectors.prometheus_api import PrometheusClient, PrometheusSettings

    listener = socket.socket()  # accepts connections (backlog) and never answers
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    client = PrometheusClient(PrometheusSettings(endpoint=url, timeout_s=600))
    source = PrometheusTrafficSource(client, deployment="hung")
    # the partition itself, without the input's start-up probe, due to read now
    partition = _TrafficPartition(source, 60.0, time.time, None, datetime.now(UTC))
    partition.next_batch()  # the read starts, and hangs on the silent endpoint
    time.sleep(0.5)
    assert partition.next_batch() == []  # still reading
    print("read in flight", flush=True)
    partition.close()
"""


def test_a_read_hung_on_prometheus_does_not_hold_up_the_exit() -> None:
    """The reads run on a daemon thread (connectors.polling.DaemonExecutor): a plain
    ThreadPoolExecutor's thread is joined at interpreter exit, so a stop waited for the hung
    read (here up to its 600 s timeout)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(HUNG_READ)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
        timeout=120,  # far below the 600 s the hung read would hold the exit
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "read in flight\n"
