"""The DGD sink and inventory source inside real bytewax runs (1 worker and a 2-worker
cluster), against the test API server."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSource
from prometheus_client import REGISTRY

from connectors.dgd import ApplyResult, DgdActuator, DgdValidationError
from connectors.dgd_api import kube_api_client
from connectors.dgd_dataflow import DgdInventorySource, DgdSink, parse_dgd_target
from flows.endpoints import wire
from schemas import DeadLetter, PlannerConfig, TickRecord, WorkerCounts
from tests.decisions import decision
from tests.flow.cluster import run_flow

from .conftest import DgdFixture, create_dgd, load_fixture, poll_inventory

pytestmark = pytest.mark.services


def factory(dgd: DgdFixture, **options: Any) -> Callable[[], DgdActuator]:
    def build() -> DgdActuator:
        return DgdActuator(
            kube_api_client(dgd.server.url),
            dgd.namespace,
            dgd.name,
            sleep=lambda s: None,
            **options,
        )

    return build


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_sink_applies_decisions_in_a_dataflow(dgd: DgdFixture, workers: int):
    results: list[ApplyResult] = []
    flow = Dataflow("dgd_sink")
    ticks = [
        TickRecord(deployment="llama", time=1.0, decision=decision(decision_id=1, num_decode=2))
    ]
    decisions = op.input("ticks", flow, TestingSource(ticks))
    op.output("dgd", decisions, DgdSink(factory(dgd), on_result=results.append))
    before = counter("flowplanner_dgd_actions_total", dgd="dynamo/vllm-disagg", outcome="applied")
    run_flow(flow, workers)
    assert [(r.decision_id, r.outcome) for r in results] == [(1, "applied")]
    assert dgd.get()["spec"]["services"]["VllmDecodeWorker"]["replicas"] == 2
    after = counter("flowplanner_dgd_actions_total", dgd="dynamo/vllm-disagg", outcome="applied")
    assert after == before + 1
    validation_reads = [r for r in dgd.server.requests if r.method == "GET"]
    assert len(validation_reads) == workers + 1  # each worker validates; one read per apply


def test_sink_applies_only_the_newest_decision_of_a_batch(dgd: DgdFixture):
    results: list[ApplyResult] = []
    sink = DgdSink(factory(dgd), deployment="llama", on_result=results.append)
    partition = sink.build("dgd", 0, 1)
    dead_before = counter("flowplanner_dead_letters_total", kind="dgd_sink")
    partition.write_batch(
        [
            TickRecord(deployment="llama", time=1.0),  # no decision: passed over
            DeadLetter(source="x", reason="bad"),  # not for this sink: passed over
            decision(decision_id=3, num_decode=3),
            ("llama", decision(decision_id=4, num_decode=4)),  # keyed items are accepted too
            decision(decision_id=2, num_decode=2),
            decision(decision_id=9, num_decode=9, deployment="someone-else"),
            "not a decision",
        ]
    )
    partition.close()  # applies what is queued on the applier thread
    assert [(r.decision_id, r.outcome) for r in results] == [
        (3, "superseded"),
        (2, "superseded"),
        (4, "applied"),
    ]
    # "not a decision" only: another deployment's decision is another sink's to apply
    assert counter("flowplanner_dead_letters_total", kind="dgd_sink") == dead_before + 1
    [patch] = dgd.patches()
    assert patch.body["spec"] == {"services": {"VllmDecodeWorker": {"replicas": 4}}}


def test_two_deployments_each_scale_their_own_dgd(dgd: DgdFixture, workers: int):
    """Every actuator output sees every deployment's decisions (flows/planner.py); each
    ``dgd://`` output applies its own deployment's and passes over the rest: valid decisions,
    not dead letters."""
    body = load_fixture("dgd_disagg.yaml")
    body["metadata"]["name"] = "mistral"
    other = create_dgd(dgd.server, dgd.client, body)
    host = dgd.server.url
    wiring = wire(
        [],
        [
            f"dgd://dynamo/vllm-disagg?deployment=llama&host={host}",
            f"dgd://dynamo/mistral?deployment=mistral&host={host}",
        ],
        {"llama": PlannerConfig(), "mistral": PlannerConfig()},
    )
    flow = Dataflow("two_dgds")
    decisions = op.input(
        "decisions",
        flow,
        TestingSource(
            [
                decision(deployment="llama", decision_id=1, num_decode=2),
                decision(deployment="mistral", decision_id=1, num_decode=3),
            ]
        ),
    )
    for i, sink in enumerate(wiring.actuators):
        op.output(f"dgd_{i}", decisions, sink)
    dead_before = counter("flowplanner_dead_letters_total", kind="dgd_sink")
    run_flow(flow, workers)
    replicas = [d.get()["spec"]["services"]["VllmDecodeWorker"]["replicas"] for d in (dgd, other)]
    assert replicas == [2, 3]
    assert counter("flowplanner_dead_letters_total", kind="dgd_sink") == dead_before


def test_sink_stops_the_dataflow_when_the_dgd_is_missing(dgd: DgdFixture, workers: int):
    flow = Dataflow("dgd_sink_missing")
    decisions = op.input("decisions", flow, TestingSource([decision(decision_id=1, num_decode=2)]))
    missing = lambda: DgdActuator(kube_api_client(dgd.server.url), dgd.namespace, "nope")  # noqa: E731
    op.output("dgd", decisions, DgdSink(missing))
    with pytest.raises(Exception) as err:
        run_flow(flow, workers)
    chain, exc = [], err.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert any(
        isinstance(e, DgdValidationError) and "dynamo/nope not found" in str(e) for e in chain
    )
    assert dgd.patches() == []


def test_inventory_source_polls_the_dgd(dgd: DgdFixture, workers: int):
    gets = itertools.count(1)

    def scale_up_before_second_poll(method: str, path: str) -> None:
        # GET 1 is the start-up validation, GETs 2.. are the polls.
        if method == "GET" and path == dgd.path and next(gets) == 3:
            body = json.dumps({"spec": {"services": {"VllmDecodeWorker": {"replicas": 2}}}})
            dgd.server.handle(
                "PATCH",
                path,
                {"content-type": "application/merge-patch+json"},
                body.encode(),
                client=False,
            )

    dgd.server.before_request(scale_up_before_second_poll)
    events = poll_inventory(factory(dgd), workers)

    assert [(e.deployment, e.time) for e in events] == [
        ("llama", 100.0),
        ("llama", 110.0),
        ("llama", 120.0),
    ]
    steady = WorkerCounts(
        ready_num_prefill=1, ready_num_decode=1, expected_num_prefill=1, expected_num_decode=1
    )
    rolling = steady.model_copy(
        update={"expected_num_decode": 2, "decode_scaling_in_progress": True}
    )
    assert [e.payload for e in events] == [steady, rolling, rolling]


def test_inventory_source_skips_a_failed_poll(dgd: DgdFixture, workers: int):
    gets = itertools.count(1)

    def fail_second_poll(method: str, path: str) -> None:
        if method == "GET" and path == dgd.path and next(gets) == 3:
            dgd.server.inject(dgd.path, 500, method="GET")

    dgd.server.before_request(fail_second_poll)
    errors_before = counter("flowplanner_dgd_read_errors_total", dgd="dynamo/vllm-disagg")
    events = poll_inventory(factory(dgd), workers)
    assert [e.time for e in events] == [100.0, 110.0]  # the failed poll yielded nothing
    assert all(e.payload.ready_num_decode == 1 for e in events)
    errors_after = counter("flowplanner_dgd_read_errors_total", dgd="dynamo/vllm-disagg")
    assert errors_after == errors_before + 1


def test_targets_build_actuators_from_the_url(dgd: DgdFixture):
    assert parse_dgd_target("dgd://dynamo/vllm-disagg") == ("dynamo", "vllm-disagg")
    with pytest.raises(ValueError, match="expected dgd://<namespace>/<name>"):
        parse_dgd_target("kafka://x")
    sink = DgdSink.from_target(
        "dgd://dynamo/vllm-disagg", host=dgd.server.url, mode="disagg", backend="vllm"
    )
    actuator = sink.actuator_factory()
    assert (actuator.namespace, actuator.name) == ("dynamo", "vllm-disagg")
    source = DgdInventorySource.from_target(
        "dgd://dynamo/vllm-disagg", "llama", host=dgd.server.url
    )
    assert source.actuator_factory().validate()["prefill"] == "VllmPrefillWorker"
