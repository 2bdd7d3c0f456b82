"""Each deployment's event-time horizon, kept for the whole run, in front of its tick windows.

bytewax's window operator forgets a key's clock once all of its windows have closed — in a live
run, whenever the inputs of a deployment go quiet long enough for the system clock to close
them. The next event then starts a fresh clock at its own time, so an event far behind what the
planner already ticked past would be admitted and the planner would tick backwards.
:class:`EventHorizon` keeps the same clock (:class:`flows.clock.PlannerClock`) for each
deployment for as long as the run lasts, and in front of the windows:

* live, a measurement behind the watermark is a dead letter (``late``), as the window's would
  be (a replay never drops a key's windows before its end: there the window step's clock is
  the one that counts) — except a reading of the run's Prometheus input
  (:class:`connectors.prometheus.PrometheusReading`, :func:`is_host_reading`): it is taken on
  the host clock, like an inventory poll, and forward passes stamped on receipt move event time
  on while its queries run and while it crosses to its deployment's worker, so one behind the
  watermark is placed at the watermark (the clock's rule, ``PlannerClock.is_host_reading``,
  which the planner flow sets: the horizon and the windows place it alike); one ahead of it
  moves event time like any measurement (a throughput-only deployment may have no other
  clock). A traffic event read from Kafka or a
  recording is data: it stays late (a followed topic decides as its replay);
* live, a measurement this run's own input stamped on receipt (:func:`is_stamped_on_receipt`:
  a forward pass over ZMQ, :class:`connectors.zmq_source.ReceivedFpmBatch`, or a Prometheus
  reading) waits while an input reads back its history (:mod:`connectors.backlog`: a followed
  topic read from its beginning after a restart, a recording joined with the engines) and for
  :data:`SETTLE_S` after the last one caught up — what an input handed on is still being
  parsed and routed to its deployment's worker then, so holding in the source is not enough.
  Stamped at the present, it would move event time past the history still to come and make
  it late. The held ones go on in arrival order before the next measurement once the history
  has settled, or on a timer (``notify_at``) if none comes; while the history is read, those
  at or before a measurement of it go on before it (a history that reaches the present
  interleaves with them), unless that one waits for confirmation or decides a held one. One
  the history moved event time past while it waited is placed at the watermark, not late (the
  wait made it late, not its time). At most :data:`MAX_HELD_RECEIPTS` forward passes wait per
  deployment; the oldest past them are dead letters (``ignored``). They are part of the state
  snapshot (:class:`HorizonState`). The backlog is the process's: every deployment's wait,
  whether it has a history or not;
* one stray timestamp must not move event time: live, a measurement more than
  :data:`MAX_JUMP_S` past the deployment's newest is held until the next measurement confirms
  it — lies within :data:`MAX_JUMP_S` of it — and is then used (a real gap in the data); if
  the next one disagrees, the held one is a dead letter (``stray``). In a replay (and live,
  while the inputs read back their history: :mod:`connectors.backlog`) any measurement more
  than :data:`REPLAY_JUMP_S` (or the deployment's allowed lateness) past the newest is held
  until the next one shows the stream did not go back behind it by more than that; the very
  first measurement of a replay is held too, and when the next one lies a week or more past
  it, the one after them says which of the two is the stray. The closed loop's simulator, in
  order by construction, is never held (``ordered``).
  Live, a measurement more than :data:`MAX_AHEAD_OF_HOST_S` (plus the allowed lateness) past
  the host clock is a dead letter at once (``ahead``), and the first one is used at once (a
  live source's first traffic observation may be minutes from its second);
* a state snapshot (inventory, capabilities, acknowledgement, limits) describes the present: it is
  placed at the watermark if it is older. Live, its own time is another host's clock: it never
  moves event time — it keeps its own time up to one tick window past the newest measurement
  (so it lands in the window a replay puts it in, whether it comes just before or just after
  the measurements of its time: a topic's partitions merged on equal times may hand on either
  first), one further ahead is placed at the newest measurement — and the ones that come before
  the deployment's first measurement wait for it and are placed at its time (an untimed
  snapshot — time 0 — would otherwise open a window at the Unix epoch); while they wait they
  collapse to one of each kind (the newest inventory and acknowledgement, the capabilities
  merged), so a deployment polled for hours before its first measurement holds three at most.
  In a replay a snapshot's time is data, so one stray timestamp there must not move event time
  either: a snapshot more than :data:`REPLAY_JUMP_S` past the newest measurement is held like
  a measurement, used if the next measurement confirms it and a dead letter (``stray``) if not;
  and a snapshot never overtakes a held measurement (nor the first one): it waits behind it,
  then is used, or is a ``stray`` dead letter if it lies more than :data:`REPLAY_JUMP_S` past
  the measurements that came after all;
* a forward-pass batch (``fpm_batch``) whose rows span several tick windows is split into one
  batch per window, each at the time of its last row (the piece in the batch's own window keeps
  the batch's time; if none of its rows are in that window, a clock event carries the batch's
  time on): each piece is then used, held or late on its own, like single forward passes, and
  its rows are folded into their own window — not into the window of the batch's time.

At the end of a bounded input a held measurement is used (nothing follows to contradict it),
and so are the snapshots waiting behind it and, live, the measurements stamped on receipt.

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
stray: event time 90000000000.0 is more than 60 s ahead of the events before and after it
102.0
"""

