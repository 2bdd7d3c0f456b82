"""Conformance of the test API server with the Kubernetes API, on the behaviours the DGD actuator
and the ``kubernetes`` client rely on.

By default the tests run against our server (``apiserver.py``). Point them at a real cluster to
check that the same assertions hold there::

    FLOWPLANNER_K8S_URL=https://127.0.0.1:6443 FLOWPLANNER_K8S_TOKEN=... \\
    FLOWPLANNER_K8S_NAMESPACE=default FLOWPLANNER_K8S_CA=ca.crt \\
        .venv/bin/pytest tests/kube/test_conformance.py -q

The token needs create/delete on customresourcedefinitions and full access to the test
resource ``flowplannerprobes.conformance.flowplanner.dev`` (created and deleted by the suite).
The probe CRD mirrors the DGD's shape: ``spec.services.<name>.replicas`` (integer, minimum 0)
with a status subresource; and the DGD Scaling Adapter's: ``spec.replicas`` behind a scale
subresource.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.services.process import wait_until

from .conftest import CA_ENV, INSECURE_ENV, Cluster

pytestmark = pytest.mark.services

GROUP = "conformance.flowplanner.dev"
VERSION = "v1alpha1"
PLURAL = "flowplannerprobes"
KIND = "FlowplannerProbe"
MERGE_PATCH = "application/merge-patch+json"

PROBE_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"kind": KIND, "plural": PLURAL, "singular": "flowplannerprobe"},
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                    },
                },
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["services"],
                                "properties": {
                                    "mode": {"type": "string", "enum": ["agg", "disagg"]},
                                    "note": {"type": "string"},
                                    "replicas": {"type": "integer", "minimum": 0},
                                    "services": {
                                        "type": "object",
                                        "additionalProperties": {
                                            "type": "object",
                                            "properties": {
                                                "subComponentType": {"type": "string"},
                                                "replicas": {"type": "integer", "minimum": 0},
                                            },
                                        },
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    }
                },
            }
        ],
    },
}


# ---------------------------------------------------------------------- helpers
def raw(
    cluster: Cluster,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
    *,
    token: bool = True,
) -> tuple[int, Any, dict[str, str]]:
    """A plain HTTP request (for what the client can't send): ``(status, json, headers)``."""
    import os

    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(cluster.url + path, data=data, method=method)
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", content_type)
    if token and cluster.token:
        request.add_header("Authorization", f"Bearer {cluster.token}")
    context = None
    if cluster.url.startswith("https"):
        context = ssl.create_default_context(cafile=os.environ.get(CA_ENV))
        if os.environ.get(INSECURE_ENV) == "1":
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, json.loads(response.read() or b"null"), dict(response.headers)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null"), dict(err.headers)


def status_of(err: ApiException) -> dict[str, Any]:
    """The ``metav1.Status`` body of a failed request."""
    return json.loads(err.body)


@pytest.fixture(scope="module")
def probe_crd(cluster: Cluster) -> Iterator[dict[str, Any]]:
    """The probe CRD, created through the API and deleted afterwards."""
    ext = k8s.ApiextensionsV1Api(cluster.client)
    created = ext.create_custom_resource_definition(PROBE_CRD)

    def established() -> bool:
        crd = ext.read_custom_resource_definition(f"{PLURAL}.{GROUP}")
        conditions = (crd.status.conditions or []) if crd.status else []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    assert created.metadata.name == f"{PLURAL}.{GROUP}" and created.metadata.uid
    # a real cluster is eventually consistent: CRDs take a moment to be established and served
    wait_until(established, "the probe CRD to be Established", timeout_s=30.0)
    wait_until(lambda: raw(cluster, "GET", f"/apis/{GROUP}/{VERSION}")[0] == 200, "discovery", 30.0)
    yield ext.read_custom_resource_definition(f"{PLURAL}.{GROUP}").to_dict()
    ext.delete_custom_resource_definition(f"{PLURAL}.{GROUP}")


@pytest.fixture
def api(cluster: Cluster, probe_crd: dict[str, Any]) -> k8s.CustomObjectsApi:
    """The client's custom-objects API."""
    return k8s.CustomObjectsApi(cluster.client)


def probe(name: str, **spec: Any) -> dict[str, Any]:
    """A probe object: a decode service with 1 replica unless ``spec`` says otherwise."""
    body_spec = {"services": {"decode": {"subComponentType": "decode", "replicas": 1}}}
    body_spec.update(spec)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": body_spec,
    }


