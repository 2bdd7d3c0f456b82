"""Per-GPU power caps read from the DGD (reference spec §8.2): each worker service's
``dynamo.nvidia.com/gpu-power-limit`` pod annotation (``extraPodMetadata.annotations``).

The pure reading (:func:`connectors.dgd_graph.gpu_power_limits`) case by case, then the
inventory source in the real bytewax runtime against the test API server: the caps arrive as
:class:`schemas.CapabilitiesEvent` items beside each poll's inventory, follow an edit of the
annotation, and a malformed one is named in a warning while the run and the other role go on.
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from connectors.dgd_graph import GPU_POWER_LIMIT_ANNOTATION, gpu_power_limits
from schemas import CapabilitiesEvent, Event, InventoryEvent
from schemas.events import MAX_GPU_POWER_W

from .apiserver import ApiServer
from .conftest import DgdFixture, create_dgd, load_fixture, poll_inventory
from .test_dgd_dataflow import factory

PREFILL, DECODE = "VllmPrefillWorker", "VllmDecodeWorker"


def service(cap: Any) -> dict[str, Any]:
    return {"extraPodMetadata": {"annotations": {GPU_POWER_LIMIT_ANNOTATION: cap}}}


# ---------------------------------------------------------------- the pure reading


@pytest.mark.parametrize(
    ("value", "watts"),
    [
        ("350", 350),
        (" 700\n", 700),  # surrounding whitespace is tolerated
        ("0350", 350),
        ("1", 1),
        (str(MAX_GPU_POWER_W), MAX_GPU_POWER_W),
    ],
)
def test_a_whole_number_of_watts_is_the_cap(value: str, watts: int) -> None:
    dgd = {"spec": {"services": {"dw": service(value)}}}
    assert gpu_power_limits(dgd, {"decode": "dw"}) == ({"decode": watts}, [])


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("350W", "is not a whole number of watts"),
        ("3.5e2", "is not a whole number of watts"),
        ("350.0", "is not a whole number of watts"),
        ("-5", "is not a whole number of watts"),
        ("+5", "is not a whole number of watts"),
        ("", "is not a whole number of watts"),
        ("３５０", "is not a whole number of watts"),  # full-width digits: not ASCII
        ("3 50", "is not a whole number of watts"),
        ("0", "is below 1 W"),
        (str(MAX_GPU_POWER_W + 1), f"is above MAX_GPU_POWER_W ({MAX_GPU_POWER_W} W)"),
        ("9" * 5000, f"is above MAX_GPU_POWER_W ({MAX_GPU_POWER_W} W)"),  # no int() of it
        (350, "is not a string but int"),
        (True, "is not a string but bool"),
        (None, "is not a string but NoneType"),
    ],
)
def test_any_other_value_is_an_unknown_cap_and_a_problem(value: Any, why: str) -> None:
    dgd = {"spec": {"services": {"pw": service("400"), "dw": service(value)}}}
    caps, problems = gpu_power_limits(dgd, {"prefill": "pw", "decode": "dw"})
    assert caps == {"prefill": 400, "decode": None}  # the other role is unaffected
    [problem] = problems
    assert problem.startswith(f"dw: annotation {GPU_POWER_LIMIT_ANNOTATION} ")
    assert problem.endswith(f" {why}")
    shown = repr(value)
    assert (shown if len(shown) <= 40 else shown[:37] + "...") in problem  # bounded length


@pytest.mark.parametrize(
    "svc",
    [
        {},
        {"extraPodMetadata": {}},
        {"extraPodMetadata": {"labels": {GPU_POWER_LIMIT_ANNOTATION: "350"}}},  # a label
        {"extraPodMetadata": {"annotations": {"other": "350"}}},
        {"extraPodMetadata": None},
    ],
    ids=["no metadata", "no annotations", "a label", "another annotation", "null metadata"],
)
def test_no_annotation_is_an_unknown_cap_without_a_problem(svc: dict[str, Any]) -> None:
    dgd = {"spec": {"services": {"dw": svc}}}
    assert gpu_power_limits(dgd, {"decode": "dw"}) == ({"decode": None}, [])


def test_a_service_gone_from_the_spec_has_no_cap_and_no_power_problem() -> None:
    # (spec_problems already reports the missing service)
    assert gpu_power_limits({"spec": {"services": {}}}, {"decode": "dw"}) == ({"decode": None}, [])


# ---------------------------------------------------------------- against the API server


def with_caps(prefill: Any = None, decode: Any = None) -> dict[str, Any]:
    """The vLLM disagg DGD fixture with these annotation values (``None``: none)."""
    body = copy.deepcopy(load_fixture("dgd_disagg.yaml"))
    for name, cap in ((PREFILL, prefill), (DECODE, decode)):
        if cap is not None:
            body["spec"]["services"][name].update(service(cap))
    return body


@pytest.fixture
def make_dgd(apiserver: ApiServer, kube: k8s.ApiClient, dgd_crd: None):
    made: list[DgdFixture] = []

    def make(manifest: dict[str, Any]) -> DgdFixture:
        fixture = create_dgd(apiserver, kube, manifest)
        made.append(fixture)
        return fixture

    yield make
    for fixture in made:
        fixture.operator.stop()


def annotate_before_get(dgd: DgdFixture, nth: int, service_name: str, value: str) -> None:
    """Edit ``service_name``'s power annotation just before the ``nth`` GET of the DGD (GET 1
    is the source's start-up validation, GETs 2.. are its polls)."""
    gets = itertools.count(1)

    def edit(method: str, path: str) -> None:
        if method == "GET" and path == dgd.path and next(gets) == nth:
            patch = {"spec": {"services": {service_name: service(value)}}}
            dgd.server.handle(
                "PATCH",
                path,
                {"content-type": "application/merge-patch+json"},
                json.dumps(patch).encode(),
                client=False,
            )

    dgd.server.before_request(edit)