from __future__ import annotations

import math
import time as host
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import bytewax.operators as op
from bytewax.operators import StatefulLogic

from connectors.prometheus import PrometheusReading
from connectors.zmq_source import ReceivedFpm, ReceivedFpmBatch
from flows.clock import EPOCH, ClockState, PlannerClock
from operators.window import merge_capabilities
from schemas import (
    AckEvent,
    CapabilitiesEvent,
    ClockEvent,
    DeadLetter,
    Event,
    FpmBatchEvent,
    FpmRow,
    InventoryEvent,
    LimitsEvent,
)

MAX_AHEAD_OF_HOST_S = 5.0
"""*ours*: live, a measurement stamped more than this past the host clock, plus the deployment's
allowed lateness (which covers the skew of the hosts that stamp its events), is refused: clocks
of healthy hosts agree within well under a second, so this is a fast clock, a broken one or a
wrong unit — and used, it would move event time ahead of every real event for as long as it
is ahead (one request stamped 2 minutes fast made the next 2 minutes of passes and requests
late: a stray a replay of the same topic holds and refuses). A state snapshot is placed at the
newest measurement instead."""

MAX_JUMP_S = 7 * 24 * 3600.0
"""*ours*: a measurement more than 7 days from its deployment's newest needs the next one to
confirm it (a stream of one deployment does not jump by a week for a single event)."""

FLOAT_NOISE_US = 1e-3
"""A time this close below a whole microsecond is read as on it (:func:`event_time_of`)."""

REPLAY_JUMP_S = 60.0
"""*ours*: in a replay, an event more than a minute (or its deployment's allowed lateness, if
longer) past the newest measurement is held until the next measurement confirms it by not
going back behind it by more than that: one mistyped timestamp an hour ahead would otherwise
make the rest of the recording late. A recording that really jumps ahead goes on from there,
so holding costs nothing but one event's wait."""

SETTLE_S = 2.0
"""*ours*: live, measurements stamped on receipt (:func:`is_stamped_on_receipt`) are held while
an input reads back its history and this long after the last one caught up: what it handed on
is still being parsed and routed to its deployment's worker then (a source batch of a thousand
lines takes tens of milliseconds on a busy host). Shorter than the live idle period (5 s,
``flows.planner.LIVE_IDLE_SECONDS``), so the held ones are used before the host clock could
move event time past them."""

MAX_HELD_RECEIPTS = 50_000
"""*ours*: the forward passes (a batch's rows each count; a Prometheus reading counts one) one
deployment holds while the inputs read back their history — at 500 passes a second, the
first 100 s of it, some 20 MB. Past it the oldest held are dead letters (``ignored``, counted
like any): the newest describe the present, and a history read for minutes must not hold
every pass of those minutes in memory."""


def untimed() -> float:
    """The time of a snapshot taken on the host clock, not the data's: 0, so the horizon places
    it at the planner's watermark (an acknowledgement, a DGD inventory poll)."""
    return 0.0


