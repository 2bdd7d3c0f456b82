"""The DGD actuator against answers the test API server never gives: a 200 whose body is not a
DGD, a spec a schema-less CRD would let through, and a server that never answers. Served by a
scripted HTTP server (real sockets, the real ``kubernetes`` client); the well-formed DGD it
serves is the one the test API server stores."""

from __future__ import annotations

import copy
import logging
import re
from typing import Any

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSource
from prometheus_client import REGISTRY

from connectors.dgd import (
    ApplyResult,
    DgdActuator,
    DgdUnavailableError,
    DgdValidationError,
)
from connectors.dgd_api import kube_api_client
from connectors.dgd_dataflow import DgdSink
from tests.decisions import decision
from tests.flow.cluster import run_flow
from tests.services.process import wait_until

from .conftest import DgdFixture, Sleeps, poll_inventory
from .scripted_server import HANG, Reply, ScriptedServer

pytestmark = pytest.mark.services


def actuator(server: ScriptedServer, **options: Any) -> DgdActuator:
    options.setdefault("sleep", Sleeps())
    return DgdActuator(
        kube_api_client(server.url), "dynamo", "vllm-disagg", mode="disagg", **options
    )


def with_changes(dgd: dict[str, Any], **paths: Any) -> dict[str, Any]:
    """A copy of ``dgd`` with ``a__b__c=value`` set (``value`` ``DELETE``: removed)."""
    out = copy.deepcopy(dgd)
    for path, value in paths.items():
        *parents, last = path.split("__")
        node = out
        for key in parents:
            node = node[key]
        if value == "DELETE":
            del node[last]
        else:
            node[last] = value
    return out


def malformed_replies(good: dict[str, Any]) -> dict[str, Reply]:
    return {
        "html page": Reply(200, b"<html>502 Bad Gateway</html>", "text/html"),
        "html labelled json": Reply(200, b"<html>502 Bad Gateway</html>"),
        "not utf-8": Reply(200, b"\xff\xfe{}"),
        "json list": Reply.json([good]),
        "no resourceVersion": Reply.json(with_changes(good, metadata__resourceVersion="DELETE")),
        "metadata null": Reply.json(with_changes(good, metadata=None)),
    }


MALFORMED = list(malformed_replies({"metadata": {"resourceVersion": "1"}}))


@pytest.mark.parametrize("kind", MALFORMED)
def test_malformed_dgd_reads_are_unavailable_not_crashes(dgd: DgdFixture, kind: str):
    good = dgd.get()
    bad = malformed_replies(good)[kind]
    sleeps = Sleeps()
    with ScriptedServer(Reply.json(good), default=bad) as server:
        planner = actuator(server, sleep=sleeps, max_attempts=3)
        assert planner.validate()["decode"] == "VllmDecodeWorker"  # the first, good read

        with pytest.raises(DgdUnavailableError, match="malformed response"):
            planner.read_inventory(retry=False)

        result = planner.apply(decision(num_decode=2))
        assert result.outcome == "failed" and "malformed response" in result.reason
        assert result.attempts == 0 and sleeps == [0.5, 1.0]  # three reads, no PATCH
        assert [m for m, _ in server.requests].count("PATCH") == 0

        with pytest.raises(DgdValidationError, match="malformed response"):
            actuator(server, max_attempts=1).validate()


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_inventory_source_skips_a_malformed_poll(dgd: DgdFixture, workers: int):
    good = dgd.get()
    html = Reply(200, b"<html>proxy error</html>", "text/html")
    errors_before = counter("flowplanner_dgd_read_errors_total", dgd="dynamo/vllm-disagg")
    with ScriptedServer(Reply.json(good), Reply.json(good), html, default=Reply.json(good)) as srv:
        events = poll_inventory(lambda: actuator(srv), workers)
    assert len(srv.requests) == 4  # the validation and three polls
    assert [e.time for e in events] == [100.0, 110.0]  # the malformed poll yielded nothing
    assert all(e.payload.expected_num_decode == 1 for e in events)
    errors_after = counter("flowplanner_dgd_read_errors_total", dgd="dynamo/vllm-disagg")
    assert errors_after == errors_before + 1


def sink_result(server: ScriptedServer, workers: int) -> ApplyResult:
    """The one result of a DGD sink flow that applies one decision against ``server``, which
    must not have been patched."""
    results: list[ApplyResult] = []
    flow = Dataflow("dgd_sink_one_decision")
    decisions = op.input("decisions", flow, TestingSource([decision(decision_id=1, num_decode=2)]))
    op.output("dgd", decisions, DgdSink(lambda: actuator(server), on_result=results.append))
    run_flow(flow, workers)
    assert "PATCH" not in [m for m, _ in server.requests]
    [result] = results
    return result


