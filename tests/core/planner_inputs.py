"""Builders of planner-core inputs shared by the tests in ``tests/core`` (spec §16.3 fixtures)."""

from __future__ import annotations

from typing import Any

from operators.state_machine import PlannerStateMachine
from operators.tick import FpmObservations, PlannerEffects, ScheduledTick, TickInput
from schemas import (
    EngineCapabilities,
    ForwardPassMetrics,
    PlannerConfig,
    QueuedRequestMetrics,
    ScheduledRequestMetrics,
    TrafficObservation,
    WorkerCapabilities,
    WorkerCounts,
)
from schemas.config import REFERENCE_BEHAVIOUR


def fpm(
    *,
    worker_id: str = "w1",
    dp_rank: int = 0,
    prefill_tokens: int = 0,
    prefill_requests: int = 0,
    decode_kv: int = 0,
    decode_requests: int = 0,
    queued_prefill: int = 0,
    queued_decode_kv: int = 0,
    wall_time: float = 0.01,
) -> ForwardPassMetrics:
    """One forward pass (the reference tests' FPM helper; wall time defaults to 10 ms)."""
    return ForwardPassMetrics(
        worker_id=worker_id,
        dp_rank=dp_rank,
        wall_time=wall_time,
        scheduled_requests=ScheduledRequestMetrics(
            num_prefill_requests=prefill_requests,
            sum_prefill_tokens=prefill_tokens,
            num_decode_requests=decode_requests,
            sum_decode_kv_tokens=decode_kv,
        ),
        queued_requests=QueuedRequestMetrics(
            sum_prefill_tokens=queued_prefill, sum_decode_kv_tokens=queued_decode_kv
        ),
    )


OURS_IN_FIXTURE: dict[str, Any] = {
    # §4.6 consolidation-aware scale-down (current upstream): the §16.3 consolidation cases
    "scale_down_rule": "consolidation",
    # the current reference tree's budget band (§8.2), which the budget tests are written for
    "gpu_budget_rule": "band",
    # ours, tested on this fixture: a single role's hold lifts it to its floors, and a zero
    # forecast sizes every role at its minimum endpoint count
    "load_hold_applies_floors": True,
    "zero_demand_to_min_endpoint": True,
}
"""The fields of :data:`~schemas.config.REFERENCE_BEHAVIOUR` where :func:`sla_config` keeps
the planner's own default on purpose (``tests/core`` depends on each)."""


def sla_config(**overrides: Any) -> PlannerConfig:
    """The §16.3 base config: disagg, SLA target, both loops, constant predictor.

    Every behaviour is the reference planner's (:data:`~schemas.config.REFERENCE_BEHAVIOUR`:
    its estimates, guard, ±1 step without stabilization, one-prompt prefill capacity, no rate
    signal on load ticks, its bootstrap — the §16.3 training sets exceed the fixture's
    2048-token prefill budget — ...): these are its acceptance cases. The exceptions are
    :data:`OURS_IN_FIXTURE`.
    """
    values: dict[str, Any] = {
        "mode": "disagg",
        "optimization_target": "sla",
        "ttft_ms": 500.0,
        "itl_ms": 50.0,
        "min_endpoint": 1,
        "max_gpu_budget": -1,
        "throughput_adjustment_interval_seconds": 60,
        "load_adjustment_interval_seconds": 5,
        "load_scaling_down_sensitivity": 80,
        "max_num_fpm_samples": 50,
        "fpm_sample_bucket_size": 16,
        "load_min_observations": 5,
        "enable_load_scaling": True,
        "enable_throughput_scaling": True,
        "load_predictor": "constant",
        **REFERENCE_BEHAVIOUR,
        **OURS_IN_FIXTURE,
    }
    values.update(overrides)
    return PlannerConfig(**values)