def event_time(event: Event) -> datetime:
    """Event time as an aware UTC datetime (what bytewax's clocks need)."""
    return event_time_of(event.time)


_SNAPSHOTS = (InventoryEvent, CapabilitiesEvent, AckEvent, LimitsEvent)


def is_state_snapshot(event: Event) -> bool:
    """Inventory, capabilities, acknowledgements and limits describe the present (see
    flows.clock)."""
    return isinstance(event, _SNAPSHOTS)  # asked ~4 times an event: the tuple is built once


_RECEIPTS = (ReceivedFpmBatch, ReceivedFpm, PrometheusReading)


def is_stamped_on_receipt(event: Event) -> bool:
    """A measurement a live input of this run stamped with the host time it received it at (a
    forward pass over ZMQ, a Prometheus reading): live, held while the inputs read back their
    history. Nothing parsed from an input is one."""
    return isinstance(event, _RECEIPTS)


def is_host_reading(event: Event) -> bool:
    """A measurement the run's own input took on its host's clock (a Prometheus reading): live,
    placed at the watermark when behind it, never late. Nothing parsed from an input is one."""
    return isinstance(event, PrometheusReading)


def late_letter(event: Event) -> DeadLetter:
    """The dead letter of a measurement behind the planner's watermark."""
    return DeadLetter(
        source="window",
        reason=f"late: event time {event.time} is behind the planner's watermark",
        raw=event.model_dump_json(),
        deployment=event.deployment,
    )


