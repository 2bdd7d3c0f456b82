"""Each deployment's event-time horizon, kept for the whole run, in front of its tick windows.

bytewax's window operator forgets a key's clock once all of its windows have closed — in a live
run, whenever the inputs of a deployment go quiet long enough for the system clock to close
them. The next event then starts a fresh clock at its own time, so an event far behind what the
planner already ticked past would be admitted and the planner would tick backwards.
:class:`EventHorizon` keeps the same clock (:class:`flows.clock.PlannerClock`) for each
deployment for as long as the run lasts, and in front of the windows:

* live, a measurement behind the watermark is a dead letter (``late``), as the window's would
  be (a replay never drops a key's windows before its end: there the window step's clock is
  the one that counts);
* one stray timestamp must not move event time: a measurement more than :data:`MAX_JUMP_S`
  past the deployment's newest (and, in a replay, the very first one) is held until the next
  measurement confirms it — lies within :data:`MAX_JUMP_S` of it — and is then used (a real
  gap in the data); if the next one disagrees, the held one is a dead letter (``stray``).
  Live, a measurement more than :data:`MAX_AHEAD_OF_HOST_S` past the host clock is a dead
  letter at once (``ahead``), and the first one is used at once (a live source's first
  traffic observation may be minutes from its second);
* a state snapshot (inventory, capabilities, acknowledgement) describes the present: it is
  placed at the watermark if it is older. Live, its own time is another host's clock: it never
  moves event time (one ahead is placed at the newest event), and one that comes before the
  deployment's first measurement waits for it and is placed at its time (an untimed snapshot —
  time 0 — would otherwise open a window at the Unix epoch).

At the end of a bounded input a held measurement is used (nothing follows to contradict it).

>>> from bytewax.testing import TestingSink, TestingSource, run_main
>>> import bytewax.operators as op
>>> from bytewax.dataflow import Dataflow
>>> from schemas import ClockEvent
>>> times = [100.0, 101.0, 9e10, 102.0]  # a stray far ahead
>>> flow = Dataflow("horizon_doc")
>>> events = op.input("in", flow, TestingSource([ClockEvent(deployment="d", time=t)
...                                              for t in times]))
>>> keyed = op.key_on("key", events, lambda e: e.deployment)
>>> clock = PlannerClock(event_time, timedelta(seconds=1))
>>> out = []
>>> op.output("out", EventHorizon(clock, live=False).apply("horizon", keyed), TestingSink(out))
>>> run_main(flow)
>>> for _key, item in out:
...     print(item.time if isinstance(item, ClockEvent) else item.reason)
100.0
101.0
stray: event time 90000000000.0 is more than 604800 s from the events around it
102.0
"""

from __future__ import annotations

import time as host
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import bytewax.operators as op
from bytewax.operators import StatefulLogic

from flows.clock import EPOCH, ClockState, PlannerClock
from schemas import AckEvent, CapabilitiesEvent, DeadLetter, Event, InventoryEvent

MAX_AHEAD_OF_HOST_S = 300.0
"""*ours*: live, an event stamped more than 5 minutes past the host clock is refused (clocks of
healthy hosts agree within well under a second; this is a broken clock or a wrong unit)."""

MAX_JUMP_S = 7 * 24 * 3600.0
"""*ours*: a measurement more than 7 days from its deployment's newest needs the next one to
confirm it (a stream of one deployment does not jump by a week for a single event)."""


def untimed() -> float:
    """The time of a snapshot taken on the host clock, not the data's: 0, so the horizon places
    it at the planner's watermark (an acknowledgement, a DGD inventory poll)."""
    return 0.0


def event_time(event: Event) -> datetime:
    """Event time as an aware UTC datetime (what bytewax's clocks need)."""
    return EPOCH + timedelta(seconds=event.time)


def is_state_snapshot(event: Event) -> bool:
    """Inventory, capabilities and acknowledgements describe the present (see flows.clock)."""
    return isinstance(event, InventoryEvent | CapabilitiesEvent | AckEvent)


def late_letter(event: Event) -> DeadLetter:
    """The dead letter of a measurement behind the planner's watermark."""
    return DeadLetter(
        source="window",
        reason=f"late: event time {event.time} is behind the planner's watermark",
        raw=event.model_dump_json(),
        deployment=event.deployment,
    )


