"""Services with a DGD Scaling Adapter (``scalingAdapter: {enabled: true}``) are scaled through
the adapter's Scale subresource, strictly (reference spec §11.1, path 1); the others keep the
DGD merge patch (path 2). Against the test API server, which serves the DGDSA CRD with its
scale subresource, and the simulated operator, which makes the adapters and copies their
replicas into the DGD."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from connectors.dgd import LAST_DECISION_ANNOTATION, DgdActuator
from connectors.dgd_api import kube_api_client
from tests.decisions import decision

from .apiserver import MERGE_PATCH, ApiServer
from .conftest import DgdFixture, Sleeps, create_dgd, load_fixture, register_dgdsa_crd

pytestmark = pytest.mark.services

DECODE_ADAPTER = "vllm-disagg-vllmdecodeworker"
PREFILL_ADAPTER = "vllm-disagg-vllmprefillworker"
ADAPTERS = "/apis/nvidia.com/v1alpha1/namespaces/dynamo/dynamographdeploymentscalingadapters"


def scale_path(adapter: str) -> str:
    return f"{ADAPTERS}/{adapter}/scale"


def manifest(*adapted: str) -> dict[str, Any]:
    """The vLLM disagg DGD with a scaling adapter declared on the ``adapted`` services."""
    body = load_fixture("dgd_disagg.yaml")
    for service in adapted:
        body["spec"]["services"][service]["scalingAdapter"] = {"enabled": True}
    return body


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def adapted(apiserver: ApiServer, kube: k8s.ApiClient, dgdsa_crd: None) -> Iterator[DgdFixture]:
    """The disagg DGD whose decode worker has a scaling adapter (made by the operator)."""
    fixture = create_dgd(apiserver, kube, manifest("VllmDecodeWorker"), adapters=True)
    yield fixture
    fixture.operator.stop()


@pytest.fixture
def make_actuator(apiserver: ApiServer, sleeps: Sleeps) -> Callable[..., DgdActuator]:
    def make(**options: Any) -> DgdActuator:
        return DgdActuator(
            kube_api_client(apiserver.url), "dynamo", "vllm-disagg", sleep=sleeps, **options
        )

    return make


def requests(server: ApiServer) -> list[tuple[str, str, int]]:
    """``(method, path, status)`` of the requests received, paths shortened to their last two
    segments (``dynamographdeployments/vllm-disagg``, ``<adapter>/scale``)."""
    return [(r.method, "/".join(r.path.split("/")[-2:]), r.status) for r in server.requests]


def adapter(server: ApiServer, name: str = DECODE_ADAPTER) -> dict[str, Any]:
    return server.read(f"{ADAPTERS}/{name}")


def spec_replicas(dgd: DgdFixture) -> dict[str, int]:
    return {name: svc["replicas"] for name, svc in dgd.get()["spec"]["services"].items()}


def test_a_service_with_an_adapter_is_scaled_through_its_scale_subresource(
    adapted: DgdFixture, make_actuator
):
    server = adapted.server
    before = adapter(server)["metadata"]["resourceVersion"]
    result = make_actuator().apply(decision(decision_id=1, num_decode=3))

    assert (result.outcome, result.patch, result.attempts) == (
        "applied",
        {"VllmDecodeWorker": 3},
        2,
    )
    assert result.reason == f"VllmDecodeWorker 1 → 3 (through scaling adapter {DECODE_ADAPTER})"
    assert requests(server) == [
        ("GET", "dynamographdeployments/vllm-disagg", 200),  # validate
        ("GET", "dynamographdeployments/vllm-disagg", 200),
        ("GET", f"{DECODE_ADAPTER}/scale", 200),
        ("PATCH", "dynamographdeployments/vllm-disagg", 200),
        ("PATCH", f"{DECODE_ADAPTER}/scale", 200),
    ]
    dgd_patch, scale_patch = [r for r in server.requests if r.method == "PATCH"]
    assert "spec" not in dgd_patch.body  # the DGD patch leaves the adapter's replicas alone
    assert LAST_DECISION_ANNOTATION in dgd_patch.body["metadata"]["annotations"]
    assert scale_patch.content_type == MERGE_PATCH
    assert scale_patch.body == {"metadata": {"resourceVersion": before}, "spec": {"replicas": 3}}
    assert adapter(server)["spec"]["replicas"] == 3
    assert spec_replicas(adapted)["VllmDecodeWorker"] == 3  # the operator copied it
    mark = json.loads(adapted.get()["metadata"]["annotations"][LAST_DECISION_ANNOTATION])
    assert (mark["decision_id"], mark["num_decode"], mark["num_prefill"]) == (1, 3, 1)


def test_services_without_an_adapter_keep_the_dgd_patch(adapted: DgdFixture, make_actuator):
    result = make_actuator().apply(decision(num_prefill=2, num_decode=4))

    assert result.outcome == "applied"
    assert result.reason == (
        "VllmDecodeWorker 1 → 4 (through scaling adapter vllm-disagg-vllmdecodeworker), "
        "VllmPrefillWorker 1 → 2"
    )
    [dgd_patch] = adapted.patches()
    assert dgd_patch.body["spec"] == {"services": {"VllmPrefillWorker": {"replicas": 2}}}
    assert all(PREFILL_ADAPTER not in r.path for r in adapted.server.requests)  # no probing
    assert spec_replicas(adapted) == {"Frontend": 1, "VllmDecodeWorker": 4, "VllmPrefillWorker": 2}


@pytest.mark.parametrize("crd", [True, False], ids=["adapter missing", "adapter CRD missing"])
def test_a_missing_adapter_fails_the_apply_with_no_fallback(
    apiserver: ApiServer, kube: k8s.ApiClient, dgd_crd: None, make_actuator, crd: bool
):
    if crd:
        register_dgdsa_crd(kube)
    dgd = create_dgd(apiserver, kube, manifest("VllmDecodeWorker"))  # no adapter controller
    result = make_actuator().apply(decision(num_decode=3))

    assert (result.outcome, result.status_code, result.attempts) == ("failed", 404, 0)
    assert result.patch == {"VllmDecodeWorker": 3}
    assert result.reason.startswith(f"read of scaling adapter dynamo/{DECODE_ADAPTER}: HTTP 404: ")
    assert result.reason.endswith(
        "(VllmDecodeWorker declares scalingAdapter.enabled, so it is scaled only through this "
        "DynamoGraphDeploymentScalingAdapter, with no fallback to the DGD; is the operator's "
        "adapter missing?)"
    )
    assert dgd.patches() == [] and spec_replicas(dgd)["VllmDecodeWorker"] == 1


def test_an_adapter_change_not_yet_in_the_dgd_holds_the_decision(
    adapted: DgdFixture, make_actuator
):
    """An HPA scaled the adapter; the operator has not copied it into the DGD yet: that change
    is in flight, and a decision made on the DGD's count must not overwrite it."""
    adapted.operator.sync_adapters = False
    k8s.CustomObjectsApi(adapted.client).patch_namespaced_custom_object_scale(
        "nvidia.com",
        "v1alpha1",
        "dynamo",
        "dynamographdeploymentscalingadapters",
        DECODE_ADAPTER,
        {"spec": {"replicas": 5}},
    )
    adapted.server.clear_requests()
    result = make_actuator().apply(decision(num_decode=3))

    assert result.outcome == "skipped_in_flight"
    assert result.reason == (
        f"adapter change not yet in the DGD: VllmDecodeWorker: its scaling adapter "
        f"{DECODE_ADAPTER} asks for 5, the DGD for 1"
    )
    assert [r.method for r in adapted.server.requests if r.method == "PATCH"] == []
    assert adapter(adapted.server)["spec"]["replicas"] == 5