@pytest.fixture
def name(cluster: Cluster, api: k8s.CustomObjectsApi) -> Iterator[str]:
    """A fresh object name, cleaned up after the test."""
    value = f"probe-{uuid.uuid4().hex[:8]}"
    yield value
    try:
        api.delete_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, value)
    except ApiException as err:
        assert err.status == 404


def create(api: k8s.CustomObjectsApi, cluster: Cluster, body: dict[str, Any]) -> dict[str, Any]:
    """Create and return the stored object."""
    return api.create_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, body)


def get(api: k8s.CustomObjectsApi, cluster: Cluster, name: str) -> dict[str, Any]:
    """Read the object."""
    return api.get_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, name)


def object_path(cluster: Cluster, name: str, sub: str = "") -> str:
    """The object's API path."""
    suffix = f"/{sub}" if sub else ""
    return f"/apis/{GROUP}/{VERSION}/namespaces/{cluster.namespace}/{PLURAL}/{name}{suffix}"


# ---------------------------------------------------------------------- discovery
def test_crd_registration_shows_in_discovery(cluster: Cluster, probe_crd: dict[str, Any]):
    groups = k8s.ApisApi(cluster.client).get_api_versions()
    ours = [g for g in groups.groups if g.name == GROUP]
    assert len(ours) == 1 and ours[0].preferred_version.group_version == f"{GROUP}/{VERSION}"

    status, group, _ = raw(cluster, "GET", f"/apis/{GROUP}")
    assert status == 200 and group["kind"] == "APIGroup"
    assert [v["version"] for v in group["versions"]] == [VERSION]

    resources = k8s.CustomObjectsApi(cluster.client).get_api_resources(GROUP, VERSION)
    by_name = {r.name: r for r in resources.resources}
    assert by_name[PLURAL].kind == KIND and by_name[PLURAL].namespaced is True
    assert {"get", "list", "create", "patch", "update", "delete"} <= set(by_name[PLURAL].verbs)
    assert set(by_name[f"{PLURAL}/status"].verbs) >= {"get", "patch", "update"}

    crd_status = probe_crd["status"]
    assert crd_status["accepted_names"]["kind"] == KIND
    assert crd_status["stored_versions"] == [VERSION]


def test_unknown_group_is_404_status(cluster: Cluster):
    status, body, _ = raw(cluster, "GET", "/apis/nonexistent.flowplanner.dev")
    assert status == 404 and body["kind"] == "Status" and body["code"] == 404


def test_invalid_crd_is_rejected(cluster: Cluster):
    bad = json.loads(json.dumps(PROBE_CRD))
    bad["metadata"]["name"] = f"wrongname.{GROUP}"
    with pytest.raises(ApiException) as err:
        k8s.ApiextensionsV1Api(cluster.client).create_custom_resource_definition(bad)
    assert err.value.status == 422
    assert status_of(err.value)["reason"] == "Invalid"


# ---------------------------------------------------------------------- create / get / list
def test_create_returns_201_with_server_fields(cluster: Cluster, api, name):
    data, code, _ = api.create_namespaced_custom_object_with_http_info(
        GROUP, VERSION, cluster.namespace, PLURAL, probe(name)
    )
    assert code == 201
    meta = data["metadata"]
    assert meta["name"] == name and meta["namespace"] == cluster.namespace
    assert meta["uid"] and meta["resourceVersion"] and meta["generation"] == 1
    assert meta["creationTimestamp"]
    assert data["spec"]["services"]["decode"]["replicas"] == 1


