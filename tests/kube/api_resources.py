"""Resource types the test API server serves: CRD validation, CRD status, version order.

>>> crd_resource_type().group_resource
'customresourcedefinitions.apiextensions.k8s.io'
>>> sorted(["v1alpha1", "v2", "v1", "v1beta2"], key=version_priority)
['v2', 'v1', 'v1beta2', 'v1alpha1']
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .api_status import invalid, not_found_page
from .openapi_schema import Cause

CRD_GROUP = "apiextensions.k8s.io"
CRD_PLURAL = "customresourcedefinitions"
_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


@dataclass(frozen=True)
class ScaleInfo:
    """A version's scale subresource: where in the object the Scale's fields live (JSON paths
    as key lists: ``.spec.replicas`` is ``("spec", "replicas")``)."""

    spec_replicas: tuple[str, ...]
    status_replicas: tuple[str, ...]
    label_selector: tuple[str, ...] | None = None


@dataclass
class VersionInfo:
    """One version of a resource type: its schema, whether it has a status subresource, and
    its scale subresource if any."""

    schema: dict[str, Any] | None
    status_subresource: bool
    scale: ScaleInfo | None = None


@dataclass
class ResourceType:
    """A resource the server serves (a CRD's names, scope and versions)."""

    group: str
    plural: str
    singular: str
    kind: str
    list_kind: str
    namespaced: bool
    versions: dict[str, VersionInfo]
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)

    @property
    def group_resource(self) -> str:
        """``<plural>.<group>``, as it appears in error messages."""
        return f"{self.plural}.{self.group}"


def now_rfc3339() -> str:
    """The current time as Kubernetes writes timestamps."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Kubernetes version ordering: GA > beta > alpha, higher numbers first."""
    m = _VERSION.match(version)
    if not m:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0), version)


def crd_resource_type() -> ResourceType:
    """The built-in ``customresourcedefinitions`` resource."""
    return ResourceType(
        group=CRD_GROUP,
        plural=CRD_PLURAL,
        singular="customresourcedefinition",
        kind="CustomResourceDefinition",
        list_kind="CustomResourceDefinitionList",
        namespaced=False,
        versions={"v1": VersionInfo(schema=None, status_subresource=True)},
        short_names=["crd", "crds"],
    )


def resource_type_of_crd(crd: dict[str, Any]) -> ResourceType:
    """Validate a CRD (422 ``Invalid`` listing every problem) and return the type it defines."""
    rt = crd_resource_type()
    name = crd["metadata"]["name"]
    spec = crd.get("spec") if isinstance(crd.get("spec"), dict) else {}
    group = spec.get("group") or ""
    names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
    plural, kind = names.get("plural") or "", names.get("kind") or ""
    causes = _crd_names_causes(name, group, plural, kind)
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        causes.append(
            Cause(
                "FieldValueNotSupported",
                "spec.scope",
                f'Unsupported value: "{scope}": supported values: "Cluster", "Namespaced"',
            )
        )
    versions = spec.get("versions") if isinstance(spec.get("versions"), list) else []
    causes.extend(_storage_version_causes(versions))
    served = _served_versions(versions, causes)
    if causes:
        raise invalid(rt, name, causes)
    return ResourceType(
        group=group,
        plural=plural,
        singular=names.get("singular") or kind.lower(),
        kind=kind,
        list_kind=names.get("listKind") or f"{kind}List",
        namespaced=scope == "Namespaced",
        versions=served,
        short_names=list(names.get("shortNames") or []),
        categories=list(names.get("categories") or []),
    )


def _crd_names_causes(name: str, group: str, plural: str, kind: str) -> list[Cause]:
    """A CRD's naming problems: its group (a domain), plural and kind, then its own name
    (``<plural>.<group>``)."""
    causes: list[Cause] = []
    if not group:
        causes.append(Cause("FieldValueRequired", "spec.group", "Required value"))
    elif "." not in group:
        causes.append(
            Cause(
                "FieldValueInvalid",
                "spec.group",
                f'Invalid value: "{group}": should be a domain with at least one dot',
            )
        )
    if not plural:
        causes.append(Cause("FieldValueRequired", "spec.names.plural", "Required value"))
    if not kind:
        causes.append(Cause("FieldValueRequired", "spec.names.kind", "Required value"))
    if group and plural and name != f"{plural}.{group}":
        causes.append(
            Cause(
                "FieldValueInvalid",
                "metadata.name",
                f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
            )
        )
    return causes


def _storage_version_causes(versions: list[Any]) -> list[Cause]:
    """The problem, if any, with a CRD's versions as a whole: exactly one is the storage
    version."""
    if not versions:
        message = "Invalid value: null: must have exactly one version marked as storage version"
    elif sum(1 for v in versions if isinstance(v, dict) and v.get("storage")) != 1:
        message = "Invalid value: must have exactly one version marked as storage version"
    else:
        return []
    return [Cause("FieldValueInvalid", "spec.versions", message)]