def test_a_stale_adapter_scale_is_a_conflict_then_re_read(
    adapted: DgdFixture, make_actuator, sleeps
):
    """Someone writes the adapter between our read of its Scale and our patch of it: the
    Scale's resourceVersion precondition makes that a 409; the retry re-reads the Scale and
    finishes the adapter write (the DGD patch, with the annotation, is in: not sent again)."""
    server = adapted.server
    raced: list[bool] = []

    def other_writer(method: str, path: str) -> None:
        if method == "PATCH" and path == scale_path(DECODE_ADAPTER) and not raced:
            raced.append(True)
            label = json.dumps({"metadata": {"labels": {"touched": "yes"}}}).encode()
            target = f"{ADAPTERS}/{DECODE_ADAPTER}"
            server.handle("PATCH", target, {"content-type": MERGE_PATCH}, label, client=False)

    server.before_request(other_writer)
    result = make_actuator().apply(decision(num_decode=2))

    assert (result.outcome, result.attempts) == ("applied", 3)
    scale_statuses = [s for m, p, s in requests(server) if p.endswith("/scale") and m == "PATCH"]
    assert scale_statuses == [409, 200] and sleeps == [0.5]
    assert adapter(server)["spec"]["replicas"] == 2


def test_a_busy_adapter_is_retried_after_its_retry_after(
    adapted: DgdFixture, make_actuator, sleeps
):
    adapted.server.inject(scale_path(DECODE_ADAPTER), 503, method="PATCH")
    result = make_actuator().apply(decision(num_decode=2))

    assert (result.outcome, result.attempts) == ("applied", 3)  # the DGD patched once
    assert sleeps == [1.0]  # Retry-After: 1 over the first backoff's 0.5
    assert spec_replicas(adapted)["VllmDecodeWorker"] == 2


