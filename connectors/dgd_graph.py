"""Reading a DynamoGraphDeployment (DGD, ``nvidia.com/v1alpha1``): pure functions, no I/O.

Which service plays which role, what each service's spec asks for, what its status reports,
and whether a change is still rolling out (reference spec §11.1):

* a role's service is the one whose ``subComponentType`` is the role, else the backend's
  default service name (vLLM ``VllmPrefillWorker`` / ``VllmDecodeWorker`` / agg ``VllmWorker``,
  SGLang and mocker ``prefill`` / ``decode``, TRT-LLM ``prefill`` / ``decode`` / agg
  ``TRTLLMWorker``); an explicitly configured name wins over both;
* a service's ready count is ``status.services[s].availableReplicas`` if present, else
  ``readyReplicas``; it is *stable* when ``spec replicas == updatedReplicas == ready`` and the
  status describes the current spec (``status.observedGeneration >= metadata.generation``);
* a missing ``spec.services[s].replicas`` means 1 (the operator's default); a service absent
  from ``spec.services``, or whose ``replicas`` is not a non-negative integer, has an unknown
  (``None``) desired count, and :func:`spec_problems` says why;
* a role's per-GPU power cap is its service's ``dynamo.nvidia.com/gpu-power-limit`` pod
  annotation (``spec.services[s].extraPodMetadata.annotations``, watts as a string), read by
  :func:`gpu_power_limits`;
* a service that declares ``scalingAdapter: {enabled: true}`` has its replicas owned by its
  DGD Scaling Adapter (DGDSA, ``dynamographdeploymentscalingadapters``), named
  ``<dgd>-<service in lower case>`` (:func:`scaling_adapter_name`): it is scaled through the
  adapter's Scale subresource, never by writing the DGD (:func:`uses_scaling_adapter`).

>>> dgd = {"metadata": {"generation": 2}, "spec": {"services": {
...     "Frontend": {"componentType": "frontend", "replicas": 1},
...     "pw": {"subComponentType": "prefill", "replicas": 2},
...     "dw": {"subComponentType": "decode", "replicas": 3}}},
...     "status": {"observedGeneration": 2, "services": {
...     "pw": {"replicas": 2, "updatedReplicas": 2, "readyReplicas": 2},
...     "dw": {"replicas": 3, "updatedReplicas": 3, "readyReplicas": 2}}}}
>>> services = resolve_services(dgd, mode="disagg", backend="vllm")
>>> services
{'prefill': 'pw', 'decode': 'dw'}
>>> counts = worker_counts(dgd, services)
>>> counts.ready_num_decode, counts.expected_num_decode, counts.decode_scaling_in_progress
(2, 3, True)
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from schemas import Role, WorkerCounts
from schemas.events import MAX_GPU_POWER_W

DGD_GROUP = "nvidia.com"
DGD_VERSION = "v1alpha1"
DGD_PLURAL = "dynamographdeployments"
DGDSA_PLURAL = "dynamographdeploymentscalingadapters"
"""The DGD Scaling Adapter resource (same group and version as the DGD)."""


DEFAULT_SERVICE_NAMES: dict[str, dict[str, str]] = {
    "vllm": {"prefill": "VllmPrefillWorker", "decode": "VllmDecodeWorker", "agg": "VllmWorker"},
    "sglang": {"prefill": "prefill", "decode": "decode", "agg": "decode"},
    "trtllm": {"prefill": "prefill", "decode": "decode", "agg": "TRTLLMWorker"},
    "mocker": {"prefill": "prefill", "decode": "decode", "agg": "decode"},
}
"""Service names a backend's DGD examples use when ``subComponentType`` is not set."""

GPU_POWER_LIMIT_ANNOTATION = "dynamo.nvidia.com/gpu-power-limit"
"""The worker pod annotation carrying each GPU's power cap in watts (reference spec §8.2)."""


class DgdValidationError(ValueError):
    """The DGD cannot be driven: not found, not readable, or its services don't fit the mode.

    The message lists every problem found, and what was looked for.

    >>> isinstance(DgdValidationError("decode: no service"), ValueError)
    True
    """


def roles_for_mode(mode: str) -> tuple[Role, ...]:
    """The roles a planner mode scales (aggregated engines count as ``decode``).

    >>> roles_for_mode("disagg"), roles_for_mode("agg")
    (('prefill', 'decode'), ('decode',))
    """
    if mode == "disagg":
        return ("prefill", "decode")
    if mode == "prefill":
        return ("prefill",)
    if mode in ("decode", "agg"):
        return ("decode",)
    raise ValueError(f"unknown mode {mode!r}: expected disagg, agg, prefill or decode")