def _refused(event: Event, kind: str, how_far: str) -> DeadLetter:
    return DeadLetter(
        source="window",
        reason=f"{kind}: event time {event.time} is more than {how_far}",
        raw=event.model_dump_json(),
        deployment=event.deployment,
    )


@dataclass
class HorizonState:
    """One deployment's clock state, its newest used measurement, the measurement held for
    confirmation, and the snapshots waiting for the first measurement (live)."""

    clock: ClockState | None = None
    newest: float | None = None
    held: Event | None = None
    waiting: list[Event] = field(default_factory=list)


@dataclass(frozen=True)
class EventHorizon:
    """The horizon step: events of one deployment in, the events to window or dead letters out.

    See the module docs for the rules and an example.
    """

    clock: PlannerClock
    live: bool

    def apply(
        self, step_id: str, keyed: op.KeyedStream[Event]
    ) -> op.KeyedStream[Event | DeadLetter]:
        """Add the step to a dataflow (``op.stateful``)."""
        return op.stateful(step_id, keyed, lambda state: _Horizon(self, state or HorizonState()))


class _Horizon(StatefulLogic[Event, Event | DeadLetter, HorizonState]):
    def __init__(self, horizon: EventHorizon, state: HorizonState) -> None:
        self.live = horizon.live
        self.clock = horizon.clock.build(state.clock)
        self.state = state

    def on_item(self, event: Event) -> tuple[Iterable[Event | DeadLetter], bool]:
        if self.live and event.time > host.time() + MAX_AHEAD_OF_HOST_S:
            past = f"{MAX_AHEAD_OF_HOST_S:g} s past the host clock"
            return [_refused(event, "ahead", past)], StatefulLogic.RETAIN
        if is_state_snapshot(event):
            return self._snapshot(event), StatefulLogic.RETAIN
        out: list[Event | DeadLetter] = []
        state = self.state
        if state.held is not None:
            held, state.held = state.held, None
            if abs(event.time - held.time) <= MAX_JUMP_S:
                out += self._use(held)  # confirmed: a real gap in the data
            else:
                out.append(_refused(held, "stray", f"{MAX_JUMP_S:g} s from the events around it"))
        first = state.newest is None and not self.live  # live, the host clock bounds the first
        if first or (state.newest is not None and event.time > state.newest + MAX_JUMP_S):
            state.held = event  # (far behind is merely late)
            return out, StatefulLogic.RETAIN
        return out + self._use(event), StatefulLogic.RETAIN

    def on_eof(self) -> tuple[Iterable[Event | DeadLetter], bool]:
        held, self.state.held = self.state.held, None
        return (self._use(held) if held is not None else []), StatefulLogic.RETAIN

    def snapshot(self) -> HorizonState:
        self.state.clock = self.clock.snapshot()
        return self.state

    def _use(self, event: Event) -> list[Event | DeadLetter]:
        state = self.state
        if not self.live:  # replays never drop a key's windows: the window step's clock will do
            state.newest = event.time if state.newest is None else max(state.newest, event.time)
            return [event]
        self.clock.before_batch()
        timestamp, watermark = self.clock.on_item(event)
        if timestamp < watermark:
            return [late_letter(event)]
        state.newest = event.time if state.newest is None else max(state.newest, event.time)
        waiting = [e.model_copy(update={"time": event.time}) for e in state.waiting]
        state.waiting = []
        return [*waiting, event]

    def _snapshot(self, event: Event) -> list[Event | DeadLetter]:
        state = self.state
        if not self.live:  # its time is data; the window step places it if late
            return [event]
        if state.newest is None:  # wait for the first measurement
            if not isinstance(event, CapabilitiesEvent):  # capabilities merge: keep them all
                state.waiting = [e for e in state.waiting if type(e) is not type(event)]
            state.waiting.append(event)
            return []
        watermark = _seconds(self.clock.on_notify())
        return [_at(event, max(watermark, min(event.time, state.newest)))]


def _at(event: Event, seconds: float) -> Event:
    return event if seconds == event.time else event.model_copy(update={"time": seconds})


def _seconds(timestamp: datetime) -> float:
    return (timestamp - EPOCH) / timedelta(seconds=1)
