"""The planner dataflow: inputs → admission → per-deployment tick windows → planner → sinks.

::

    inputs ─► admit ─┬─► dead letters (invalid, unknown deployment, bad role, a batch's bad row)
                     └─► key by deployment
                          ─► event horizon (stateful, one per key) ─┬─► late, ahead ─► dead letters
                          ─► fold_window (tumbling, event time) ────┤
                          ─► planner (stateful, one per key) ───────┤ (forward passes beyond
                          ─► tick records ─► decisions              ┘  an engine's capabilities)

Ticks come from the data's event time (:mod:`flows.clock`); a window ticks once event time
passes its end (an input that ends mid-window leaves that window open rather than ticking on
partial data). With ``live=False`` (recorded streams, bounded Kafka reads, the simulator) the
watermark is the newest event time seen minus the allowed lateness and nothing depends on the
host clock, so a replay reproduces its decisions bit for bit at any speed and with any number
of workers. With ``live=True`` the watermark also follows the system clock once inputs have
been quiet for five seconds, so windows close (and the planner ticks) when nothing arrives —
not while an input is still reading its backlog (:mod:`connectors.backlog`).

The window length is the greatest common divisor of every deployment's tick intervals (load,
and throughput when enabled), at millisecond resolution; a deployment whose cadence is longer
simply folds several windows into one tick.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from typing import TypeGuard, cast

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.inputs import Source
from bytewax.operators.windowing import TumblingWindower, fold_window
from bytewax.outputs import FixedPartitionedSink, Sink

from connectors.backlog import BACKLOG
from connectors.pipeline_metrics import DEAD_LETTERS, DECISIONS_OUT, dead_letter_kind
from connectors.virtual import ReadAck
from flows.clock import EPOCH, PlannerClock
from flows.horizon import (
    EventHorizon,
    event_time,
    is_host_reading,
    is_state_snapshot,
    late_letter,
    untimed,
)
from operators.ack_gate import AckGate
from operators.admission import Admission
from operators.deployment import DeploymentPlanner
from operators.window import TickWindow, fold_event, merge_windows
from schemas import (
    AckEvent,
    Acknowledgement,
    DeadLetter,
    DecisionAck,
    DeliveredDecision,
    Event,
    ForwardPassMetrics,
    PlannerConfig,
    Role,
    ScalingDecision,
    TickRecord,
    TrafficObservation,
)

LIVE_IDLE_SECONDS = 5.0
"""Live runs: after this long without a newer event, the watermark follows the system clock."""


def window_seconds(configs: dict[str, PlannerConfig]) -> float:
    """The tick window of these deployments: gcd of all their enabled tick intervals, in
    seconds (ms resolution). The flow gives each deployment its own (``{name: config}``), so a
    deployment's ticks, training and lateness do not depend on what else a config holds.

    >>> window_seconds({"a": PlannerConfig(optimization_target="sla", enable_load_scaling=True)})
    5.0
    """
    millis = 0
    for config in configs.values():
        millis = math.gcd(millis, round(config.load_adjustment_interval_seconds * 1000))
        if config.enable_throughput_scaling:
            millis = math.gcd(millis, round(config.throughput_adjustment_interval_seconds * 1000))
    return millis / 1000


@dataclass
class PlannerSinks:
    """Where the flow's outputs go (each list may be empty).

    >>> from bytewax.testing import TestingSink, TestingSource, run_main
    >>> from schemas import ClockEvent
    >>> events = [ClockEvent(deployment="llama", time=0), ClockEvent(deployment="llama", time=6),
    ...           ClockEvent(deployment="x", time=7)]  # "x" is not a configured deployment
    >>> ticks, dead = [], []
    >>> sinks = PlannerSinks(ticks=[TestingSink(ticks)], dead_letters=[TestingSink(dead)])
    >>> configs = {"llama": PlannerConfig(mode="decode")}
    >>> run_main(build_flow(configs, [TestingSource(events)], sinks))
    >>> [(r.time, r.ran_load) for r in ticks], [d.reason for d in dead]
    ([(5.0, True)], ["unknown deployment 'x' (the config has llama)"])
    """

    decisions: list[Sink] = field(default_factory=list)
    ticks: list[Sink] = field(default_factory=list)
    dead_letters: list[Sink] = field(default_factory=list)
    actuators: list[Sink] = field(default_factory=list)
    """Outputs that change a fleet (a DGD, the virtual connector): they get the decisions of
    every deployment that is not ``advisory`` (spec §9.1: advisory decisions are computed,
    logged and exported, never applied)."""


@dataclass(frozen=True)
class _PlannerStep:
    configs: dict[str, PlannerConfig]
    windows_of: dict[str, float]
    bootstrap: dict[str, dict[Role, list[ForwardPassMetrics]]]
    hold_for_acks: bool = False
    warmup: dict[str, list[TrafficObservation]] = field(default_factory=dict)
    delivered: dict[str, DeliveredDecision] = field(default_factory=dict)
    in_flight: dict[str, DeliveredDecision] = field(default_factory=dict)
    acknowledged: dict[str, int] = field(default_factory=dict)

    def __call__(
        self, planner: DeploymentPlanner | None, closed: tuple[str, float, TickWindow]
    ) -> tuple[DeploymentPlanner, tuple[TickRecord, list[DeadLetter]]]:
        deployment, end_s, window = closed
        if planner is None:
            config = self.configs[deployment]
            gate = None
            if self.hold_for_acks and not config.advisory:  # nothing acknowledges advice
                sent = self.in_flight.get(deployment)  # it awaits its acknowledgement
                held = self.delivered.get(deployment)
                last_emitted = sent.decision_id if sent else 0
                issued = max(last_emitted, held.decision_id if held else 0)
                acked = self.acknowledged.get(deployment, 0)  # one never issued: the stream's
                gate = AckGate(
                    config.scaling_max_wait_seconds,
                    last_emitted_id=last_emitted,
                    acked_decision_id=acked if acked <= issued else 0,
                    in_flight=(sent.num_prefill, sent.num_decode) if sent else None,
                    numbered_after=held.decision_id if held else 0,
                )
            planner = DeploymentPlanner(
                deployment,
                config,
                self.windows_of[deployment],
                bootstrap=self.bootstrap.get(deployment),
                gate=gate,
                warmup=self.warmup.get(deployment),
                delivered=self.delivered.get(deployment),
            )
        record = planner.on_window(end_s, window)
        return planner, (record, planner.take_dead_letters())


def _late(deployment_and_late: tuple[str, tuple[int, Event]]) -> DeadLetter:
    _deployment, (_window, event) = deployment_and_late
    return late_letter(event)


def ack_event(item: ReadAck | DecisionAck | DeadLetter) -> AckEvent | DeadLetter:
    """An acknowledgement from the virtual connector's topic as an input event (remembering the
    message it was read from: :meth:`schemas.AckEvent.read_at`).

    It is a state snapshot timed at event time 0 (:func:`flows.horizon.untimed`), whatever its
    own ``time`` says: the event horizon places it at the planner's watermark, so it applies
    from the next tick. Its ``time`` is the orchestrator's clock, not the data's: one ahead of
    the data (or in milliseconds) would move event time on and make every later measurement
    late, and the host clock would make a replay depend on when it ran.

    >>> ack_event(DecisionAck(deployment="d", acked_decision_id=3, time=1e10)).time
    0.0
    """
    if isinstance(item, DeadLetter):
        return item
    ack = item.ack if isinstance(item, ReadAck) else item
    event = AckEvent(
        deployment=ack.deployment,
        time=untimed(),
        payload=Acknowledgement(acked_decision_id=ack.acked_decision_id),
    )
    return (
        event.read_at(item.source, item.position, item.raw) if isinstance(item, ReadAck) else event
    )


def is_event(item: Event | DeadLetter) -> TypeGuard[Event]:
    """``item`` is an event, not a dead letter (a branch of the flows)."""
    return not isinstance(item, DeadLetter)


def _is_keyed_event(kv: tuple[str, Event | DeadLetter]) -> TypeGuard[tuple[str, Event]]:
    return not isinstance(kv[1], DeadLetter)


def count_dead_letter(letter: DeadLetter) -> DeadLetter:
    """Count ``letter`` in ``flowplanner_dead_letters_total`` by kind; returns it."""
    DEAD_LETTERS.labels(kind=dead_letter_kind(letter.reason)).inc()
    return letter


def _count_decision(decision: ScalingDecision) -> ScalingDecision:
    DECISIONS_OUT.labels(deployment=decision.deployment).inc()
    return decision


def build_flow(
    configs: dict[str, PlannerConfig],
    inputs: Sequence[Source],
    sinks: PlannerSinks,
    *,
    live: bool = False,
    bootstrap: dict[str, dict[Role, list[ForwardPassMetrics]]] | None = None,
    acks: Source | None = None,
    warmup: dict[str, list[TrafficObservation]] | None = None,
    delivered: dict[str, DeliveredDecision] | None = None,
    in_flight: dict[str, DeliveredDecision] | None = None,
    acknowledged: dict[str, int] | None = None,
    name: str = "flowplanner",
    host_clock: Callable[[], datetime] | None = None,
    ordered: bool = False,
) -> Dataflow:
    """Build the planner dataflow for ``configs`` (deployment name → config).

    ``bootstrap`` gives benchmark FPMs per deployment and role (from a pre-deployment profile)
    to warm the perf models before live data arrives. ``acks`` (the virtual connector's
    acknowledgement source) makes every deployment hold a decision until the previous one is
    acknowledged (:class:`operators.ack_gate.AckGate`). ``warmup`` pre-trains each
    deployment's load predictors with historical traffic windows (spec §7.6). ``delivered``
    is, per deployment, the newest decision the outputs already hold: a restarted planner
    resumes after it (see :mod:`operators.deployment`). ``in_flight`` is the newest decision
    the virtual connector's topic holds: behind ``acks`` it awaits its acknowledgement, unless
    ``acknowledged`` (the highest id the acknowledgement topic held at start) covers it.
    ``host_clock`` is the system clock of a live run (tests give their own).
    ``ordered`` says the inputs are in event-time order by construction (the closed loop's own
    simulator): the event horizon then holds nothing for confirmation.
    """
    if not configs:
        raise ValueError("no deployments configured")
    if not inputs:
        raise ValueError("no inputs")
    flow = Dataflow(name)
    streams = [op.input(f"input_{i}", flow, source) for i, source in enumerate(inputs)]
    if acks is not None:
        streams.append(op.map("ack_events", op.input("acks", flow, acks), ack_event))
    raw = streams[0] if len(streams) == 1 else op.merge("merge_inputs", *streams)

    admitted = op.flat_map("admit", raw, Admission(configs).admit)
    valid = op.branch("valid", admitted, is_event)
    keyed = op.key_on("by_deployment", valid.trues, lambda event: event.deployment)

    windows_of = {name: window_seconds({name: config}) for name, config in configs.items()}
    lateness = {name: timedelta(seconds=c.allowed_lateness_seconds) for name, c in configs.items()}
    idle_after = timedelta(seconds=LIVE_IDLE_SECONDS) if live else None
    clock = PlannerClock(
        event_time,
        max(lateness.values()),
        idle_after,
        is_state=is_state_snapshot,
        is_host_reading=is_host_reading,
        lateness_of=lambda event: lateness[event.deployment],  # each key its own
        backlog=BACKLOG if live else None,
    )
    if host_clock is not None:
        clock = replace(clock, now_getter=host_clock)
    closed, late, horizon_refused = _tick_windows(keyed, windows_of, clock, live, ordered)
    step = _PlannerStep(
        configs,
        windows_of,
        bootstrap or {},
        hold_for_acks=acks is not None,
        warmup=warmup or {},
        delivered=delivered or {},
        in_flight=in_flight or {},
        acknowledged=acknowledged or {},
    )
    records = op.stateful_map("planner", closed, step)
    tick_records = op.map("tick_records", records, lambda kv: kv[1][0])
    beyond_limits = op.flat_map("beyond_engine_limits", records, lambda kv: kv[1][1])
    decisions = op.filter_map(  # what reached the outputs before a restart is not sent again
        "decisions",
        tick_records,
        lambda record: None if record.delivered_before else record.decision,
    )
    decisions = op.map("count_decisions", decisions, _count_decision)
    applied = op.filter("not_advisory", decisions, lambda d: not configs[d.deployment].advisory)

    late_letters = op.map("late_letters", late, _late)
    # bytewax's branch narrows only its trues (a TypeGuard); its falses are the dead letters
    invalid = cast(op.Stream[DeadLetter], valid.falses)
    refused = op.map("refused_letters", horizon_refused, lambda kv: kv[1])
    dead = op.merge("dead_letters", invalid, refused, late_letters, beyond_limits)
    dead = op.map("count_dead_letters", dead, count_dead_letter)

    for kind, stream, kind_sinks in (
        ("decisions", decisions, sinks.decisions),
        ("actuators", applied, sinks.actuators),
        ("ticks", tick_records, sinks.ticks),
        ("dead_letters", dead, sinks.dead_letters),
    ):
        for i, sink in enumerate(kind_sinks):
            _output(f"{kind}_out_{i}", stream, sink)
    return flow


def _tick_windows(
    keyed: op.KeyedStream[Event],
    windows_of: dict[str, float],
    clock: PlannerClock,
    live: bool,
    ordered: bool,
) -> tuple[
    op.Stream[tuple[str, tuple[str, float, TickWindow]]],
    op.Stream[tuple[str, tuple[int, Event]]],
    op.Stream[tuple[str, DeadLetter]],
]:
    """Each deployment's events through the event horizon into tumbling tick windows of its
    own length (one horizon and window step per length): the closed windows as ``(deployment,
    (deployment, end_s, window))``, the late events, and the horizon's dead letters."""
    closed, late, refused = [], [], []
    lengths = sorted(set(windows_of.values()))
    for window_s in lengths:
        names = {name for name, length in windows_of.items() if length == window_s}
        suffix = "" if len(lengths) == 1 else f"_{round(window_s * 1000)}ms"
        mine = (
            keyed
            if len(lengths) == 1
            else op.filter(f"window_of{suffix}", keyed, partial(_of_deployments, names))
        )
        horizon = EventHorizon(clock, live, window_s, ordered).apply(f"event_horizon{suffix}", mine)
        on_time = op.branch(f"on_time{suffix}", horizon, _is_keyed_event)
        windows = fold_window(
            f"tick_window{suffix}",
            on_time.trues,
            clock,
            TumblingWindower(length=timedelta(seconds=window_s), align_to=EPOCH),
            TickWindow,
            fold_event,
            merge_windows,
        )
        closed.append(op.map(f"window_closed{suffix}", windows.down, partial(_closed, window_s)))
        late.append(windows.late)
        # bytewax's branch narrows only its trues (a TypeGuard); its falses are dead letters
        refused.append(cast(op.Stream[tuple[str, DeadLetter]], on_time.falses))
    if len(lengths) == 1:
        return closed[0], late[0], refused[0]
    return (
        op.merge("windows_closed", *closed),
        op.merge("windows_late", *late),
        op.merge("horizons_refused", *refused),
    )


def _of_deployments(names: set[str], kv: tuple[str, Event]) -> bool:
    return kv[0] in names


def _closed(
    window_s: float, kv: tuple[str, tuple[int, TickWindow]]
) -> tuple[str, tuple[str, float, TickWindow]]:
    """A closed window as the planner step takes it: its deployment and end time."""
    deployment, (index, window) = kv
    return deployment, (deployment, (index + 1) * window_s, window)


def _route_key(record: ScalingDecision | TickRecord | DeadLetter) -> str:
    return record.deployment or ""


def _output(step_id: str, stream: op.Stream, sink: Sink) -> None:
    # Fixed-partitioned sinks route (key, value) pairs; dynamic sinks take the records as is.
    if isinstance(sink, FixedPartitionedSink):
        stream = op.key_on(f"{step_id}_route", stream, _route_key)
    op.output(step_id, stream, sink)
