"""The event-time clock of the planner's tick windows.

The watermark (what event time the planner considers complete) follows the data: the newest
event time seen minus the allowed lateness. That is all a replay uses, so it never depends on
the host's speed. A live run adds one rule: when no newer event has arrived for ``idle_after``
of system time, the watermark advances with the system clock from there, so windows close (and
the planner ticks) while inputs are quiet. A live backlog — a Kafka topic read behind its
producers — keeps the data-driven watermark as long as it flows, so none of it is dropped as
late (bytewax's ``EventClock`` would let the system clock run ahead between batches). Inputs
still reading what they held at start (:mod:`connectors.backlog`: a followed topic read back
from its beginning, a recording joined with live inputs) are not quiet, however long the host
stalls between two of their events: while one is behind, the system clock moves nothing, and
quiet time counts from when the last one caught up at the earliest — so a restarted worker
rebuilds from its history what an uninterrupted one decided, at any host speed. Nor is an input
quiet that nobody reads: a followed topic not read for a second (the worker stopped, its host
paused or busy) is stalled, and its quiet time leaves the stall out — it stops at the stall
and goes on after it — so the events that queued meanwhile are judged by their own time, not
made late by the host clock that ran on, and a stall delays idle ticks by its own length.

The end of the input is not the end of event time: a window still open then is incomplete and
does not tick. A recorded stream that should end with a tick ends with a ``clock`` event.

A late *state snapshot* (``is_state``: worker inventory, capabilities, acknowledgements,
limits) is not dropped: it describes the present, not a past instant, so it is placed at the
watermark and applies from the next tick. Late measurements (forward passes, requests) stay
late — but for a reading this host took on its own clock (``is_host_reading``), placed at the
watermark too: the host clock that moved the watermark is its own. Live, a snapshot never
moves event time (its time is another host's clock): the newest event time is the
measurements', and a snapshot may open a window ahead of them without closing any.

Each key (deployment) has its own clock; ``lateness_of`` gives the allowed lateness of the key
an item belongs to (``lateness`` until the first item of a key, e.g. right after a resume).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bytewax.operators.windowing import Clock, ClockLogic

from connectors.backlog import EPOCH, Backlog


def _system_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class ClockState:
    """What a clock remembers (snapshot by bytewax): newest event time, when it was seen
    (system time), and the watermark so far.

    >>> clock = PlannerClock(lambda t: EPOCH + timedelta(seconds=t), timedelta(seconds=1))
    >>> logic = clock.build(None)
    >>> _ = logic.on_item(12)
    >>> state = logic.snapshot()
    >>> (state.newest - EPOCH).seconds, (state.watermark - EPOCH).seconds
    (12, 11)
    >>> clock.build(state).on_item(5)[1] == state.watermark  # resumed: the watermark holds
    True
    """

    newest: datetime = EPOCH
    seen_at: datetime = EPOCH
    watermark: datetime = EPOCH


@dataclass
class _PlannerClockLogic(ClockLogic[Any, ClockState]):
    clock: PlannerClock
    state: ClockState = field(default_factory=ClockState)
    _now: datetime = EPOCH
    _lateness: timedelta | None = None

    def before_batch(self) -> None:
        if self.clock.idle_after is not None:
            self._now = max(self._now, self.clock.now_getter())

    def on_item(self, value: Any) -> tuple[datetime, datetime]:
        if self.clock.lateness_of is not None:
            self._lateness = self.clock.lateness_of(value)
        timestamp = self.clock.ts_getter(value)
        state = self.state
        is_state = self.clock.is_state(value)
        self._advance()  # what quiet inputs let the host clock close already, before this item
        # live, a snapshot does not move the measurements' newest time — unless there is none
        # yet (bytewax starts a key's clock afresh once all its windows closed: a snapshot then,
        # an acknowledgement, must still open a window that the idle rule closes)
        live_snapshot = is_state and self.clock.idle_after is not None and state.newest > EPOCH
        if timestamp > state.newest and not live_snapshot:
            state.newest, state.seen_at = timestamp, self._now
        watermark = self._advance()
        if timestamp < watermark and (is_state or self.clock.is_host_reading(value)):
            timestamp = watermark  # a late snapshot still tells the current state
        return timestamp, watermark

    def on_notify(self) -> datetime:
        self.before_batch()
        return self._advance()

    def on_eof(self) -> datetime:
        return self.state.watermark  # do not close the windows still open

    def to_system_utc(self, timestamp: datetime) -> datetime | None:
        idle = self.clock.idle_after
        if idle is None:
            return None
        # the system time at which quiet inputs would move the watermark past ``timestamp``
        # (inputs behind: look again one idle period from now at the earliest)
        state = self.state
        quiet_from = self._quiet_from()
        start = self._now if quiet_from is None else quiet_from
        return start + idle + (timestamp - (state.newest - self.lateness))

    def snapshot(self) -> ClockState:
        return ClockState(self.state.newest, self.state.seen_at, self.state.watermark)

    @property
    def lateness(self) -> timedelta:
        return self.clock.lateness if self._lateness is None else self._lateness

    def _advance(self) -> datetime:
        state = self.state
        watermark = state.newest - self.lateness
        idle = self.clock.idle_after
        if idle is not None:
            quiet_from = self._quiet_from()
            if quiet_from is not None and self._now - quiet_from > idle:
                watermark += self._now - quiet_from - idle
        state.watermark = max(state.watermark, watermark)
        return state.watermark

    def _quiet_from(self) -> datetime | None:
        """Since when the inputs have been quiet (system time); ``None`` while one is behind
        or stalled."""
        backlog = self.clock.backlog
        return self.state.seen_at if backlog is None else backlog.quiet_since(self.state.seen_at)


@dataclass
class PlannerClock(Clock[Any, ClockState]):
    """Event-time clock: data-driven, plus the system clock while inputs are quiet (live).

    >>> clock = PlannerClock(lambda t: EPOCH + timedelta(seconds=t), timedelta(seconds=1))
    >>> logic = clock.build(None)
    >>> [logic.on_item(t)[1].second for t in (10, 12, 11)]  # newest minus lateness
    [9, 11, 11]
    >>> logic.on_eof().second  # the input ended: event time did not
    11
    >>> per_key = PlannerClock(clock.ts_getter, timedelta(seconds=1),
    ...                        lateness_of=lambda t: timedelta(seconds=t % 2))
    >>> [per_key.build(None).on_item(t)[1].second for t in (10, 13)]  # 0 s and 1 s late
    [10, 12]

    Live (``idle_after``), the host clock moves the watermark once the inputs are quiet — not
    while one of them is still reading its backlog (``backlog``):

    >>> from connectors.backlog import Backlog
    >>> host = [EPOCH]
    >>> def at(seconds):
    ...     host[0] = EPOCH + timedelta(seconds=seconds)
    >>> backlog, topic = Backlog(now=lambda: host[0]), type("Reader", (), {})()
    >>> live = PlannerClock(clock.ts_getter, timedelta(0), timedelta(seconds=5),
    ...                     now_getter=lambda: host[0], backlog=backlog)
    >>> logic = live.build(None)
    >>> backlog.behind(topic)
    >>> _ = logic.on_item(100); at(60)  # the worker stalls for a minute in the backlog
    >>> def watermark():
    ...     return (logic.on_notify() - EPOCH).seconds
    >>> watermark()  # no quieter for it: event time is the data's
    100
    >>> backlog.caught_up(topic); at(63); watermark()  # quiet since 60 s
    100
    >>> at(68); watermark()  # quiet for 8 s: 3 s past the idle period
    103
    """

    ts_getter: Callable[[Any], datetime]
    lateness: timedelta
    idle_after: timedelta | None = None
    now_getter: Callable[[], datetime] = _system_now
    is_state: Callable[[Any], bool] = lambda _value: False
    is_host_reading: Callable[[Any], bool] = lambda _value: False
    """A measurement taken on this host's clock (a Prometheus reading): it moves event time
    like any measurement, but a late one is placed at the watermark like a snapshot."""
    lateness_of: Callable[[Any], timedelta] | None = None
    backlog: Backlog | None = None
    """Live: the inputs' backlog (:data:`connectors.backlog.BACKLOG`); ``None``: quiet time
    counts from the newest event alone."""

    def build(self, resume_state: ClockState | None) -> _PlannerClockLogic:
        logic = _PlannerClockLogic(self, resume_state or ClockState())
        if self.idle_after is not None:
            logic._now = self.now_getter()
            if resume_state is None:
                logic.state.seen_at = logic._now
        return logic
