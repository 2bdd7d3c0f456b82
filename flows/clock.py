"""The event-time clock of the planner's tick windows.

The watermark (what event time the planner considers complete) follows the data: the newest
event time seen minus the allowed lateness. That is all a replay uses, so it never depends on
the host's speed. A live run adds one rule: when no newer event has arrived for ``idle_after``
of system time, the watermark advances with the system clock from there, so windows close (and
the planner ticks) while inputs are quiet. A live backlog — a Kafka topic read behind its
producers — keeps the data-driven watermark as long as it flows, so none of it is dropped as
late (bytewax's ``EventClock`` would let the system clock run ahead between batches).

The end of the input is not the end of event time: a window still open then is incomplete and
does not tick. A recorded stream that should end with a tick ends with a ``clock`` event.

A late *state snapshot* (``is_state``: worker inventory, capabilities, acknowledgements) is not
dropped: it describes the present, not a past instant, so it is placed at the watermark and
applies from the next tick. Late measurements (forward passes, requests) stay late.

Each key (deployment) has its own clock; ``lateness_of`` gives the allowed lateness of the key
an item belongs to (``lateness`` until the first item of a key, e.g. right after a resume).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bytewax.operators.windowing import Clock, ClockLogic

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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
        self._advance()  # what quiet inputs let the host clock close already, before this item
        if timestamp > state.newest:
            state.newest, state.seen_at = timestamp, self._now
        watermark = self._advance()
        if timestamp < watermark and self.clock.is_state(value):
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
        state = self.state
        return state.seen_at + idle + (timestamp - (state.newest - self.lateness))

    def snapshot(self) -> ClockState:
        return ClockState(self.state.newest, self.state.seen_at, self.state.watermark)

    @property
    def lateness(self) -> timedelta:
        return self.clock.lateness if self._lateness is None else self._lateness

    def _advance(self) -> datetime:
        state = self.state
        watermark = state.newest - self.lateness
        idle = self.clock.idle_after
        if idle is not None and self._now - state.seen_at > idle:
            watermark += self._now - state.seen_at - idle
        state.watermark = max(state.watermark, watermark)
        return state.watermark


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
    """

    ts_getter: Callable[[Any], datetime]
    lateness: timedelta
    idle_after: timedelta | None = None
    now_getter: Callable[[], datetime] = _system_now
    is_state: Callable[[Any], bool] = lambda _value: False
    lateness_of: Callable[[Any], timedelta] | None = None

    def build(self, resume_state: ClockState | None) -> _PlannerClockLogic:
        logic = _PlannerClockLogic(self, resume_state or ClockState())
        if self.idle_after is not None:
            logic._now = self.now_getter()
            if resume_state is None:
                logic.state.seen_at = logic._now
        return logic
