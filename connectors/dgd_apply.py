"""The bookkeeping of one :meth:`connectors.dgd.DgdActuator.apply` over its attempts.

Every request an attempt makes goes through :func:`request_step`, which turns a request error
into a :class:`RequestFailed` naming the stage, the patch planned and whether it was a write.
:class:`ApplyRun` keeps what the apply has done so far (requests sent, the write whose answer
was lost, the adapter writes still to do once the DGD patch is in) and turns a failure into
the :class:`connectors.dgd_plan.ApplyResult` it ends with, or into a retry.

>>> run = ApplyRun(ScalingDecision(deployment="llama", decision_id=7, time=60.0,
...                                num_prefill=None, num_decode=3, reason="scale_up",
...                                source="load"))
>>> run.request_failed(RequestFailed("read", ApiException(status=503))) is None  # retried
True
>>> result = run.request_failed(RequestFailed("read", ApiException(status=403)))
>>> result.outcome, result.status_code
('failed', 403)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from kubernetes.client.exceptions import ApiException

from connectors.dgd_api import REQUEST_ERRORS, answer_lost, error_text, transient
from connectors.dgd_plan import LAST_DECISION_ANNOTATION, AdapterScale, ApplyResult, Outcome
from schemas import ScalingDecision

__all__ = ["ApplyRun", "RequestFailed", "request_step"]

T = TypeVar("T")


class RequestFailed(Exception):
    """A request of an apply attempt failed: at which ``stage``, the ``error``, the ``patch``
    planned, whether the request was a ``write`` (then ``steps`` describes it) and, for a
    scaling adapter's request, the service it scales (``adapter_of``)."""

    def __init__(
        self,
        stage: str,
        error: Exception,
        *,
        patch: dict[str, int] | None = None,
        write: bool = False,
        steps: str = "",
        adapter_of: str | None = None,
    ) -> None:
        super().__init__(f"{stage}: {error_text(error)}")
        self.error = error
        self.patch = patch
        self.write = write
        self.steps = steps
        self.adapter_of = adapter_of


def request_step(
    stage: str,
    request: Callable[[], T],
    *,
    patch: dict[str, int] | None = None,
    write: bool = False,
    steps: str = "",
    adapter_of: str | None = None,
) -> T:
    """``request()``; a request error is raised as :class:`RequestFailed` of ``stage``."""
    try:
        return request()
    except REQUEST_ERRORS as err:
        raise RequestFailed(
            stage, err, patch=patch, write=write, steps=steps, adapter_of=adapter_of
        ) from err


@dataclass
class ApplyRun:
    """What one :meth:`DgdActuator.apply` has done so far, over its attempts: PATCH requests
    sent, the last error, and the write whose answer was lost (its patch, its steps, why)."""

    decision: ScalingDecision
    attempts: int = 0
    last_error: str = ""
    last_status: int | None = None
    lost: tuple[dict[str, int], str, str] | None = None
    sent: dict[str, int] = field(default_factory=dict)
    """What the last DGD write planned: every service it changes, in the DGD or through an
    adapter."""
    steps: str = ""
    """That change described, for the log and the result."""
    pending: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Adapter writes of ``sent`` not yet done: service → (the adapter's count when planned,
    the target)."""
    dgd_in: bool = False
    """This apply's DGD patch is in: what is left is ``pending``, ungated (module docs)."""

    def plan_write(
        self, patch: dict[str, int], steps: str, scales: dict[str, AdapterScale]
    ) -> None:
        """Note the DGD write about to be sent and the adapter writes that are to follow it."""
        self.sent, self.steps, self.dgd_in = dict(patch), steps, False
        self.pending = {s: (scales[s].replicas, n) for s, n in patch.items() if s in scales}

    def partly(self) -> str:
        """What a failure leaves written and not written once the DGD patch is in (empty
        when nothing is half-done)."""
        if not (self.dgd_in and self.pending):
            return ""
        done = [f"{s} → {n}" for s, n in sorted(self.sent.items()) if s not in self.pending]
        left = ", ".join(f"{s} → {n}" for s, (_, n) in sorted(self.pending.items()))
        return (
            f" (partly applied: written the {LAST_DECISION_ANNOTATION} annotation of decision "
            f"{self.decision.decision_id}{''.join(', ' + d for d in done)}; not written: {left} "
            "through the scaling adapter)"
        )

    def result(
        self,
        outcome: Outcome,
        reason: str,
        patch: dict[str, int] | None = None,
        status: int | None = None,
    ) -> ApplyResult:
        decision = self.decision
        return ApplyResult(
            decision.deployment,
            decision.decision_id,
            outcome,
            reason,
            dict(patch or {}),
            self.attempts,
            status,
        )

    def committed(self, asked: dict[str, int | None]) -> ApplyResult | None:
        """``applied`` if a write whose answer was lost shows in ``asked`` (what each service
        asks for, as read now)."""
        if self.lost is None or any(asked.get(s) != n for s, n in self.lost[0].items()):
            return None
        sent, steps, why = self.lost
        note = f"the PATCH response was lost: {why}; the re-read shows it committed"
        return self.result("applied", f"{steps} ({note})", sent)

    def request_failed(self, failed: RequestFailed) -> ApplyResult | None:
        """Note a failed request; the ``failed`` result when it is not to be retried (a 409
        is, for a write: re-read, re-check, re-write)."""
        err = failed.error
        self.last_error = str(failed)
        self.last_status = err.status if isinstance(err, ApiException) else None
        if failed.adapter_of is not None and self.last_status == 404:
            self.last_error += (
                f" ({failed.adapter_of} declares scalingAdapter.enabled, so it is scaled only "
                "through this DynamoGraphDeploymentScalingAdapter, with no fallback to the DGD; "
                "is the operator's adapter missing?)"
            )
        if not (transient(err) or (failed.write and self.last_status == 409)):
            reason = self.last_error + self.partly()
            return self.result("failed", reason, failed.patch, self.last_status)
        if failed.write and failed.patch is not None and answer_lost(err):
            self.lost = (failed.patch, failed.steps, error_text(err))
        return None
