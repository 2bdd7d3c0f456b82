"""The DGD actuator against the test API server (real HTTP, the real ``kubernetes`` client)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s

from connectors.dgd import (
    LAST_DECISION_ANNOTATION,
    DgdActuator,
    DgdUnavailableError,
    DgdValidationError,
)
from connectors.dgd_api import kube_api_client
from schemas import DeliveredDecision, WorkerCounts
from tests.decisions import decision
from tests.services.process import wait_until

from .apiserver import ApiServer
from .conftest import DgdFixture, Sleeps, create_dgd, load_fixture

pytestmark = pytest.mark.services

MERGE_PATCH = "application/merge-patch+json"


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def make_actuator(dgd: DgdFixture, sleeps: Sleeps) -> Callable[..., DgdActuator]:
    def make(**options: Any) -> DgdActuator:
        options.setdefault("mode", "disagg")
        options.setdefault("backend", "vllm")
        return DgdActuator(
            kube_api_client(dgd.server.url),
            options.pop("namespace", dgd.namespace),
            options.pop("name", dgd.name),
            sleep=sleeps,
            **options,
        )

    return make


def spec_replicas(dgd: DgdFixture) -> dict[str, int]:
    services = dgd.get()["spec"]["services"]
    return {name: svc["replicas"] for name, svc in services.items()}


def manifest_with(services: dict[str, Any], name: str = "custom") -> dict[str, Any]:
    body = load_fixture("dgd_disagg.yaml")
    body["metadata"]["name"] = name
    body["spec"]["services"] = services
    return body


# ---------------------------------------------------------------------- start-up validation
def test_validate_resolves_vllm_default_names(make_actuator):
    assert make_actuator().validate() == {
        "prefill": "VllmPrefillWorker",
        "decode": "VllmDecodeWorker",
    }


def test_validate_prefers_sub_component_type_over_default_names(dgd, make_actuator):
    services = {
        "Frontend": {"componentType": "frontend", "replicas": 1},
        "VllmPrefillWorker": {"replicas": 1},  # a default name, but not the prefill role here
        "fast-prefill": {"subComponentType": "prefill", "replicas": 2},
        "decoders": {"subComponentType": "decode", "replicas": 1},
    }
    create_dgd(dgd.server, dgd.client, manifest_with(services))
    assert make_actuator(name="custom").validate() == {
        "prefill": "fast-prefill",
        "decode": "decoders",
    }


def test_validate_fails_when_dgd_is_missing(make_actuator):
    with pytest.raises(DgdValidationError) as err:
        make_actuator(name="no-such-dgd").validate()
    message = str(err.value)
    assert "dynamo/no-such-dgd not found" in message
    assert "DYN_PARENT_DGD_K8S_NAME" in message


def test_validate_says_when_the_dgd_resource_is_not_served(apiserver: ApiServer):
    """No DGD CRD (or not at v1alpha1): not the "check the name" of a missing object."""
    actuator = DgdActuator(kube_api_client(apiserver.url), "dynamo", "llama", sleep=lambda s: 0)
    with pytest.raises(DgdValidationError) as err:
        actuator.validate()
    message = str(err.value)
    assert "does not serve nvidia.com/v1alpha1 dynamographdeployments" in message
    assert "CRD installed, at version v1alpha1?" in message
    assert "check the name" not in message


def test_validate_fails_naming_the_missing_role(dgd, make_actuator):
    services = {"Frontend": {"replicas": 1}, "VllmDecodeWorker": {"replicas": 1}}
    create_dgd(dgd.server, dgd.client, manifest_with(services))
    with pytest.raises(DgdValidationError) as err:
        make_actuator(name="custom").validate()
    message = str(err.value)
    assert "prefill: no service has subComponentType: prefill" in message
    assert "'VllmPrefillWorker' is absent" in message
    assert "services present: Frontend, VllmDecodeWorker" in message
    assert "decode:" not in message  # the decode role resolved fine


def test_validate_fails_on_duplicate_sub_component_type(dgd, make_actuator):
    services = {
        "p": {"subComponentType": "prefill", "replicas": 1},
        "d1": {"subComponentType": "decode", "replicas": 1},
        "d2": {"subComponentType": "decode", "replicas": 1},
    }
    create_dgd(dgd.server, dgd.client, manifest_with(services))
    with pytest.raises(
        DgdValidationError,
        match=r"2 services have subComponentType: decode "
        r"\(d1, d2\)",
    ):
        make_actuator(name="custom").validate()


def test_validate_fails_when_backend_names_do_not_match(make_actuator):
    """An SGLang planner on a vLLM DGD (spec §17 item 8) fails at start, naming both roles."""
    with pytest.raises(DgdValidationError) as err:
        make_actuator(backend="sglang").validate()
    assert "prefill: no service" in str(err.value) and "decode: no service" in str(err.value)


def test_validate_rejects_explicit_service_of_another_role(dgd, make_actuator):
    services = {"p": {"subComponentType": "prefill"}, "d": {"subComponentType": "decode"}}
    create_dgd(dgd.server, dgd.client, manifest_with(services))
    actuator = make_actuator(name="custom", services={"prefill": "d"})
    with pytest.raises(DgdValidationError, match="'d' has subComponentType: decode, not prefill"):
        actuator.validate()


def test_validate_reports_missing_permission(dgd, make_actuator):
    dgd.server.inject(dgd.path, 403, method="GET")
    with pytest.raises(DgdValidationError, match="needs get/patch on dynamographdeployments"):
        make_actuator().validate()


def test_validate_agg_mode_uses_the_agg_worker(dgd, make_actuator):
    services = {"Frontend": {"replicas": 1}, "VllmWorker": {"replicas": 2}}
    create_dgd(dgd.server, dgd.client, manifest_with(services, name="agg"))
    actuator = make_actuator(name="agg", mode="agg")
    assert actuator.validate() == {"decode": "VllmWorker"}
    assert actuator.read_inventory() == WorkerCounts(ready_num_decode=2, expected_num_decode=2)


def test_from_environment_takes_the_name_from_the_env(dgd, monkeypatch):
    monkeypatch.setenv("DYN_PARENT_DGD_K8S_NAME", dgd.name)
    actuator = DgdActuator.from_environment(namespace=dgd.namespace, host=dgd.server.url)
    assert actuator.name == dgd.name and actuator.validate()["decode"] == "VllmDecodeWorker"
    monkeypatch.delenv("DYN_PARENT_DGD_K8S_NAME")
    with pytest.raises(DgdValidationError, match="DYN_PARENT_DGD_K8S_NAME"):
        DgdActuator.from_environment(namespace=dgd.namespace, host=dgd.server.url)


# ---------------------------------------------------------------------- inventory
def test_inventory_follows_a_rollout(dgd, make_actuator):
    actuator = make_actuator()
    assert actuator.read_inventory() == WorkerCounts(
        ready_num_prefill=1, ready_num_decode=1, expected_num_prefill=1, expected_num_decode=1
    )
    assert actuator.apply(decision(num_decode=3)).outcome == "applied"
    rolling = actuator.read_inventory()
    assert (rolling.ready_num_decode, rolling.expected_num_decode) == (1, 3)
    assert rolling.decode_scaling_in_progress and not rolling.prefill_scaling_in_progress
    dgd.operator.converge()
    done = actuator.read_inventory()
    assert (done.ready_num_decode, done.expected_num_decode) == (3, 3)
    assert not done.decode_scaling_in_progress


def test_inventory_prefers_available_then_ready_replicas(dgd, make_actuator):
    status = dgd.get()["status"]
    status["services"]["VllmDecodeWorker"].update(readyReplicas=1, availableReplicas=0)
    del status["services"]["VllmPrefillWorker"]["availableReplicas"]
    dgd.server.write_status(dgd.path, status)
    counts = make_actuator().read_inventory()
    assert counts.ready_num_decode == 0 and counts.decode_scaling_in_progress
    assert counts.ready_num_prefill == 1 and not counts.prefill_scaling_in_progress


def test_inventory_is_in_progress_until_the_operator_observes_the_spec(dgd, make_actuator):
    stale = dgd.get()["status"]
    stale["observedGeneration"] = 0  # counts as before, but written for an older spec
    dgd.server.write_status(dgd.path, stale)
    counts = make_actuator().read_inventory()
    assert counts.ready_num_decode == 1 and counts.expected_num_decode == 1
    assert counts.decode_scaling_in_progress and counts.prefill_scaling_in_progress


def test_inventory_read_failure_raises_instead_of_reporting_zero(dgd, make_actuator, sleeps):
    dgd.server.inject(dgd.path, 503, 503, 500, method="GET")
    actuator = make_actuator(max_attempts=3)
    with pytest.raises(DgdUnavailableError, match="HTTP 500"):
        actuator.read(retry=True)
    assert sleeps == [1.0, 1.0]  # 0.5 and 1.0, both lifted to the server's Retry-After: 1
    assert actuator.read_inventory().ready_num_decode == 1


# ---------------------------------------------------------------------- applying decisions
def test_apply_sends_one_merge_patch_of_the_changed_service(dgd, make_actuator):
    version = dgd.get()["metadata"]["resourceVersion"]
    result = make_actuator().apply(decision(num_prefill=2, num_decode=1))
    assert result.outcome == "applied" and result.ok
    assert result.patch == {"VllmPrefillWorker": 2} and result.attempts == 1
    assert result.reason == "VllmPrefillWorker 1 → 2"
    [patch] = dgd.patches()
    assert patch.content_type == MERGE_PATCH
    mark = json.loads(patch.body["metadata"]["annotations"].pop(LAST_DECISION_ANNOTATION))
    assert mark == {
        "deployment": "llama",
        "decision_id": 1,
        "time": 1.0,
        "num_prefill": 2,
        "num_decode": 1,
    }
    assert patch.body == {
        "metadata": {"resourceVersion": version, "annotations": {}},
        "spec": {"services": {"VllmPrefillWorker": {"replicas": 2}}},
    }
    assert spec_replicas(dgd) == {"Frontend": 1, "VllmDecodeWorker": 1, "VllmPrefillWorker": 2}
    assert dgd.get()["metadata"]["generation"] == 2


def test_a_restarted_actuator_reads_back_the_last_decision_it_applied(dgd, make_actuator):
    actuator = make_actuator()
    assert actuator.delivered() is None  # never patched by us
    assert actuator.apply(decision(decision_id=4, num_prefill=2)).outcome == "applied"
    assert (
        actuator.apply(decision(decision_id=5, num_prefill=2)).outcome == "no_change"
    )  # nothing written
    delivered = make_actuator().delivered()
    # with what each service is left asking for: decode, which the decision left alone, too
    assert delivered == DeliveredDecision(
        deployment="llama", decision_id=4, time=4.0, num_prefill=2, num_decode=1
    )


def test_an_annotation_that_does_not_parse_is_passed_over(dgd, make_actuator, caplog):
    k8s.CustomObjectsApi(dgd.client).patch_namespaced_custom_object(
        "nvidia.com",
        "v1alpha1",
        dgd.namespace,
        "dynamographdeployments",
        dgd.name,
        {"metadata": {"annotations": {LAST_DECISION_ANNOTATION: '{"decision_id": 0}'}}},
        _content_type=MERGE_PATCH,
    )
    assert make_actuator().delivered() is None
    assert "ignored annotation flowplanner/last-decision (deployment: Field required" in caplog.text


def test_apply_changes_both_pools_in_one_atomic_patch(dgd, make_actuator):
    """A rebalance (spec §17 item 6) is one write: no state with one pool changed alone."""
    result = make_actuator().apply(decision(num_prefill=2, num_decode=3))
    assert result.patch == {"VllmPrefillWorker": 2, "VllmDecodeWorker": 3}
    [patch] = dgd.patches()
    assert patch.body["spec"] == {
        "services": {"VllmPrefillWorker": {"replicas": 2}, "VllmDecodeWorker": {"replicas": 3}}
    }
    assert dgd.get()["metadata"]["generation"] == 2  # one spec change


def test_apply_without_precondition_sends_only_the_replicas(dgd, make_actuator):
    make_actuator(resource_version_precondition=False).apply(decision(num_decode=2))
    [patch] = dgd.patches()
    assert patch.body["spec"] == {"services": {"VllmDecodeWorker": {"replicas": 2}}}
    assert "resourceVersion" not in patch.body["metadata"]


def test_apply_skips_equal_targets(dgd, make_actuator):
    result = make_actuator().apply(decision(num_prefill=1, num_decode=1))
    assert result.outcome == "no_change" and result.ok
    assert dgd.patches() == []


def test_apply_skips_while_dgd_is_not_ready(dgd, make_actuator):
    dgd.operator.set_not_ready("CrashLoop", "decode pod restarting")
    result = make_actuator().apply(decision(num_decode=2))
    assert result.outcome == "skipped_not_ready" and not result.ok
    assert "Ready condition is False (CrashLoop: decode pod restarting)" in result.reason
    assert result.patch == {"VllmDecodeWorker": 2}
    assert dgd.patches() == [] and spec_replicas(dgd)["VllmDecodeWorker"] == 1


def test_apply_holds_a_second_change_while_one_is_in_flight(dgd, make_actuator):
    server, client = dgd.server, dgd.client
    fixture = create_dgd(
        server,
        client,
        manifest_with(
            {
                "p": {"subComponentType": "prefill", "replicas": 1},
                "d": {"subComponentType": "decode", "replicas": 1},
            },
            name="steady",
        ),
        ready_during_rollout=True,
    )
    actuator = make_actuator(name="steady")
    assert actuator.apply(decision(decision_id=1, num_decode=2)).outcome == "applied"
    # The operator is rolling out (decode spec 2, ready 1) but reports Ready=True.
    for i, held in enumerate(
        [
            decision(decision_id=2, num_decode=3),
            decision(decision_id=3, num_prefill=2, num_decode=2),
        ]
    ):
        result = actuator.apply(held)
        assert result.outcome == "skipped_in_flight", i
        assert "d: spec 2, updated 2, ready 1" in result.reason
    assert len(fixture.patches()) == 1
    fixture.operator.converge()
    assert actuator.apply(decision(decision_id=4, num_decode=3)).outcome == "applied"
    assert spec_replicas(fixture) == {"p": 1, "d": 3}


def test_apply_retries_409_by_rereading_then_repatching(dgd, make_actuator, sleeps):
    actuator = make_actuator()
    actuator.validate()
    dgd.server.clear_requests()
    dgd.server.inject(dgd.path, 409, 409, method="PATCH")
    result = actuator.apply(decision(num_decode=2))
    assert result.outcome == "applied" and result.attempts == 3
    assert sleeps == [0.5, 1.0]
    verbs = [(r.method, r.status) for r in dgd.server.requests if r.path == dgd.path]
    assert verbs == [
        ("GET", 200),
        ("PATCH", 409),
        ("GET", 200),
        ("PATCH", 409),
        ("GET", 200),
        ("PATCH", 200),
    ]
    assert spec_replicas(dgd)["VllmDecodeWorker"] == 2


def test_real_conflict_makes_the_actuator_recheck_before_writing(dgd, make_actuator):
    """Someone scales prefill between our read and our patch: the resourceVersion precondition
    turns that into a 409, and the re-read sees the other rollout, so we don't stack on it."""
    server = dgd.server
    raced = []

    def other_writer(method: str, path: str) -> None:
        if method == "PATCH" and path == dgd.path and not raced:
            raced.append(True)
            body = json.dumps({"spec": {"services": {"VllmPrefillWorker": {"replicas": 3}}}})
            server.handle("PATCH", path, {"content-type": MERGE_PATCH}, body.encode(), client=False)

    server.before_request(other_writer)
    result = make_actuator().apply(decision(num_decode=2))
    assert result.outcome == "skipped_not_ready"
    statuses = [r.status for r in dgd.patches()]
    assert statuses == [409]
    assert spec_replicas(dgd) == {"Frontend": 1, "VllmDecodeWorker": 1, "VllmPrefillWorker": 3}