def test_duplicate_create_is_409_already_exists(cluster: Cluster, api, name):
    create(api, cluster, probe(name))
    with pytest.raises(ApiException) as err:
        create(api, cluster, probe(name))
    body = status_of(err.value)
    assert err.value.status == 409
    assert body["kind"] == "Status" and body["reason"] == "AlreadyExists"
    assert body["details"] == {"name": name, "group": GROUP, "kind": PLURAL}


def test_missing_object_is_404_status(cluster: Cluster, api):
    with pytest.raises(ApiException) as err:
        get(api, cluster, "does-not-exist")
    body = status_of(err.value)
    assert err.value.status == 404
    assert body["kind"] == "Status" and body["apiVersion"] == "v1"
    assert body["status"] == "Failure" and body["reason"] == "NotFound" and body["code"] == 404
    assert body["details"]["name"] == "does-not-exist" and body["details"]["kind"] == PLURAL
    assert body["message"] == f'{PLURAL}.{GROUP} "does-not-exist" not found'


def test_list_returns_kind_list(cluster: Cluster, api, name):
    create(api, cluster, probe(name))
    listed = api.list_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL)
    assert listed["kind"] == f"{KIND}List" and listed["apiVersion"] == f"{GROUP}/{VERSION}"
    assert listed["metadata"]["resourceVersion"]
    items = [i for i in listed["items"] if i["metadata"]["name"] == name]
    assert len(items) == 1 and items[0]["kind"] == KIND


def test_list_with_label_selector(cluster: Cluster, api, name):
    body = probe(name)
    body["metadata"]["labels"] = {"flowplanner-test": name}
    create(api, cluster, body)
    hit = api.list_namespaced_custom_object(
        GROUP, VERSION, cluster.namespace, PLURAL, label_selector=f"flowplanner-test={name}"
    )
    miss = api.list_namespaced_custom_object(
        GROUP, VERSION, cluster.namespace, PLURAL, label_selector="flowplanner-test=nobody"
    )
    assert [i["metadata"]["name"] for i in hit["items"]] == [name]
    assert miss["items"] == []


# ---------------------------------------------------------------------- patches
def test_merge_patch_merges_and_null_deletes(cluster: Cluster, api, name):
    created = create(api, cluster, probe(name, note="hello", mode="disagg"))
    patched = api.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        cluster.namespace,
        PLURAL,
        name,
        {
            "spec": {
                "note": None,
                "services": {"decode": {"replicas": 3}, "prefill": {"replicas": 2}},
            }
        },
    )
    spec = patched["spec"]
    assert "note" not in spec and spec["mode"] == "disagg"
    assert spec["services"]["decode"] == {"subComponentType": "decode", "replicas": 3}
    assert spec["services"]["prefill"] == {"replicas": 2}
    assert patched["metadata"]["generation"] == 2
    assert patched["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    assert get(api, cluster, name) == patched


def test_json_patch_with_test_operation(cluster: Cluster, api, name):
    create(api, cluster, probe(name))
    ops = [
        {"op": "test", "path": "/spec/services/decode/subComponentType", "value": "decode"},
        {"op": "replace", "path": "/spec/services/decode/replicas", "value": 4},
        {"op": "add", "path": "/spec/note", "value": "patched"},
    ]
    patched = api.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        cluster.namespace,
        PLURAL,
        name,
        ops,
        _content_type="application/json-patch+json",
    )
    assert patched["spec"]["services"]["decode"]["replicas"] == 4
    assert patched["spec"]["note"] == "patched"


def test_json_patch_failed_test_changes_nothing(cluster: Cluster, api, name):
    before = create(api, cluster, probe(name))
    ops = [
        {"op": "replace", "path": "/spec/services/decode/replicas", "value": 9},
        {"op": "test", "path": "/spec/services/decode/subComponentType", "value": "prefill"},
    ]
    with pytest.raises(ApiException) as err:
        api.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            cluster.namespace,
            PLURAL,
            name,
            ops,
            _content_type="application/json-patch+json",
        )
    assert err.value.status == 422
    assert status_of(err.value)["kind"] == "Status"
    assert get(api, cluster, name) == before


