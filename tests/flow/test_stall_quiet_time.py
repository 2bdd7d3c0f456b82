"""A live clock's quiet time leaves a stall of its inputs out, and only the stall.

The real :class:`flows.clock.PlannerClock` and :class:`connectors.backlog.Backlog`, on one
host clock the test moves: a followed topic is read every 100 ms, except during a stall. What
queued during the stall must not be made late (the inputs were not read, so they were not
quiet), and the stall must not cost the idle rule more than its own length (quiet time that
restarted after a stall held the ticks up for as long as the inputs had been quiet before it).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from bytewax.operators.windowing import ClockLogic

from connectors.backlog import EPOCH, Backlog
from flows.clock import PlannerClock

IDLE_S = 5.0
LAST_EVENT = 100.0
"""Event time of the last event, seen at host time 0."""


class Topic:
    """A reader (the registry holds readers weakly)."""


class Host:
    """A host clock the test moves, and two topics read every 100 ms while the worker runs."""

    def __init__(self) -> None:
        self.start = datetime(2026, 1, 1, tzinfo=UTC)
        self.seconds = 0.0
        self.backlog = Backlog(now=self.now)
        self.topics = [Topic(), Topic()]  # say, the events topic and an acknowledgements one

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.seconds)

    def run(self, until: float) -> None:
        """The worker runs: the topic is read now and every 100 ms up to ``until``."""
        self.read()
        while self.seconds < until - 1e-9:
            self.seconds = round(self.seconds + 0.1, 6)
            self.read()

    def read(self) -> None:
        for topic in self.topics:
            self.backlog.polled(topic)

    def stall(self, until: float) -> None:
        self.seconds = until  # nothing is read meanwhile


def clock_after_the_last_event(host: Host) -> ClockLogic[Any, Any]:
    """The planner's live clock on ``host``'s clock and backlog, having seen the last event."""
    clock = PlannerClock(
        lambda t: EPOCH + timedelta(seconds=t),
        lateness=timedelta(0),
        idle_after=timedelta(seconds=IDLE_S),
        now_getter=host.now,
        backlog=host.backlog,
    )
    logic = clock.build(None)
    logic.on_item(LAST_EVENT)
    return logic


def watermarks(stall_s: float) -> dict[str, float]:
    host = Host()
    logic = clock_after_the_last_event(host)

    def watermark() -> float:
        return (logic.on_notify() - EPOCH).total_seconds()

    seen = {}
    host.run(60.0)
    seen["before"] = watermark()
    host.stall(60.0 + stall_s)
    seen["stalled"] = watermark()  # before the topic is read again
    host.run(70.0)
    seen["after"] = watermark()
    return seen


def test_a_stall_is_left_out_of_the_quiet_time_and_only_the_stall() -> None:
    steady = watermarks(stall_s=0.0)
    stalled = watermarks(stall_s=2.0)
    assert steady["after"] == LAST_EVENT + 70.0 - IDLE_S
    # until the topic is read again, the host clock moves nothing: an event of the stall,
    # stamped at host time 60.5, is not late when it is read at 62
    assert stalled["stalled"] == stalled["before"] == LAST_EVENT + 60.0 - IDLE_S
    # read again, quiet time goes on from where it stopped: the 2 s are all it costs (once,
    # though both topics saw the stall)
    assert stalled["after"] == steady["after"] - 2.0


def test_stalls_that_overlap_are_left_out_once() -> None:
    # two readers stall at overlapping times (say on two workers): y from 0 to 10 s and from
    # 12 to 14 s, x from 4.9 to 20 s; together the inputs were stalled for 20 s, not 25.1
    host = Host()
    x, y = host.topics

    def at(seconds: float, *readers: Topic) -> None:
        host.seconds = seconds
        for reader in readers:
            host.backlog.polled(reader)

    reads = {x: [0.0, 1.0, 2.0, 3.0, 4.0, 4.9, 20.0], y: [0.0, 10.0, 11.0, 12.0, 14.0, 20.0]}
    for seconds in sorted({t for times in reads.values() for t in times}):
        at(seconds, *(reader for reader, times in reads.items() if seconds in times))
    quiet = host.backlog.quiet_since(host.start)
    assert quiet is not None and (quiet - host.start).total_seconds() == 20.0


def test_a_backlog_found_mid_run_is_left_out_of_the_quiet_time_and_only_it() -> None:
    """A partition added to a followed topic (or a topic that appears) while the inputs are
    read: while its backlog is read the host clock moves nothing; afterwards quiet time goes
    on from where it stopped — the spell costs the idle rule its length, not a restart."""

    def after_a_found_backlog(spell_s: float) -> tuple[float, float]:
        host = Host()
        logic = clock_after_the_last_event(host)
        added = Topic()
        host.run(3.0)  # quiet for 3 s of the 5 the idle rule needs
        if spell_s:
            host.backlog.behind(added, mid_run=True)
            host.run(3.0 + spell_s)
            during = (logic.on_notify() - EPOCH).total_seconds()
            host.backlog.caught_up(added)
        else:
            during = LAST_EVENT
        host.run(8.0 + spell_s)
        return during, (logic.on_notify() - EPOCH).total_seconds()

    _, steady = after_a_found_backlog(0.0)
    during, held = after_a_found_backlog(1.5)
    assert steady == LAST_EVENT + 8.0 - IDLE_S
    assert during == LAST_EVENT  # not quiet while a backlog is read
    # the 3 s of quiet before the spell still count: the window closes 1.5 s later, not 4.5
    assert held == steady