def test_apply_retries_5xx_with_exponential_backoff(dgd, make_actuator, sleeps):
    dgd.server.inject(dgd.path, 500, 502, 500, method="PATCH")
    result = make_actuator().apply(decision(num_decode=2))
    assert result.outcome == "applied" and result.attempts == 4
    assert sleeps == [0.5, 1.0, 2.0]


def test_apply_gives_up_after_bounded_retries_without_raising(dgd, make_actuator, sleeps):
    dgd.server.inject(dgd.path, *([500] * 10), method="PATCH")
    result = make_actuator(max_attempts=5, max_backoff_s=1.5).apply(decision(num_decode=2))
    assert result.outcome == "failed" and result.status_code == 500
    assert result.attempts == 5 and "gave up after 5 attempts" in result.reason
    assert sleeps == [0.5, 1.0, 1.5, 1.5]
    assert spec_replicas(dgd)["VllmDecodeWorker"] == 1


@pytest.mark.parametrize("code", [403, 422])
def test_apply_does_not_retry_permanent_errors(dgd, make_actuator, sleeps, code):
    dgd.server.inject(dgd.path, code, method="PATCH")
    result = make_actuator().apply(decision(num_decode=2))
    assert result.outcome == "failed" and result.status_code == code
    assert result.attempts == 1 and sleeps == []


