"""Which inputs of this process are still reading what they held when they started.

A live run's clock lets the host's clock move event time on once the inputs have been quiet
for a while (:mod:`flows.clock`). An input still reading its backlog — a followed Kafka topic
read back from its beginning after a restart, a recording joined with live inputs — is not
quiet, however long the worker stalls between two of its events: until it has handed all of it
on, event time follows its data alone. Sources say so here (:meth:`Backlog.behind`, then
:meth:`Backlog.caught_up` or :meth:`Backlog.forget`); the clock asks :attr:`Backlog.is_behind`
and counts quiet time from :attr:`Backlog.caught_up_at` at the earliest.

One registry, :data:`BACKLOG`, serves the whole process: bytewax runs the sources of ``-w N``
workers on N threads, so every method holds a lock. It holds the readers weakly: one dropped
without being closed (a flow that failed) no longer counts as behind.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from datetime import UTC, datetime


def _system_now() -> datetime:
    return datetime.now(UTC)


class Backlog:
    """The readers that are behind, and the host time at which the last one caught up.

    >>> class Reader: ...
    >>> topic, recording = Reader(), Reader()
    >>> now = [datetime(2025, 1, 1, tzinfo=UTC)]
    >>> backlog = Backlog(now=lambda: now[0])
    >>> backlog.is_behind, backlog.caught_up_at
    (False, None)
    >>> backlog.behind(topic); backlog.behind(recording)
    >>> backlog.caught_up(topic); backlog.is_behind  # the recording is still being read
    True
    >>> now[0] = datetime(2025, 1, 1, 0, 0, 9, tzinfo=UTC)
    >>> backlog.forget(recording); backlog.is_behind, backlog.caught_up_at.second
    (False, 9)
    >>> backlog.caught_up(recording); backlog.caught_up_at.second  # nothing changed
    9
    """

    def __init__(self, now: Callable[[], datetime] = _system_now) -> None:
        self._now = now
        self._lock = threading.Lock()
        self._behind: weakref.WeakSet[object] = weakref.WeakSet()
        self._caught_up_at: datetime | None = None

    def behind(self, reader: object) -> None:
        """``reader`` has a backlog to read."""
        with self._lock:
            self._behind.add(reader)

    def caught_up(self, reader: object) -> None:
        """``reader`` has handed on its backlog (or stops reading: :meth:`forget` is the same)."""
        with self._lock:
            if reader not in self._behind:
                return
            self._behind.discard(reader)
            if not self._behind:
                self._caught_up_at = self._now()

    forget = caught_up

    @property
    def is_behind(self) -> bool:
        """Some input is still reading its backlog."""
        with self._lock:
            return bool(self._behind)

    @property
    def caught_up_at(self) -> datetime | None:
        """When the last input behind caught up (``None``: none was ever behind)."""
        with self._lock:
            return self._caught_up_at


BACKLOG = Backlog()
"""The process's registry: the sources report to it, a live run's clock reads it."""