def _served_versions(versions: list[Any], causes: list[Cause]) -> dict[str, VersionInfo]:
    """The served versions of a CRD by name (each one's problems → ``causes``: a name and a
    schema are required, the scale subresource checked)."""
    served: dict[str, VersionInfo] = {}
    for i, v in enumerate(versions):
        if not isinstance(v, dict) or not v.get("name"):
            causes.append(Cause("FieldValueRequired", f"spec.versions[{i}].name", "Required value"))
            continue
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, dict):
            causes.append(
                Cause(
                    "FieldValueRequired",
                    f"spec.versions[{i}].schema.openAPIV3Schema",
                    "Required value: schemas are required",
                )
            )
            continue
        subresources = v.get("subresources") or {}
        scale = _scale_info(subresources.get("scale"), f"spec.versions[{i}]", causes)
        if v.get("served"):
            status = "status" in subresources
            served[v["name"]] = VersionInfo(schema=schema, status_subresource=status, scale=scale)
    return served


def _scale_path(
    value: Any, field_path: str, under: tuple[str, ...], causes: list[Cause]
) -> tuple[str, ...] | None:
    """A scale JSON path (``.spec.replicas``) as keys, if it lies under one of ``under``."""
    if not isinstance(value, str) or not value:
        causes.append(Cause("FieldValueRequired", field_path, "Required value"))
        return None
    keys = tuple(value.split(".")[1:]) if value.startswith(".") else ()
    if len(keys) < 2 or keys[0] not in under or not all(keys):
        places = " or ".join(f".{u}" for u in under)
        message = f'Invalid value: "{value}": should be a json path under {places}'
        causes.append(Cause("FieldValueInvalid", field_path, message))
        return None
    return keys


def _scale_info(scale: Any, where: str, causes: list[Cause]) -> ScaleInfo | None:
    """The scale subresource of a CRD version (``None`` if it has none; problems → causes)."""
    if scale is None:
        return None
    at = f"{where}.subresources.scale"
    scale = scale if isinstance(scale, dict) else {}
    spec = _scale_path(scale.get("specReplicasPath"), f"{at}.specReplicasPath", ("spec",), causes)
    status = _scale_path(
        scale.get("statusReplicasPath"), f"{at}.statusReplicasPath", ("status",), causes
    )
    selector = None
    if scale.get("labelSelectorPath") is not None:
        selector = _scale_path(
            scale["labelSelectorPath"], f"{at}.labelSelectorPath", ("spec", "status"), causes
        )
    if spec is None or status is None:
        return None
    return ScaleInfo(spec, status, selector)


def crd_status(crd: dict[str, Any]) -> dict[str, Any]:
    """The status of a CRD once accepted: names accepted, Established."""
    names = dict(crd["spec"]["names"])
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", f"{names['kind']}List")
    now = now_rfc3339()
    storage = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
    return {
        "acceptedNames": names,
        "storedVersions": [storage],
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": now,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": now,
            },
        ],
    }


def discovery_document(types: Iterable[ResourceType], segments: list[str]) -> dict[str, Any]:
    """``/apis`` (no segments), ``/apis/<group>`` or ``/apis/<group>/<version>``."""
    types = list(types)
    groups: dict[str, set[str]] = {}
    for rt in types:
        groups.setdefault(rt.group, set()).update(rt.versions)

    def group_body(name: str) -> dict[str, Any]:
        versions = sorted(groups[name], key=version_priority)
        entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"name": name, "versions": entries, "preferredVersion": entries[0]}

    if not segments:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [group_body(g) for g in sorted(groups)],
        }
    group = segments[0]
    if group not in groups:
        raise not_found_page()
    if len(segments) == 1:
        return {"kind": "APIGroup", "apiVersion": "v1", **group_body(group)}
    version = segments[1]
    if version not in groups[group]:
        raise not_found_page()
    resources: list[dict[str, Any]] = []
    for rt in sorted(types, key=lambda r: r.plural):
        if rt.group != group or version not in rt.versions:
            continue
        entry: dict[str, Any] = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": [
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "create",
                "update",
                "watch",
            ],
        }
        if rt.short_names:
            entry["shortNames"] = rt.short_names
        if rt.categories:
            entry["categories"] = rt.categories
        resources.append(entry)
        if rt.versions[version].status_subresource:
            resources.append(
                {
                    "name": f"{rt.plural}/status",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if rt.versions[version].scale is not None:
            resources.append(
                {
                    "name": f"{rt.plural}/scale",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": resources,
    }