def test_apply_survives_an_unreachable_api_server(sleeps):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    actuator = DgdActuator(
        kube_api_client(f"http://127.0.0.1:{port}"), "ns", "gone", sleep=sleeps, max_attempts=2
    )
    result = actuator.apply(decision(num_decode=2))
    assert result.outcome == "failed" and "cannot read DGD ns/gone" in result.reason
    assert sleeps == [0.5]


def test_apply_ignores_decisions_older_than_the_newest(dgd, make_actuator):
    actuator = make_actuator()
    assert actuator.apply(decision(decision_id=5, num_decode=1)).outcome == "no_change"
    assert actuator.apply(decision(decision_id=4, num_decode=2)).outcome == "stale"
    assert actuator.apply(decision(decision_id=5, num_decode=2)).outcome == "stale"
    assert dgd.patches() == []
    other = actuator.apply(decision(decision_id=1, num_decode=2, deployment="other-key"))
    assert other.outcome == "applied"


def tight_dgd(dgd: DgdFixture, **operator_options: Any) -> DgdFixture:
    """A DGD (``p``, ``d``: 1 each, Ready) with room for only one decode pod."""
    services = {
        "p": {"subComponentType": "prefill", "replicas": 1},
        "d": {"subComponentType": "decode", "replicas": 1},
    }
    return create_dgd(
        dgd.server,
        dgd.client,
        manifest_with(services, name="tight"),
        capacity={"d": 1},
        **operator_options,
    )


