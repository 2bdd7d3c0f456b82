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

>>> SimulatedOperator.service_status(desired=3, ready=2, available=True)["availableReplicas"]
2
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

from .apiserver import ApiServer


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
    ) -> None:
        self.server = server
        self.path = path.rstrip("/")
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

    def _on_write(self, path: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if path != self.path or new is None:
            return
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
