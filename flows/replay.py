"""Closed-loop replay: the simulated fleet and the real planner dataflow, on virtual time.

The fleet simulator is the dataflow's input (a bytewax source) and its actuator (a bytewax
sink). The two run in lock step: the source simulates one tick window of the fleet and hands
the planner every event of it (forward passes, arrivals, inventory) followed by a clock event
at the window's end; it then waits until the planner's tick record for that window has come
back through the sink, which applies the decision to the fleet at that same instant. Nothing
sleeps and nothing reads the host clock, so the same trace, config and seed give the same
result, bit for bit, at any host speed — with exactly the flow and operators used in
production.

The loop runs the planner with no allowed lateness, whatever the config says
(:func:`closed_loop_flow`): the simulator hands over each window's events in event-time order
and nothing arrives after its time, so lateness would admit nothing more — it would only hold
the window ``[until - step, until)`` open until event time reached ``until + lateness``, and
that event time comes from the source, which waits for the window's tick record first: with
any lateness above 0 the loop would deadlock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bytewax.dataflow import Dataflow
from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.testing import run_main

from flows.planner import PlannerSinks, build_flow, window_seconds
from schemas import ClockEvent, Event, ForwardPassMetrics, PlannerConfig, Role, TickRecord
from sim.fleet import FleetSim


@dataclass
class ClosedLoop:
    """Shared state of one replay: the fleet, the horizon, and the planner's progress.

    >>> from schemas.profile import DecodeProfile, PerformanceProfile, PrefillProfile
    >>> from schemas.trace import TraceRequest
    >>> from sim.fleet import FleetSpec
    >>> profile = PerformanceProfile(
    ...     prefill=PrefillProfile(prefill_isl=[100, 1100], prefill_ttft=[20, 40],
    ...                            prefill_thpt_per_gpu=[5000, 27500]),
    ...     decode=DecodeProfile(x_kv_usage=[0.001, 0.5], y_context_length=[1000, 1000],
    ...                          z_itl=[5, 25], z_thpt_per_gpu=[200, 9000], max_kv_tokens=10**6))
    >>> fleet = FleetSim(FleetSpec(profile=profile), [TraceRequest(arrival_s=1, isl=500, osl=20)])
    >>> loop = ClosedLoop(fleet, end_s=10.0, step_s=5.0)
    >>> loop.next_events()[-1].type, loop.awaiting
    ('clock', 5.0)
    >>> loop.next_events()  # nothing more until the planner's record for [0, 5) comes back
    []
    """

    fleet: FleetSim
    end_s: float
    step_s: float
    records: list[TickRecord] = field(default_factory=list)
    awaiting: float | None = None
    on_step: Callable[[float], None] | None = None

    def next_events(self) -> list[Event]:
        """Simulate the next window, or nothing while the planner is still on the last one."""
        if self.awaiting is not None:
            return []
        start = self.fleet.now_s
        if start >= self.end_s:
            raise StopIteration
        until = min(start + self.step_s, self.end_s)
        events: list[Event] = [ClockEvent(deployment=self.fleet.deployment, time=start)]
        events.extend(self.fleet.advance(until))
        if _is_boundary(until, self.step_s):
            self.awaiting = until  # the window [until - step, until) closes with this batch
        if self.on_step is not None:
            self.on_step(until)
        return events

    def on_record(self, record: TickRecord) -> None:
        """A tick record came back: apply its decision to the fleet and release the source."""
        self.records.append(record)
        if record.decision is not None:
            self.fleet.apply(record.decision)
        if self.awaiting is not None and record.time >= self.awaiting - 1e-9:
            self.awaiting = None


def _is_boundary(t: float, step_s: float) -> bool:
    return abs(t / step_s - round(t / step_s)) < 1e-9


class _FleetPartition(StatefulSourcePartition[Event, None]):
    def __init__(self, loop: ClosedLoop) -> None:
        self._loop = loop

    def next_batch(self) -> list[Event]:
        return self._loop.next_events()

    def snapshot(self) -> None:
        return None


class FleetSource(FixedPartitionedSource[Event, None]):
    """The simulated fleet as the planner flow's input (one partition).

    >>> from flows.scenario import fleet_spec
    >>> spec = fleet_spec(PlannerConfig(mode="disagg"))  # the shipped H200 profile
    >>> loop = ClosedLoop(FleetSim(spec, []), end_s=10.0, step_s=5.0)
    >>> part = FleetSource(loop).build_part("fleet_in", "fleet", None)
    >>> [e.type for e in part.next_batch()], loop.awaiting  # one window, ended by a clock
    (['clock', 'capabilities', 'inventory', 'fpm_batch', 'fpm_batch', 'clock'], 5.0)
    """

    def __init__(self, loop: ClosedLoop) -> None:
        self.loop = loop

    def list_parts(self) -> list[str]:
        return ["fleet"]

    def build_part(self, step_id: str, for_part: str, resume_state: None) -> _FleetPartition:
        return _FleetPartition(self.loop)


class _ActuatorPartition(StatelessSinkPartition[TickRecord]):
    def __init__(self, loop: ClosedLoop) -> None:
        self._loop = loop

    def write_batch(self, items: list[TickRecord]) -> None:
        for record in items:
            self._loop.on_record(record)


class FleetActuator(DynamicSink[TickRecord]):
    """The simulated fleet as the planner flow's actuator (takes tick records).

    >>> from flows.scenario import fleet_spec
    >>> spec = fleet_spec(PlannerConfig(mode="disagg"))  # the shipped H200 profile
    >>> loop = ClosedLoop(FleetSim(spec, []), end_s=10.0, step_s=5.0)
    >>> _ = loop.next_events()  # the source waits for the planner's record of [0, 5)
    >>> record = TickRecord(deployment="sim", time=5.0)
    >>> FleetActuator(loop).build("ticks", 0, 1).write_batch([record])
    >>> loop.awaiting, len(loop.records)  # the record is in: the source may go on
    (None, 1)
    """

    def __init__(self, loop: ClosedLoop) -> None:
        self.loop = loop

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _ActuatorPartition:
        return _ActuatorPartition(self.loop)


def closed_loop_flow(
    loop: ClosedLoop,
    config: PlannerConfig,
    bootstrap: dict[Role, list[ForwardPassMetrics]] | None = None,
) -> Dataflow:
    """The production planner flow with the fleet as its only input and actuator.

    ``config``'s ``allowed_lateness_seconds`` is set to 0, and no event is held for
    confirmation (see the module docs: the simulator's events are in order, and the lock step
    would deadlock on any lateness or hold).
    """
    deployment = loop.fleet.deployment
    in_order = config.model_copy(update={"allowed_lateness_seconds": 0.0})
    return build_flow(
        {deployment: in_order},
        [FleetSource(loop)],
        PlannerSinks(ticks=[FleetActuator(loop)]),
        live=False,
        bootstrap={deployment: bootstrap} if bootstrap else None,
        name="flowplanner_replay",
        ordered=True,
    )


def replay(
    fleet: FleetSim,
    config: PlannerConfig,
    end_s: float,
    bootstrap: dict[Role, list[ForwardPassMetrics]] | None = None,
    on_step: Callable[[float], None] | None = None,
) -> list[TickRecord]:
    """Run the fleet under the planner until ``end_s``; returns every tick record."""
    step_s = window_seconds({fleet.deployment: config})
    loop = ClosedLoop(fleet=fleet, end_s=end_s, step_s=step_s, on_step=on_step)
    run_main(closed_loop_flow(loop, config, bootstrap))
    return loop.records
