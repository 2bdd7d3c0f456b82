"""What the planner emits: scaling decisions, their diagnostics, and dead letters.

What the planner writes is read forward-compatibly: a reader ignores fields it does not know
(``_WRITTEN``), so a newer planner may add fields within a ``schema_version`` and an older
one — rolled back, resuming from a decisions topic or a tick file the newer one wrote — still
reads them, and so does a consumer validating with ``flowplanner schema`` (no
``additionalProperties: false``). What the planner reads from others (events, acknowledgements,
its config) stays strict: an unknown field there is a mistake, refused by name — except in an
engine's forward-pass record, which newer engines extend (:mod:`schemas.fpm`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from schemas.events import EventTime, Role, TrafficObservation
from schemas.fpm import MAX_COUNT, NonNegativeFinite

_WRITTEN = ConfigDict(frozen=True, extra="ignore")
"""The config of what the planner writes (module docstring); the type checker still refuses an
unknown keyword where the planner builds one."""

LoadReason = Literal[
    "unset",
    "disabled",
    "no_fpm_data",
    "scaling_in_progress",
    "worker_count_mismatch",
    "insufficient_data",
    "no_change",
    "scale_up",
    "scale_down",
    "scale_down_capped_by_throughput",
    "scale_down_refused_consolidation",
    "scale_down_refused_rate",
    "scale_down_stabilizing",
    "gpu_budget_guard_hold",
    "gpu_budget_reconcile",
    "power_budget_clamp",
]
"""Load-scaling decision reasons: the reference's enum states (spec §4.8) plus two of ours —
``scale_down_refused_rate`` (the recent request rate would overload the survivors) and
``scale_down_stabilizing`` (a scale-down waits for its stabilization window) — and the
current tree's budget-band reasons (§8.2): ``gpu_budget_guard_hold`` (the GPU budget held a
move it could not fund without reversing it) and ``gpu_budget_reconcile`` (a fleet out of
the budget band, or below a minimum endpoint, is brought back into it) — and
``power_budget_clamp`` (the power budget cut or held a scale-up; the reference logs it and
names no reason)."""

ThroughputReason = Literal[
    "unset",
    "disabled",
    "no_traffic_data",
    "predict_failed",
    "model_not_ready",
    "partner_not_ready",
    "set_lower_bound",
    "scale",
    "no_change",
    "gpu_budget_guard_hold",
    "gpu_budget_reconcile",
    "power_budget_clamp",
    "scale_down_stabilizing",
]
"""Throughput-scaling decision reasons (spec §5.3, with the current tree's ``no_change`` and
budget-band reasons of §8.2, and our ``power_budget_clamp`` and ``scale_down_stabilizing``)."""

LOAD_REASONS: tuple[str, ...] = LoadReason.__args__  # type: ignore[attr-defined]
THROUGHPUT_REASONS: tuple[str, ...] = ThroughputReason.__args__  # type: ignore[attr-defined]


class TickDiagnostics(BaseModel):
    """Intermediate numbers of one tick (spec §1.2), all ``None`` until the tick sets them.

    >>> TickDiagnostics().estimated_ttft_ms is None
    True
    """

    model_config = ConfigDict(extra="ignore")  # written: read forward-compatibly

    estimated_ttft_ms: float | None = None
    estimated_itl_ms: float | None = None
    predicted_num_req: float | None = None
    predicted_isl: float | None = None
    predicted_osl: float | None = None
    predicted_kv_hit_rate: float | None = None
    engine_rps_prefill: float | None = None
    engine_rps_decode: float | None = None
    throughput_lower_bound_prefill: int | None = None
    throughput_lower_bound_decode: int | None = None
    load_decision_reason: LoadReason | None = None
    throughput_decision_reason: ThroughputReason | None = None
    load_decision_reason_prefill: LoadReason | None = None
    load_decision_reason_decode: LoadReason | None = None
    throughput_decision_reason_prefill: ThroughputReason | None = None
    throughput_decision_reason_decode: ThroughputReason | None = None
    power_budget_total_watts: int | None = None
    power_projected_watts: int | None = None
    """Watts the planned replicas draw at their caps (``None`` when power awareness is off or
    a cap is unknown): the decision's counts, else the counts in effect (expected, else
    ready)."""


class ScalingDecision(BaseModel):
    """A durable scaling fact: target replicas per role for one deployment.

    ``decision_id`` increases by one per decision of a deployment, so consumers deduplicate by
    ``(deployment, decision_id)``. ``None`` targets mean "no opinion" (keep the current count);
    aggregated deployments carry their engine count in ``num_decode``. ``current_*`` are the ready
    counts the decision was made from, so a reader sees the step (e.g. ``2 -> 3``).

    >>> d = ScalingDecision(deployment="llama", decision_id=1, time=105.0, num_prefill=2,
    ...                     num_decode=None, reason="scale_up", source="load")
    >>> ScalingDecision.model_validate_json(d.model_dump_json()) == d
    True
    """

    model_config = _WRITTEN

    schema_version: Literal[1] = 1
    deployment: str = Field(min_length=1)
    decision_id: int = Field(
        ge=1, description="Counts the deployment's decisions from 1; unique across restarts"
    )
    time: float = Field(
        description="Event time of the tick that decided (its window's end), in seconds: Unix "
        "time live, the recording's time in a replay"
    )
    num_prefill: int | None = Field(
        default=None,
        ge=0,
        description="Prefill replicas wanted; null: no change wanted, or an aggregated deployment",
    )
    num_decode: int | None = Field(
        default=None,
        ge=0,
        description="Decode replicas wanted (of an agg deployment: its engines); null: no change",
    )
    current_prefill: int | None = Field(
        default=None, description="Prefill replicas ready when the planner decided"
    )
    current_decode: int | None = Field(
        default=None, description="Decode replicas ready when the planner decided"
    )
    expected_prefill: int | None = Field(
        default=None,
        description="Prefill replicas asked for (ready or starting) as the planner saw it when "
        "it decided; an actuator tells from it whether the decision saw a change in flight",
    )
    expected_decode: int | None = Field(
        default=None, description="Decode replicas asked for as the planner saw it (see above)"
    )
    source: Literal["load", "throughput"]
    reason: str = Field(description="The deciding loop's reason: a LoadReason or ThroughputReason")
    prefill_reason: str | None = None
    decode_reason: str | None = None
    note: str | None = Field(
        default=None, description="Free text for people, e.g. how long the decision was held"
    )
    diagnostics: TickDiagnostics = Field(default_factory=TickDiagnostics)


class DeliveredDecision(BaseModel):
    """The newest decision a destination already holds for a deployment.

    A restarted planner reads it back from its outputs (the decisions topic, the DGD's
    ``flowplanner/last-decision`` annotation) and resumes after it: decisions of ticks up to
    ``time`` were delivered before the restart and are not sent again, and new ids continue
    after ``decision_id``. :meth:`newest` merges what several outputs hold.

    >>> a = DeliveredDecision(deployment="llama", decision_id=4, time=300.0)
    >>> b = DeliveredDecision(deployment="llama", decision_id=3, time=240.0)
    >>> DeliveredDecision.newest([a, b]) == {"llama": a}
    True
    """

    model_config = _WRITTEN

    deployment: str = Field(min_length=1)
    decision_id: int = Field(ge=1)
    time: EventTime
    num_prefill: int | None = Field(default=None, ge=0)
    num_decode: int | None = Field(default=None, ge=0)

    @classmethod
    def of(cls, decision: ScalingDecision) -> DeliveredDecision:
        """What delivering ``decision`` leaves behind (its id, time and targets)."""
        return cls(
            deployment=decision.deployment,
            decision_id=decision.decision_id,
            time=decision.time,
            num_prefill=decision.num_prefill,
            num_decode=decision.num_decode,
        )

    @classmethod
    def newest(cls, delivered: Iterable[DeliveredDecision]) -> dict[str, DeliveredDecision]:
        """Per deployment, the decision with the highest id any of ``delivered`` holds, at the
        latest time any holds."""
        newest: dict[str, DeliveredDecision] = {}
        for mark in delivered:
            seen = newest.get(mark.deployment)
            if seen is not None:
                latest = mark if mark.decision_id >= seen.decision_id else seen
                mark = latest.model_copy(update={"time": max(seen.time, mark.time)})
            newest[mark.deployment] = mark
        return newest


class DecisionAck(BaseModel):
    """The environment's word that it applied a deployment's decisions up to an id.

    Sent back on the virtual connector's acknowledgement topic; ``acked_decision_id`` is the
    newest ``decision_id`` applied (reference: ``scaled_decision_id``). ``time`` is when it was
    applied (Unix seconds), if the sender says — for the record: the planner applies an
    acknowledgement from its next tick, whatever its time, so any finite time >= 0 is taken (one
    in milliseconds used to throw the acknowledgement away, holding the next decision for up to
    ``scaling_max_wait_seconds``).

    >>> DecisionAck.model_validate_json('{"deployment": "llama", "acked_decision_id": 3}')
    DecisionAck(schema_version=1, deployment='llama', acked_decision_id=3, time=None)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = 1
    deployment: str = Field(min_length=1)
    acked_decision_id: int = Field(ge=0, le=MAX_COUNT)
    """At most :data:`schemas.fpm.MAX_COUNT` (2**64 − 1), as a decision id can be: a larger one
    is refused where it is read (a dead letter), not carried into the flow."""
    time: NonNegativeFinite | None = None