def test_sink_reports_a_malformed_read_as_failed(dgd: DgdFixture, workers: int):
    good = dgd.get()
    html = Reply(200, b"<html>proxy error</html>", "text/html")
    # each worker builds its sink partition, and each validates the DGD with one read
    with ScriptedServer(*[Reply.json(good)] * workers, default=html) as server:
        result = sink_result(server, workers)
    assert result.outcome == "failed" and "malformed response" in result.reason


def test_a_hung_read_is_sent_once_per_actuator_attempt(dgd: DgdFixture):
    """urllib3 retries connecting only: a read timeout goes back to the actuator, whose own
    bounded loop (``max_attempts``, with backoff) is the only retry of a request that
    reached the server. (The read timeout and the whole-request deadline end at the same
    time here: either may report it.)"""
    sleeps = Sleeps()
    timed_out = "timed out|cut off after 2 s"
    with ScriptedServer(Reply.json(dgd.get()), default=HANG) as server:
        # (2 s: the validation must be answered within it on a loaded machine)
        planner = actuator(server, sleep=sleeps, request_timeout_s=2.0, max_attempts=2)
        planner.validate()
        with pytest.raises(DgdUnavailableError, match=timed_out):
            planner.read_inventory(retry=False)
        assert len(server.requests) == 2  # the validation, and one poll
        result = planner.apply(decision(num_decode=2))
        assert result.outcome == "failed" and re.search(timed_out, result.reason)
        # the server records a request once its thread has read it
        wait_until(lambda: len(server.requests) >= 4, "the fourth request", timeout_s=30)
        assert len(server.requests) == 4 and sleeps == [0.5]


def test_non_integer_replicas_fail_the_apply_and_leave_inventory_unknown(dgd: DgdFixture, caplog):
    text = with_changes(dgd.get(), spec__services__VllmDecodeWorker__replicas="1")
    with ScriptedServer(default=Reply.json(text)) as server:
        planner = actuator(server)
        result = planner.apply(decision(num_decode=2))
        assert result.outcome == "failed"
        assert result.reason == "VllmDecodeWorker: spec replicas '1' is not a non-negative integer"
        with caplog.at_level(logging.WARNING, logger="connectors.dgd"):
            counts = planner.read_inventory()
        assert counts.expected_num_decode is None and counts.decode_scaling_in_progress
        assert counts.expected_num_prefill == 1 and not counts.prefill_scaling_in_progress
        assert "expected replicas unknown" in caplog.text
        assert "'1' is not a non-negative integer" in caplog.text


def test_null_spec_leaves_expected_replicas_unknown(dgd: DgdFixture):
    good = dgd.get()
    with ScriptedServer(Reply.json(good), default=Reply.json(with_changes(good, spec=None))) as srv:
        planner = actuator(srv)
        planner.validate()
        counts = planner.read_inventory()
        assert (counts.expected_num_prefill, counts.expected_num_decode) == (None, None)
        assert counts.ready_num_decode == 1 and counts.decode_scaling_in_progress
        result = planner.apply(decision(num_decode=2))
        assert result.outcome == "failed"
        assert result.reason == (
            "service(s) VllmPrefillWorker, VllmDecodeWorker no longer in the DGD"
        )


def malformed_statuses(good: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """DGDs whose status a schema-less CRD (or a broken controller) would let through."""
    conditions = good["status"]["conditions"]
    ready_true = [dict(c, status=True) if c["type"] == "Ready" else c for c in conditions]
    return {
        "conditions int": with_changes(good, status__conditions=5),
        "conditions true": with_changes(good, status__conditions=True),
        "conditions mapping": with_changes(good, status__conditions={"type": "Ready"}),
        "conditions of strings": with_changes(good, status__conditions=["Ready", 1]),
        "status list": with_changes(good, status=[1, 2]),
        "Ready status bare true": with_changes(good, status__conditions=ready_true),
    }


MALFORMED_STATUSES = list(malformed_statuses({"status": {"conditions": []}}))


@pytest.mark.parametrize("kind", MALFORMED_STATUSES)
def test_a_malformed_status_is_not_ready_and_never_raises(dgd: DgdFixture, kind: str, caplog):
    bad = malformed_statuses(dgd.get())[kind]
    with ScriptedServer(default=Reply.json(bad)) as server:
        planner = actuator(server)
        with caplog.at_level(logging.WARNING, logger="connectors.dgd"):
            result = planner.apply(decision(num_decode=2))
        assert result.outcome == "skipped_not_ready", result.reason
        assert "Ready condition is Unknown" in result.reason
        assert "malformed status" in result.reason
        assert "PATCH" not in [m for m, _ in server.requests]
    assert "malformed status, taken as not ready" in caplog.text


def test_sink_survives_a_malformed_status(dgd: DgdFixture, workers: int):
    """The apply runs on the sink's applier thread; an exception there would stop the flow."""
    bad = malformed_statuses(dgd.get())["conditions int"]
    with ScriptedServer(default=Reply.json(bad)) as server:
        result = sink_result(server, workers)
    assert result.outcome == "skipped_not_ready" and "malformed status" in result.reason