def test_apply_retracts_an_unschedulable_scale_up(dgd, make_actuator):
    """Spec §17 item 7: decode 1 → 2 can't be scheduled (no GPU); the DGD stays not Ready.
    Giving the pending replica back is allowed; a further scale-up is not."""
    fixture = tight_dgd(dgd)
    actuator = make_actuator(name="tight")
    assert actuator.apply(decision(decision_id=1, num_decode=2, time=100.0)).outcome == "applied"
    fixture.operator.converge()
    stuck = actuator.read_inventory()
    assert (stuck.ready_num_decode, stuck.expected_num_decode) == (1, 2)
    assert (
        actuator.apply(decision(decision_id=2, num_decode=3, time=200.0)).outcome
        == "skipped_not_ready"
    )
    strict = make_actuator(name="tight", allow_retraction=False)
    retraction = decision(decision_id=3, num_decode=1, time=200.0, expected_decode=2)
    assert strict.apply(retraction).outcome == "skipped_not_ready"
    assert actuator.apply(retraction).outcome == "applied"
    fixture.operator.converge()
    assert actuator.read_inventory().decode_scaling_in_progress is False


def test_a_stuck_scale_up_is_given_back_when_the_load_drops_below_ready(dgd, make_actuator):
    """Spec §17 item 7 (the reference never scales back down after load stops): decode 1 → 4
    with room for 2, so 2 stay Pending; then the load is gone and the planner, seeing the 4,
    asks for 1. The Pending 2 are given back at once (never below ready); the rest of the
    scale-down is an ordinary change, once the DGD is Ready again."""
    fixture = tight_dgd(dgd)
    fixture.operator.capacity["d"] = 2
    actuator = make_actuator(name="tight")
    assert actuator.apply(decision(decision_id=1, num_decode=4, time=100.0)).outcome == "applied"
    fixture.operator.converge()
    stuck = actuator.read_inventory()
    assert (stuck.ready_num_decode, stuck.expected_num_decode) == (2, 4)
    retraction = actuator.apply(decision(decision_id=2, num_decode=1, expected_decode=4))
    assert retraction.outcome == "applied", retraction.reason
    assert retraction.patch == {"d": 2}
    assert "gives back only the replicas not ready" in retraction.reason
    fixture.operator.converge()
    assert actuator.read_inventory().decode_scaling_in_progress is False
    rest = actuator.apply(decision(decision_id=3, num_decode=1, expected_decode=2))
    assert (rest.outcome, rest.patch) == ("applied", {"d": 1})
    assert "retraction" not in rest.reason


