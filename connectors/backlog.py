"""What this process knows about how its inputs are being read: which are still reading what
they held when they started, and when each was last read.

A live run's clock lets the host's clock move event time on once the inputs have been quiet for
a while (:mod:`flows.clock`). Quiet is only known of inputs that are being read:

* An input still reading its backlog — a followed Kafka topic read back from its beginning
  after a restart, a recording joined with live inputs — is not quiet, however long the worker
  stalls between two of its events: until it has handed all of it on, event time follows its
  data alone. Sources say so here (:meth:`Backlog.behind`, then :meth:`Backlog.caught_up` or
  :meth:`Backlog.forget`); the clock asks :attr:`Backlog.is_behind` and counts quiet time from
  :attr:`Backlog.caught_up_at` at the earliest. A backlog that comes mid-run — a partition
  added to a followed topic (``behind(reader, mid_run=True)``) — is not a restart: quiet time
  leaves out the spell it took to read, like a stall (below), and keeps what it had before it.
  What an input handed on is still on its way downstream (parsed, routed to its deployment's
  worker) for a moment after it caught up: :meth:`Backlog.settling_until` tells until when, so
  the live event horizon (:mod:`flows.horizon`) holds measurements stamped on receipt until
  the history is through.
* A live input is read every few milliseconds while the worker runs (:meth:`Backlog.polled`).
  When one was not read for :data:`STALL_GAP` (the process was stopped, its host paused, the
  worker busy), nothing is known of what queued meanwhile: until it is read again the inputs
  are not quiet, and afterwards quiet time leaves the stall out
  (:meth:`Backlog.quiet_since`), so the events of a stall are judged by their own time once
  read, not made late by the host clock that ran on — and a stall costs the idle rule no more
  than its own length.

One registry, :data:`BACKLOG`, serves the whole process: bytewax runs the sources of ``-w N``
workers on N threads, so every method holds a lock. It holds the readers weakly: one dropped
without being closed (a flow that failed) no longer counts.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

STALL_GAP = timedelta(seconds=1)
"""A live input not read for this long was stalled: a reader that finds nothing waits at most
tens of milliseconds (the Kafka and ZMQ readers) before it looks again."""

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

STALLS_KEPT = 256
"""The stalls remembered: a quiet spell with more of them counts the oldest as quiet."""


def _system_now() -> datetime:
    return datetime.now(UTC)


class Backlog:
    """The readers that are behind, when the last one caught up, and when the live ones were
    not read (stalls).

    >>> class Reader: ...
    >>> topic, recording = Reader(), Reader()
    >>> now = [datetime(2025, 1, 1, tzinfo=UTC)]
    >>> def at(seconds):
    ...     now[0] = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)
    >>> backlog = Backlog(now=lambda: now[0])
    >>> backlog.is_behind, backlog.caught_up_at, backlog.quiet_since(EPOCH) == EPOCH
    (False, None, True)
    >>> backlog.behind(topic); backlog.behind(recording)
    >>> backlog.caught_up(topic); backlog.is_behind  # the recording is still being read
    True
    >>> at(9); backlog.forget(recording); backlog.is_behind, backlog.quiet_since(EPOCH).second
    (False, 9)
    >>> backlog.caught_up(recording); backlog.caught_up_at.second  # nothing changed
    9

    The topic is read every few milliseconds — until its worker stalls, from 30 s to 50 s:

    >>> at(30); backlog.polled(topic); at(50)
    >>> backlog.quiet_since(EPOCH) is None  # nobody knows what queued meanwhile
    True
    >>> backlog.polled(topic)  # read again: the 20 s of the stall do not count as quiet
    >>> newest_at_40 = datetime(2025, 1, 1, 0, 0, 40, tzinfo=UTC)
    >>> backlog.quiet_since(EPOCH).second, backlog.quiet_since(newest_at_40).second
    (29, 50)
    """

    def __init__(self, now: Callable[[], datetime] = _system_now) -> None:
        self._now = now
        self._lock = threading.Lock()
        self._behind: weakref.WeakSet[object] = weakref.WeakSet()
        self._read_at: weakref.WeakKeyDictionary[object, datetime] = weakref.WeakKeyDictionary()
        self._caught_up_at: datetime | None = None
        self._stalls: deque[tuple[datetime, datetime]] = deque(maxlen=STALLS_KEPT)
        self._behind_since: datetime | None = None
        """When the inputs went from none behind to a backlog found mid-run."""
        self._last_caught_up_at: datetime | None = None
        """When the last input behind last caught up, with any backlog (mid-run included)."""

    def behind(self, reader: object, mid_run: bool = False) -> None:
        """``reader`` has a backlog to read: the one it started with, or (``mid_run``) one it
        found while its inputs were read live."""
        with self._lock:
            if not self._behind:
                self._behind_since = self._now() if mid_run else None
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
                self._stalled(last, now)
            self._read_at[reader] = now

    def _stalled(self, begin: datetime, end: datetime) -> None:
        """Quiet time leaves out ``begin``–``end`` (``end`` is now: no stall ends later)."""
        while self._stalls and self._stalls[-1][1] >= begin:  # overlaps: one stall
            earlier, _end = self._stalls.pop()
            begin = min(earlier, begin)
        self._stalls.append((begin, end))

    def forget(self, reader: object) -> None:
        """``reader`` stops reading: it is neither behind nor read any more."""
        with self._lock:
            self._catch_up(reader)
            self._read_at.pop(reader, None)

    def _catch_up(self, reader: object) -> None:
        if reader in self._behind:
            self._behind.discard(reader)
            if not self._behind:
                self._last_caught_up_at = self._now()
                if self._behind_since is None:  # the backlog the inputs started with
                    self._caught_up_at = self._now()
                else:  # mid-run: the spell counts as a stall
                    self._stalled(self._behind_since, self._now())
                    self._behind_since = None

    @property
    def is_behind(self) -> bool:
        """Some input is still reading its backlog."""
        with self._lock:
            return bool(self._behind)

    @property
    def caught_up_at(self) -> datetime | None:
        """When the last input behind caught up with the backlog the inputs started with
        (``None``: none was behind at the start)."""
        with self._lock:
            return self._caught_up_at

    def settling_until(self, settle: timedelta) -> datetime | None:
        """Until when what the inputs read back may still be on its way downstream: ``settle``
        after the last input behind caught up (a backlog found mid-run too); while one is
        behind, ``settle`` from now at the earliest (ask again then). ``None`` once that has
        passed, or when no input was ever behind.

        >>> now = [datetime(2025, 1, 1, tzinfo=UTC)]
        >>> class Reader: ...
        >>> backlog, topic, settle = Backlog(now=lambda: now[0]), Reader(), timedelta(seconds=2)
        >>> backlog.settling_until(settle) is None  # nothing read back
        True
        >>> backlog.behind(topic); backlog.settling_until(settle).second  # behind: look at 2 s
        2
        >>> now[0] += timedelta(seconds=5); backlog.caught_up(topic)
        >>> backlog.settling_until(settle).second  # caught up at 5 s: settled at 7 s
        7
        >>> now[0] += settle; backlog.settling_until(settle) is None
        True
        """
        with self._lock:
            now = self._now()
            if self._behind:
                return now + settle
            last = self._last_caught_up_at
            return None if last is None or now >= last + settle else last + settle

    def quiet_since(self, start: datetime) -> datetime | None:
        """Since when the inputs count as quiet, for a clock whose newest event came at host
        time ``start``: from ``start``, or from when the last input behind caught up if later,
        pushed on by the stalls since (quiet time leaves them out: what queued then is read
        after them). ``None`` while an input is behind or stalled."""
        with self._lock:
            if self._behind:
                return None
            now = self._now()
            if any(now - last > STALL_GAP for last in self._read_at.values()):
                return None
            since = max(start, self._caught_up_at or EPOCH)
            stalled = [end - max(begin, since) for begin, end in self._stalls if end > since]
            return since + sum(stalled, timedelta(0))


BACKLOG = Backlog()
"""The process's registry: the sources report to it, a live run's clock reads it."""