def default_caps(**decode: Any) -> WorkerCapabilities:
    """Prefill and decode engines: 1 GPU, 2048 batched tokens (decode fields overridable)."""
    return WorkerCapabilities(
        prefill=EngineCapabilities(num_gpu=1, max_num_batched_tokens=2048),
        decode=EngineCapabilities(num_gpu=1, max_num_batched_tokens=2048, **decode),
    )


def agg_caps(**decode: Any) -> WorkerCapabilities:
    """Aggregated engines (carried as decode): 1 GPU, 2048 batched tokens."""
    return WorkerCapabilities(
        decode=EngineCapabilities(num_gpu=1, max_num_batched_tokens=2048, **decode)
    )


def core(caps: WorkerCapabilities | None = None, **overrides: Any) -> PlannerStateMachine:
    """A state machine on :func:`sla_config` (agg mode gets :func:`agg_caps`)."""
    config = sla_config(**overrides)
    if caps is None:
        caps = agg_caps() if config.mode == "agg" else default_caps()
    return PlannerStateMachine(config, caps)


PREFILL_TRAINING = [
    fpm(prefill_tokens=t, prefill_requests=1, wall_time=0.001 * t + 0.002)
    for t in (500, 1000, 1500, 2000, 2500)
]
"""§16.2 case 3: wall = 0.001·t + 0.002 s."""

DECODE_TRAINING = [
    fpm(decode_kv=kv, decode_requests=n, wall_time=0.00001 * kv + 0.001)
    for n, kv in ((5, 5000), (10, 10000), (20, 20000), (30, 30000), (40, 40000))
]
"""§16.2 case 11: wall = 1e-5·kv + 0.001 s."""

AGG_TRAINING = [
    fpm(
        prefill_tokens=p,
        prefill_requests=1,
        decode_kv=d,
        decode_requests=10,
        wall_time=0.001 * p + 0.0001 * d + 0.001,
    )
    for p, d in ((100, 1000), (200, 2000), (300, 3000), (400, 4000), (500, 5000))
]
"""§16.2 case 12: wall = 0.001·p + 0.0001·d + 0.001 s (p and d collinear)."""


def run_tick(
    machine: PlannerStateMachine,
    *,
    now_s: float = 5.0,
    prefill: dict[tuple[str, int], ForwardPassMetrics] | None = None,
    decode: dict[tuple[str, int], ForwardPassMetrics] | None = None,
    counts: WorkerCounts | None = None,
    traffic: TrafficObservation | None = None,
    load: bool | None = None,
) -> PlannerEffects:
    """Run one tick whose flags match the data given (FPMs → load tick, traffic → throughput)."""
    has_fpm = prefill is not None or decode is not None
    run_load = has_fpm if load is None else load
    tick = ScheduledTick(
        at_s=now_s,
        run_load_scaling=run_load,
        run_throughput_scaling=traffic is not None,
        need_traffic_metrics=traffic is not None,
        traffic_metrics_duration_s=traffic.duration_s if traffic is not None else 0.0,
        need_worker_states=True,
        need_worker_fpm=run_load,
    )
    observations = FpmObservations(prefill=prefill, decode=decode) if run_load else None
    return machine.on_tick(
        tick,
        TickInput(
            now_s=now_s, traffic=traffic, worker_counts=counts, fpm_observations=observations
        ),
    )


def engines(count: int, **fields: Any) -> dict[tuple[str, int], ForwardPassMetrics]:
    """``count`` engines ``w0``, ``w1``, … with identical FPM fields."""
    return {(f"w{i}", 0): fpm(worker_id=f"w{i}", **fields) for i in range(count)}


def saturated_prefill(count: int) -> dict[tuple[str, int], ForwardPassMetrics]:
    """``count`` prefill engines, each with 10 000 prompt tokens queued behind a 500-token
    pass of 0.502 s: far over any TTFT target, so the load rule asks for one more replica."""
    return engines(
        count, queued_prefill=10_000, prefill_tokens=500, prefill_requests=1, wall_time=0.502
    )