def test_strategic_merge_patch_on_custom_resource_is_415(cluster: Cluster, api, name):
    create(api, cluster, probe(name))
    status, body, _ = raw(
        cluster,
        "PATCH",
        object_path(cluster, name),
        {"spec": {"note": "x"}},
        "application/strategic-merge-patch+json",
    )
    assert status == 415 and body["kind"] == "Status"
    assert body["reason"] == "UnsupportedMediaType"
    assert "application/merge-patch+json" in body["message"]
    assert "note" not in get(api, cluster, name)["spec"]


def test_client_sends_merge_patch_by_default(cluster: Cluster, api, name):
    """The client's default for a dict body is merge patch: a nested key survives."""
    create(api, cluster, probe(name))
    patched = api.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        cluster.namespace,
        PLURAL,
        name,
        {"spec": {"services": {"decode": {"replicas": 2}}}},
    )
    assert patched["spec"]["services"]["decode"]["subComponentType"] == "decode"
    if cluster.server is not None:
        last = [r for r in cluster.server.requests if r.method == "PATCH"][-1]
        assert last.content_type == "application/merge-patch+json"


# ---------------------------------------------------------------------- versions
def test_generation_bumps_on_spec_change_only(cluster: Cluster, api, name):
    created = create(api, cluster, probe(name))
    labelled = api.patch_namespaced_custom_object(
        GROUP, VERSION, cluster.namespace, PLURAL, name, {"metadata": {"labels": {"a": "b"}}}
    )
    assert labelled["metadata"]["generation"] == 1
    assert labelled["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    with_status = api.patch_namespaced_custom_object_status(
        GROUP, VERSION, cluster.namespace, PLURAL, name, {"status": {"observed": 1}}
    )
    assert with_status["metadata"]["generation"] == 1
    assert with_status["metadata"]["resourceVersion"] != labelled["metadata"]["resourceVersion"]
    respec = api.patch_namespaced_custom_object(
        GROUP, VERSION, cluster.namespace, PLURAL, name, {"spec": {"note": "new"}}
    )
    assert respec["metadata"]["generation"] == 2


def test_no_op_patch_keeps_resource_version(cluster: Cluster, api, name):
    created = create(api, cluster, probe(name))
    same = api.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        cluster.namespace,
        PLURAL,
        name,
        {"spec": {"services": {"decode": {"replicas": 1}}}},
    )
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert same["metadata"]["generation"] == 1


def test_stale_resource_version_is_409_conflict(cluster: Cluster, api, name):
    created = create(api, cluster, probe(name))
    stale = created["metadata"]["resourceVersion"]
    api.patch_namespaced_custom_object(
        GROUP, VERSION, cluster.namespace, PLURAL, name, {"spec": {"note": "first"}}
    )
    with pytest.raises(ApiException) as patch_err:
        api.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            cluster.namespace,
            PLURAL,
            name,
            {"metadata": {"resourceVersion": stale}, "spec": {"note": "second"}},
        )
    replaced = dict(created, spec={**created["spec"], "note": "third"})
    with pytest.raises(ApiException) as put_err:
        api.replace_namespaced_custom_object(
            GROUP, VERSION, cluster.namespace, PLURAL, name, replaced
        )
    for err in (patch_err.value, put_err.value):
        body = status_of(err)
        assert err.status == 409 and body["reason"] == "Conflict"
        assert "the object has been modified" in body["message"]
    assert get(api, cluster, name)["spec"]["note"] == "first"


def test_put_with_current_resource_version_replaces(cluster: Cluster, api, name):
    current = create(api, cluster, probe(name, note="a"))
    current["spec"] = {"services": {"decode": {"replicas": 5}}}
    replaced = api.replace_namespaced_custom_object(
        GROUP, VERSION, cluster.namespace, PLURAL, name, current
    )
    assert replaced["spec"] == {"services": {"decode": {"replicas": 5}}}
    assert replaced["metadata"]["generation"] == 2


