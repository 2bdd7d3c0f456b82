"""The tick window: everything one deployment sent during one tumbling event-time window.

The dataflow folds every valid event of a deployment into a :class:`TickWindow` with bytewax's
``fold_window`` (event time, tumbling, ordered); each closed window becomes one step of the
deployment's planner. The folder keeps, per engine, the forward passes of the window as compact
rows, from which the planner takes the latest FPM (the reference's signal), evenly spaced
training samples, and the per-engine time average (agg mode).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import overload

from schemas import (
    FPM_COLUMN,
    AckEvent,
    CapabilitiesEvent,
    ClockEvent,
    EngineCapabilities,
    Event,
    FpmBatchEvent,
    FpmEvent,
    FpmRow,
    InventoryEvent,
    Limits,
    LimitsEvent,
    RequestEvent,
    RequestRecord,
    Role,
    TrafficEvent,
    TrafficObservation,
    WorkerCapabilities,
    WorkerCounts,
    fpm_to_row,
)

EngineId = tuple[Role, str, int]
"""``(role, worker_id, dp_rank)`` of one engine."""

WALL_TIME = FPM_COLUMN["wall_time"]
"""Index of ``wall_time`` in an FPM row (see ``schemas.FPM_BATCH_COLUMNS``)."""


@dataclass
class TickWindow:
    """Accumulator of one deployment's events in one window (the ``fold_window`` state).

    >>> from schemas import parse_event
    >>> w = TickWindow()
    >>> w = fold_event(w, parse_event('{"type":"fpm","deployment":"d","time":1.5,'
    ...     '"payload":{"role":"decode","fpm":{"worker_id":"w1","wall_time":0.02}}}'))
    >>> w.rows[("decode", "w1", 0)][0][:3]
    (1.5, 0, 0.02)
    """

    rows: dict[EngineId, list[FpmRow]] = field(default_factory=dict)
    inventory: WorkerCounts | None = None
    capabilities: WorkerCapabilities | None = None
    traffic: list[tuple[float, TrafficObservation]] = field(default_factory=list)
    requests: list[RequestRecord] = field(default_factory=list)
    acks: list[AckEvent] = field(default_factory=list)
    limits: list[Limits] = field(default_factory=list)
    events: int = 0

    def __deepcopy__(self, memo: dict[int, object]) -> TickWindow:
        """The copy bytewax snapshots every epoch (10 s), recovery or not: the containers are
        copied, their items — row tuples, frozen models — are immutable and shared. Copying
        every row deeply cost more CPU than the rest of the flow at 100 k FPM/s.

        >>> import copy
        >>> w = TickWindow(rows={("decode", "w1", 0): [(1.0, 0, 0.02) + (0,) * 13]})
        >>> c = copy.deepcopy(w)
        >>> c.rows[("decode", "w1", 0)].append(c.rows[("decode", "w1", 0)][0])
        >>> len(w.rows[("decode", "w1", 0)]), c.rows == w.rows
        (1, False)
        """
        return TickWindow(
            rows={engine: list(rows) for engine, rows in self.rows.items()},
            inventory=self.inventory,
            capabilities=self.capabilities,
            traffic=list(self.traffic),
            requests=list(self.requests),
            acks=list(self.acks),
            limits=list(self.limits),
            events=self.events,
        )


def fold_event(window: TickWindow, event: Event) -> TickWindow:
    """Add one event to the window (events arrive in event-time order).

    A forward-pass batch's rows all go into this window: the flow splits a batch whose rows
    span several windows into one per window before (``flows.horizon.split_by_window``).
    """
    window.events += 1
    if isinstance(event, FpmEvent):
        engine = event.payload
        key = (engine.role, engine.fpm.worker_id, engine.fpm.dp_rank)
        window.rows.setdefault(key, []).append(fpm_to_row(event.time, engine.fpm))
    elif isinstance(event, FpmBatchEvent):
        batch = event.payload
        window.rows.setdefault((batch.role, batch.worker_id, batch.dp_rank), []).extend(batch.rows)
    elif isinstance(event, RequestEvent):
        window.requests.append(event.payload)
    elif isinstance(event, InventoryEvent):
        window.inventory = event.payload
    elif isinstance(event, CapabilitiesEvent):
        window.capabilities = merge_capabilities(window.capabilities, event.payload)
    elif isinstance(event, TrafficEvent):
        window.traffic.append((event.time, event.payload))
    elif isinstance(event, AckEvent):
        window.acks.append(event)
    elif isinstance(event, LimitsEvent):
        window.limits.append(event.payload)  # each is applied, or refused, on its own
    else:
        assert isinstance(event, ClockEvent)
    return window


def merge_windows(a: TickWindow, b: TickWindow) -> TickWindow:
    """Combine two windows of the same span (``b`` is the later one)."""
    for key, rows in b.rows.items():
        merged = a.rows.setdefault(key, [])
        merged.extend(rows)
        merged.sort(key=lambda row: row[0])
    a.inventory = b.inventory or a.inventory
    a.capabilities = merge_capabilities(a.capabilities, b.capabilities)
    a.traffic.extend(b.traffic)
    a.requests.extend(b.requests)
    a.acks.extend(b.acks)
    a.limits.extend(b.limits)
    a.events += b.events
    return a


@overload
def merge_capabilities(
    old: WorkerCapabilities | None, new: WorkerCapabilities
) -> WorkerCapabilities: ...
@overload
def merge_capabilities(
    old: WorkerCapabilities | None, new: WorkerCapabilities | None
) -> WorkerCapabilities | None: ...
def merge_capabilities(
    old: WorkerCapabilities | None, new: WorkerCapabilities | None
) -> WorkerCapabilities | None:
    """Newer capabilities win field by field: a role, or a field of a role, that the newer
    record leaves out keeps its old value (the DGD names only a power cap, a worker's card
    the token limits; neither erases the other); a field it sets to ``null`` is cleared.

    >>> from schemas import EngineCapabilities as C
    >>> merged = merge_capabilities(WorkerCapabilities(prefill=C(num_gpu=2, max_num_seqs=8)),
    ...                             WorkerCapabilities(prefill=C(gpu_power_limit_w=500),
    ...                                                decode=C(num_gpu=1)))
    >>> merged.prefill.num_gpu, merged.prefill.gpu_power_limit_w, merged.decode.num_gpu
    (2, 500, 1)
    """
    if old is None or new is None:
        return new or old
    return WorkerCapabilities(
        prefill=_merge_engine(old.prefill, new.prefill),
        decode=_merge_engine(old.decode, new.decode),
    )


def _merge_engine(
    old: EngineCapabilities | None, new: EngineCapabilities | None
) -> EngineCapabilities | None:
    if old is None or new is None:
        return new or old
    return old.model_copy(update=new.model_dump(exclude_unset=True))


def evenly_spaced(rows: list[FpmRow], count: int) -> list[FpmRow]:
    """``count`` forward passes spread evenly over the window, always including the last.

    Idle heartbeats (``wall_time == 0``) are not forward passes and are skipped.

    >>> passes = [(float(t), t, 0.01) + (0,) * 13 for t in range(10)]
    >>> [row[1] for row in evenly_spaced(passes, 3)]
    [3, 6, 9]
    """
    passes = [row for row in rows if row[WALL_TIME] > 0.0]
    if len(passes) <= count:
        return passes
    step = len(passes) / count
    return [passes[len(passes) - 1 - int(i * step)] for i in reversed(range(count))]


def time_average(rows: list[FpmRow]) -> FpmRow | None:
    """The mean forward pass of the window, ``None`` without forward passes.

    A linear perf model fitted on means is unbiased, and the mean smooths the bimodal wall time
    of aggregated engines (decode-only vs prefill-carrying iterations). The counts are means
    too, not rounded (:func:`schemas.mean_fpm` builds its FPM): a chunk in one pass of four is
    0.25 prefill requests of 512 tokens, and the models' moving averages keep its 2 048 tokens
    per request.

    >>> a = (1.0, 1, 0.010) + (0, 0, 0.0, 0, 4, 4000, 0.0) + (0,) * 6
    >>> b = (2.0, 2, 0.030) + (1, 300, 0.0, 0, 3, 6000, 0.0) + (0,) * 6
    >>> time_average([a, b])[:9]
    (2.0, 2, 0.02, 0.5, 150.0, 0.0, 0.0, 3.5, 5000.0)
    """
    passes = [row for row in rows if row[WALL_TIME] > 0.0]
    if not passes:
        return None
    n = len(passes)
    columns = list(zip(*passes, strict=True))
    mean = [sum(column) / n for column in columns]
    last = passes[-1]
    return tuple(last[i] if i < 2 else mean[i] for i in range(len(last)))  # type: ignore[return-value]
