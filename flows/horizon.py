"""Each deployment's event-time horizon, kept for the whole run, in front of its tick windows.

bytewax's window operator forgets a key's clock once all of its windows have closed — in a live
run, whenever the inputs of a deployment go quiet long enough for the system clock to close
them. The next event then starts a fresh clock at its own time, so an event far behind what the
planner already ticked past would be admitted and the planner would tick backwards.
:class:`EventHorizon` keeps the same clock (:class:`flows.clock.PlannerClock`) for each
deployment for as long as the run lasts, and in front of the windows:

* a measurement behind the watermark is a dead letter (``late``), as the window's would be;
* a measurement too far *ahead* is a dead letter too (``ahead``): one event stamped in the far
  future would otherwise make every later valid event late. Live, that is more than
  :data:`MAX_AHEAD_OF_HOST_S` past the host clock; in any run, more than
  :data:`MAX_JUMP_S` past the deployment's newest event;
* a state snapshot (inventory, capabilities, acknowledgement) describes the present: it is
  placed at the watermark if it is older; live, one that comes before the deployment's first
  measurement waits for it and is placed at its time (an untimed snapshot — time 0 — would
  otherwise open a window at the Unix epoch).

>>> from datetime import timedelta
>>> from schemas import ClockEvent
>>> clock = PlannerClock(event_time, timedelta(seconds=1))
>>> horizon = EventHorizon(clock, live=False)
>>> state, out = horizon(None, ClockEvent(deployment="llama", time=100.0))
>>> state, out = horizon(state, ClockEvent(deployment="llama", time=50.0))
>>> print(out[0].reason)
late: event time 50.0 is behind the planner's watermark
>>> state, out = horizon(state, ClockEvent(deployment="llama", time=9e10))
>>> out[0].reason.split(":")[0]
'ahead'
"""

from __future__ import annotations

import time as host
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from bytewax.operators.windowing import ClockLogic

from flows.clock import EPOCH, ClockState, PlannerClock
from schemas import AckEvent, CapabilitiesEvent, DeadLetter, Event, InventoryEvent

MAX_AHEAD_OF_HOST_S = 300.0
"""*ours*: live, an event stamped more than 5 minutes past the host clock is refused (clocks of
healthy hosts agree within well under a second; this is a broken clock or a wrong unit)."""

MAX_JUMP_S = 7 * 24 * 3600.0
"""*ours*: an event more than 7 days past its deployment's newest is refused (no recording or
live stream of one deployment pauses for a week; this is a corrupt timestamp)."""


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


@dataclass
class HorizonState:
    """One deployment's clock, whether it has seen a measurement, and the snapshots waiting
    for the first one (the newest inventory and acknowledgement, every capabilities event)."""

    clock: ClockLogic[Event, ClockState]
    measured: bool = False
    waiting: list[Event] = field(default_factory=list)

    def wait(self, snapshot: Event) -> None:
        """Hold ``snapshot`` until the first measurement; a newer one of a kind that replaces
        (inventory, acknowledgement) takes the older one's place."""
        if not isinstance(snapshot, CapabilitiesEvent):  # capabilities merge: keep them all
            self.waiting = [e for e in self.waiting if type(e) is not type(snapshot)]
        self.waiting.append(snapshot)


@dataclass(frozen=True)
class EventHorizon:
    """The ``stateful_flat_map`` step: one event in, the events to window (or dead letters) out.

    See the module docs for the rules and an example.
    """

    clock: PlannerClock
    live: bool

    def __call__(
        self, state: HorizonState | None, event: Event
    ) -> tuple[HorizonState, list[Event | DeadLetter]]:
        if state is None:
            state = HorizonState(self.clock.build(None))
        ahead = self._ahead(state, event)
        if ahead is not None:
            return state, [ahead]
        snapshot = is_state_snapshot(event)
        if snapshot and self.live and not state.measured:
            state.wait(event)
            return state, []
        state.clock.before_batch()
        timestamp, watermark = state.clock.on_item(event)
        if snapshot:  # placed at the watermark if older
            return state, [event.model_copy(update={"time": _seconds(timestamp)})]
        if timestamp < watermark:
            return state, [late_letter(event)]
        state.measured = True
        waiting = [e.model_copy(update={"time": event.time}) for e in state.waiting]
        state.waiting = []
        return state, [*waiting, event]

    def _ahead(self, state: HorizonState, event: Event) -> DeadLetter | None:
        newest = _seconds(state.clock.snapshot().newest)
        if self.live and event.time > host.time() + MAX_AHEAD_OF_HOST_S:
            why = f"more than {MAX_AHEAD_OF_HOST_S:g} s past the host clock"
        elif state.measured and event.time > newest + MAX_JUMP_S:
            why = f"more than {MAX_JUMP_S:g} s past the newest event ({newest})"
        else:
            return None
        return DeadLetter(
            source="window",
            reason=f"ahead: event time {event.time} is {why}",
            raw=event.model_dump_json(),
            deployment=event.deployment,
        )


def _seconds(timestamp: datetime) -> float:
    return (timestamp - EPOCH) / timedelta(seconds=1)