def test_put_without_resource_version_is_rejected(cluster: Cluster, api, name):
    current = create(api, cluster, probe(name))
    del current["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as err:
        api.replace_namespaced_custom_object(
            GROUP, VERSION, cluster.namespace, PLURAL, name, current
        )
    assert err.value.status == 422
    assert status_of(err.value)["details"]["causes"][0]["field"] == "metadata.resourceVersion"


# ---------------------------------------------------------------------- schema
@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"services": {"decode": {"replicas": -1}}}, "spec.services.decode.replicas"),
        ({"services": {"decode": {"replicas": "two"}}}, "spec.services.decode.replicas"),
        ({"services": {}, "mode": "sideways"}, "spec.mode"),
        ({"note": "no services"}, "spec.services"),
    ],
    ids=["minimum", "type", "enum", "required"],
)
def test_schema_violation_is_422_invalid(cluster: Cluster, api, name, spec, field):
    body = probe(name)
    body["spec"] = spec
    with pytest.raises(ApiException) as err:
        create(api, cluster, body)
    status = status_of(err.value)
    assert err.value.status == 422 and status["reason"] == "Invalid"
    assert status["details"]["kind"] == KIND and status["details"]["name"] == name
    assert [c["field"] for c in status["details"]["causes"]] == [field]
    assert status["message"].startswith(f'{KIND}.{GROUP} "{name}" is invalid: {field}')


def test_schema_violation_in_patch_changes_nothing(cluster: Cluster, api, name):
    before = create(api, cluster, probe(name))
    with pytest.raises(ApiException) as err:
        api.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            cluster.namespace,
            PLURAL,
            name,
            {"spec": {"services": {"decode": {"replicas": -3}}}},
        )
    assert err.value.status == 422
    assert get(api, cluster, name) == before


def test_unknown_fields_are_pruned(cluster: Cluster, api, name):
    body = probe(name)
    body["spec"]["services"]["decode"]["replcas"] = 7
    created = create(api, cluster, body)
    assert created["spec"]["services"]["decode"] == {"subComponentType": "decode", "replicas": 1}


# ---------------------------------------------------------------------- status subresource
def test_status_subresource_is_separate_from_spec(cluster: Cluster, api, name):
    body = probe(name)
    body["status"] = {"ignored": True}
    created = create(api, cluster, body)
    assert "status" not in created

    status_written = api.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        cluster.namespace,
        PLURAL,
        name,
        {"status": {"readyReplicas": 1}, "spec": {"note": "via status"}},
    )
    assert status_written["status"] == {"readyReplicas": 1}
    assert "note" not in status_written["spec"]

    spec_written = api.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        cluster.namespace,
        PLURAL,
        name,
        {"status": {"readyReplicas": 99}, "spec": {"note": "via main"}},
    )
    assert spec_written["status"] == {"readyReplicas": 1}
    assert spec_written["spec"]["note"] == "via main"

    read_status = api.get_namespaced_custom_object_status(
        GROUP, VERSION, cluster.namespace, PLURAL, name
    )
    assert read_status["status"] == {"readyReplicas": 1}


# ---------------------------------------------------------------------- scale subresource
def get_scale(api: k8s.CustomObjectsApi, cluster: Cluster, name: str) -> dict[str, Any]:
    """Read the object's Scale."""
    return api.get_namespaced_custom_object_scale(GROUP, VERSION, cluster.namespace, PLURAL, name)


def patch_scale(
    api: k8s.CustomObjectsApi, cluster: Cluster, name: str, body: dict[str, Any]
) -> dict[str, Any]:
    """Merge-patch the object's Scale."""
    return api.patch_namespaced_custom_object_scale(
        GROUP, VERSION, cluster.namespace, PLURAL, name, body, _content_type=MERGE_PATCH
    )


