"""Event-time clocks of the planner's tick windows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bytewax.operators.windowing import Clock, ClockLogic


@dataclass
class _CompleteWindowsLogic(ClockLogic[Any, Any]):
    inner: ClockLogic[Any, Any]

    def before_batch(self) -> None:
        self.inner.before_batch()

    def on_item(self, value: Any) -> tuple[datetime, datetime]:
        return self.inner.on_item(value)

    def on_notify(self) -> datetime:
        return self.inner.on_notify()

    def on_eof(self) -> datetime:
        # The end of the input is not the end of event time: a window still open then is
        # incomplete, so it must not tick (bytewax's clocks would close every window).
        return self.inner.on_notify()

    def to_system_utc(self, timestamp: datetime) -> datetime | None:
        return self.inner.to_system_utc(timestamp)

    def snapshot(self) -> Any:
        return self.inner.snapshot()


@dataclass
class CompleteWindowsClock(Clock[Any, Any]):
    """Wraps a clock so that windows close only when event time passes their end, never at EOF.

    A recorded stream that should end with a tick ends with a ``clock`` event at that time.

    >>> from datetime import timedelta, timezone
    >>> from bytewax.operators.windowing import EventClock
    >>> clock = CompleteWindowsClock(EventClock(lambda v: v, timedelta(0)))
    >>> logic = clock.build(None)
    >>> t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    >>> logic.on_item(t)[1] == t, logic.on_eof() < datetime.max.replace(tzinfo=timezone.utc)
    (True, True)
    """

    inner: Clock[Any, Any]

    def build(self, resume_state: Any) -> _CompleteWindowsLogic:
        return _CompleteWindowsLogic(self.inner.build(resume_state))
