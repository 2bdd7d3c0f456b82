"""Live, measurements stamped on receipt (forward passes over ZMQ) wait while the inputs read
back a history, and a moment after: stamped at the present, they would move event time past
the history still to come and make it late. A history that reaches their time interleaves with
them; past a bound, the oldest held are dead letters; once the history has settled, a timer
releases them even when nothing else comes."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.inputs import DynamicSource, Source, StatelessSourcePartition
from bytewax.testing import TestingSink, TestingSource

import flows.horizon
from connectors.backlog import Backlog
from connectors.zmq_source import ReceivedFpmBatch
from flows.clock import PlannerClock
from flows.horizon import SETTLE_S, EventHorizon, event_time
from schemas import ClockEvent, DeadLetter, Event, FpmBatch
from tests.flow.cluster import run_flow

ROW = (0.0, 7, 0.02, 0, 0, 0.0, 0, 4, 4000, 0.0, 0, 0, 0.0, 0, 0, 0.0)
NOW = time.time()


class Reader:
    """An input reading back its history (the backlog holds it weakly: keep it alive)."""


def received(ago: float) -> ReceivedFpmBatch:
    """A forward pass the ZMQ source received ``ago`` seconds before :data:`NOW`."""
    at = NOW - ago
    rows = [(at, *ROW[1:])]
    return ReceivedFpmBatch(deployment="d", time=at, payload=FpmBatch(role="decode", rows=rows))


def history(ago: float) -> ClockEvent:
    """A measurement of the history, ``ago`` seconds before :data:`NOW`."""
    return ClockEvent(deployment="d", time=NOW - ago)


def horizon_flow(source: Source[Event], backlog: Backlog, out: list) -> Dataflow:
    flow = Dataflow("receipts")
    keyed = op.key_on("key", op.input("in", flow, source), lambda e: e.deployment)
    clock = PlannerClock(event_time, timedelta(0), timedelta(seconds=5), backlog=backlog)
    stamped = op.map(
        "stamp", EventHorizon(clock, live=True).apply("horizon", keyed), _with_wall_time
    )
    op.output("out", stamped, TestingSink(out))
    return flow


def _with_wall_time(keyed: tuple[str, Event | DeadLetter]) -> tuple[Event | DeadLetter, float]:
    return keyed[1], time.monotonic()


def described(out: list) -> list[tuple[str, object]]:
    """Each output as (kind, seconds before :data:`NOW` or the dead letter's kind)."""
    return [
        (
            type(item).__name__,
            item.reason.split(":")[0] if isinstance(item, DeadLetter) else NOW - item.time,
        )
        for item, _wall_time in out
    ]


def run_behind(events: list[Event], workers: int) -> list[tuple[str, object]]:
    """``events`` through the live horizon while an input reads back its history throughout."""
    backlog, reader = Backlog(), Reader()
    backlog.behind(reader)
    out: list = []
    run_flow(horizon_flow(TestingSource(events), backlog, out), workers)
    return described(out)


def test_passes_received_while_the_history_is_read_wait_behind_it(workers):
    events: list[Event] = [history(100), history(99), received(1.0), received(0.9)]
    events += [history(ago) for ago in (98, 97, 96)]

    got = run_behind(events, workers)

    # before: the two passes were used, and the history after them was late
    history_used = [("ClockEvent", pytest.approx(ago)) for ago in (100, 99, 98, 97, 96)]
    passes_at_the_end = [("ReceivedFpmBatch", pytest.approx(ago)) for ago in (1.0, 0.9)]
    assert got == history_used + passes_at_the_end


def test_a_history_that_reaches_their_time_interleaves_with_them(workers):
    # passes out of order (two engines' polls): the one the history passed while it waited is
    # placed at the watermark, not late
    events: list[Event] = [history(52), history(51), received(50.5), received(50.8)]
    events += [received(49.5), history(50), history(49), history(48)]

    got = run_behind(events, workers)

    assert got == [
        ("ClockEvent", pytest.approx(52)),
        ("ClockEvent", pytest.approx(51)),
        ("ReceivedFpmBatch", pytest.approx(50.5)),
        ("ReceivedFpmBatch", pytest.approx(50.5, abs=1e-5)),  # placed (µs of the clock)
        ("ClockEvent", pytest.approx(50)),
        ("ReceivedFpmBatch", pytest.approx(49.5)),
        ("ClockEvent", pytest.approx(49)),
        ("ClockEvent", pytest.approx(48)),
    ]


def test_past_the_bound_the_oldest_held_passes_are_dead_letters(workers, monkeypatch):
    monkeypatch.setattr(flows.horizon, "MAX_HELD_RECEIPTS", 2)
    events: list[Event] = [history(100), *(received(ago) for ago in (1.0, 0.9, 0.8, 0.7))]
    events.append(history(99))

    got = run_behind(events, workers)

    assert got == [
        ("ClockEvent", pytest.approx(100)),
        ("DeadLetter", "ignored"),  # the two oldest, as the third and fourth come
        ("DeadLetter", "ignored"),
        ("ClockEvent", pytest.approx(99)),
        ("ReceivedFpmBatch", pytest.approx(0.8)),
        ("ReceivedFpmBatch", pytest.approx(0.7)),
    ]


@dataclass
class Until:
    """A pause that ends once ``done()`` holds (asked every 50 ms), or after ``at_most_s``."""

    done: Callable[[], bool]
    at_most_s: float
    ends: float | None = None

    def waiting(self) -> bool:
        self.ends = self.ends or time.monotonic() + self.at_most_s
        return not self.done() and time.monotonic() < self.ends


Step = list[Event] | Callable[[], None] | Until


class _Scripted(StatelessSourcePartition[Event]):
    def __init__(self, steps: list[Step], ended_at: list[float]) -> None:
        self.steps, self.ended_at = steps, ended_at
        self.awake: datetime | None = None

    def next_batch(self) -> list[Event]:
        self.awake = None
        if not self.steps:
            self.ended_at.append(time.monotonic())
            raise StopIteration
        step = self.steps[0]
        if isinstance(step, Until) and step.waiting():
            self.awake = datetime.now(UTC) + timedelta(seconds=0.05)
            return []
        self.steps.pop(0)
        if isinstance(step, Until):
            return []
        if callable(step):
            step()
            return []
        return step

    def next_awake(self) -> datetime | None:
        return self.awake


class Scripted(DynamicSource[Event]):
    """Batches of events, actions and waits, on the first worker."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.ended_at: list[float] = []

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _Scripted:
        return _Scripted(self.steps if worker_index == 0 else [], self.ended_at)


def test_once_the_history_has_settled_a_timer_releases_them(workers):
    backlog, reader = Backlog(), Reader()
    backlog.behind(reader)
    out: list = []
    caught_up_at: list[float] = []

    def catch_up() -> None:
        backlog.caught_up(reader)
        caught_up_at.append(time.monotonic())

    source = Scripted(
        [
            [history(100), received(1.0), history(99)],
            catch_up,
            # nothing comes: the passes go out SETTLE_S after the history caught up
            Until(lambda: len(out) == 3, at_most_s=60.0),
        ]
    )

    run_flow(horizon_flow(source, backlog, out), workers)

    assert described(out) == [
        ("ClockEvent", pytest.approx(100)),
        ("ClockEvent", pytest.approx(99)),
        ("ReceivedFpmBatch", pytest.approx(1.0)),
    ]
    released_at = out[-1][1]
    # on the timer, while the input was still open (not at its end, the fallback)
    assert released_at - caught_up_at[0] >= SETTLE_S - 0.05
    assert released_at < max(source.ended_at)
