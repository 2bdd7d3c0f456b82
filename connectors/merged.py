"""Several replayed inputs read as one stream, merged by event time.

A replay's inputs are each in event-time order — a recording's files are merged on it
(:mod:`connectors.recorded`), so are a topic's partitions (:mod:`connectors.kafka.source`) —
but bytewax reads separate inputs side by side, in batches, in whatever interleaving its
runtime picks. The planner's event time follows the newest event it has seen, so one input
read ahead of another (say, a topic of a deployment's state snapshots beside a recording of its
forward passes) would make the other's events late, and the replay's decisions would depend
on the interleaving. :class:`MergedSource` makes separate inputs one input: one bytewax
partition that reads every input's partitions (its *lanes*) and hands on the queued item with
the least ``(event time, lane)``, as long as every lane that has not ended has one queued — the
same merge a recording's files get, so a replay decides the same however its inputs are split
(and whichever the runtime or the broker serves first).

Each input says what event time an item has with its ``merge_time(item)``, and the lane keys
its items by it (:class:`connectors.merge_keys.MergeKeys`): an item without one — a dead
letter, a line that is no valid event — keeps its lane's previous key, so it stays with its
neighbours, and so does one stamped more than a minute past that key unless the lane's next
timed item confirms the jump (one stray timestamp does not hold the rest of its input back
behind the others, whose events would then be late).

A followed input — a Kafka topic read live — never ends, so it holds the merge only while it
reads its *history*: what it held when the worker started (read back from its beginning after
a restart), or a partition added to it since (:attr:`FollowedPartition.reading_history`).
``flowplanner run`` merges every history input of a live run so (its followed and bounded
topics and its recordings; not the engines' ZMQ passes nor Prometheus readings, stamped on
receipt, which the event horizon holds meanwhile: :mod:`flows.horizon`): the history of
several followed topics is handed on in event-time order, as their replay would be, and what
one of them receives live meanwhile waits for the others' history. Once a followed lane has
read its history, its items are keyed at their own time and handed on as they come (waiting
for a confirmation could hold a live event until the next message, minutes away).

The resume state is every lane's own state plus the items read from it and not handed on yet
(keyed, or waiting for their key), so a resumed replay hands on exactly what was left, in the
same order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition

from connectors.merge_keys import MergeKeys
from connectors.stopping import inputs_ended

PARTITION = "merged"
"""The source's one partition: every input's partitions merged into one ordered stream."""

Queued = tuple[float, Any]
"""An item read from a lane and not handed on yet, with its merge key."""


class TimedSource(Protocol):
    """A bytewax source of event-time-ordered partitions whose items have a time: bounded,
    or followed (its partitions are :class:`FollowedPartition`).

    >>> import pathlib, tempfile
    >>> from connectors.recorded import RecordedSource
    >>> path = pathlib.Path(tempfile.mkdtemp(), "events.jsonl")
    >>> _ = path.write_text('{"type": "inventory", "deployment": "d", "time": 7.5}\\n')
    >>> source: TimedSource = RecordedSource([str(path)])  # every planner input is one
    >>> source.merge_time(object()) is None  # not a line read: it has no event time
    True
    """

    def list_parts(self) -> list[str]: ...

    def build_part(
        self, step_id: str, for_part: str, resume_state: Any
    ) -> StatefulSourcePartition[Any, Any]: ...

    def merge_time(self, item: Any) -> float | None:
        """The item's event time, ``None`` if it has none."""
        ...


@runtime_checkable
class FollowedPartition(Protocol):
    """A partition that never ends by itself (a followed Kafka topic's reader).

    >>> class Reader:
    ...     reading_history = False
    >>> isinstance(Reader(), FollowedPartition), isinstance(object(), FollowedPartition)
    (True, False)
    """

    @property
    def reading_history(self) -> bool:
        """It is reading back what it held at start (or a part of it found since)."""
        ...


@dataclass
class MergedState:
    """Resume state: per lane, its partition's own state, what it had read and keyed but not
    handed on, and its keys' state (the items read and waiting for their key among them).

    >>> import pickle
    >>> state = MergedState(parts={"events.jsonl": 12}, queued={"events.jsonl": [(5.0, "item")]})
    >>> pickle.loads(pickle.dumps(state)) == state  # bytewax snapshots it
    True
    """

    parts: dict[str, Any] = field(default_factory=dict)
    queued: dict[str, list[Queued]] = field(default_factory=dict)
    keys: dict[str, MergeKeys[Any]] = field(default_factory=dict)


