"""The Kubernetes DGD actuator: reads worker inventory from, and applies scaling decisions to, a
DynamoGraphDeployment (``nvidia.com/v1alpha1``, reference spec §11.1).

Finding the DGD
    Its name comes from the config (``dgd://<namespace>/<name>``) or the environment variable
    ``DYN_PARENT_DGD_K8S_NAME``; its namespace from the config, else the pod's service account
    (``/var/run/secrets/kubernetes.io/serviceaccount/namespace``), else ``default``. The API
    server, its CA and our credentials come from the in-cluster config (the pod's service
    account), with the local kubeconfig as fallback (see
    :func:`connectors.dgd_api.kube_api_client`). An explicit host URL
    (``dgd://NS/NAME?host=URL``) overrides only the server address: the credentials and CA of
    that configuration are kept when there is one, and none are needed when there is not (a
    local test server). ``?token_file=PATH`` (a bearer token, re-read on every request,
    as rotated tokens need) and ``?ca=PATH`` (a private CA bundle) override those.

Bounded requests
    Every request (reads of the DGD and of scaling adapters, patches) is bounded *as a whole*
    by ``request_timeout_s`` (connect, headers and body, :func:`connectors.http_deadline.bounded`):
    urllib3's own timeout bounds each socket read, so an API server that trickles its answer a
    byte at a time would hold a request for ever. A request cut off is logged as a warning
    and fails like a timeout: a read error (``flowplanner_dgd_read_errors_total``) or a
    ``failed`` apply attempt, retried by the rules below; an apply is so bounded by
    ``max_attempts`` × (requests of an attempt × ``request_timeout_s`` + backoff).

Start-up validation (:meth:`DgdActuator.validate`)
    The DGD must exist and be readable, and every role of the planner's mode must map to exactly
    one service: by ``subComponentType`` (``prefill`` / ``decode``), else by the backend's
    default name (see :mod:`connectors.dgd_graph`), else by a name given explicitly. Anything
    else raises :class:`DgdValidationError` naming what is missing or ambiguous and listing the
    services present (spec §17 item 8: name mismatches must fail loudly, not divide by zero).

Reading the DGD
    A GET that succeeds but does not return a DGD object (an ingress's HTML error page, a JSON
    list, an object without ``metadata.resourceVersion``, a body that is not UTF-8) is a failed
    read, retried like a 5xx: :meth:`DgdActuator.read` then raises
    :class:`DgdUnavailableError`, ``validate`` :class:`DgdValidationError`, and ``apply``
    returns ``failed``.

Inventory (:meth:`DgdActuator.read_inventory`)
    ``ready`` = ``status.services[s].availableReplicas`` (else ``readyReplicas``), ``expected``
    = ``spec.services[s].replicas``, ``scaling_in_progress`` unless
    ``spec == updatedReplicas == ready`` on a status that has observed the current generation.
    A service gone from the spec, or whose ``replicas`` is not a non-negative integer, has an
    unknown (``None``) expected count; that is logged as a warning when it starts or changes.
    A count no fleet has (above ``schemas.events.MAX_REPLICAS``, or beyond u64) makes the read
    fail (:class:`DgdUnavailableError`, counted in ``flowplanner_dgd_read_errors_total``).
    :meth:`DgdActuator.read_fleet` returns the same counts with, from the same read, each
    role's per-GPU power cap (the service's ``dynamo.nvidia.com/gpu-power-limit`` pod
    annotation, see :func:`connectors.dgd_graph.gpu_power_limits`) and why a cap is unknown.

Applying a decision (:meth:`DgdActuator.apply`)
    One JSON merge patch of the DGD (``Content-Type: application/merge-patch+json``)::

        {"metadata": {"resourceVersion": "<as read>",
                      "annotations": {"flowplanner/last-decision": "<DeliveredDecision>"}},
         "spec": {"services": {"<Service>": {"replicas": N}}}}

    carrying only the roles whose target differs from the spec (equal → ``no_change``). The
    annotation records the decision (a :class:`schemas.DeliveredDecision` as JSON:
    ``deployment``, ``decision_id``, ``time``) and what every managed service is left asking
    for (``num_prefill`` / ``num_decode``: the patched count, else the spec as read), so
    a restarted planner reads it back (:meth:`DgdActuator.delivered`) and does not apply
    the decisions of its replayed history again. The
    ``resourceVersion`` precondition makes the patch apply to exactly the state the checks
    below were made on; a 409 Conflict (someone else wrote in between) means re-read, re-check,
    re-patch. It fails, with a reason, when a managed service is gone from the spec or its
    ``replicas`` is not a non-negative integer. It is skipped, with a reason, when the DGD
    ``Ready`` condition is not ``"True"`` (``skipped_not_ready``) or when any managed service is
    still rolling out a previous change (``skipped_in_flight``: never stack a second change on
    one in flight, spec §17 item 10).
    A status that is malformed (``status`` or ``status.conditions`` of the wrong type) counts
    as not Ready, with a warning naming what is wrong.

    One exception (spec §17 item 7): a target that only *retracts our own* unfinished scale-up
    (below a spec that asks for more than are ready, after a patch of ours that this decision
    saw) is applied even then, giving back only the replicas not ready, so pods stuck Pending
    for lack of GPUs can be given back. The rule, and the planning of every apply, are in
    :mod:`connectors.dgd_plan`; anything else inside that range is gated like any change, and
    the skip reason says why it was not a retraction.

    Services with a scaling adapter (reference spec §11.1, path 1). A service that declares
    ``scalingAdapter: {enabled: true}`` has its replicas owned by its DGD Scaling Adapter
    (``dynamographdeploymentscalingadapters/<dgd>-<service in lower case>``, see
    :mod:`connectors.dgd_graph`), which the operator copies into the DGD. It is scaled strictly
    through the adapter's Scale subresource: its ``replicas`` are left out of the DGD patch,
    and once the DGD patch (the annotation, the precondition, the other services) is in, the
    adapter gets the merge patch ``{"metadata": {"resourceVersion": "<as read>"}, "spec":
    {"replicas": N}}`` on ``.../<adapter>/scale``. Every attempt reads the Scale of every
    managed service that declares an adapter (one GET each, before anything is written, before
    the ``no_change`` check too), and such a service asks for its adapter's count, not the
    DGD's: a decision equal to those counts is ``no_change``, and a decision is
    ``skipped_in_flight`` while any adapter asks for another count than the DGD's spec, whether
    or not the decision changes that service (a change of the adapter's own, not yet copied
    into the DGD, is never stacked on nor undone unseen). An adapter that is missing (404)
    fails the apply with a message naming it, with no fallback to the DGD.

    Order and crash semantics. The DGD patch goes first: its ``resourceVersion`` precondition
    is what makes the change apply to the DGD state the gates were checked on (the Scale's own
    precondition only guards the adapter), and it carries the annotation even when every
    service it changes has an adapter. Adapters first would not work: the operator copying an
    adapter into the DGD changes its resourceVersion, so the DGD patch would meet a 409 and its
    re-check would find the DGD rolling out that copy and skip, half-applied; and a crash in
    between would leave a change that no annotation names. Once this apply's DGD patch is in
    (its answer came back, or a re-read finds this decision's id in the annotation after an
    answer was lost), a retried attempt does not plan again: the DGD rolling out is this
    apply's own change, so it only writes the adapters still short of their targets, ungated,
    from a fresh read of their Scales; an adapter set to a third count meanwhile is not
    overwritten. An apply left half-done is never reported as a skip: it is ``failed`` with a
    reason ending ``(partly applied: written the flowplanner/last-decision annotation of
    decision N, <direct services>; not written: <adapter services>)``. The annotation then
    names the decision with the targets planned, and so it is after a crash between the two
    writes: a restarted planner treats that decision as delivered and does not replay it, and
    the next decision plans from the adapters' counts as read.

    Services without one are patched in the DGD directly (path 2), with no attempt at an
    adapter first: the reference tries ``<dgd>-<service>`` for every service and falls back
    on a 404, but the operator makes adapters only for services that declare one, so for the
    others that request is a 404 every apply (a request, and an RBAC grant, for nothing), and
    a stray adapter of a service that does not declare one is not what the operator copies
    into the DGD. An operator whose adapters are on by default and not declared in the DGD
    needs ``scalingAdapter: {enabled: true}`` written out for the planner to use them.

    409 and 429/5xx,
    timeouts, connection errors and malformed answers are retried with bounded exponential
    backoff (``Retry-After`` honoured, capped); other errors (401, 403, 404, 422) are not. A
    409 or a retried error of any request of an attempt starts the next attempt from the read
    (which, once the DGD patch is in, finishes the adapter writes, as above).
    A PATCH that got no answer (timeout, dropped connection, unreadable response) may have
    committed: if the re-read (of the DGD, and of the adapters) then shows the targets in
    place, the outcome is ``applied``, with a note.
    ``apply`` never raises on API errors: it returns an :class:`ApplyResult` that the flow logs
    and counts (``flowplanner_dgd_actions_total{dgd, outcome}``). What an apply has done over
    its attempts, and how a failed request ends it or retries, is kept in
    :mod:`connectors.dgd_apply`.

RBAC the planner's service account needs (namespace-scoped Role)::

    - apiGroups: ["nvidia.com"]
      resources: ["dynamographdeployments"]
      verbs: ["get", "patch"]
    - apiGroups: ["nvidia.com"]
      resources: ["dynamographdeploymentscalingadapters/scale"]
      verbs: ["get", "patch"]

(``get`` on the DGD already returns its status. The adapter rule is used only for services
that declare a scaling adapter; 401 and 403 are told apart in the errors: a 401 is a token
missing, expired or wrong, a 403 a service account without these grants.)

>>> result = ApplyResult("llama", 4, "skipped_in_flight", "VllmDecodeWorker: spec 3, ready 2")
>>> result.ok, result.outcome
(False, 'skipped_in_flight')
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter
from pydantic import ValidationError

from connectors.dgd_api import (
    REQUEST_ERRORS,
    MalformedResponseError,
    RequestDeadlineError,
    error_text,
    kube_api_client,
    names_object,
    pod_namespace,
    retry_after,
    transient,
)
from connectors.dgd_apply import ApplyRun, RequestFailed, request_step
from connectors.dgd_graph import (
    DGD_GROUP,
    DGD_PLURAL,
    DGD_VERSION,
    DGDSA_PLURAL,
    DgdValidationError,
    default_service_name,
    gpu_power_limits,
    resolve_services,
    roles_for_mode,
    scaling_adapter_name,
    spec_problems,
    status_problems,
    uses_scaling_adapter,
    worker_counts,
)
from connectors.dgd_plan import (
    LAST_DECISION_ANNOTATION,
    AdapterScale,
    ApplyResult,
    adapters_ahead,
    asked_counts,
    carries,
    describe_change,
    last_decision,
    patch_body,
    plan_patch,
    spec_of,
)
from connectors.http_deadline import bounded, watch_pools
from schemas import (
    DeliveredDecision,
    Role,
    ScalingDecision,
    WorkerCounts,
    describe_validation_error,
)
from schemas.events import inventory_implausibility

__all__ = [
    "DGD_NAME_ENV",
    "LAST_DECISION_ANNOTATION",
    "ApplyResult",
    "DgdActuator",
    "DgdUnavailableError",
    "DgdValidationError",
    "FleetReading",
]

log = logging.getLogger(__name__)

DGD_NAME_ENV = "DYN_PARENT_DGD_K8S_NAME"
MERGE_PATCH = "application/merge-patch+json"
T = TypeVar("T")

DGD_ACTIONS = Counter(
    "flowplanner_dgd_actions", "Scaling decisions handled by the DGD actuator", ["dgd", "outcome"]
)
DGD_READ_ERRORS = Counter(
    "flowplanner_dgd_read_errors", "Failed reads of a DGD (inventory polls)", ["dgd"]
)


@dataclass(frozen=True)
class FleetReading:
    """One read of the DGD: the worker inventory and each role's per-GPU power cap (watts;
    ``None`` when unknown), with why a cap that is present could not be read.

    >>> reading = FleetReading(WorkerCounts(ready_num_decode=2), {"decode": 700}, ())
    >>> reading.counts.ready_num_decode, reading.gpu_power_limits
    (2, {'decode': 700})
    """

    counts: WorkerCounts
    gpu_power_limits: dict[Role, int | None]
    power_problems: tuple[str, ...]


class DgdUnavailableError(RuntimeError):
    """The DGD could not be read (after retries); carries the last HTTP status if any.

    >>> DgdUnavailableError("cannot read DGD ns/x: HTTP 503: busy", 503).status_code
    503
    """

    def __init__(
        self, message: str, status_code: int | None = None, names_object: bool = False
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.names_object = names_object
        """The API server's answer names the object (``details.name``): a 404 then means the
        object is missing, not the resource type (no CRD, or not at this version)."""


def _check_dgd(obj: object) -> dict[str, Any]:
    """``obj`` if it looks like a stored object (a JSON object with a resourceVersion)."""
    if not isinstance(obj, dict):
        raise MalformedResponseError(f"a {type(obj).__name__}, not an object: {str(obj)[:80]!r}")
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not metadata.get("resourceVersion"):
        raise MalformedResponseError("an object without metadata.resourceVersion")
    return obj


class DgdActuator:
    """Reads and scales one DGD through the Kubernetes API (see the module docs).

    ``sleep`` is called for every backoff (inject a recorder in tests); backoff doubles from
    ``backoff_s`` up to ``max_backoff_s``, for at most ``max_attempts`` tries per call.
    ``services`` names a role's service explicitly (overrides resolution by
    ``subComponentType`` and default names). ``allow_retraction=False`` gates every change,
    retractions too (module docs). Thread-safe: calls are serialized. Build
    ``api_client`` with :func:`kube_api_client` (a default client lets urllib3 retry a 503 with
    ``Retry-After`` by itself, sleeping outside the actuator's control).

    >>> actuator = DgdActuator(kube_api_client("http://127.0.0.1:1"), "ns", "llama-disagg",
    ...                        mode="disagg", backend="vllm")
    >>> actuator.dgd, actuator.roles
    ('ns/llama-disagg', ('prefill', 'decode'))
    """

    def __init__(
        self,
        api_client: k8s.ApiClient,
        namespace: str,
        name: str,
        *,
        mode: str = "disagg",
        backend: str = "vllm",
        services: dict[Role, str] | None = None,
        max_attempts: int = 5,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        sleep: Callable[[float], None] = time.sleep,
        request_timeout_s: float = 10.0,
        resource_version_precondition: bool = True,
        allow_retraction: bool = True,
    ) -> None:
        if not name:
            raise DgdValidationError(f"no DGD name: pass one or set {DGD_NAME_ENV}")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.namespace = namespace
        self.name = name
        self.mode = mode
        self.backend = backend
        self.roles = roles_for_mode(mode)
        for role in self.roles:
            default_service_name(backend, mode, role)  # rejects an unknown backend now
        self.explicit_services = dict(services or {})
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.sleep = sleep
        self.request_timeout_s = request_timeout_s
        self.resource_version_precondition = resource_version_precondition
        self.allow_retraction = allow_retraction
        watch_pools(api_client.rest_client.pool_manager)  # requests bounded as a whole
        self._api = k8s.CustomObjectsApi(api_client)
        self._lock = threading.Lock()
        self._services: dict[Role, str] | None = None
        self._newest_decision: dict[str, int] = {}
        self._spec_problems = ""
        self._status_problems = ""

    @classmethod
    def from_environment(
        cls,
        *,
        name: str | None = None,
        namespace: str | None = None,
        host: str | None = None,
        token: str | None = None,
        token_file: str | None = None,
        ca_cert: str | None = None,
        **kwargs: Any,
    ) -> DgdActuator:
        """Name from ``name`` or ``$DYN_PARENT_DGD_K8S_NAME``; namespace from ``namespace`` or
        the pod's service account; client from in-cluster/kubeconfig, with ``host``,
        ``token``/``token_file`` and ``ca_cert`` overriding it (:func:`kube_api_client`)."""
        dgd_name = name or os.environ.get(DGD_NAME_ENV, "")
        if not dgd_name:
            raise DgdValidationError(f"no DGD name: pass one or set {DGD_NAME_ENV}")
        client = kube_api_client(host, token, token_file=token_file, ca_cert=ca_cert)
        return cls(client, namespace or pod_namespace(), dgd_name, **kwargs)

    @property
    def dgd(self) -> str:
        """``<namespace>/<name>`` of the DGD (metric label, log prefix)."""
        return f"{self.namespace}/{self.name}"

    @property
    def services(self) -> dict[Role, str]:
        """Role → service name, resolved by :meth:`validate` (on first use if not called)."""
        if self._services is None:
            self.validate()
        assert self._services is not None
        return self._services

    # ------------------------------------------------------------------ reading
    def _bounded(self, what: str, request: Callable[[], T]) -> T:
        """``request()``, cut off after ``request_timeout_s`` as a whole (module docs): then
        logged and raised as :class:`RequestDeadlineError`."""
        with bounded(self.request_timeout_s) as deadline:
            try:
                return request()
            except Exception as err:
                if not deadline.expired:
                    raise
                cut = RequestDeadlineError(
                    f"{what} cut off after {self.request_timeout_s:g} s: no whole answer by "
                    "then (the API server answers too slowly, or not at all)"
                )
                log.warning("DGD %s: %s", self.dgd, cut)
                raise cut from err

    def _get(self) -> dict[str, Any]:
        return _check_dgd(
            self._bounded(
                "GET",
                partial(
                    self._api.get_namespaced_custom_object,
                    DGD_GROUP,
                    DGD_VERSION,
                    self.namespace,
                    DGD_PLURAL,
                    self.name,
                    _request_timeout=self.request_timeout_s,
                ),
            )
        )

    def _patch_dgd(self, body: dict[str, Any]) -> None:
        self._bounded(
            "PATCH",
            partial(
                self._api.patch_namespaced_custom_object,
                DGD_GROUP,
                DGD_VERSION,
                self.namespace,
                DGD_PLURAL,
                self.name,
                body,
                _content_type=MERGE_PATCH,
                _request_timeout=self.request_timeout_s,
            ),
        )

    def _get_scale(self, service: str) -> AdapterScale:
        adapter = scaling_adapter_name(self.name, service)
        scale = self._bounded(
            f"GET of adapter {adapter}",
            partial(
                self._api.get_namespaced_custom_object_scale,
                DGD_GROUP,
                DGD_VERSION,
                self.namespace,
                DGDSA_PLURAL,
                adapter,
                _request_timeout=self.request_timeout_s,
            ),
        )
        return AdapterScale.of(service, adapter, scale)

    def _patch_scale(self, scale: AdapterScale, replicas: int) -> None:
        body: dict[str, Any] = {"spec": {"replicas": replicas}}
        if self.resource_version_precondition:
            body["metadata"] = {"resourceVersion": scale.resource_version}
        self._bounded(
            f"PATCH of adapter {scale.adapter}",
            partial(
                self._api.patch_namespaced_custom_object_scale,
                DGD_GROUP,
                DGD_VERSION,
                self.namespace,
                DGDSA_PLURAL,
                scale.adapter,
                body,
                _content_type=MERGE_PATCH,
                _request_timeout=self.request_timeout_s,
            ),
        )

    def _backoff(self, attempt: int, err: Exception | None = None) -> float:
        delay = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))
        hinted = retry_after(err) if err is not None else None
        if hinted is not None:
            delay = min(self.max_backoff_s, max(delay, hinted))
        return delay

    def read(self, *, retry: bool = True) -> dict[str, Any]:
        """The DGD object; transient errors (malformed answers included) are retried (if
        ``retry``), then :class:`DgdUnavailableError`."""
        attempts = self.max_attempts if retry else 1
        last: Exception | None = None
        for attempt in range(1, attempts + 1):
            try:
                return self._get()
            except REQUEST_ERRORS as err:
                last = err
                if not transient(err):
                    break
                if attempt < attempts:
                    self.sleep(self._backoff(attempt, err))
        assert last is not None
        status = last.status if isinstance(last, ApiException) else None
        raise DgdUnavailableError(
            f"cannot read DGD {self.dgd}: {error_text(last)}", status, names_object(last)
        )

    def delivered(self) -> DeliveredDecision | None:
        """The last decision a patch of ours carried (its annotation), if the DGD has one.

        An annotation that does not parse is passed over with a warning.
        """
        mark, problem = last_decision(self.read())
        if problem is not None:
            log.warning(
                "DGD %s: ignored annotation %s (%s)", self.dgd, LAST_DECISION_ANNOTATION, problem
            )
        return mark

    def validate(self) -> dict[Role, str]:
        """Check the DGD exists and has one service per role; returns role → service name.

        Raises :class:`DgdValidationError` with every problem found.
        """
        try:
            dgd = self.read()
        except DgdUnavailableError as err:
            where = f"{DGD_GROUP}/{DGD_VERSION} {DGD_PLURAL}"
            if err.status_code == 404 and err.names_object:
                raise DgdValidationError(
                    f"DynamoGraphDeployment {self.dgd} not found ({where}); check the name "
                    f"(config or ${DGD_NAME_ENV}) and namespace"
                ) from err
            if err.status_code == 404:
                raise DgdValidationError(
                    f"the API server does not serve {where}: is the DynamoGraphDeployment CRD "
                    f"installed, at version {DGD_VERSION}? ({err})"
                ) from err
            if err.status_code == 401:
                raise DgdValidationError(
                    f"not authenticated to read DynamoGraphDeployment {self.dgd}: {err}"
                ) from err
            if err.status_code == 403:
                raise DgdValidationError(
                    f"not allowed to read DynamoGraphDeployment {self.dgd}: {err}"
                ) from err
            raise DgdValidationError(str(err)) from err
        try:
            services = resolve_services(
                dgd, mode=self.mode, backend=self.backend, explicit=self.explicit_services
            )
        except DgdValidationError as err:
            raise DgdValidationError(f"DynamoGraphDeployment {self.dgd}: {err}") from None
        self._services = services
        log.info(
            "DGD %s: %s",
            self.dgd,
            ", ".join(self._describe(dgd, r, s) for r, s in services.items()),
        )
        return services

    def _describe(self, dgd: dict[str, Any], role: Role, service: str) -> str:
        """``role → service``, and how the service is scaled when it has an adapter."""
        if not uses_scaling_adapter(dgd, service):
            return f"{role} → {service}"
        adapter = scaling_adapter_name(self.name, service)
        return f"{role} → {service} (scaled through adapter {DGDSA_PLURAL}/{adapter})"

    def read_inventory(self, *, retry: bool = True) -> WorkerCounts:
        """Ready/expected replicas and in-progress flags per role, from the DGD.

        Raises :class:`DgdUnavailableError` when the DGD cannot be read (never reports a failed
        read as zero workers). A role whose desired count the spec does not give has
        ``expected`` ``None``; that is logged when it starts or its reason changes.
        """
        return self.read_fleet(retry=retry).counts

    def read_fleet(self, *, retry: bool = True) -> FleetReading:
        """:meth:`read_inventory` and, from the same read, each role's per-GPU power cap.

        A power cap that cannot be read is ``None`` and its reason is in
        :attr:`FleetReading.power_problems` (not logged here; it never fails the read).
        """
        services = self.services
        try:
            dgd = self.read(retry=retry)
        except DgdUnavailableError:
            DGD_READ_ERRORS.labels(dgd=self.dgd).inc()
            raise
        problems = "; ".join(spec_problems(dgd, services.values()))
        if problems and problems != self._spec_problems:
            log.warning("DGD %s: expected replicas unknown: %s", self.dgd, problems)
        self._spec_problems = problems
        try:
            counts = worker_counts(dgd, services)
            absurd = inventory_implausibility(counts)
        except ValidationError as exc:  # a count beyond u64
            absurd = describe_validation_error(exc)
        if absurd is not None:
            DGD_READ_ERRORS.labels(dgd=self.dgd).inc()
            raise DgdUnavailableError(f"DGD {self.dgd}: implausible replica counts: {absurd}")
        caps, power_problems = gpu_power_limits(dgd, services)
        return FleetReading(counts, caps, tuple(power_problems))

    # ------------------------------------------------------------------ scaling
    def apply(self, decision: ScalingDecision) -> ApplyResult:
        """Patch the DGD to the decision's targets (see the module docs); never raises on API
        errors."""
        with self._lock:
            result = self._apply(decision)
        DGD_ACTIONS.labels(dgd=self.dgd, outcome=result.outcome).inc()
        level = logging.WARNING if result.outcome == "failed" else logging.INFO
        log.log(
            level,
            "DGD %s decision %s/%d: %s (%s)",
            self.dgd,
            decision.deployment,
            decision.decision_id,
            result.outcome,
            result.reason,
        )
        return result

    def _targets(self, decision: ScalingDecision) -> dict[Role, int]:
        wanted: dict[Role, int | None] = {
            "prefill": decision.num_prefill,
            "decode": decision.num_decode,
        }
        return {role: n for role, n in wanted.items() if n is not None and role in self.roles}

    def _apply(self, decision: ScalingDecision) -> ApplyResult:
        run = ApplyRun(decision)
        newest = self._newest_decision.get(decision.deployment)
        if newest is not None and decision.decision_id <= newest:
            return run.result(
                "stale", f"decision {decision.decision_id} is not newer than {newest}"
            )
        self._newest_decision[decision.deployment] = decision.decision_id
        targets = self._targets(decision)
        if not targets:
            return run.result("no_change", f"no target for the roles of mode {self.mode}")
        try:
            services = self.services
        except DgdValidationError as err:
            return run.result("failed", str(err))
        for attempt in range(1, self.max_attempts + 1):
            try:
                return self._attempt(run, services, targets)
            except RequestFailed as failed:
                if (done := run.request_failed(failed)) is not None:
                    return done
                if attempt < self.max_attempts:
                    self.sleep(self._backoff(attempt, failed.error))
        if run.lost is not None:  # the last PATCH got no answer: did it commit?
            try:
                dgd = request_step("read", self._get)
                scales = self._adapter_scales(dgd, services, run.lost[0])
                asked = asked_counts(dgd, services, scales)
            except RequestFailed:
                pass
            else:
                if (done := run.committed(asked)) is not None:
                    return done
            run.last_error += " (the last PATCH got no answer and may have committed)"
        return run.result(
            "failed",
            f"gave up after {self.max_attempts} attempts; last error: {run.last_error}"
            + run.partly(),
            status=run.last_status,
        )

    def _attempt(
        self, run: ApplyRun, services: dict[Role, str], targets: dict[Role, int]
    ) -> ApplyResult:
        """One pass of :meth:`apply`: read (the DGD and every adapter's Scale), check, write (the
        DGD, then the adapters); raises :class:`RequestFailed` when a request fails."""
        dgd = request_step("read", self._get)
        moved = {services[r]: n for r, n in targets.items() if spec_of(dgd, services[r]) != n}
        scales = self._adapter_scales(dgd, services, moved)
        asked = asked_counts(dgd, services, scales)
        if (done := run.committed(asked)) is not None:
            return done
        if run.pending and (run.dgd_in or carries(dgd, run.decision)):
            run.dgd_in = True
            return self._finish(run, scales)
        self._note_status(dgd)
        try:
            patch, skip = plan_patch(
                dgd, services, targets, run.decision, asked, allow_retraction=self.allow_retraction
            )
        except Exception as err:  # a DGD body no check above foresaw: never crash the flow
            log.warning("DGD %s: cannot plan on this DGD body", self.dgd, exc_info=True)
            return run.result("failed", f"malformed DGD: {type(err).__name__}: {err}")
        if not patch:
            return run.result("no_change", "the DGD already asks for these replicas")
        if skip is not None:
            return run.result(skip[0], skip[1], patch)
        if lagging := adapters_ahead(dgd, scales):
            return run.result("skipped_in_flight", lagging, patch)
        try:
            body = patch_body(
                dgd,
                services,
                patch,
                scales,
                run.decision,
                resource_version_precondition=self.resource_version_precondition,
            )
        except ValidationError as err:  # a decision the annotation cannot record
            return run.result("failed", f"decision: {describe_validation_error(err)}", patch)
        run.plan_write(patch, describe_change(dgd, services, targets, patch, scales), scales)
        run.attempts += 1
        request_step(
            "patch", partial(self._patch_dgd, body), patch=patch, write=True, steps=run.steps
        )
        run.dgd_in = True
        return self._finish(run, scales)

    def _note_status(self, dgd: dict[str, Any]) -> None:
        """Warn when the DGD's status turns malformed (it then counts as not Ready), once per
        change of what is wrong."""
        malformed = "; ".join(status_problems(dgd))
        if malformed and malformed != self._status_problems:
            log.warning("DGD %s: malformed status, taken as not ready: %s", self.dgd, malformed)
        self._status_problems = malformed

    def _finish(self, run: ApplyRun, scales: dict[str, AdapterScale]) -> ApplyResult:
        """Write the adapters of this apply's DGD patch, which is in: not gated again (the DGD
        rolling out is this apply's own change), but an adapter someone else set meanwhile is
        not overwritten (a failure naming what is half-done)."""
        for service, (before, target) in list(run.pending.items()):
            scale = scales.get(service)
            if scale is None or scale.replicas not in (before, target):
                now = "no longer declares" if scale is None else f"set to {scale.replicas} by"
                reason = f"{service}: its scaling adapter {now} someone else meanwhile"
                return run.result("failed", reason + run.partly(), run.sent)
            if scale.replicas != target:
                run.attempts += 1
                request_step(
                    f"patch of scaling adapter {self.namespace}/{scale.adapter}",
                    partial(self._patch_scale, scale, target),
                    patch=run.sent,
                    write=True,
                    steps=run.steps,
                    adapter_of=service,
                )
            del run.pending[service]
        return run.result("applied", run.steps, run.sent)

    def _adapter_scales(
        self, dgd: dict[str, Any], services: dict[Role, str], moved: dict[str, int]
    ) -> dict[str, AdapterScale]:
        """The Scale of every managed service that declares an adapter (one GET each, every
        attempt: an adapter ahead of the DGD gates any decision, module docs); raises
        :class:`RequestFailed` (its ``patch`` ``moved``)."""
        scales: dict[str, AdapterScale] = {}
        for service in services.values():
            if uses_scaling_adapter(dgd, service):
                scales[service] = request_step(
                    f"read of scaling adapter {self.namespace}/"
                    f"{scaling_adapter_name(self.name, service)}",
                    partial(self._get_scale, service),
                    patch=moved,
                    adapter_of=service,
                )
        return scales