def test_a_retraction_of_one_role_keeps_the_other_roles_scale_up_ours(dgd, make_actuator):
    """Both roles scale up and stick. A decision that retracts prefill and leaves decode
    alone must not make our decode scale-up look like someone else's: the annotation records
    what each service is left asking for, so decode can be retracted next."""
    fixture = tight_dgd(dgd)
    fixture.operator.capacity["p"] = 1
    actuator = make_actuator(name="tight")
    both = decision(decision_id=1, num_prefill=3, num_decode=4, time=100.0)
    assert actuator.apply(both).outcome == "applied"
    fixture.operator.converge()
    prefill_back = decision(decision_id=2, num_prefill=1, expected_prefill=3, expected_decode=4)
    assert actuator.apply(prefill_back).patch == {"p": 1}
    mark = DeliveredDecision.model_validate_json(
        fixture.get()["metadata"]["annotations"][LAST_DECISION_ANNOTATION]
    )
    assert (mark.decision_id, mark.num_prefill, mark.num_decode) == (2, 1, 4)
    fixture.operator.converge()
    decode_back = decision(decision_id=3, num_decode=1, expected_prefill=1, expected_decode=4)
    result = actuator.apply(decode_back)
    assert (result.outcome, result.patch) == ("applied", {"d": 1}), result.reason
    assert spec_replicas(fixture) == {"p": 1, "d": 1}


