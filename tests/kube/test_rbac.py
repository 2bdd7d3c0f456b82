"""The Kubernetes Role shipped in deploy/kubernetes grants exactly what the DGD actuator asks
of the API server: every request it makes — validating the DGD, reading its inventory and the
last decision, applying a decision, to a service patched in the DGD and to one with a scaling
adapter — is recorded by the test API server and must be granted, and every grant must be used
(a missing verb fails in the cluster, an extra one is privilege nobody needs)."""

from __future__ import annotations

import re

import pytest
import yaml
from kubernetes import client as k8s

from connectors.dgd import DgdActuator
from connectors.dgd_api import kube_api_client
from tests.decisions import decision
from tests.deploy.test_kubernetes import MANIFESTS

from .apiserver import ApiServer
from .conftest import create_dgd, load_fixture

pytestmark = pytest.mark.services

VERBS = {"GET": "get", "PATCH": "patch", "PUT": "update", "POST": "create", "DELETE": "delete"}
OBJECT = re.compile(r"^/apis/(?P<group>[^/]+)/[^/]+/namespaces/[^/]+/(?P<resource>[^/]+)/[^/]+")


def granted() -> set[tuple[str, str, str]]:
    (role,) = [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d["kind"] == "Role"]
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_role_grants_what_the_actuator_asks_and_nothing_more(
    apiserver: ApiServer, kube: k8s.ApiClient, dgdsa_crd: None
) -> None:
    body = load_fixture("dgd_disagg.yaml")
    body["spec"]["services"]["VllmDecodeWorker"]["scalingAdapter"] = {"enabled": True}
    dgd = create_dgd(apiserver, kube, body, adapters=True)
    actuator = DgdActuator(kube_api_client(dgd.server.url), dgd.namespace, dgd.name)
    actuator.validate()
    actuator.read_fleet()
    actuator.delivered()
    assert actuator.apply(decision(decision_id=1, num_prefill=2, num_decode=2)).ok
    asked = set()
    for request in dgd.server.requests:
        match = OBJECT.match(request.path)
        assert match, request.path
        resource = match["resource"] + request.path[match.end() :]  # e.g. ".../status"
        asked.add((match["group"], resource, VERBS[request.method]))
    assert asked == granted()