def caps_by_time(events: list[Event]) -> list[tuple[float, int | None, int | None]]:
    """``(time, prefill watts, decode watts)`` of each capabilities event."""
    rows = []
    for e in events:
        if isinstance(e, CapabilitiesEvent):
            p, d = e.payload.prefill, e.payload.decode
            rows.append(
                (
                    e.time,
                    None if p is None else p.gpu_power_limit_w,
                    None if d is None else d.gpu_power_limit_w,
                )
            )
    return rows


def dgd_gets(dgd: DgdFixture) -> int:
    return sum(1 for r in dgd.server.requests if r.method == "GET" and r.path == dgd.path)


@pytest.mark.services
def test_the_source_yields_the_caps_and_follows_an_edit(make_dgd, workers: int) -> None:
    dgd = make_dgd(with_caps(prefill="350", decode=" 700 "))
    annotate_before_get(dgd, 4, DECODE, "600")  # before the third poll
    events = poll_inventory(factory(dgd), workers)

    assert [(type(e).__name__, e.deployment, e.time) for e in events] == [
        ("InventoryEvent", "llama", 100.0),
        ("CapabilitiesEvent", "llama", 100.0),
        ("InventoryEvent", "llama", 110.0),
        ("CapabilitiesEvent", "llama", 110.0),
        ("InventoryEvent", "llama", 120.0),
        ("CapabilitiesEvent", "llama", 120.0),
    ]
    assert caps_by_time(events) == [(100.0, 350, 700), (110.0, 350, 700), (120.0, 350, 600)]
    # each payload names the power cap only, so merging it erases no other capability
    for e in events:
        if isinstance(e, CapabilitiesEvent):
            for engine in (e.payload.prefill, e.payload.decode):
                assert engine is not None
                assert engine.model_dump(exclude_none=True).keys() == {"gpu_power_limit_w"}
    assert dgd_gets(dgd) == 1 + 3  # the validation, then one read per poll


@pytest.mark.services
def test_a_malformed_annotation_is_named_once_and_the_run_goes_on(
    make_dgd, workers: int, caplog: pytest.LogCaptureFixture
) -> None:
    dgd = make_dgd(with_caps(prefill="350W", decode="700"))
    annotate_before_get(dgd, 4, PREFILL, "0")  # another bad value before the third poll
    with caplog.at_level(logging.WARNING, logger="connectors.dgd_dataflow"):
        events = poll_inventory(factory(dgd), workers)

    inventory = [e for e in events if isinstance(e, InventoryEvent)]
    assert [e.time for e in inventory] == [100.0, 110.0, 120.0]  # no poll was lost
    assert all(e.payload.ready_num_prefill == 1 for e in inventory)
    assert caps_by_time(events) == [(100.0, None, 700), (110.0, None, 700), (120.0, None, 700)]
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "power cap" in r.getMessage()
    ]
    annotation = f"{PREFILL}: annotation {GPU_POWER_LIMIT_ANNOTATION}"
    assert warnings == [  # once per distinct problem, not once per poll
        f"DGD dynamo/vllm-disagg: per-GPU power cap unknown: {annotation} '350W' is not a "
        "whole number of watts",
        f"DGD dynamo/vllm-disagg: per-GPU power cap unknown: {annotation} '0' is below 1 W",
    ]


@pytest.mark.services
def test_no_annotation_means_no_capabilities_event(make_dgd, workers: int) -> None:
    dgd = make_dgd(with_caps())
    events = poll_inventory(factory(dgd), workers)
    assert [type(e).__name__ for e in events] == ["InventoryEvent"] * 3


@pytest.mark.services
def test_only_a_malformed_annotation_means_no_capabilities_event(make_dgd, workers: int) -> None:
    dgd = make_dgd(with_caps(decode="lots"))
    events = poll_inventory(factory(dgd), workers, polls=2)
    assert [type(e).__name__ for e in events] == ["InventoryEvent"] * 2


@pytest.mark.services
def test_agg_mode_reports_the_cap_as_decode(make_dgd) -> None:
    body = copy.deepcopy(load_fixture("dgd_disagg.yaml"))
    workers_spec = body["spec"]["services"]
    workers_spec["VllmWorker"] = workers_spec.pop(DECODE) | service("450")
    del workers_spec[PREFILL]
    body["metadata"]["name"] = "vllm-agg"
    dgd = make_dgd(body)
    reading = factory(dgd, mode="agg", backend="vllm")().read_fleet()
    assert reading.gpu_power_limits == {"decode": 450}
    assert reading.power_problems == ()
    assert reading.counts.ready_num_decode == 1


@pytest.mark.services
def test_the_crd_keeps_pod_annotations_and_refuses_a_non_string_one(make_dgd, kube) -> None:
    # As in Dynamo's CRD, extraPodMetadata.annotations is a map[string]string: the annotation
    # survives pruning, and a number where a string belongs is refused (so only a hand-built
    # object, as in the unit tests above, can carry one).
    dgd = make_dgd(with_caps(decode="700"))
    stored = dgd.get()["spec"]["services"][DECODE]["extraPodMetadata"]
    assert stored == {"annotations": {GPU_POWER_LIMIT_ANNOTATION: "700"}}
    body = with_caps(decode=700)
    body["metadata"]["name"] = "numeric-cap"
    with pytest.raises(ApiException) as err:
        k8s.CustomObjectsApi(kube).create_namespaced_custom_object(
            "nvidia.com", "v1alpha1", dgd.namespace, "dynamographdeployments", body
        )
    assert err.value.status == 422
    assert "extraPodMetadata.annotations" in str(err.value.body)