@pytest.mark.parametrize("ours_before", [False, True], ids=["no-annotation", "ours-was-2"])
@pytest.mark.parametrize("ready_during_rollout", [False, True], ids=["not-ready", "ready"])
def test_a_foreign_scale_up_in_flight_is_not_retracted(
    dgd, make_actuator, ours_before, ready_during_rollout
):
    """Someone else (kubectl, another controller) scales decode to 4 while only 1 can run; a
    decision made from the older inventory asks for 2. That is a scale-up on top of a change in
    flight that is not ours, not a retraction: it is held, as without retraction."""
    fixture = tight_dgd(dgd, ready_during_rollout=ready_during_rollout)
    actuator = make_actuator(name="tight")
    if ours_before:  # our last patch set decode to 1 (from 2): the annotation says 1
        fixture.operator.capacity["d"] = 2
        assert (
            actuator.apply(decision(decision_id=1, num_decode=2, time=100.0)).outcome == "applied"
        )
        fixture.operator.converge()
        assert (
            actuator.apply(decision(decision_id=2, num_decode=1, expected_decode=2)).outcome
            == "applied"
        )
        fixture.operator.converge()
        fixture.operator.capacity["d"] = 1
    k8s.CustomObjectsApi(dgd.client).patch_namespaced_custom_object(
        "nvidia.com",
        "v1alpha1",
        fixture.namespace,
        "dynamographdeployments",
        fixture.name,
        {"spec": {"services": {"d": {"replicas": 4}}}},
    )  # the operator starts the rollout: 1 ready of 4
    inventory = actuator.read_inventory()
    assert (inventory.ready_num_decode, inventory.expected_num_decode) == (1, 4)
    late = decision(
        decision_id=10, num_decode=2, expected_decode=4
    )  # newer than ours, and saw the 4
    strict = make_actuator(name="tight", allow_retraction=False).apply(late)
    result = actuator.apply(late)
    assert result.outcome == strict.outcome
    assert result.outcome == ("skipped_in_flight" if ready_during_rollout else "skipped_not_ready")
    assert "not a retraction" in result.reason
    assert ("set (1)" if ours_before else "no flowplanner/last-decision") in result.reason
    assert spec_replicas(fixture)["d"] == 4


