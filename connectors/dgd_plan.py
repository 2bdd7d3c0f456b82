"""Planning one apply of a scaling decision on a DGD as read: pure functions, no I/O.

:class:`connectors.dgd.DgdActuator` reads the DGD (and the Scale of every scaling adapter),
plans with these functions, then writes. Planning decides which services to patch (those whose
target differs from what they ask for: an adapter's count, else the spec), whether the gates
let the patch through, the merge patch itself and how the change is described.

Gates, in order (:func:`plan_patch`): a managed service gone from the spec, or whose
``replicas`` is not a non-negative integer, fails the apply; a target that retracts our own
unfinished scale-up is applied at once (below); otherwise the DGD must be ``Ready``
(``skipped_not_ready``) and no managed service may be rolling out a previous change
(``skipped_in_flight``, spec §17 item 10).

The retraction rule (spec §17 item 7: pods stuck Pending for lack of GPUs can be given back).
A target is a retraction when, for every service the patch changes, all of these hold:

* it lies below the spec while the spec asks for more than are ready (``target < spec``,
  ``ready < spec``, :func:`retracts`); the patch gives back the replicas not ready, down to
  the target or to ready, whichever is more (``max(target, ready)``): a target below ready is
  a scale-down, which waits, like any change, for the DGD to be Ready again;
* the spec in flight is ours: the ``flowplanner/last-decision`` annotation is of the same
  deployment and its ``num_prefill`` / ``num_decode`` equals the service's current spec
  (a scale-up by a person or another controller is never retracted);
* the decision is newer than that patch's (a higher ``decision_id``) and was made after
  seeing its scale-up: the decision's ``expected_prefill`` / ``expected_decode`` (the
  counts asked for, as the planner's inventory showed them when it decided) equal the spec
  in flight. Newer is not enough: the decision right after ours is typically made from an
  inventory read before our patch landed (it asks for 2 believing 1 is asked for, not
  knowing 4 are on the way), and applying it would stack a change on the one in flight.

Anything else inside that range is gated like any change (not Ready, in flight), and the
skip reason says why it was not a retraction (:func:`not_a_retraction`).

>>> dgd = {"metadata": {"resourceVersion": "9"},
...        "spec": {"services": {"dw": {"replicas": 2}}},
...        "status": {"conditions": [{"type": "Ready", "status": "True"}],
...                   "services": {"dw": {"replicas": 2, "updatedReplicas": 2,
...                                       "readyReplicas": 2}}}}
>>> d = ScalingDecision(deployment="llama", decision_id=3, time=60.0, num_prefill=None,
...                     num_decode=3, reason="scale_up", source="load")
>>> plan_patch(dgd, {"decode": "dw"}, {"decode": 3}, d, {"dw": 2}, allow_retraction=True)
({'dw': 3}, None)
>>> patch_body(dgd, {"decode": "dw"}, {"dw": 3}, {}, d)["spec"]
{'services': {'dw': {'replicas': 3}}}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from connectors.dgd_api import MalformedResponseError
from connectors.dgd_graph import (
    ServiceState,
    ready_condition,
    service_state,
    spec_problems,
)
from schemas import DeliveredDecision, Role, ScalingDecision, describe_validation_error

__all__ = [
    "LAST_DECISION_ANNOTATION",
    "AdapterScale",
    "ApplyResult",
    "Outcome",
    "adapters_ahead",
    "asked_counts",
    "carries",
    "describe_change",
    "last_decision",
    "not_a_retraction",
    "patch_body",
    "plan_patch",
    "retracts",
    "spec_of",
]

LAST_DECISION_ANNOTATION = "flowplanner/last-decision"
"""The DGD annotation naming the decision whose replicas our last patch set."""

Outcome = Literal[
    "applied",
    "no_change",
    "skipped_not_ready",
    "skipped_in_flight",
    "stale",
    "superseded",
    "failed",
]
Skip = tuple[Outcome, str]
"""Why a planned patch must not be sent (yet): the outcome and its reason."""


@dataclass(frozen=True)
class ApplyResult:
    """What became of one scaling decision.

    ``patch`` maps service names to the replicas written (``applied``) or that would have been
    written (skips, failures). ``attempts`` counts PATCH requests sent; ``status_code`` is the
    HTTP status of the last failed request, if any.

    >>> ApplyResult("d", 1, "applied", "scaled", {"VllmDecodeWorker": 3}, attempts=1).ok
    True
    """

    deployment: str
    decision_id: int
    outcome: Outcome
    reason: str
    patch: dict[str, int] = field(default_factory=dict)
    attempts: int = 0
    status_code: int | None = None

    @property
    def ok(self) -> bool:
        """The DGD now asks for the decision's targets (applied, or already equal)."""
        return self.outcome in ("applied", "no_change")