def test_a_forbidden_adapter_is_not_retried(adapted: DgdFixture, make_actuator, sleeps):
    adapted.server.inject(scale_path(DECODE_ADAPTER), 403, method="PATCH")
    result = make_actuator().apply(decision(num_decode=2))

    assert (result.outcome, result.status_code, sleeps) == ("failed", 403, [])
    assert "dynamographdeploymentscalingadapters/scale" in result.reason  # what to grant


def test_an_adapter_is_not_touched_while_the_dgd_is_not_ready(adapted: DgdFixture, make_actuator):
    adapted.operator.set_not_ready()
    adapted.server.clear_requests()
    result = make_actuator().apply(decision(num_decode=3))

    assert result.outcome == "skipped_not_ready"
    touched = [(r.method, r.path) for r in adapted.server.requests if "scalingadapters" in r.path]
    assert touched == [("GET", scale_path(DECODE_ADAPTER))]  # read (is it ahead?), not written


def test_a_lost_scale_answer_that_committed_is_applied(adapted: DgdFixture, make_actuator, sleeps):
    """The adapter's PATCH commits (and the operator copies it into the DGD) but its answer
    comes after the client's timeout: the re-read finds it in place."""
    released = threading.Event()
    server = adapted.server

    def answer_late(path: str, old: Any, new: Any) -> None:
        if path.startswith(ADAPTERS) and old and new and old["spec"] != new["spec"]:
            released.wait(10.0)  # until the actuator has given up and backs off

    def backoff(seconds: float) -> None:
        sleeps.append(seconds)
        released.set()

    server.on_write(answer_late)
    actuator = make_actuator(request_timeout_s=3.0)
    actuator.sleep = backoff
    result = actuator.apply(decision(num_decode=3))

    assert (result.outcome, result.attempts) == ("applied", 2)
    assert result.reason.startswith(
        f"VllmDecodeWorker 1 → 3 (through scaling adapter {DECODE_ADAPTER}) (the PATCH "
        "response was lost: "
    )
    assert adapter(server)["spec"]["replicas"] == 3


def scale_adapter(dgd: DgdFixture, replicas: int) -> None:
    """Scale the decode adapter as an HPA would (the operator copies it unless told not to)."""
    k8s.CustomObjectsApi(dgd.client).patch_namespaced_custom_object_scale(
        "nvidia.com",
        "v1alpha1",
        "dynamo",
        "dynamographdeploymentscalingadapters",
        DECODE_ADAPTER,
        {"spec": {"replicas": replicas}},
    )