def default_service_name(backend: str, mode: str, role: Role) -> str:
    """The backend's conventional service name for ``role`` in ``mode``.

    >>> default_service_name("vllm", "agg", "decode")
    'VllmWorker'
    >>> default_service_name("sglang", "disagg", "prefill")
    'prefill'
    """
    check_backend(backend)
    return DEFAULT_SERVICE_NAMES[backend]["agg" if mode == "agg" else role]


def check_backend(backend: str) -> None:
    """Raise ``ValueError`` naming the known backends unless ``backend`` is one.

    >>> check_backend("foo")
    Traceback (most recent call last):
    ValueError: unknown backend 'foo': expected one of mocker, sglang, trtllm, vllm
    """
    if backend not in DEFAULT_SERVICE_NAMES:
        known = ", ".join(sorted(DEFAULT_SERVICE_NAMES))
        raise ValueError(f"unknown backend {backend!r}: expected one of {known}")


def _section(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """The mapping under ``key``; an empty one when it is absent or not a mapping."""
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


def _services(dgd: dict[str, Any]) -> dict[str, dict[str, Any]]:
    services = _section(_section(dgd, "spec"), "services")
    return {name: (svc if isinstance(svc, dict) else {}) for name, svc in services.items()}


def _describe(dgd: dict[str, Any]) -> str:
    parts = []
    for name, svc in sorted(_services(dgd).items()):
        sub = svc.get("subComponentType")
        parts.append(f"{name} (subComponentType: {sub})" if sub else name)
    return ", ".join(parts) or "none"


def resolve_services(
    dgd: dict[str, Any],
    *,
    mode: str,
    backend: str,
    explicit: dict[Role, str] | None = None,
) -> dict[Role, str]:
    """Map each role of ``mode`` to its service name; raises :class:`DgdValidationError`.

    >>> dgd = {"spec": {"services": {"a": {"subComponentType": "decode"},
    ...                              "b": {"subComponentType": "decode"}}}}
    >>> try:
    ...     resolve_services(dgd, mode="decode", backend="vllm")
    ... except DgdValidationError as err:
    ...     print(str(err).split(" (mode")[0])
    decode: 2 services have subComponentType: decode (a, b); name one explicitly
    """
    explicit = explicit or {}
    services = _services(dgd)
    resolved: dict[Role, str] = {}
    problems: list[str] = []
    for role in roles_for_mode(mode):
        name = explicit.get(role)
        if name is not None:
            if name not in services:
                problems.append(f"{role}: configured service {name!r} is not in spec.services")
                continue
            sub = services[name].get("subComponentType")
            if sub not in (None, "", "worker", role):
                problems.append(
                    f"{role}: configured service {name!r} has subComponentType: {sub}, not {role}"
                )
                continue
            resolved[role] = name
            continue
        matches = sorted(n for n, svc in services.items() if svc.get("subComponentType") == role)
        if len(matches) > 1:
            problems.append(
                f"{role}: {len(matches)} services have subComponentType: {role} "
                f"({', '.join(matches)}); name one explicitly"
            )
            continue
        if matches:
            resolved[role] = matches[0]
            continue
        default = default_service_name(backend, mode, role)
        sub = services.get(default, {}).get("subComponentType")
        if default in services and sub in (None, "", "worker", role):
            resolved[role] = default
            continue
        problems.append(
            f"{role}: no service has subComponentType: {role} and the {backend} default "
            f"name {default!r} is absent"
        )
    if not problems and len(set(resolved.values())) < len(resolved):
        problems.append(f"one service plays several roles: {resolved}")
    if problems:
        raise DgdValidationError(
            "; ".join(problems) + f" (mode {mode}; services present: {_describe(dgd)})"
        )
    return resolved


def uses_scaling_adapter(dgd: dict[str, Any], name: str) -> bool:
    """Whether service ``name`` declares its DGD Scaling Adapter (``scalingAdapter.enabled``
    true): its replicas are then the adapter's to set.

    >>> dgd = {"spec": {"services": {"dw": {"scalingAdapter": {"enabled": True}},
    ...                              "pw": {"scalingAdapter": {"enabled": False}}, "fe": {}}}}
    >>> [uses_scaling_adapter(dgd, s) for s in ("dw", "pw", "fe", "absent")]
    [True, False, False, False]
    """
    return _section(_services(dgd).get(name, {}), "scalingAdapter").get("enabled") is True


def scaling_adapter_name(dgd_name: str, service: str) -> str:
    """The name the operator gives the DGD Scaling Adapter of ``service`` (reference spec
    §11.1).

    >>> scaling_adapter_name("vllm-disagg", "VllmDecodeWorker")
    'vllm-disagg-vllmdecodeworker'
    """
    return f"{dgd_name}-{service.lower()}"


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if value >= 0 else None


@dataclass(frozen=True)
class ServiceState:
    """What the DGD says about one service: desired (spec) and observed (status) replicas.

    >>> ServiceState("dw", spec_replicas=3, ready=2, updated=3, observed=True).stable
    False
    """

    name: str
    spec_replicas: int | None
    ready: int | None
    updated: int | None
    observed: bool

    @property
    def stable(self) -> bool:
        """No change is rolling out: ``spec == updated == ready`` on a current status."""
        return (
            self.observed
            and self.ready is not None
            and self.spec_replicas == self.updated == self.ready
        )

    def describe(self) -> str:
        """A one-line account for logs and skip reasons."""
        text = f"{self.name}: spec {self.spec_replicas}, updated {self.updated}, ready {self.ready}"
        return text if self.observed else text + " (status not yet observed for this spec)"


def status_is_current(dgd: dict[str, Any]) -> bool:
    """Whether the status was written for the current spec (``observedGeneration``).

    A status without ``observedGeneration`` is taken as current (older operators omit it).

    >>> status_is_current({"metadata": {"generation": 3}, "status": {"observedGeneration": 2}})
    False
    """
    status = _section(dgd, "status")
    observed = status.get("observedGeneration")
    generation = _section(dgd, "metadata").get("generation")
    if not isinstance(observed, int) or not isinstance(generation, int):
        return True
    return observed >= generation


def service_state(dgd: dict[str, Any], name: str) -> ServiceState:
    """The spec and status counts of service ``name``.

    >>> dgd = {"spec": {"services": {"w": {}}},
    ...        "status": {"services": {"w": {"updatedReplicas": 1, "readyReplicas": 1,
    ...                                      "availableReplicas": 0}}}}
    >>> service_state(dgd, "w")
    ServiceState(name='w', spec_replicas=1, ready=0, updated=1, observed=True)
    """
    spec = _services(dgd).get(name)
    spec_replicas = None if spec is None else _count(spec.get("replicas", 1))
    svc_status = _section(_section(dgd, "status"), "services").get(name)
    ready = updated = None
    if isinstance(svc_status, dict):
        available = _count(svc_status.get("availableReplicas"))
        ready = available if available is not None else _count(svc_status.get("readyReplicas"))
        updated = _count(svc_status.get("updatedReplicas"))
    return ServiceState(name, spec_replicas, ready, updated, status_is_current(dgd))


def status_problems(dgd: dict[str, Any]) -> list[str]:
    """What is malformed in the parts of ``status`` the actuator reads (empty when nothing):
    ``status`` not a mapping, ``status.conditions`` not a list, a condition not a mapping or
    its ``status`` not a string.

    >>> status_problems({"status": {"conditions": 5}})
    ['status.conditions is a int, not a list']
    >>> status_problems({"status": {"conditions": [{"type": "Ready"}, "x"]}})
    ['status.conditions[1] is a str, not a mapping']
    >>> status_problems({"status": {}}), status_problems({})
    ([], [])
    """
    status = dgd.get("status")
    if status is None:
        return []
    if not isinstance(status, dict):
        return [f"status is a {type(status).__name__}, not a mapping"]
    conditions = status.get("conditions")
    if conditions is None:
        return []
    if not isinstance(conditions, list):
        return [f"status.conditions is a {type(conditions).__name__}, not a list"]
    problems = []
    for i, cond in enumerate(conditions):
        if not isinstance(cond, dict):
            problems.append(f"status.conditions[{i}] is a {type(cond).__name__}, not a mapping")
        elif "status" in cond and not isinstance(cond["status"], str):
            kind = type(cond["status"]).__name__
            problems.append(f"status.conditions[{i}].status is a {kind}, not a string")
    return problems


def ready_condition(dgd: dict[str, Any]) -> tuple[str, str]:
    """``(status, explanation)`` of the DGD's ``Ready`` condition; ``Unknown`` when absent or
    when ``status.conditions`` is not a list (the explanation then says what it is instead).

    >>> ready_condition({"status": {"conditions": [{"type": "Ready", "status": "False",
    ...                  "reason": "Scaling", "message": "1/2 ready"}]}})
    ('False', 'Scaling: 1/2 ready')
    >>> ready_condition({"status": {"conditions": True}})
    ('Unknown', 'malformed status: status.conditions is a bool, not a list')
    >>> ready_condition({"status": ["Ready"]})
    ('Unknown', 'malformed status: status is a list, not a mapping')
    """
    problems = status_problems(dgd)
    conditions = _section(dgd, "status").get("conditions")
    if not isinstance(conditions, list) and problems:
        return "Unknown", "malformed status: " + "; ".join(problems)
    for cond in conditions or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            value = cond.get("status", "Unknown")
            if not isinstance(value, str):  # e.g. a bare true: not the API's "True"
                kind = type(value).__name__
                return "Unknown", f"malformed status: the Ready condition's status is a {kind}"
            text = ": ".join(str(cond[k]) for k in ("reason", "message") if cond.get(k))
            return value, text
    if problems:
        return "Unknown", "no Ready condition in status (malformed status: " + "; ".join(
            problems
        ) + ")"
    return "Unknown", "no Ready condition in status"


def spec_problems(dgd: dict[str, Any], names: Collection[str]) -> list[str]:
    """Why the spec gives no desired replica count for some of the services ``names``
    (empty when it gives one for each).

    >>> spec_problems({"spec": {"services": {"a": {"replicas": "1"}, "b": {}}}}, ["a", "b", "c"])
    ['service(s) c no longer in the DGD', "a: spec replicas '1' is not a non-negative integer"]
    """
    services = _services(dgd)
    missing = [name for name in names if name not in services]
    problems = [f"service(s) {', '.join(missing)} no longer in the DGD"] if missing else []
    for name in names:
        value = services[name].get("replicas", 1) if name in services else 0
        if _count(value) is None:
            problems.append(f"{name}: spec replicas {value!r} is not a non-negative integer")
    return problems


def worker_counts(dgd: dict[str, Any], services: dict[Role, str]) -> WorkerCounts:
    """The planner's worker inventory from the DGD (roles not in ``services`` stay unknown).

    A role whose service is not stable is flagged ``scaling_in_progress``; one whose desired
    count the spec does not give (see :func:`spec_problems`) has ``expected`` ``None``.
    """
    fields: dict[str, Any] = {}
    for role, name in services.items():
        state = service_state(dgd, name)
        fields[f"ready_num_{role}"] = state.ready
        fields[f"expected_num_{role}"] = state.spec_replicas
        fields[f"{role}_scaling_in_progress"] = not state.stable
    return WorkerCounts(**fields)


_WHOLE_NUMBER = re.compile(r"[0-9]+")


def _power_cap(value: Any) -> int | str:
    """The watts an annotation value names, or why it names none."""
    if not isinstance(value, str):
        return f"is not a string but {type(value).__name__}"
    text = value.strip()
    if not _WHOLE_NUMBER.fullmatch(text):
        return "is not a whole number of watts"
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(MAX_GPU_POWER_W)):  # never int() an endless digit string
        return f"is above MAX_GPU_POWER_W ({MAX_GPU_POWER_W} W)"
    watts = int(digits)
    if watts < 1:
        return "is below 1 W"
    if watts > MAX_GPU_POWER_W:
        return f"is above MAX_GPU_POWER_W ({MAX_GPU_POWER_W} W)"
    return watts