@dataclass(frozen=True)
class AdapterScale:
    """The Scale of a service's DGD Scaling Adapter: the replicas it asks for, as of
    ``resource_version``.

    >>> AdapterScale.of("dw", "d-dw", {"metadata": {"resourceVersion": "7"}, "spec": {}})
    AdapterScale(service='dw', adapter='d-dw', replicas=0, resource_version='7')
    """

    service: str
    adapter: str
    replicas: int
    resource_version: str

    @classmethod
    def of(cls, service: str, adapter: str, scale: object) -> AdapterScale:
        """Read an ``autoscaling/v1`` Scale (``spec.replicas`` is left out when 0); raises
        :class:`MalformedResponseError` for anything else."""
        if not isinstance(scale, dict):
            raise MalformedResponseError(f"a {type(scale).__name__}, not a Scale")
        spec, metadata = scale.get("spec"), scale.get("metadata")
        replicas = spec.get("replicas", 0) if isinstance(spec, dict) else None
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise MalformedResponseError(f"a Scale whose spec.replicas is {replicas!r}")
        if not isinstance(version, str) or not version:
            raise MalformedResponseError("a Scale without metadata.resourceVersion")
        return cls(service, adapter, replicas, version)


def spec_of(dgd: dict[str, Any], service: str) -> int | None:
    """The replicas the DGD's spec asks of ``service`` (``None``: unknown)."""
    return service_state(dgd, service).spec_replicas


def asked_counts(
    dgd: dict[str, Any], services: dict[Role, str], scales: dict[str, AdapterScale]
) -> dict[str, int | None]:
    """What each managed service asks for now: its adapter's Scale if it has one, else the
    DGD's spec.

    >>> asked_counts({"spec": {"services": {"dw": {"replicas": 2}}}}, {"decode": "dw"}, {})
    {'dw': 2}
    """
    asked = {service: spec_of(dgd, service) for service in services.values()}
    asked.update({service: scale.replicas for service, scale in scales.items()})
    return asked


def adapters_ahead(dgd: dict[str, Any], scales: dict[str, AdapterScale]) -> str:
    """Why a change of an adapter is still on its way to the DGD (empty: none is)."""
    ahead = [
        f"{service}: its scaling adapter {scale.adapter} asks for {scale.replicas}, the DGD "
        f"for {spec_of(dgd, service)}"
        for service, scale in scales.items()
        if scale.replicas != spec_of(dgd, service)
    ]
    return "adapter change not yet in the DGD: " + "; ".join(ahead) if ahead else ""


def plan_patch(
    dgd: dict[str, Any],
    services: dict[Role, str],
    targets: dict[Role, int],
    decision: ScalingDecision,
    asked: dict[str, int | None],
    *,
    allow_retraction: bool,
) -> tuple[dict[str, int], Skip | None]:
    """The services to patch (whose target differs from what they ask for, ``asked``) and, if
    the patch must not be sent (yet), why (the gates of the module docs)."""
    patch = {services[r]: n for r, n in targets.items() if asked[services[r]] != n}
    if not patch:
        return patch, None
    problems = spec_problems(dgd, services.values())
    if problems:
        return patch, ("failed", "; ".join(problems))
    states = {role: service_state(dgd, name) for role, name in services.items()}
    moved = {r: n for r, n in targets.items() if services[r] in patch}
    note = ""
    if allow_retraction and all(retracts(states[r], n) for r, n in moved.items()):
        why_not = not_a_retraction(dgd, states, moved, decision)
        if why_not is None:  # never below ready: the rest of a scale-down waits for Ready
            return {services[r]: max(n, states[r].ready or 0) for r, n in moved.items()}, None
        note = f"; not a retraction: {why_not}"
    status, why = ready_condition(dgd)
    if status != "True":
        return patch, ("skipped_not_ready", f"DGD Ready condition is {status} ({why}){note}")
    unstable = [s.describe() for s in states.values() if not s.stable]
    if unstable:
        return patch, (
            "skipped_in_flight",
            "previous change still rolling out: " + "; ".join(unstable) + note,
        )
    return patch, None


def retracts(state: ServiceState, target: int) -> bool:
    """The target gives back some of an unfinished scale-up (target < spec, ready < spec):
    the replicas not ready, down to the target or to ready, whichever is more.

    >>> retracts(ServiceState("dw", spec_replicas=4, ready=1, updated=4, observed=True), 2)
    True
    """
    return (
        state.ready is not None
        and state.spec_replicas is not None
        and state.ready < state.spec_replicas
        and target < state.spec_replicas
    )


