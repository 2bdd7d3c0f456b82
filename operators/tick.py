"""The tick model of the planner core (reference spec §1.2–§1.3).

A tick is a pure function of (state, ``TickInput``, time) → ``PlannerEffects``. Time arrives as
data: event time in replay, system time live. Nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from schemas import (
    ForwardPassMetrics,
    Role,
    TickDiagnostics,
    TrafficObservation,
    WorkerCounts,
)
from schemas.events import MAX_REPLICAS

EngineKey = tuple[str, int]
"""``(worker_id, dp_rank)`` of one engine."""

MERGE_TOLERANCE_S = 0.5
"""Cadences due within this many seconds of each other run in one tick (spec §1.3)."""


@dataclass(frozen=True)
class ScheduledTick:
    """When the next tick runs and which loops it runs (absolute seconds).

    >>> ScheduledTick(at_s=105.0, run_load_scaling=True).run_throughput_scaling
    False
    """

    at_s: float
    run_load_scaling: bool = False
    run_throughput_scaling: bool = False
    need_traffic_metrics: bool = False
    traffic_metrics_duration_s: float = 0.0
    need_worker_states: bool = False
    need_worker_fpm: bool = False


@dataclass(frozen=True)
class FpmObservations:
    """The latest FPM of every engine, per role (``None`` = no data for that role).

    >>> obs = FpmObservations(decode={("w1", 0): ForwardPassMetrics(worker_id="w1")})
    >>> list(obs.decode)
    [('w1', 0)]
    """

    prefill: dict[EngineKey, ForwardPassMetrics] | None = None
    decode: dict[EngineKey, ForwardPassMetrics] | None = None

    def for_role(self, role: Role) -> dict[EngineKey, ForwardPassMetrics] | None:
        """The engines of one role."""
        return self.prefill if role == "prefill" else self.decode


@dataclass(frozen=True)
class TickInput:
    """Everything a tick may look at.

    ``training_fpms`` (ours) are the forward passes that train the perf models this tick; when
    ``None`` the tick trains on ``fpm_observations`` (the reference behaviour: latest FPM only).
    ``rate_traffic`` (ours) is the traffic of the last ``load_rate_window_seconds`` when the
    tick's ``traffic`` covers another span (a load tick merged with a throughput tick reads the
    throughput interval); ``None``: ``traffic`` is that window, unless ``rate_traffic_unknown``
    says the window was read apart and its traffic is unknown (then nothing is sized for it).

    >>> TickInput(now_s=5.0).traffic is None
    True
    """

    now_s: float
    traffic: TrafficObservation | None = None
    worker_counts: WorkerCounts | None = None
    fpm_observations: FpmObservations | None = None
    training_fpms: dict[Role, list[ForwardPassMetrics]] | None = None
    rate_traffic: TrafficObservation | None = None
    rate_traffic_unknown: bool = False


@dataclass(frozen=True)
class ScaleTarget:
    """A scaling decision of the core: target replicas per role (``None`` = keep current).

    ``source`` says which loop decided; ``reason`` is the aggregate reason, and the per-role
    reasons use the exact reference names (spec §4.8, §5.3). The flow adapter turns this into a
    durable :class:`schemas.ScalingDecision` (deployment, decision id, time, diagnostics).

    >>> ScaleTarget(num_prefill=3, num_decode=None, source="load", reason="scale_up").num_prefill
    3
    """

    num_prefill: int | None
    num_decode: int | None
    source: Literal["load", "throughput"]
    reason: str
    prefill_reason: str | None = None
    decode_reason: str | None = None

    def within_replica_ceiling(self) -> ScaleTarget:
        """This target with no role above :data:`schemas.events.MAX_REPLICAS`, the most replicas a
        role can have: the inventory readers refuse more, so a decision past it (a sizing of
        absurd demand, a scale-up from the ceiling) would blind the planner once applied.

        >>> ScaleTarget(2**40, 3, "throughput", "scale").within_replica_ceiling().num_prefill
        65536
        """
        prefill, decode = self.num_prefill, self.num_decode
        return replace(
            self,
            num_prefill=None if prefill is None else min(prefill, MAX_REPLICAS),
            num_decode=None if decode is None else min(decode, MAX_REPLICAS),
        )


@dataclass
class PlannerEffects:
    """What a tick produced: an optional decision, the next tick, and its diagnostics.

    >>> PlannerEffects().scale_to is None
    True
    """

    scale_to: ScaleTarget | None = None
    next_tick: ScheduledTick | None = None
    diagnostics: TickDiagnostics = field(default_factory=TickDiagnostics)
