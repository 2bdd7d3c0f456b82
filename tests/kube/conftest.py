"""Fixtures of the Kubernetes tests: the test API server, a client for it, a DGD with its
simulated operator, and the target of the conformance suite (ours, or a real cluster)."""

from __future__ import annotations

import copy
import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import bytewax.operators as op
import pytest
import yaml
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink
from kubernetes import client as k8s

from connectors.dgd import DgdActuator
from connectors.dgd_dataflow import DgdInventorySource
from schemas import Event
from tests.flow.cluster import run_flow

from .apiserver import ApiServer
from .dgd_operator import SimulatedOperator

FIXTURES = Path(__file__).parent / "fixtures"
DGD_NAMESPACE = "dynamo"

URL_ENV = "FLOWPLANNER_K8S_URL"
TOKEN_ENV = "FLOWPLANNER_K8S_TOKEN"
NAMESPACE_ENV = "FLOWPLANNER_K8S_NAMESPACE"
CA_ENV = "FLOWPLANNER_K8S_CA"
INSECURE_ENV = "FLOWPLANNER_K8S_INSECURE"


class Sleeps(list):
    """The actuator's ``sleep``: records the backoff delays instead of sleeping, so a test
    asserts the retry schedule without spending it."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def poll_inventory(
    actuator: Callable[[], DgdActuator], workers: int, polls: int = 3
) -> list[Event]:
    """What a :class:`DgdInventorySource` of deployment ``llama`` yields in ``polls`` polls,
    run in the real bytewax runtime; the polls are timed 100, 110, 120, ... s. (Inventory
    events, each followed by a capabilities event when the DGD names a GPU power cap.)"""
    events: list[Event] = []
    flow = Dataflow("dgd_inventory")
    source = DgdInventorySource(
        actuator,
        "llama",
        timedelta(milliseconds=1),
        clock=itertools.count(100.0, 10.0).__next__,
        max_polls=polls,
    )
    op.output("out", op.input("inventory", flow, source), TestingSink(events))
    run_flow(flow, workers)
    return events


def load_fixture(name: str) -> dict[str, Any]:
    """A YAML file of ``tests/kube/fixtures``."""
    return yaml.safe_load((FIXTURES / name).read_text())


def api_client(
    url: str, token: str | None = None, *, ca: str | None = None, insecure: bool = False
) -> k8s.ApiClient:
    """A ``kubernetes`` client for ``url`` (bearer ``token``)."""
    cfg = k8s.Configuration(host=url)
    if token:
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
    cfg.verify_ssl = not insecure
    cfg.ssl_ca_cert = ca
    return k8s.ApiClient(cfg)


@pytest.fixture(autouse=True)
def no_cluster_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keep the machine's own Kubernetes configuration (a pod's service account, the user's
    kubeconfig) out of the tests: clients find none unless a test writes one."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))


@pytest.fixture
def apiserver() -> Iterator[ApiServer]:
    """Our API server on a free loopback port."""
    with ApiServer() as server:
        yield server


@pytest.fixture
def kube(apiserver: ApiServer) -> Iterator[k8s.ApiClient]:
    """A ``kubernetes`` client of :func:`apiserver`."""
    client = api_client(apiserver.url)
    yield client
    client.close()


@dataclass
class DgdFixture:
    """A DGD created on the test server, Ready, with its simulated operator."""

    server: ApiServer
    client: k8s.ApiClient
    namespace: str
    name: str
    operator: SimulatedOperator

    @property
    def path(self) -> str:
        """The DGD's API path."""
        return (
            f"/apis/nvidia.com/v1alpha1/namespaces/{self.namespace}"
            f"/dynamographdeployments/{self.name}"
        )

    def get(self) -> dict[str, Any]:
        """The DGD as stored."""
        return self.server.read(self.path)

    def patches(self) -> list[Any]:
        """The PATCH requests the server received for the DGD (injected ones included)."""
        return [r for r in self.server.requests if r.method == "PATCH" and r.path == self.path]


def register_dgd_crd(client: k8s.ApiClient) -> None:
    """Create the DGD CRD through the API, as ``kubectl apply -f`` would."""
    k8s.ApiextensionsV1Api(client).create_custom_resource_definition(load_fixture("dgd_crd.yaml"))


def register_dgdsa_crd(client: k8s.ApiClient) -> None:
    """Create the DGD Scaling Adapter CRD (with its scale subresource) through the API."""
    crd = load_fixture("dgdsa_crd.yaml")
    k8s.ApiextensionsV1Api(client).create_custom_resource_definition(crd)


def create_dgd(
    server: ApiServer,
    client: k8s.ApiClient,
    manifest: dict[str, Any] | None = None,
    *,
    namespace: str = DGD_NAMESPACE,
    ready: bool = True,
    **operator_options: Any,
) -> DgdFixture:
    """Create a DGD (default: the trimmed vLLM disagg example) and let the operator run it."""
    body = copy.deepcopy(manifest or load_fixture("dgd_disagg.yaml"))
    name = body["metadata"]["name"]
    fixture_path = f"/apis/nvidia.com/v1alpha1/namespaces/{namespace}/dynamographdeployments/{name}"
    operator = SimulatedOperator(server, fixture_path, **operator_options)
    k8s.CustomObjectsApi(client).create_namespaced_custom_object(
        "nvidia.com", "v1alpha1", namespace, "dynamographdeployments", body
    )
    if ready:
        operator.converge()
    server.clear_requests()
    return DgdFixture(server, client, namespace, name, operator)


@pytest.fixture
def dgd_crd(apiserver: ApiServer, kube: k8s.ApiClient) -> None:
    """The DGD CRD registered on the test server."""
    register_dgd_crd(kube)


@pytest.fixture
def dgdsa_crd(apiserver: ApiServer, kube: k8s.ApiClient, dgd_crd: None) -> None:
    """The DGD and DGD Scaling Adapter CRDs registered on the test server."""
    register_dgdsa_crd(kube)


@pytest.fixture
def dgd(apiserver: ApiServer, kube: k8s.ApiClient, dgd_crd: None) -> Iterator[DgdFixture]:
    """The vLLM disagg DGD (1 prefill, 1 decode), Ready; its operator converges on request."""
    fixture = create_dgd(apiserver, kube)
    yield fixture
    fixture.operator.stop()


@dataclass
class Cluster:
    """Where the conformance suite runs: our server (``server`` set) or a real cluster."""

    url: str
    token: str | None
    namespace: str
    client: k8s.ApiClient
    server: ApiServer | None


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """``$FLOWPLANNER_K8S_URL`` (+ ``_TOKEN``, ``_NAMESPACE``, ``_CA``, ``_INSECURE=1``) if set,
    else our server started for the module."""
    url = os.environ.get(URL_ENV)
    if url:
        token = os.environ.get(TOKEN_ENV)
        client = api_client(
            url, token, ca=os.environ.get(CA_ENV), insecure=os.environ.get(INSECURE_ENV) == "1"
        )
        yield Cluster(url, token, os.environ.get(NAMESPACE_ENV, "default"), client, None)
        client.close()
        return
    token = uuid.uuid4().hex
    with ApiServer(token=token) as server:
        client = api_client(server.url, token)
        yield Cluster(server.url, token, "default", client, server)
        client.close()