@pytest.mark.parametrize("prefill", [2, 1], ids=["prefill changed", "equal to the DGD"])
def test_an_adapter_ahead_holds_a_decision_that_leaves_its_service_alone(
    adapted: DgdFixture, make_actuator, prefill: int
):
    """The decode adapter asks for 5, not yet copied into the DGD (decode 1): a decision
    keeping decode at the DGD's 1 would stack a change on that one (prefill changed) or
    undo it unseen (equal to the DGD: not ``no_change``, the adapter asks for 5)."""
    adapted.operator.sync_adapters = False
    scale_adapter(adapted, 5)
    result = make_actuator().apply(decision(num_prefill=prefill, num_decode=1))

    assert result.outcome == "skipped_in_flight"
    assert result.reason == (
        f"adapter change not yet in the DGD: VllmDecodeWorker: its scaling adapter "
        f"{DECODE_ADAPTER} asks for 5, the DGD for 1"
    )
    assert adapted.patches() == [] and adapter(adapted.server)["spec"]["replicas"] == 5


def test_a_decision_equal_to_the_adapters_counts_is_no_change(adapted: DgdFixture, make_actuator):
    adapted.operator.sync_adapters = False
    scale_adapter(adapted, 5)
    result = make_actuator().apply(decision(num_prefill=1, num_decode=5))

    assert result.outcome == "no_change"
    assert adapted.patches() == [] and spec_replicas(adapted)["VllmDecodeWorker"] == 1


def test_a_busy_adapter_after_the_dgd_patch_is_finished_ungated(
    adapted: DgdFixture, make_actuator, sleeps
):
    """Prefill is patched in the DGD, then the decode adapter answers 503 once: the retry
    finds the DGD rolling out this apply's own prefill change, recognises the apply by its
    decision id in the annotation, and only writes the adapter (no second DGD patch)."""
    adapted.server.inject(scale_path(DECODE_ADAPTER), 503, method="PATCH")
    result = make_actuator().apply(decision(decision_id=7, num_prefill=2, num_decode=3))

    assert (result.outcome, result.attempts, sleeps) == ("applied", 3, [1.0])
    assert result.patch == {"VllmPrefillWorker": 2, "VllmDecodeWorker": 3}
    assert len(adapted.patches()) == 1
    assert adapter(adapted.server)["spec"]["replicas"] == 3
    assert spec_replicas(adapted) == {"Frontend": 1, "VllmDecodeWorker": 3, "VllmPrefillWorker": 2}


def test_a_forbidden_adapter_after_the_dgd_patch_says_what_is_half_done(
    adapted: DgdFixture, make_actuator, sleeps
):
    adapted.server.inject(scale_path(DECODE_ADAPTER), 403, method="PATCH")
    result = make_actuator().apply(decision(decision_id=7, num_prefill=2, num_decode=3))

    assert (result.outcome, result.status_code, sleeps) == ("failed", 403, [])
    assert result.reason.startswith(f"patch of scaling adapter dynamo/{DECODE_ADAPTER}: HTTP 403")
    assert result.reason.endswith(
        f"(partly applied: written the {LAST_DECISION_ANNOTATION} annotation of decision 7, "
        "VllmPrefillWorker → 2; not written: VllmDecodeWorker → 3 through the scaling adapter)"
    )
    assert spec_replicas(adapted)["VllmPrefillWorker"] == 2
    assert adapter(adapted.server)["spec"]["replicas"] == 1


def test_an_adapter_set_by_someone_else_after_the_dgd_patch_is_not_overwritten(
    adapted: DgdFixture, make_actuator, sleeps
):
    """Between the 503 and the retry an HPA sets the adapter to 4: finishing the apply would
    overwrite that change unseen, so it fails, naming what is half-done."""
    adapted.operator.sync_adapters = False
    adapted.server.inject(scale_path(DECODE_ADAPTER), 503, method="PATCH")
    actuator = make_actuator()
    actuator.sleep = lambda seconds: scale_adapter(adapted, 4)
    result = actuator.apply(decision(decision_id=7, num_prefill=2, num_decode=3))

    assert result.outcome == "failed"
    assert result.reason.startswith(
        "VllmDecodeWorker: its scaling adapter set to 4 by someone else meanwhile (partly applied"
    )
    assert adapter(adapted.server)["spec"]["replicas"] == 4
