"""The merge keys of one input's items: where each goes when inputs are merged by event time.

A replay merges several inputs into one stream — a recording's files
(:mod:`connectors.recorded`), a topic's partitions (:mod:`connectors.kafka.source`) and a
replay's separate inputs (:mod:`connectors.merged`) — by handing on the queued item with the
least key. Each input is in event-time order, and an item's key is its event time, with one
exception: one stray timestamp must not move it. Keyed at its own time, a single event stamped
an hour (or a century) ahead would hold the rest of its input back behind every other input's
events, which would then all be late; in one input read alone it costs one dead letter (the
event-time step, :mod:`flows.horizon`, refuses it as ``stray``), and merged with others it
must cost no more. (An item that is no event the flow admits — a line cut short, an unknown
deployment — has no time here: its source gives ``None``.)

So an item more than :data:`flows.horizon.REPLAY_JUMP_S` past its input's previous key waits
for the input's next item with a time, and keeps the previous key unless that one confirms the
jump by not going back behind it by more than :data:`~flows.horizon.REPLAY_JUMP_S` — the
horizon's rule, for one input instead of one deployment (at its shortest: the horizon waits
for a deployment's allowed lateness instead, if that is longer; the merge knows no config). A
real gap (a recording that moves on by minutes or days) is confirmed by the event after it and
merged at its true time. The items
without a time that follow a waiting one (dead letters, lines that are no valid event) wait
with it and get its key, as they always take the key before them. At the input's end a waiting
item is keyed at its own time: nothing follows in its input to contradict it (the horizon too
uses a held event at the end). The very first timed item of an input waits for the second
like any jump (the key before it is ``-inf``, a topic partition's 0, or a resumed merge's).

The keys depend only on the input's items, in their order: not on how fast, or in what
batches, they are read. So a merge resumed with the key of the last item it handed on keys the
items after it as the first run did. A followed topic's partitions wait for confirmation only
while they read their backlog (a live run judges its history as its replay would); after it,
the next message may be minutes away, and each is keyed at its own time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from flows.horizon import REPLAY_JUMP_S

T = TypeVar("T")

Keyed = tuple[float, T]
"""An item with its merge key."""

MAX_WAITING = 10_000
"""A jump followed by this many items without a time is not confirmed: it keeps the key before
it, and so do they (what waits is held in memory; a run of bad lines is no confirmation)."""


@dataclass
class MergeKeys(Generic[T]):
    """The merge keys of one input's items, given one by one in the input's order.

    :meth:`add` returns the items whose keys are known, in order, with their keys; :meth:`end`
    those still waiting when the input ends. A stray far ahead keeps the key before it, a real
    gap is crossed:

    >>> keys = MergeKeys[str]()
    >>> read = [(100.0, "a"), (101.0, "b"), (9e10, "stray"), (None, "bad line"), (102.0, "c")]
    >>> [keyed for time, item in read for keyed in keys.add(time, item)] + keys.end()
    [(100.0, 'a'), (101.0, 'b'), (101.0, 'stray'), (101.0, 'bad line'), (102.0, 'c')]
    >>> keys = MergeKeys[str]()
    >>> read = [(0.0, "a"), (86400.0, "a day later"), (86401.0, "b"), (9e10, "last")]
    >>> [keyed for time, item in read for keyed in keys.add(time, item)] + keys.end()
    [(0.0, 'a'), (86400.0, 'a day later'), (86401.0, 'b'), (90000000000.0, 'last')]
    >>> keys = MergeKeys[str](key=5.0)  # a run of bad lines confirms nothing
    >>> released = keys.add(9e10, "stray") + [
    ...     keyed for _ in range(MAX_WAITING) for keyed in keys.add(None, "bad")]
    >>> len(released), released[0], keys.key
    (10001, (5.0, 'stray'), 5.0)
    """

    key: float = -math.inf
    """The key of the last item keyed (the resume state of an input that hands on in order)."""
    waiting: list[tuple[float | None, T]] = field(default_factory=list)
    """A jump ahead waiting for the next timed item, first, and the untimed items after it."""
    confirm: bool = True
    """Jumps wait for confirmation (a replay); ``False``: each item keyed at its own time."""

    def add(self, time: float | None, item: T) -> list[Keyed[T]]:
        """``item`` is the input's next, with its event time (``None``: it has none): the items
        whose keys are now known."""
        if time is None:
            return self._untimed(item)
        keyed = self._settle(time) if self.waiting else []
        if self.confirm and time > self.key + REPLAY_JUMP_S:
            self.waiting = [(time, item)]
            return keyed
        self.key = time
        return [*keyed, (time, item)]

    def end(self) -> list[Keyed[T]]:
        """The input ended: what still waits is keyed at the waiting jump's own time."""
        if not self.waiting:
            return []
        jump = self.waiting[0][0]
        assert jump is not None  # only a timed item starts to wait
        return self._release(jump)

    def copy(self) -> MergeKeys[T]:
        """A copy to snapshot or resume from (the waiting list is not shared)."""
        return replace(self, waiting=list(self.waiting))

    def _untimed(self, item: T) -> list[Keyed[T]]:
        """An item without a time: it waits with a waiting jump, else takes the key before it."""
        if self.waiting:
            self.waiting.append((None, item))
            return self._release(self.key) if len(self.waiting) > MAX_WAITING else []
        return [(self.key, item)]

    def _settle(self, time: float) -> list[Keyed[T]]:
        """The waiting items, now that the next timed item has come at ``time``."""
        jump = self.waiting[0][0]
        assert jump is not None
        return self._release(jump if time >= jump - REPLAY_JUMP_S else self.key)

    def _release(self, key: float) -> list[Keyed[T]]:
        self.key = key
        waiting, self.waiting = self.waiting, []
        return [(key, item) for _time, item in waiting]