def test_our_in_flight_scale_up_is_retracted_only_by_a_decision_made_after_seeing_it(
    dgd, make_actuator
):
    """Our decision 1 scales decode 1 → 4 (3 pods stay Pending). Decision 2, one load tick
    later, was made from an inventory read before the patch landed (1 asked for): its "2" is
    a scale-up stacked on ours, not a retraction (spec §17 item 10). Decision 3, made from an
    inventory showing the stuck scale-up (4 asked for), gives 2 back."""
    fixture = tight_dgd(dgd)
    actuator = make_actuator(name="tight")
    assert actuator.apply(decision(decision_id=1, num_decode=4, time=100.0)).outcome == "applied"
    fixture.operator.converge()
    stacked = actuator.apply(decision(decision_id=2, num_decode=2, expected_decode=1))
    assert stacked.outcome == "skipped_not_ready"
    assert "seeing 1 decode replicas asked for, not the 4 in flight" in stacked.reason
    assert spec_replicas(fixture)["d"] == 4
    restarted = make_actuator(name="tight")  # the rule reads the DGD, not the actuator's memory
    retraction = restarted.apply(decision(decision_id=3, num_decode=2, expected_decode=4))
    assert retraction.outcome == "applied", retraction.reason
    assert spec_replicas(fixture)["d"] == 2


def test_a_decision_older_than_our_in_flight_patch_does_not_retract_it(dgd, make_actuator):
    """Decision 5 scaled decode 1 → 4 (stuck). Decision 3 — older, e.g. replayed by another
    planner replica or delivered late — must not undo it, however it compares with ready."""
    fixture = tight_dgd(dgd)
    assert make_actuator(name="tight").apply(decision(decision_id=5, num_decode=4, time=500.0)).ok
    fixture.operator.converge()
    other = make_actuator(name="tight")  # no memory of decision 5: only the DGD knows it
    result = other.apply(decision(decision_id=3, num_decode=2, expected_decode=4))
    assert result.outcome == "skipped_not_ready"
    assert "decision 3 is not newer than decision 5" in result.reason
    assert spec_replicas(fixture)["d"] == 4


def test_a_retraction_must_target_the_deployment_that_scaled_up(dgd, make_actuator):
    fixture = tight_dgd(dgd)
    assert make_actuator(name="tight").apply(decision(decision_id=1, num_decode=4, time=100.0)).ok
    fixture.operator.converge()
    result = make_actuator(name="tight").apply(
        decision(decision_id=2, num_decode=2, deployment="other", expected_decode=4)
    )
    assert result.outcome == "skipped_not_ready"
    assert "for deployment 'llama'" in result.reason
    assert spec_replicas(fixture)["d"] == 4


def test_apply_in_agg_mode_scales_the_agg_worker(dgd, make_actuator):
    services = {"Frontend": {"replicas": 1}, "VllmWorker": {"replicas": 1}}
    fixture = create_dgd(dgd.server, dgd.client, manifest_with(services, name="agg"))
    actuator = make_actuator(name="agg", mode="agg")
    assert (
        actuator.apply(decision(decision_id=1, num_prefill=4)).outcome == "no_change"
    )  # no prefill role
    assert actuator.apply(decision(decision_id=2, num_decode=2)).outcome == "applied"
    assert spec_replicas(fixture) == {"Frontend": 1, "VllmWorker": 2}


def test_server_without_status_yet_reports_unknown_ready(apiserver: ApiServer, kube, dgd_crd):
    fixture = create_dgd(apiserver, kube, ready=False)
    fixture.server.write_status(fixture.path, {})
    actuator = DgdActuator(kube_api_client(apiserver.url), fixture.namespace, fixture.name)
    counts = actuator.read_inventory()
    assert counts.ready_num_decode is None and counts.expected_num_decode == 1
    assert counts.decode_scaling_in_progress


def test_operator_that_converges_at_once_lets_decisions_follow(dgd, make_actuator):
    services = {"p": {"subComponentType": "prefill"}, "d": {"subComponentType": "decode"}}
    create_dgd(dgd.server, dgd.client, manifest_with(services, name="quick"), delay_s=0)
    actuator = make_actuator(name="quick")
    outcomes = [
        actuator.apply(decision(decision_id=i, num_decode=i + 1)).outcome for i in (1, 2, 3)
    ]
    assert outcomes == ["applied"] * 3
    assert actuator.read_inventory().ready_num_decode == 4


def test_operator_with_a_delay_completes_the_rollout_by_itself(dgd, make_actuator):
    services = {"p": {"subComponentType": "prefill"}, "d": {"subComponentType": "decode"}}
    fixture = create_dgd(dgd.server, dgd.client, manifest_with(services, name="slow"), delay_s=0.01)
    actuator = make_actuator(name="slow")
    assert actuator.apply(decision(decision_id=1, num_decode=3)).outcome == "applied"
    wait_until(
        lambda: not actuator.read_inventory().decode_scaling_in_progress,
        "the delayed rollout to complete",
        timeout_s=10.0,
        interval_s=0.01,
    )
    assert actuator.read_inventory().ready_num_decode == 3
    assert fixture.operator.rollouts == 2  # the creation and the scale-up