MAX_RAW_CHARS = 500
"""A dead letter keeps at most this much of the offending input (``raw``); it clips it itself."""


class DeadLetter(BaseModel):
    """An input that was not used, with the reason. Nothing valid is ever dead-lettered.

    ``raw`` is the offending input, clipped to its first :data:`MAX_RAW_CHARS` characters, so a
    producer passes it whole and a multi-megabyte input never reaches a dead-letter sink.

    >>> DeadLetter(source="in.jsonl", position=7, reason="invalid JSON", raw="{oops").position
    7
    >>> len(DeadLetter(source="in.jsonl", reason="too big", raw="x" * 10**6).raw) == MAX_RAW_CHARS
    True
    """

    model_config = _WRITTEN

    source: str
    position: int | None = None
    reason: str
    raw: str = ""
    deployment: str | None = None

    @field_validator("raw", mode="before")
    @classmethod
    def _clip_raw(cls, value: object) -> object:
        return value[:MAX_RAW_CHARS] if isinstance(value, str) else value


class EngineLoad(BaseModel):
    """Queue gauges of one engine at a tick (from its latest FPM).

    >>> EngineLoad(role="decode", worker_id="w1", queued_decode_kv_tokens=10).dp_rank
    0
    """

    model_config = _WRITTEN

    role: Literal["prefill", "decode"]
    worker_id: str
    dp_rank: int = 0
    queued_prefill_tokens: int = 0
    queued_decode_kv_tokens: int = 0
    inflight_decode_kv_tokens: int = 0


