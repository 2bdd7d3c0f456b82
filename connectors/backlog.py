"""What this process knows about how its inputs are being read: which are still reading what
they held when they started, and when each was last read.

A live run's clock lets the host's clock move event time on once the inputs have been quiet for
a while (:mod:`flows.clock`). Quiet is only known of inputs that are being read:

* An input still reading its backlog — a followed Kafka topic read back from its beginning
  after a restart, a recording joined with live inputs — is not quiet, however long the worker
  stalls between two of its events: until it has handed all of it on, event time follows its
  data alone. Sources say so here (:meth:`Backlog.behind`, then :meth:`Backlog.caught_up` or
  :meth:`Backlog.forget`); the clock asks :attr:`Backlog.is_behind` and counts quiet time from
  :attr:`Backlog.caught_up_at` at the earliest.
* A live input is read every few milliseconds while the worker runs (:meth:`Backlog.polled`).
  Quiet is known up to :attr:`Backlog.heard_at`, the oldest of the inputs' last reads, and no
  further. When one was not read for :data:`STALL_GAP` (the process was stopped, its host
  paused, the worker busy), nothing is known of what queued meanwhile: quiet counts from the
  read that ended the gap (:attr:`Backlog.resumed_at`), so the events of a stall are judged by
  their own time once read, not made late by the host clock that ran on.

One registry, :data:`BACKLOG`, serves the whole process: bytewax runs the sources of ``-w N``
workers on N threads, so every method holds a lock. It holds the readers weakly: one dropped
without being closed (a flow that failed) no longer counts.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

STALL_GAP = timedelta(seconds=1)
"""A live input not read for this long was stalled: a reader that finds nothing waits at most
tens of milliseconds (the Kafka and ZMQ readers) before it looks again."""

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _system_now() -> datetime:
    return datetime.now(UTC)


class Backlog:
    """The readers that are behind, when the last one caught up, and when each was last read.

    >>> class Reader: ...
    >>> topic, recording = Reader(), Reader()
    >>> now = [datetime(2025, 1, 1, tzinfo=UTC)]
    >>> backlog = Backlog(now=lambda: now[0])
    >>> backlog.is_behind, backlog.caught_up_at, backlog.quiet_since == EPOCH
    (False, None, True)
    >>> backlog.behind(topic); backlog.behind(recording)
    >>> backlog.caught_up(topic); backlog.is_behind  # the recording is still being read
    True
    >>> now[0] = datetime(2025, 1, 1, 0, 0, 9, tzinfo=UTC)
    >>> backlog.forget(recording); backlog.is_behind, backlog.quiet_since.second
    (False, 9)
    >>> backlog.caught_up(recording); backlog.caught_up_at.second  # nothing changed
    9

    The topic is read every few milliseconds — until its worker stalls for 20 s:

    >>> backlog.polled(topic); now[0] += timedelta(seconds=20)
    >>> backlog.quiet_since is None  # nobody knows what queued meanwhile
    True
    >>> backlog.polled(topic); backlog.quiet_since.second  # read again: quiet from here on
    29
    """

    def __init__(self, now: Callable[[], datetime] = _system_now) -> None:
        self._now = now
        self._lock = threading.Lock()
        self._behind: weakref.WeakSet[object] = weakref.WeakSet()
        self._read_at: weakref.WeakKeyDictionary[object, datetime] = weakref.WeakKeyDictionary()
        self._caught_up_at: datetime | None = None
        self._resumed_at: datetime | None = None

    def behind(self, reader: object) -> None:
        """``reader`` has a backlog to read."""
        with self._lock:
            self._behind.add(reader)

    def caught_up(self, reader: object) -> None:
        """``reader`` has handed on its backlog."""
        with self._lock:
            self._catch_up(reader)

    def polled(self, reader: object) -> None:
        """``reader`` (a live input) is being read now; it reads again within
        :data:`STALL_GAP` as long as its worker runs."""
        with self._lock:
            now = self._now()
            last = self._read_at.get(reader)
            if last is not None and now - last > STALL_GAP:
                self._resumed_at = now
            self._read_at[reader] = now

    def forget(self, reader: object) -> None:
        """``reader`` stops reading: it is neither behind nor read any more."""
        with self._lock:
            self._catch_up(reader)
            self._read_at.pop(reader, None)

    def _catch_up(self, reader: object) -> None:
        if reader in self._behind:
            self._behind.discard(reader)
            if not self._behind:
                self._caught_up_at = self._now()

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

    @property
    def quiet_since(self) -> datetime | None:
        """The earliest host time from which the inputs may count as quiet (a live clock also
        waits for the newest event): when the last of them caught up or resumed after a
        stall, :data:`EPOCH` when neither happened; ``None`` while one is behind or stalled."""
        with self._lock:
            if self._behind:
                return None
            now = self._now()
            if any(now - last > STALL_GAP for last in self._read_at.values()):
                return None
            return max(t or EPOCH for t in (self._caught_up_at, self._resumed_at))


BACKLOG = Backlog()
"""The process's registry: the sources report to it, a live run's clock reads it."""