@dataclass
class _Lane:
    key: str
    source: TimedSource
    part: StatefulSourcePartition[Any, Any]
    queue: deque[Queued]
    keys: MergeKeys[Any]
    ended: bool = False

    def read(self) -> None:
        """Queue the lane's next batch, or note that it ended."""
        if self.holds_history:  # merged as a replay is: a jump waits for confirmation (again,
            self.keys.confirm = True  # for a followed lane resumed or grown a partition)
        try:
            batch = self.part.next_batch()
        except StopIteration:
            self.ended = True
            self.queue.extend(self.keys.end())
            return
        for item in batch:
            self.queue.extend(self.keys.add(self.source.merge_time(item), item))
        if self.keys.confirm and not self.holds_history:  # live from here: own time each
            self.queue.extend(self.keys.end())
            self.keys.confirm = False

    def due(self, now: datetime) -> bool:
        """The lane is to be read now: not ended, nothing queued, and its input did not ask to
        wait (a followed topic that does not exist yet asks again every half second)."""
        if self.ended or self.queue:
            return False
        wake = self.part.next_awake()
        return wake is None or wake <= now

    @property
    def holds_history(self) -> bool:
        """The lane has history still to read: a bounded input until it ends, a followed one
        while it reads back what it held at start."""
        if self.ended:
            return False
        return not isinstance(self.part, FollowedPartition) or self.part.reading_history


class _MergedPartition(StatefulSourcePartition[Any, MergedState]):
    def __init__(self, lanes: list[_Lane]) -> None:
        self._lanes = lanes
        self._waiting: list[_Lane] = []

    def next_batch(self) -> list[Any]:
        if inputs_ended():
            raise StopIteration
        now = datetime.now(UTC)
        for lane in self._lanes:
            if lane.due(now):
                lane.read()
        lanes, batch = self._lanes, []
        while True:
            self._waiting = [lane for lane in lanes if not lane.queue and lane.holds_history]
            queued = [i for i, lane in enumerate(lanes) if lane.queue]
            if self._waiting or not queued:
                break
            first = min(queued, key=lambda i: (lanes[i].queue[0][0], i))
            batch.append(lanes[first].queue.popleft()[1])
        if not batch and all(lane.ended for lane in lanes):
            raise StopIteration  # every lane ended and every item was handed on
        return batch

    def next_awake(self) -> datetime | None:
        """Poll at once unless every lane waited on asked to wait (then until the first);
        none waited on (followed lanes past their history), every lane not ended."""
        waited = self._waiting or [lane for lane in self._lanes if not lane.ended]
        wakes = [lane.part.next_awake() for lane in waited]
        if not wakes or any(wake is None for wake in wakes):
            return None
        return min(wake for wake in wakes if wake is not None)

    def snapshot(self) -> MergedState:
        return MergedState(
            parts={lane.key: lane.part.snapshot() for lane in self._lanes},
            queued={lane.key: list(lane.queue) for lane in self._lanes},
            keys={lane.key: lane.keys.copy() for lane in self._lanes},
        )

    def close(self) -> None:
        for lane in self._lanes:
            lane.part.close()


class MergedSource(FixedPartitionedSource[Any, MergedState]):
    """Inputs read as one stream, merged on ``(event time, lane)`` while any reads history.

    >>> import os, tempfile
    >>> import bytewax.operators as op
    >>> from bytewax.dataflow import Dataflow
    >>> from bytewax.testing import TestingSink, run_main
    >>> from connectors.recorded import RecordedSource
    >>> d = tempfile.mkdtemp(); a, b = os.path.join(d, "a.jsonl"), os.path.join(d, "b.jsonl")
    >>> def at(t): return '{"type": "clock", "deployment": "d", "time": %d}\\n' % t
    >>> _ = open(a, "w").write(at(1) + at(3))
    >>> _ = open(b, "w").write(at(2) + at(3))
    >>> out = []; flow = Dataflow("doc")
    >>> merged = MergedSource([RecordedSource([a]), RecordedSource([b])])
    >>> op.output("out", op.input("in", flow, merged), TestingSink(out))
    >>> run_main(flow); [(os.path.basename(e.source), e.position) for e in out]
    [('a.jsonl', 1), ('b.jsonl', 1), ('a.jsonl', 2), ('b.jsonl', 2)]
    """

    def __init__(self, sources: Sequence[TimedSource]) -> None:
        if not sources:
            raise ValueError("no inputs to merge")
        self.sources = list(sources)
        self._parts: list[tuple[str, TimedSource, str]] | None = None

    def _lane_parts(self) -> list[tuple[str, TimedSource, str]]:
        if self._parts is None:
            self._parts = [
                (f"{i}/{part}", source, part)
                for i, source in enumerate(self.sources)
                for part in source.list_parts()
            ]
        return self._parts

    def list_parts(self) -> list[str]:
        self._lane_parts()
        return [PARTITION]

    def build_part(
        self, step_id: str, for_part: str, resume_state: MergedState | None
    ) -> _MergedPartition:
        state = resume_state or MergedState()
        lanes = [
            _Lane(
                key,
                source,
                source.build_part(f"{step_id}/{key}", part, state.parts.get(key)),
                deque(state.queued.get(key, [])),
                state.keys[key].copy() if key in state.keys else MergeKeys(),
            )
            for key, source, part in self._lane_parts()
        ]
        return _MergedPartition(lanes)