def gpu_power_limits(
    dgd: dict[str, Any], services: dict[Role, str]
) -> tuple[dict[Role, int | None], list[str]]:
    """Each role's per-GPU power cap in watts, and the problems found reading them.

    The cap is the ``dynamo.nvidia.com/gpu-power-limit`` annotation of the role's service
    (``spec.services[s].extraPodMetadata.annotations``): a string holding a whole number of
    watts from 1 to ``MAX_GPU_POWER_W`` (surrounding whitespace allowed). A missing annotation
    (or service) gives ``None`` silently; any other value gives ``None`` and a problem naming
    the service, the annotation and the value.

    >>> def service(cap):
    ...     return {"extraPodMetadata": {"annotations": {GPU_POWER_LIMIT_ANNOTATION: cap}}}
    >>> dgd = {"spec": {"services": {"pw": service(" 350 "), "dw": service("350W"), "fe": {}}}}
    >>> caps, problems = gpu_power_limits(dgd, {"prefill": "pw", "decode": "dw"})
    >>> caps
    {'prefill': 350, 'decode': None}
    >>> print(problems[0])
    dw: annotation dynamo.nvidia.com/gpu-power-limit '350W' is not a whole number of watts
    >>> gpu_power_limits(dgd, {"decode": "fe"})
    ({'decode': None}, [])
    """
    specs = _services(dgd)
    caps: dict[Role, int | None] = {}
    problems: list[str] = []
    for role, name in services.items():
        annotations = _section(_section(specs.get(name, {}), "extraPodMetadata"), "annotations")
        if GPU_POWER_LIMIT_ANNOTATION not in annotations:
            caps[role] = None
            continue
        value = annotations[GPU_POWER_LIMIT_ANNOTATION]
        cap = _power_cap(value)
        if isinstance(cap, str):
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
            problems.append(f"{name}: annotation {GPU_POWER_LIMIT_ANNOTATION} {shown} {cap}")
            caps[role] = None
        else:
            caps[role] = cap
    return caps, problems
