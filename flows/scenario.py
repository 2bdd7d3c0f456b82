"""Replay scenarios: a workload, a simulated fleet, and the planner that drives it.

Shared by ``flowplanner replay``, ``bench`` and ``demo``. A scenario runs either under the
real planner flow (closed loop, :func:`flows.replay.replay`) or under a fixed policy: a static
fleet, or a replica schedule known in hindsight.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from connectors.profiles import load_profile
from connectors.traces import read_trace
from flows.replay import replay
from operators.bootstrap import profile_to_fpms
from schemas import PlannerConfig, ScalingDecision, TickRecord
from schemas.profile import PerformanceProfile
from schemas.trace import TraceRequest
from sim.fleet import FleetSim, FleetSpec
from sim.scoring import RunResult
from sim.workload import burst_load, poisson_load, scale_load, sinusoidal_load, speed_up, trace_span

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO / "tests/data/traces/azure_2023_conv.csv"
DEFAULT_PROFILE = REPO / "tests/data/profiles/h200_llama3.1-8b-fp8_tp1"
DEFAULT_CONFIG = REPO / "examples/planner.yaml"

SYNTHETIC = ("poisson", "sine", "burst")
"""Synthetic workloads: steady Poisson, a sinusoid (one period per hour), bursts of 3× load."""
MAX_REQUESTS = 5_000_000
"""The most requests a scenario may hold (checked before any is built: beyond it a typo would
run out of memory or never finish)."""


def load_requests(
    trace: str | Path | None = None,
    *,
    synthetic: str | None = None,
    rate_rps: float = 5.0,
    duration_s: float = 3600.0,
    load_scale: int = 1,
    speedup: float = 1.0,
    seed: int = 0,
) -> list[TraceRequest]:
    """A trace file (Mooncake, Azure, dynamo.request.trace.v1) or a synthetic workload,
    compressed by ``speedup`` and superimposed ``load_scale`` times with seeded offsets;
    raises ``ValueError`` when that would be more than :data:`MAX_REQUESTS` requests.

    >>> load_requests(synthetic="poisson", rate_rps=1e9, duration_s=1.0)
    Traceback (most recent call last):
    ...
    ValueError: about 1,000,000,000 requests, more than 5,000,000: lower the rate, duration or scale
    """
    if synthetic is not None:
        mean_rps = rate_rps * (4.0 / 3.0 if synthetic == "burst" else 1.0)
        _check_size(mean_rps * duration_s * load_scale)
        if synthetic == "poisson":
            requests = poisson_load(rate_rps, duration_s, seed=seed)
        elif synthetic == "sine":
            requests = sinusoidal_load(rate_rps, 0.8 * rate_rps, 3600.0, duration_s, seed=seed)
        elif synthetic == "burst":
            bursts = [(duration_s * f, duration_s / 12, 3.0 * rate_rps) for f in (0.25, 0.6)]
            requests = burst_load(rate_rps, bursts, duration_s, seed=seed)
        else:
            raise ValueError(f"unknown synthetic workload {synthetic!r} (one of {SYNTHETIC})")
    else:
        requests = read_trace(trace or DEFAULT_TRACE)
        _check_size(len(requests) * load_scale)
    if speedup != 1.0:
        requests = speed_up(requests, speedup)
    if load_scale > 1:
        requests = scale_load(requests, load_scale, seed=seed)
    return requests


def _check_size(expected: float) -> None:
    if not expected <= MAX_REQUESTS:
        raise ValueError(
            f"about {expected:,.0f} requests, more than {MAX_REQUESTS:,}: "
            "lower the rate, duration or scale"
        )


@dataclass
class Scenario:
    """Everything a replay needs except the policy.

    ``spec`` carries the fleet's initial size; ``end_s`` is when the replay stops (the trace's
    span plus a drain margin).

    >>> requests = [TraceRequest(arrival_s=t, isl=500, osl=20) for t in (0.0, 45.0, 90.0)]
    >>> scenario = Scenario(requests, fleet_spec(PlannerConfig(mode="agg")))
    >>> scenario.end_s  # span 135 s → whole minutes (180 s) + 60 s drain margin
    240.0
    """

    requests: Sequence[TraceRequest]
    spec: FleetSpec
    deployment: str = "sim"
    seed: int = 0
    end_s: float = 0.0
    label: str = ""

    def __post_init__(self) -> None:
        if not self.end_s:
            self.end_s = math.ceil(trace_span(self.requests) / 60.0) * 60.0 + 60.0

    def fleet(self, **changes: object) -> FleetSim:
        spec = self.spec.model_copy(update=changes) if changes else self.spec
        return FleetSim(spec, self.requests, deployment=self.deployment, seed=self.seed)


def fleet_spec(
    config: PlannerConfig,
    profile: PerformanceProfile | None = None,
    *,
    prefill_replicas: int = 1,
    decode_replicas: int = 1,
    **options: Any,
) -> FleetSpec:
    """A fleet matching a planner config (mode, SLA targets, GPUs per replica of each role:
    ``prefill_engine_num_gpu`` / ``decode_engine_num_gpu``, 1 if unset); ``options`` are
    further :class:`sim.fleet.FleetSpec` fields (validated by it).

    >>> spec = fleet_spec(PlannerConfig(prefill_engine_num_gpu=4, decode_engine_num_gpu=1))
    >>> spec.gpus("prefill"), spec.gpus("decode")
    (4, 1)
    """
    if config.mode not in ("disagg", "agg"):
        raise ValueError(f"the simulator runs disagg or agg fleets, not mode {config.mode!r}")
    return FleetSpec(
        profile=profile or load_profile(DEFAULT_PROFILE),
        mode=config.mode,
        prefill_replicas=prefill_replicas if config.mode == "disagg" else 0,
        decode_replicas=decode_replicas,
        ttft_ms=config.ttft_ms,
        itl_ms=config.itl_ms,
        gpus_per_replica=config.decode_engine_num_gpu or 1,
        prefill_gpus_per_replica=(
            config.prefill_engine_num_gpu or 1 if config.mode == "disagg" else None
        ),
        **options,
    )


@dataclass
class Outcome:
    """One replay: its score, the planner's ticks (none for fixed policies), and its speed.

    >>> requests = [TraceRequest(arrival_s=t, isl=500, osl=20) for t in (0.0, 45.0, 90.0)]
    >>> scenario = Scenario(requests, fleet_spec(PlannerConfig(mode="agg")))
    >>> out = run_schedule(scenario, [(0.0, 0, 1)], name="static-1")  # one engine, 240 s
    >>> out.name, out.result.num_finished, round(out.result.gpu_hours, 4), out.records
    ('static-1', 3, 0.0667, [])
    """

    name: str
    result: RunResult
    fleet: FleetSim
    records: list[TickRecord] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def speed(self) -> float:
        """Simulated seconds per wall-clock second."""
        return self.result.duration_s / self.wall_s if self.wall_s > 0 else math.inf


def run_planner(
    scenario: Scenario,
    config: PlannerConfig,
    *,
    name: str = "planner",
    bootstrap: bool = True,
    on_step: Callable[[float], None] | None = None,
    initial: tuple[int, int] | None = None,
) -> Outcome:
    """The scenario under the real planner flow (closed loop); ``initial`` overrides the
    fleet's starting (prefill, decode) replicas."""
    changes = {}
    if initial is not None:
        changes = {"prefill_replicas": initial[0], "decode_replicas": initial[1]}
    fleet = scenario.fleet(**changes)
    fpms = profile_to_fpms(scenario.spec.profile) if bootstrap else None
    started = time.perf_counter()
    records = replay(fleet, config, scenario.end_s, bootstrap=fpms, on_step=on_step)
    wall = time.perf_counter() - started
    return Outcome(name, fleet.result(), fleet, records, wall)