def not_a_retraction(
    dgd: dict[str, Any],
    states: dict[Role, ServiceState],
    moved: dict[Role, int],
    decision: ScalingDecision,
) -> str | None:
    """Why targets below a spec that asks for more than are ready (``moved``) may not retract
    the scale-up in flight; ``None`` when they may (the rule is in the module docs)."""
    mark, problem = last_decision(dgd)
    if mark is None:
        return problem or f"the DGD has no {LAST_DECISION_ANNOTATION} annotation of ours"
    if mark.deployment != decision.deployment:
        return f"the last patch of ours was for deployment {mark.deployment!r}"
    for role in moved:
        prefill = role == "prefill"
        ours = mark.num_prefill if prefill else mark.num_decode
        seen = decision.expected_prefill if prefill else decision.expected_decode
        spec = states[role].spec_replicas
        if ours != spec:
            return (
                f"{states[role].name} spec {spec} is not what our last patch (decision "
                f"{mark.decision_id}) set ({ours}): someone else changed it"
            )
        if decision.decision_id <= mark.decision_id:
            return (
                f"decision {decision.decision_id} is not newer than decision "
                f"{mark.decision_id}, which set the spec in flight"
            )
        if seen != spec:
            return (
                f"decision {decision.decision_id} was made seeing {seen} {role} replicas "
                f"asked for, not the {spec} in flight: it did not see the scale-up"
            )
    return None


def last_decision(dgd: dict[str, Any]) -> tuple[DeliveredDecision | None, str | None]:
    """The decision the ``flowplanner/last-decision`` annotation names, and why there is none
    when the annotation is present but unreadable.

    >>> last_decision({"metadata": {"annotations": {LAST_DECISION_ANNOTATION: "{"}}})[1]
    'Invalid JSON: EOF while parsing an object at line 1 column 1'
    """
    metadata = dgd.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    raw = annotations.get(LAST_DECISION_ANNOTATION) if isinstance(annotations, dict) else None
    if raw is None:
        return None, None
    if not isinstance(raw, str):
        return None, f"not a string but {type(raw).__name__}"
    try:
        return DeliveredDecision.model_validate_json(raw), None
    except ValidationError as err:
        return None, describe_validation_error(err)


def carries(dgd: dict[str, Any], decision: ScalingDecision) -> bool:
    """The DGD's last-decision annotation names ``decision``: its DGD patch is in."""
    mark, _ = last_decision(dgd)
    return (
        mark is not None
        and mark.deployment == decision.deployment
        and mark.decision_id == decision.decision_id
    )


def patch_body(
    dgd: dict[str, Any],
    services: dict[Role, str],
    patch: dict[str, int],
    scales: dict[str, AdapterScale],
    decision: ScalingDecision,
    *,
    resource_version_precondition: bool = True,
) -> dict[str, Any]:
    """The DGD merge patch: the last-decision annotation, the ``resourceVersion``
    precondition and the replicas of the services without an adapter (a service with one is
    written through its adapter's Scale instead). Raises :class:`pydantic.ValidationError` for a
    decision the annotation cannot record."""
    # what each managed service is left asking for: the patch, else the spec as read
    left = {role: patch.get(svc, spec_of(dgd, svc)) for role, svc in services.items()}
    targets_left = {"num_prefill": left.get("prefill"), "num_decode": left.get("decode")}
    mark = DeliveredDecision.of(decision.model_copy(update=targets_left)).model_dump_json()
    metadata: dict[str, Any] = {"annotations": {LAST_DECISION_ANNOTATION: mark}}
    if resource_version_precondition:
        metadata["resourceVersion"] = dgd["metadata"]["resourceVersion"]
    body: dict[str, Any] = {"metadata": metadata}
    direct = {svc: {"replicas": n} for svc, n in patch.items() if svc not in scales}
    if direct:
        body["spec"] = {"services": direct}
    return body


def describe_change(
    dgd: dict[str, Any],
    services: dict[Role, str],
    targets: dict[Role, int],
    patch: dict[str, int],
    scales: dict[str, AdapterScale],
) -> str:
    """The changes, one per service, for the log and the result."""
    steps = ", ".join(
        f"{svc} {spec_of(dgd, svc)} → {n}"
        + (f" (through scaling adapter {scales[svc].adapter})" if svc in scales else "")
        for svc, n in sorted(patch.items())
    )
    if any(patch.get(services[r], n) != n for r, n in targets.items()):
        steps += (
            " (a retraction gives back only the replicas not ready; the rest waits for "
            "the DGD to be Ready)"
        )
    return steps
