"""A live worker that reads a history back beside engines publishing over ZMQ uses both.

The engines' forward passes are stamped with the host time of the poll that received them: the
present. A recording joined with them holds the recent past. Before the event horizon held the
passes while the history was read (and a moment after: it is still being parsed and routed
then), the first passes moved the deployment's event time to the present and the rest of the
history was late. Here the engines publish for real (an :class:`FpmPublisher` on a thread) and
the recording hands on its first batch, then waits until the ZMQ source has handed on passes
— so they do overtake the history, on every run — and goes on: the history must decide what a
replay of it decides, and the passes must still reach the planner.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bytewax.inputs import StatefulSourcePartition, StatelessSourcePartition
from bytewax.testing import TestingSink

from connectors.recorded import RecordedSource, ResumeState
from connectors.zmq_publisher import FpmPublisher
from connectors.zmq_source import ZmqFpmSource, ZmqItem
from flows.planner import PlannerSinks, build_flow
from schemas import DeadLetter, ForwardPassMetrics, PlannerConfig, RawEvent, TickRecord
from tests.flow.live_run import replay, run_until_interrupted
from tests.flow.streams import DECODE_CONFIG, decode_fpm, decode_ramp, write_stream

HISTORY_S = 300.0
"""Of forward passes in the recording: 2 400 events, three of the recording's batches."""

ENDS_AGO_S = 20.0
"""The history ends this long before the test starts: the recent past, within the horizon's
one-minute confirmation rule of the present."""

PASS_PERIOD_S = 0.02
"""The live engine publishes a pass every 20 ms."""

LIVE_WORKER = "live0"

POLLS_FIRST = 3
"""The recording waits for passes of this many polls: a pass more than a minute ahead of the
history waits for the next to confirm it (a stray otherwise), so one alone would not move event
time; two in a row do."""

WAIT_S = 120.0
"""For the live engine's first tick (a loaded machine included)."""


@contextmanager
def live_engine() -> Iterator[str]:
    """A decode engine publishing forward passes over ZMQ on a thread, at its URL."""
    urls: list[str] = []
    bound, stop = threading.Event(), threading.Event()

    def publish() -> None:
        with FpmPublisher("tcp://127.0.0.1:*") as publisher:  # one thread owns the socket
            urls.append(publisher.url)
            bound.set()
            publisher.wait_for_subscribers(1, timeout=WAIT_S)
            counter = 0
            while not stop.wait(PASS_PERIOD_S):
                counter += 1
                fpm = decode_fpm(LIVE_WORKER, 200_000, 100, counter)
                publisher.publish(ForwardPassMetrics.model_validate(fpm))

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    assert bound.wait(30), "the engine did not bind"
    try:
        yield urls[0]
    finally:
        stop.set()
        thread.join(10)


class AnnouncedPasses(ZmqFpmSource):
    """The engines' source, noting when it has handed on forward passes from
    :data:`POLLS_FIRST` polls (``passes_out``)."""

    def __init__(self, url: str, passes_out: threading.Event) -> None:
        super().__init__({url: ("alpha", "decode")})
        self.passes_out = passes_out
        self.polls_with_passes = 0

    def build(
        self, step_id: str, worker_index: int, worker_count: int
    ) -> StatelessSourcePartition[ZmqItem]:
        partition = super().build(step_id, worker_index, worker_count)
        next_batch = partition.next_batch

        def announcing() -> list[ZmqItem]:
            items = next_batch()
            if any(not isinstance(item, DeadLetter) for item in items):
                self.polls_with_passes += 1
            if self.polls_with_passes >= POLLS_FIRST:
                self.passes_out.set()
            return items

        partition.next_batch = announcing  # type: ignore[method-assign]
        return partition


class OvertakenHistory(RecordedSource):
    """A recording that hands on its first batch, then waits (empty batches: the worker goes on
    with its other inputs) until ``passes_out`` says live passes went out, then goes on."""

    def __init__(self, path: Path, passes_out: threading.Event) -> None:
        super().__init__([path])
        self.passes_out = passes_out
        self.batches_after_passes = 0

    def build_part(
        self, step_id: str, for_part: str, resume_state: ResumeState | None
    ) -> StatefulSourcePartition[RawEvent | DeadLetter, ResumeState]:
        partition = super().build_part(step_id, for_part, resume_state)
        next_batch, handed = partition.next_batch, [0]

        def gated() -> list[RawEvent | DeadLetter]:
            if handed[0] and not self.passes_out.is_set():
                return []
            batch = next_batch()  # raises StopIteration at the end
            handed[0] += 1
            self.batches_after_passes += self.passes_out.is_set()
            return batch

        partition.next_batch = gated  # type: ignore[method-assign]
        return partition


def history(path: Path) -> Path:
    """The recording: a decode ramp of two engines, ending :data:`ENDS_AGO_S` ago."""
    start = time.time() - ENDS_AGO_S - HISTORY_S
    events = [e | {"time": e["time"] + start} for e in decode_ramp("alpha", 2, HISTORY_S)]
    return write_stream(path, events)


def _targets(decision: dict) -> tuple:
    keys = ("decision_id", "time", "num_prefill", "num_decode", "reason")
    return tuple(decision[key] for key in keys)


def saw_live_engine(record: TickRecord) -> bool:
    return any(engine.worker_id == LIVE_WORKER for engine in record.engines)


def test_a_history_read_beside_live_zmq_passes_is_not_made_late(
    tmp_path: Path, workers: int
) -> None:
    configs = {"alpha": PlannerConfig.model_validate(DECODE_CONFIG)}
    stream = history(tmp_path / "history.jsonl")
    decisions, history_ticks, history_dead = replay(configs, RecordedSource([stream]))
    assert decisions and history_dead == []  # the history alone decides, and nothing is late
    ticks: list[TickRecord] = []
    dead: list[DeadLetter] = []
    sinks = PlannerSinks(ticks=[TestingSink(ticks)], dead_letters=[TestingSink(dead)])
    passes_out = threading.Event()
    recording = OvertakenHistory(stream, passes_out)

    with live_engine() as url:
        engines = AnnouncedPasses(url, passes_out)
        flow = build_flow(configs, [recording, engines], sinks, live=True)

        def watch(finished: threading.Event) -> None:
            deadline = time.monotonic() + WAIT_S
            while not finished.wait(0.05) and time.monotonic() < deadline:
                if any(saw_live_engine(record) for record in ticks):
                    return

        run_until_interrupted(flow, watch, workers)

    assert recording.batches_after_passes >= 1  # the passes did go out before the history did
    assert [letter.reason for letter in dead] == []  # before the fix: the history, late
    # decides what the replay decides (the tick records may differ in where a state snapshot
    # lands: live, a snapshot's time is another host's clock and is placed by the live rule)
    last = history_ticks[-1]["time"]
    live = [r.decision.model_dump() for r in ticks if r.decision and r.time <= last]
    assert [_targets(d) for d in live] == [_targets(d) for d in decisions]
    assert any(saw_live_engine(record) for record in ticks), "no tick used the live passes"
