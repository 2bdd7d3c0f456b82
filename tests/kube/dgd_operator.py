"""A stand-in for the Dynamo operator: writes a DGD's status the way the real one reports it.

It watches one DGD through :meth:`ApiServer.on_write`. When the spec changes (a generation
bump) it starts a rollout at once: ``observedGeneration`` follows the spec, each service's
``replicas`` and ``updatedReplicas`` take the new desired count, ready counts stay where they
were, and ``Ready`` turns ``False``. The rollout *completes* — ready counts reach the desired
ones, ``Ready`` turns ``True`` — when :meth:`SimulatedOperator.converge` is called, or by itself
``delay_s`` seconds later (``delay_s=0``: immediately after the write). ``capacity`` caps a
service's ready count (pods that stay Pending, e.g. for lack of GPUs); such a rollout never
completes. ``report_available=False`` omits ``availableReplicas`` (as PodCliques do);
``ready_during_rollout=True`` leaves ``Ready`` at ``True`` while a rollout is under way (so the
actuator's own in-flight check, not the condition, is what holds a second change).

``adapters=True`` runs the operator's scaling-adapter controller too (the DGDSA CRD must be
registered): each service that declares ``scalingAdapter: {enabled: true}`` gets its
DynamoGraphDeploymentScalingAdapter ``<dgd>-<service in lower case>`` (``spec.replicas`` from
the service, ``spec.dgdRef``) when the DGD is written without one, and a change of an adapter's
``spec.replicas`` is copied into the DGD's ``spec.services.<service>.replicas`` at once (a
spec change like any: the rollout follows) — unless ``sync_adapters`` is set to ``False``,
which holds the copies back (an adapter change on its way to the DGD) until :meth:`sync`.

>>> SimulatedOperator.service_status(desired=3, ready=2, available=True)["availableReplicas"]
2
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from typing import Any

from .api_status import ApiError
from .apiserver import MERGE_PATCH, ApiServer

ADAPTERS = "dynamographdeploymentscalingadapters"
ADAPTER_KIND = "DynamoGraphDeploymentScalingAdapter"


class SimulatedOperator:
    """Keeps the status of the DGD at ``path`` on ``server`` (see the module docs)."""

    def __init__(
        self,
        server: ApiServer,
        path: str,
        *,
        delay_s: float | None = None,
        capacity: dict[str, int] | None = None,
        report_available: bool = True,
        ready_during_rollout: bool = False,
        adapters: bool = False,
    ) -> None:
        self.server = server
        self.path = path.rstrip("/")
        self.adapters = adapters
        self.sync_adapters = True
        # /apis/<group>/<version>/namespaces/<ns>/dynamographdeployments/<name>
        self.dgd_name = self.path.rsplit("/", 1)[1]
        self.adapter_root = self.path.rsplit("/", 2)[0] + f"/{ADAPTERS}"
        self.delay_s = delay_s
        self.capacity = dict(capacity or {})
        self.report_available = report_available
        self.ready_during_rollout = ready_during_rollout
        self.rollouts = 0
        self._timers: list[threading.Timer] = []
        server.on_write(self._on_write)

    @staticmethod
    def service_status(desired: int, ready: int, *, available: bool) -> dict[str, Any]:
        """One ``status.services`` entry (a Deployment-backed service)."""
        entry: dict[str, Any] = {
            "componentKind": "Deployment",
            "replicas": desired,
            "updatedReplicas": desired,
            "readyReplicas": ready,
        }
        if available:
            entry["availableReplicas"] = ready
        return entry

    @staticmethod
    def _desired(dgd: dict[str, Any]) -> dict[str, int]:
        services = dgd.get("spec", {}).get("services", {}) or {}
        return {name: int((svc or {}).get("replicas", 1)) for name, svc in services.items()}

    def _status(
        self, dgd: dict[str, Any], ready: dict[str, int], *, rollout: bool = False
    ) -> dict[str, Any]:
        desired = self._desired(dgd)
        all_ready = all(ready.get(name, 0) == n for name, n in desired.items())
        all_ready = all_ready or (rollout and self.ready_during_rollout)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        generation = dgd["metadata"]["generation"]
        condition = {
            "type": "Ready",
            "status": "True" if all_ready else "False",
            "reason": "AllComponentsReady" if all_ready else "ComponentsNotReady",
            "message": "all services are ready"
            if all_ready
            else ", ".join(
                f"{name} {ready.get(name, 0)}/{n}"
                for name, n in sorted(desired.items())
                if ready.get(name, 0) != n
            )
            + " ready",
            "lastTransitionTime": now,
            "observedGeneration": generation,
        }
        return {
            "observedGeneration": generation,
            "state": "successful" if all_ready else "pending",
            "conditions": [condition],
            "services": {
                name: self.service_status(n, ready.get(name, 0), available=self.report_available)
                for name, n in desired.items()
            },
        }

    def _current_ready(self, dgd: dict[str, Any]) -> dict[str, int]:
        services = (dgd.get("status") or {}).get("services") or {}
        out = {}
        for name, entry in services.items():
            value = entry.get("availableReplicas", entry.get("readyReplicas", 0))
            out[name] = int(value)
        return out

    def converge(self) -> dict[str, Any]:
        """Complete the rollout: every service ready at its desired count (up to capacity)."""
        dgd = self.server.read(self.path)
        ready = {name: min(n, self.capacity.get(name, n)) for name, n in self._desired(dgd).items()}
        return self.server.write_status(self.path, self._status(dgd, ready))

    def set_not_ready(self, reason: str = "Degraded", message: str = "a pod is failing") -> None:
        """Turn the Ready condition False without touching the counts (e.g. a crash loop)."""
        dgd = self.server.read(self.path)
        status = dict(dgd.get("status") or self._status(dgd, self._current_ready(dgd)))
        status["conditions"] = [
            {"type": "Ready", "status": "False", "reason": reason, "message": message}
        ]
        self.server.write_status(self.path, status)

    # ------------------------------------------------------------------ scaling adapters
    def adapter_path(self, service: str) -> str:
        """The API path of ``service``'s scaling adapter."""
        return f"{self.adapter_root}/{self.dgd_name}-{service.lower()}"

    def _adapted_services(self, dgd: dict[str, Any]) -> dict[str, dict[str, Any]]:
        services = dgd.get("spec", {}).get("services", {}) or {}
        return {
            name: svc
            for name, svc in services.items()
            if ((svc or {}).get("scalingAdapter") or {}).get("enabled") is True
        }

    def _ensure_adapters(self, dgd: dict[str, Any]) -> None:
        for service, svc in self._adapted_services(dgd).items():
            body = {
                "apiVersion": "nvidia.com/v1alpha1",
                "kind": ADAPTER_KIND,
                "metadata": {"name": self.adapter_path(service).rsplit("/", 1)[1]},
                "spec": {
                    "replicas": int(svc.get("replicas", 1)),
                    "dgdRef": {"name": self.dgd_name, "serviceName": service},
                },
            }
            response = self.server.handle(
                "POST", self.adapter_root, {}, json.dumps(body).encode(), client=False
            )
            if response.status not in (201, 409):  # 409: it exists already
                raise ApiError(response.status, "Failed", str(response.body))

    def sync(self) -> None:
        """Copy every adapter's ``spec.replicas`` into the DGD (the adapter controller)."""
        dgd = self.server.read(self.path)
        for service, svc in self._adapted_services(dgd).items():
            try:
                adapter = self.server.read(self.adapter_path(service))
            except ApiError:
                continue  # not made (yet)
            wanted = adapter["spec"].get("replicas", 0)
            if int(svc.get("replicas", 1)) != wanted:
                patch = {"spec": {"services": {service: {"replicas": wanted}}}}
                body = json.dumps(patch).encode()
                headers = {"content-type": MERGE_PATCH}
                self.server.handle("PATCH", self.path, headers, body, client=False)

    def _on_adapter_write(self, new: dict[str, Any]) -> None:
        if new["spec"].get("dgdRef", {}).get("name") == self.dgd_name and self.sync_adapters:
            self.sync()

    def _on_write(self, path: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if self.adapters and new is not None and path.startswith(self.adapter_root + "/"):
            self._on_adapter_write(new)
            return
        if path != self.path or new is None:
            return
        if self.adapters:
            self._ensure_adapters(new)
        if old is not None and old["metadata"]["generation"] == new["metadata"]["generation"]:
            return
        self.rollouts += 1
        desired = self._desired(new)
        ready = {name: min(self._current_ready(new).get(name, 0), n) for name, n in desired.items()}
        self.server.write_status(self.path, self._status(new, ready, rollout=True))
        if self.delay_s == 0:
            self.converge()
        elif self.delay_s is not None:
            timer = threading.Timer(self.delay_s, self.converge)
            timer.daemon = True
            self._timers.append(timer)
            timer.start()

    def stop(self) -> None:
        """Cancel pending delayed convergences."""
        for timer in self._timers:
            timer.cancel()