class TickRecord(BaseModel):
    """Everything one planner tick saw and decided: feeds metrics, reports and scoring.

    >>> TickRecord(deployment="d", time=5.0).decision is None
    True
    """

    model_config = _WRITTEN

    deployment: str
    time: float
    ready_prefill: int | None = None
    ready_decode: int | None = None
    ran_load: bool = False
    ran_throughput: bool = False
    decision: ScalingDecision | None = None
    diagnostics: TickDiagnostics = Field(default_factory=TickDiagnostics)
    engines: list[EngineLoad] = Field(default_factory=list)
    observed_traffic: TrafficObservation | None = None
    gpus_per_prefill: int | None = None
    """GPUs of one prefill replica as the planner knows them (workers' capabilities, else the
    config; ``None`` when unknown) — what GPU-hours are counted with."""
    gpus_per_decode: int | None = None
    perf_samples_set_aside: dict[Role, int] = Field(default_factory=dict)
    """Forward passes each role's perf model has set aside so far (suspects nobody confirmed:
    :class:`operators.perf.regression.FpmRegressor`); tick records only."""
    delivered_before: SkipJsonSchema[bool] = Field(default=False, exclude=True)
    """``decision`` reached the outputs before a restart: it is in the record (the metrics and
    reports show it, as in a run never stopped) and not sent again. Never written: the tick
    records of a resumed run read as those of a run never stopped (nor in the JSON Schema)."""