def run_schedule(
    scenario: Scenario,
    schedule: Sequence[tuple[float, int, int]],
    *,
    name: str,
    step_s: float = 5.0,
) -> Outcome:
    """The scenario under a fixed replica schedule ``[(time, prefill, decode), ...]``.

    A one-entry schedule at time 0 is a static fleet (it starts at that size, ready); later
    entries apply at their own time, not at the next ``step_s`` boundary.
    """
    first = schedule[0]
    fleet = scenario.fleet(prefill_replicas=first[1], decode_replicas=first[2])
    started = time.perf_counter()
    pending = list(schedule[1:])
    decision_id = 0
    t = 0.0
    while t < scenario.end_s:
        t = min(t + step_s, scenario.end_s)
        while pending and pending[0][0] <= t:
            at, prefill, decode = pending.pop(0)
            if at > fleet.now_s:
                fleet.advance(at)
            decision_id += 1
            fleet.apply(
                ScalingDecision(
                    deployment=scenario.deployment,
                    decision_id=decision_id,
                    time=at,
                    num_prefill=prefill if scenario.spec.mode == "disagg" else None,
                    num_decode=decode,
                    source="throughput",
                    reason="scale",
                )
            )
        if t > fleet.now_s:
            fleet.advance(t)
    wall = time.perf_counter() - started
    return Outcome(name, fleet.result(), fleet, [], wall)