def _not_held(event: Event) -> DeadLetter:
    """The dead letter of a measurement stamped on receipt that did not fit the held ones."""
    return DeadLetter(
        source="window",
        reason=(
            f"ignored: received at {event.time} while the inputs read back their history, past "
            f"the {MAX_HELD_RECEIPTS} forward passes held meanwhile"
        ),
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
    """One deployment's clock state, its newest used measurement, the event held for
    confirmation, and the snapshots waiting: live, for the first measurement; in a replay,
    behind the held event (the first ``ahead_of_held`` of them came before it). Live, also the
    measurements stamped on receipt held while the inputs read back their history.

    A new deployment's state is empty; the step fills it as events come:

    >>> state = HorizonState()
    >>> state.clock is None, state.newest, state.waiting
    (True, None, [])
    """

    clock: ClockState | None = None
    newest: float | None = None
    held: Event | None = None
    held_short: bool = False
    """Live: the held event was held while the inputs read back their history, and is judged
    by the replay's rule when the next one comes, whenever that is."""
    waiting: list[Event] = field(default_factory=list)
    ahead_of_held: int = 0
    rival: Event | None = None
    """A replay's first measurement, when the second (held) lies more than :data:`MAX_JUMP_S`
    past it: the third says which of the two is the stray."""
    ahead_of_rival: int = 0
    receipts: deque[Event] = field(default_factory=deque)
    """Live: measurements stamped on receipt, held in arrival order while the inputs read back
    their history (:func:`is_stamped_on_receipt`, :data:`SETTLE_S`)."""
    receipt_rows: int = 0
    """The forward passes in ``receipts`` (bounded by :data:`MAX_HELD_RECEIPTS`)."""


@dataclass(frozen=True)
class EventHorizon:
    """The horizon step: events of one deployment in, the events to window or dead letters out.

    See the module docs for the rules and a whole dataflow; built for a replay:

    >>> horizon = EventHorizon(PlannerClock(event_time, timedelta(seconds=1)), live=False)
    >>> horizon.live, horizon.window_s, horizon.ordered
    (False, None, False)
    """

    clock: PlannerClock
    live: bool
    window_s: float | None = None
    """The tick window's length: forward-pass batches that span several are split (``None``:
    batches pass whole)."""
    ordered: bool = False
    """The input is in event-time order by construction (the closed loop's own simulator): a
    replay holds nothing for confirmation — the simulator waits for the tick its last event
    closes, so a held event would never be confirmed."""

    def apply(
        self, step_id: str, keyed: op.KeyedStream[Event]
    ) -> op.KeyedStream[Event | DeadLetter]:
        """Add the step to a dataflow (``op.stateful``)."""
        return op.stateful(step_id, keyed, lambda state: _Horizon(self, state or HorizonState()))


class _Horizon(StatefulLogic[Event, Event | DeadLetter, HorizonState]):
    def __init__(self, horizon: EventHorizon, state: HorizonState) -> None:
        self.live = horizon.live
        self.ordered = horizon.ordered
        self.backlog = horizon.clock.backlog
        self.window = None if horizon.window_s is None else timedelta(seconds=horizon.window_s)
        self.clock = horizon.clock.build(state.clock)
        self.lateness_of = horizon.clock.lateness_of
        self.lateness = horizon.clock.lateness
        self.state = state

    def on_item(self, event: Event) -> tuple[Iterable[Event | DeadLetter], bool]:
        # a snapshot stamped ahead is placed at the newest measurement instead (_snapshot)
        if self.live and not is_state_snapshot(event):
            bound = MAX_AHEAD_OF_HOST_S + self._lateness_s(event)
            if event.time > host.time() + bound:
                past = f"{bound:g} s past the host clock"
                return [_refused(event, "ahead", past)], StatefulLogic.RETAIN
        if isinstance(event, FpmBatchEvent) and self.window is not None:
            pieces = split_by_window(event, self.window)
            if len(pieces) > 1:
                return [out for piece in pieces for out in self._one(piece)], StatefulLogic.RETAIN
        return self._one(event), StatefulLogic.RETAIN

    def _one(self, event: Event) -> list[Event | DeadLetter]:
        if not self.live:
            return self._use(event) if self.ordered else self._replayed(event)
        if is_state_snapshot(event):
            return self._snapshot(event)
        if not is_stamped_on_receipt(event):
            return self._receipts_up_to(event) + self._live(event)
        if self._settling():
            return self._hold_receipt(event)
        return self._release_receipts() + self._live(event)

    def _live(self, event: Event, held_back: bool = False) -> list[Event | DeadLetter]:
        """Live: a measurement, used or held for confirmation (``held_back``: see :meth:`_use`)."""
        out: list[Event | DeadLetter] = []
        state = self.state
        rebuilding = self._rebuilding()
        if state.held is not None:
            held, state.held = state.held, None
            out += self._decide(held, event, first=False, short=state.held_short)
        if self._needs_confirmation(event, rebuilding):
            state.held, state.held_short = event, rebuilding  # (far behind is merely late)
            return out
        return out + self._use(event, held_back)  # live, the host clock bounds the first one

    def _rebuilding(self) -> bool:
        """Live: the inputs read back their history (a live run judges it as its replay would)."""
        return self.backlog is not None and self.backlog.is_behind

    def _needs_confirmation(self, event: Event, rebuilding: bool) -> bool:
        """Live: ``event`` lies further past the newest measurement than it may without the
        next one confirming it (a replay's jump while ``rebuilding``, else a week)."""
        jump = self._jump(event) if rebuilding else MAX_JUMP_S
        return self.state.newest is not None and event.time > self.state.newest + jump

    def _settling(self) -> bool:
        """Live: an input reads back its history, or did less than :data:`SETTLE_S` ago."""
        return self._settles_at() is not None

    def _settles_at(self) -> datetime | None:
        backlog = self.backlog
        return None if backlog is None else backlog.settling_until(timedelta(seconds=SETTLE_S))

    def _hold_receipt(self, event: Event) -> list[Event | DeadLetter]:
        """Live, while the inputs read back their history: ``event`` (stamped on receipt) waits
        behind it; past :data:`MAX_HELD_RECEIPTS` the oldest held are dead letters."""
        state = self.state
        state.receipts.append(event)
        state.receipt_rows += _passes(event)
        dropped: list[Event | DeadLetter] = []
        while state.receipt_rows > MAX_HELD_RECEIPTS and len(state.receipts) > 1:
            oldest = state.receipts.popleft()
            state.receipt_rows -= _passes(oldest)
            dropped.append(_not_held(oldest))
        return dropped

    def _receipts_up_to(self, event: Event) -> list[Event | DeadLetter]:
        """The held measurements stamped on receipt that go before ``event``, a measurement of
        the history (or of any input not stamped on receipt): all of them once the history is
        through; while it is read, those at or before ``event``'s time (a history that reaches
        the present interleaves with them in event-time order) — none if ``event`` waits for
        confirmation, or decides a held one: the next measurement will say."""
        state = self.state
        if not state.receipts:
            return []
        if not self._settling():
            return self._release_receipts()
        if state.held is not None:
            return []
        if self._needs_confirmation(event, self._rebuilding()):
            return []
        return self._release_receipts(until=event.time)

    def _release_receipts(self, until: float = math.inf) -> list[Event | DeadLetter]:
        """The held measurements stamped on receipt, in arrival order, up to the first one
        stamped after ``until``: used, each placed at the watermark if the history moved event
        time past it while it was held."""
        state, out = self.state, list[Event | DeadLetter]()
        while state.receipts and state.receipts[0].time <= until:
            receipt = state.receipts.popleft()
            state.receipt_rows -= _passes(receipt)
            out += self._live(receipt, held_back=True)
        return out

    def on_notify(self) -> tuple[Iterable[Event | DeadLetter], bool]:
        if self.state.receipts and not self._settling():
            return self._release_receipts(), StatefulLogic.RETAIN
        return [], StatefulLogic.RETAIN

    def notify_at(self) -> datetime | None:
        """Live, while measurements stamped on receipt are held: when the history will have
        settled (system time; asked again after every item)."""
        if not self.state.receipts:
            return None
        return self._settles_at() or datetime.now(UTC)

    def on_eof(self) -> tuple[Iterable[Event | DeadLetter], bool]:
        state = self.state
        if self.live:  # the held receipts may decide the held event: they go first
            released = self._release_receipts()
            held, state.held = state.held, None
            return released + (self._use(held) if held is not None else []), StatefulLogic.RETAIN
        held, state.held = state.held, None
        waiting, state.waiting = state.waiting, []
        # nothing follows to contradict them: the held events and the snapshots waiting are used
        rival, state.rival = state.rival, None
        before = state.ahead_of_held if held is not None else len(waiting)
        first = state.ahead_of_rival if rival is not None else before
        out = waiting[:first] + (self._use(rival) if rival is not None else [])
        out += waiting[first:before] + (self._use(held) if held is not None else [])
        return out + waiting[before:], StatefulLogic.RETAIN

    def snapshot(self) -> HorizonState:
        self.state.clock = self.clock.snapshot()
        return self.state

    def _replayed(self, event: Event) -> list[Event | DeadLetter]:
        """A replay: every time is data, snapshots' included (the window step places late ones)."""
        state = self.state
        if is_state_snapshot(event):
            if state.held is not None or state.newest is None:
                state.waiting.append(event)  # behind the held event, or the first measurement
                return []
            if event.time > state.newest + self._jump(event):
                state.held, state.ahead_of_held = event, 0  # nothing waits when nothing is held
                return []
            return [event]
        used: list[Event | DeadLetter] = self._settle_rival(event) if state.rival else []
        waiting, state.waiting = state.waiting, []
        before = state.ahead_of_held if state.held is not None else len(waiting)
        if state.held is not None:
            held, state.held = state.held, None
            if state.newest is None and event.time > held.time + MAX_JUMP_S:
                state.rival, state.ahead_of_rival = held, before  # the next one will say
            else:
                used += self._decide(held, event, first=state.newest is None, short=True)
        hold = state.newest is None or event.time > state.newest + self._jump(event)
        now = [] if hold else self._use(event)  # far behind is merely late (the window step's)
        out = self._settle(waiting[:before], hold) + used + self._settle(waiting[before:], hold)
        if hold:
            state.held, state.ahead_of_held = event, len(state.waiting)
        return out + now

    def _settle_rival(self, event: Event) -> list[Event | DeadLetter]:
        """Replay: the first two measurements lay more than :data:`MAX_JUMP_S` apart; the third
        (``event``) says which is the stray: the second (held) if ``event`` goes back behind it
        — the first is then held again, to be decided by ``event`` — else the first."""
        state = self.state
        rival, state.rival = state.rival, None
        assert rival is not None and state.held is not None
        if event.time < state.held.time - self._jump(state.held):
            stray, state.held, state.ahead_of_held = state.held, rival, state.ahead_of_rival
            return [self._stray_ahead(stray)]
        return [_stray(rival)]

    def _settle(self, snapshots: list[Event], hold: bool) -> list[Event | DeadLetter]:
        """Replay: snapshots that waited for a held event, now that it is decided — used, still
        waiting (behind the next held measurement) or stray."""
        newest = self.state.newest
        out: list[Event | DeadLetter] = []
        for snapshot in snapshots:
            if newest is not None and snapshot.time <= newest + self._jump(snapshot):
                out.append(snapshot)
            elif hold:
                self.state.waiting.append(snapshot)
            else:
                out.append(self._stray_ahead(snapshot))
        return out

    def _decide(
        self, held: Event, event: Event, *, first: bool, short: bool
    ) -> list[Event | DeadLetter]:
        """The held event, now that ``event`` follows it: used, or a ``stray`` dead letter.
        ``short`` (a replay, or a live run reading back its history): stray if the stream goes
        back behind it by more than :meth:`_jump`. The very first measurement of a replay, and
        a live one held by the week rule (not ``short``), is stray if ``event`` lies more than
        :data:`MAX_JUMP_S` from it."""
        if short and event.time < held.time - self._jump(held):
            return [self._stray_ahead(held)]
        if (first or not short) and abs(event.time - held.time) > MAX_JUMP_S:
            return [_stray(held)]
        return self._use(held)

    def _lateness_s(self, event: Event) -> float:
        """The allowed lateness of ``event``'s deployment, in seconds."""
        lateness = self.lateness if self.lateness_of is None else self.lateness_of(event)
        return lateness.total_seconds()

    def _jump(self, event: Event) -> float:
        """Replay: how far past the newest measurement ``event`` may lie without confirmation."""
        return max(REPLAY_JUMP_S, self._lateness_s(event))

    def _stray_ahead(self, event: Event) -> DeadLetter:
        ahead = f"{self._jump(event):g} s ahead of the events before and after it"
        return _refused(event, "stray", ahead)

    def _use(self, event: Event, held_back: bool = False) -> list[Event | DeadLetter]:
        """``event`` is used: it moves event time, or is late. ``held_back`` (a measurement
        stamped on receipt that waited behind the history): behind the watermark it is placed at
        it — the wait made it late, not its time."""
        state = self.state
        if not self.live:  # replays never drop a key's windows: the window step's clock will do
            if not is_state_snapshot(event):
                state.newest = event.time if state.newest is None else max(state.newest, event.time)
            return [event]
        self.clock.before_batch()
        timestamp, watermark = self.clock.on_item(event)
        if timestamp < watermark:
            if not held_back:
                return [late_letter(event)]
            timestamp = watermark
        if timestamp > event_time(event):  # the clock placed it (a host reading overtaken)
            event = _at(event, _seconds(timestamp))
        state.newest = event.time if state.newest is None else max(state.newest, event.time)
        waiting = [e.model_copy(update={"time": event.time}) for e in state.waiting]
        state.waiting = []
        return [*waiting, event]

    def _snapshot(self, event: Event) -> list[Event | DeadLetter]:
        """Live: a snapshot never moves event time."""
        state = self.state
        if state.newest is None:  # wait for the first measurement, one of each kind
            state.waiting = _collapsed(state.waiting, event)
            return []
        watermark = _seconds(self.clock.on_notify())
        ahead = 0.0 if self.window is None else self.window.total_seconds()
        at = event.time if event.time <= state.newest + ahead else state.newest
        return [_at(event, max(watermark, at))]


def _passes(event: Event) -> int:
    """The forward passes ``event`` holds (a batch's rows; any other measurement counts one)."""
    return len(event.payload.rows) if isinstance(event, FpmBatchEvent) else 1


def _stray(event: Event) -> DeadLetter:
    return _refused(event, "stray", f"{MAX_JUMP_S:g} s from the events around it")


def _collapsed(waiting: list[Event], snapshot: Event) -> list[Event]:
    """``waiting`` with ``snapshot`` added last, in place of the one of its kind: the newest
    inventory counts, capabilities merge field by field; every limits change and every
    acknowledgement is kept (each is applied, or refused, on its own: a restarted worker reads
    the whole acknowledgement topic before its first measurement, and a stale or never-issued
    acknowledgement read last must not erase the valid one before it).

    >>> from schemas import EngineCapabilities as Engine, WorkerCapabilities as Workers
    >>> def caps(t, **fields):
    ...     return CapabilitiesEvent(deployment="d", time=t,
    ...                              payload=Workers(decode=Engine(**fields)))
    >>> waiting = _collapsed(_collapsed([], caps(1, num_gpu=2)), caps(2, gpu_power_limit_w=700))
    >>> [(e.time, e.payload.decode.num_gpu, e.payload.decode.gpu_power_limit_w) for e in waiting]
    [(2.0, 2, 700)]
    """
    kept: list[Event] = []
    for earlier in waiting:
        if type(earlier) is not type(snapshot) or isinstance(earlier, (LimitsEvent, AckEvent)):
            kept.append(earlier)
        elif isinstance(earlier, CapabilitiesEvent) and isinstance(snapshot, CapabilitiesEvent):
            merged = merge_capabilities(earlier.payload, snapshot.payload)
            snapshot = snapshot.model_copy(update={"payload": merged})
    return [*kept, snapshot]


def split_by_window(batch: FpmBatchEvent, window: timedelta) -> list[Event]:
    """``batch`` as one batch per tick window its rows lie in, each at the time of its last row
    (the one in the batch's own window at the batch's time; a clock event carries the batch's
    time on if none is). A batch within one window comes back as it is.

    >>> row = (0.0, 7, 0.02) + (0, 0, 0.0, 0, 4, 4000, 0.0) + (0, 0, 0.0, 0, 0, 0.0)
    >>> def at(*times):
    ...     return [(t,) + row[1:] for t in times]
    >>> from schemas import FpmBatch
    >>> batch = FpmBatchEvent(deployment="d", time=11.0,
    ...                       payload=FpmBatch(role="decode", rows=at(1.0, 4.0, 6.0, 9.0)))
    >>> [(e.type, e.time, [r[0] for r in e.payload.rows] if e.type == "fpm_batch" else None)
    ...  for e in split_by_window(batch, timedelta(seconds=5))]
    [('fpm_batch', 4.0, [1.0, 4.0]), ('fpm_batch', 9.0, [6.0, 9.0]), ('clock', 11.0, None)]
    """
    rows = batch.payload.rows
    own = _window_of(batch.time, window)
    if not rows or _window_of(rows[0][0], window) == own:
        return [batch]
    groups: dict[int, list[FpmRow]] = {}
    for row in rows:
        groups.setdefault(_window_of(row[0], window), []).append(row)
    pieces: list[Event] = [
        batch.model_copy(
            update={
                "time": batch.time if index == own else group[-1][0],
                "payload": batch.payload.model_copy(update={"rows": group}),
            }
        )
        for index, group in groups.items()
    ]
    if own not in groups:
        pieces.append(ClockEvent(deployment=batch.deployment, time=batch.time))
    return pieces


def _window_of(seconds: float, window: timedelta) -> int:
    """The index of the tick window holding ``seconds`` (as bytewax's tumbling windower)."""
    return (event_time_of(seconds) - EPOCH) // window


def event_time_of(seconds: float) -> datetime:
    """``seconds`` of event time as the aware UTC datetime bytewax's clocks use: its
    microsecond, truncated — rounded, a time less than half a microsecond before a window's end
    was placed in the next window while the float (which a batch's rows are split on) lies in
    this one, and the batch's split closed the window on the other engines' passes of that
    instant. Float noise of a nanosecond below a microsecond counts as on it (``4.35`` is
    ``4.349999999…``).

    >>> [event_time_of(t).isoformat()[17:] for t in (4.35, 4.9999998, 5.0, 0.1 + 0.2)]
    ['04.350000+00:00', '04.999999+00:00', '05+00:00', '00.300000+00:00']
    """
    return EPOCH + timedelta(microseconds=math.floor(seconds * 1e6 + FLOAT_NOISE_US))


def _at(event: Event, seconds: float) -> Event:
    return event if seconds == event.time else event.model_copy(update={"time": seconds})


def _seconds(timestamp: datetime) -> float:
    return (timestamp - EPOCH) / timedelta(seconds=1)