def test_apply_fails_clearly_when_a_service_disappears(dgd, make_actuator):
    actuator = make_actuator()
    actuator.validate()
    dgd.server.handle(
        "PATCH",
        dgd.path,
        {"content-type": "application/json-patch+json"},
        json.dumps([{"op": "remove", "path": "/spec/services/VllmDecodeWorker"}]).encode(),
        client=False,
    )
    result = actuator.apply(decision(num_decode=2))
    assert result.outcome == "failed"
    assert result.reason == "service(s) VllmDecodeWorker no longer in the DGD"
    assert dgd.patches() == []


def test_inventory_of_a_renamed_service_is_unknown_not_one(dgd, make_actuator, caplog):
    """The decode service is renamed after start-up: its expected count is unknown (and said
    so), not the operator's default of 1 for a service that has no ``replicas``."""
    actuator = make_actuator()
    actuator.validate()
    body = {
        "spec": {
            "services": {
                "VllmDecodeWorker": None,
                "VllmDecodeWorkerV2": {"componentType": "worker", "replicas": 4},
            }
        }
    }
    dgd.server.handle(
        "PATCH", dgd.path, {"content-type": MERGE_PATCH}, json.dumps(body).encode(), client=False
    )
    dgd.operator.converge()
    with caplog.at_level("WARNING", logger="connectors.dgd"):
        counts = actuator.read_inventory()
        actuator.read_inventory()
    assert counts.expected_num_decode is None and counts.ready_num_decode is None
    assert counts.decode_scaling_in_progress
    assert (counts.expected_num_prefill, counts.ready_num_prefill) == (1, 1)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "DGD dynamo/vllm-disagg: expected replicas unknown: "
        "service(s) VllmDecodeWorker no longer in the DGD"
    ]  # said once, not on every poll


def test_a_patch_whose_answer_is_lost_is_reported_applied(dgd, make_actuator, sleeps):
    """The PATCH commits but its response comes after the client's timeout: the re-read finds
    the targets in place, which is our write landing, not a no-op."""
    released = threading.Event()

    def answer_late(path: str, old: Any, new: Any) -> None:
        if old is not None and new is not None and old["spec"] != new["spec"]:
            released.wait(10.0)  # until the actuator has given up and backs off

    def backoff(seconds: float) -> None:
        sleeps.append(seconds)
        released.set()

    dgd.server.on_write(answer_late)
    actuator = make_actuator(request_timeout_s=3.0)
    actuator.sleep = backoff
    result = actuator.apply(decision(num_decode=3))
    assert result.outcome == "applied" and result.ok
    assert result.patch == {"VllmDecodeWorker": 3} and result.attempts == 1
    assert result.reason.startswith("VllmDecodeWorker 1 → 3 (the PATCH response was lost: ")
    assert result.reason.endswith("; the re-read shows it committed)")
    assert sleeps == [0.5]
    assert [r.status for r in dgd.patches()] == [200]
    assert spec_replicas(dgd)["VllmDecodeWorker"] == 3


def test_a_patch_whose_answer_is_lost_on_the_last_attempt_is_read_back(dgd, make_actuator):
    """Two busy answers, then the third and last PATCH commits but its answer comes too late:
    a last read shows it landed, so the outcome is ``applied``, not a ``failed`` that did."""
    released = threading.Event()

    def answer_late(path: str, old: Any, new: Any) -> None:
        if old is not None and new is not None and old["spec"] != new["spec"]:
            released.wait(10.0)  # past the client's timeout: the answer is lost

    dgd.server.on_write(answer_late)
    dgd.server.inject(dgd.path, 503, 503, method="PATCH")
    actuator = make_actuator(request_timeout_s=3.0, max_attempts=3)
    try:
        result = actuator.apply(decision(num_decode=3))
    finally:
        released.set()
    assert (result.outcome, result.attempts, result.patch) == (
        "applied",
        3,
        {"VllmDecodeWorker": 3},
    )
    assert result.reason.endswith("; the re-read shows it committed)")
    assert spec_replicas(dgd)["VllmDecodeWorker"] == 3