def test_scale_subresource_shows_in_discovery(cluster: Cluster, probe_crd: dict[str, Any]):
    status, resources, _ = raw(cluster, "GET", f"/apis/{GROUP}/{VERSION}")
    [scale] = [r for r in resources["resources"] if r["name"] == f"{PLURAL}/scale"]
    assert status == 200 and (scale["group"], scale["version"], scale["kind"]) == (
        "autoscaling",
        "v1",
        "Scale",
    )
    assert {"get", "patch"} <= set(scale["verbs"])


def test_scale_subresource_reads_spec_replicas(cluster: Cluster, api, name):
    created = create(api, cluster, probe(name, replicas=2))
    scale = get_scale(api, cluster, name)
    assert (scale["kind"], scale["apiVersion"]) == ("Scale", "autoscaling/v1")
    assert scale["spec"] == {"replicas": 2} and scale["status"]["replicas"] == 0
    assert scale["metadata"]["name"] == name
    assert scale["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_scale_patch_writes_spec_replicas(cluster: Cluster, api, name):
    created = create(api, cluster, probe(name, replicas=2))
    current = created["metadata"]["resourceVersion"]
    scaled = patch_scale(
        api, cluster, name, {"metadata": {"resourceVersion": current}, "spec": {"replicas": 4}}
    )
    stored = get(api, cluster, name)
    assert scaled["spec"] == {"replicas": 4} and stored["spec"]["replicas"] == 4
    assert stored["metadata"]["generation"] == 2
    assert scaled["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert stored["metadata"]["resourceVersion"] != current
    assert stored["spec"]["services"] == created["spec"]["services"]


def test_stale_scale_resource_version_is_409_conflict(cluster: Cluster, api, name):
    created = create(api, cluster, probe(name, replicas=2))
    stale = created["metadata"]["resourceVersion"]
    patch_scale(api, cluster, name, {"spec": {"replicas": 3}})
    with pytest.raises(ApiException) as err:
        patch_scale(
            api, cluster, name, {"metadata": {"resourceVersion": stale}, "spec": {"replicas": 5}}
        )
    body = status_of(err.value)
    assert err.value.status == 409 and body["reason"] == "Conflict"
    assert get(api, cluster, name)["spec"]["replicas"] == 3


def test_negative_scale_is_422_invalid(cluster: Cluster, api, name):
    create(api, cluster, probe(name, replicas=2))
    with pytest.raises(ApiException) as err:
        patch_scale(api, cluster, name, {"spec": {"replicas": -1}})
    assert err.value.status == 422 and status_of(err.value)["reason"] == "Invalid"
    assert get(api, cluster, name)["spec"]["replicas"] == 2


def test_scale_of_a_missing_object_is_404_naming_it(cluster: Cluster, api):
    for call in (
        lambda: get_scale(api, cluster, "no-such-probe"),
        lambda: patch_scale(api, cluster, "no-such-probe", {"spec": {"replicas": 1}}),
    ):
        with pytest.raises(ApiException) as err:
            call()
        assert err.value.status == 404
        assert status_of(err.value)["details"]["name"] == "no-such-probe"


# ---------------------------------------------------------------------- delete, auth
def test_delete_then_404(cluster: Cluster, api, name):
    create(api, cluster, probe(name))
    deleted = api.delete_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, name)
    assert deleted["metadata"]["name"] == name or deleted.get("kind") == "Status"
    for call in (
        get,
        lambda a, c, n: a.delete_namespaced_custom_object(GROUP, VERSION, c.namespace, PLURAL, n),
    ):
        with pytest.raises(ApiException) as err:
            call(api, cluster, name)
        assert err.value.status == 404


def test_request_without_credentials_is_refused(cluster: Cluster, probe_crd):
    if not cluster.token:
        pytest.skip("the cluster was given without a token")
    status, body, _ = raw(
        cluster,
        "GET",
        f"/apis/{GROUP}/{VERSION}/namespaces/{cluster.namespace}/{PLURAL}",
        token=False,
    )
    assert status in (401, 403) and body["kind"] == "Status"
