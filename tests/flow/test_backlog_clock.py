"""A live worker that reads a backlog decides what a replay of it decides, however long its
host stalls while reading it.

Live, the host clock moves event time on once the inputs have been quiet for five seconds. A
followed topic read back from its beginning (a restarted worker rebuilding its state) and a
recording joined with live inputs are not quiet while they are read, so a stall of the host
there must not move event time past their data. The stall is modelled deterministically: the
run's host clock (``build_flow(host_clock=...)``) jumps by an hour after a fixed number of
readings, which the test checks happened while the backlog was being read.
"""

from __future__ import annotations

import _thread
import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from bytewax.errors import BytewaxRuntimeError
from bytewax.inputs import Source
from bytewax.testing import TestingSink, run_main
from confluent_kafka import Producer

from connectors.backlog import BACKLOG
from connectors.kafka import ensure_topic
from connectors.kafka.source import KafkaEventSource
from connectors.recorded import RecordedSource
from flows.planner import PlannerSinks, build_flow
from schemas import DeadLetter, PlannerConfig, TickRecord
from tests.flow.streams import DECODE_CONFIG, decode_ramp, write_stream

SECONDS = 300.0
"""Of forward passes: 2 400 events, more than two of a source's batches."""

JUMP_AT_READING = 200
"""The host clock jumps at its 200th reading: well inside the first batch of the backlog."""


class JumpingClock:
    """The host clock of a worker that stalls for an hour once: it stands still (the run is
    fast), jumps at reading ``jump_at``, and notes whether an input was behind then."""

    def __init__(self, jump_at: int) -> None:
        self.start = datetime.now(UTC)
        self.jump_at = jump_at
        self.readings = 0
        self.jumped_while_behind: bool | None = None

    def __call__(self) -> datetime:
        self.readings += 1
        if self.readings == self.jump_at:
            self.jumped_while_behind = BACKLOG.is_behind
        stalled = timedelta(hours=1) if self.readings >= self.jump_at else timedelta(0)
        return self.start + stalled


def publish(bootstrap: str, topic: str, events: list[dict]) -> None:
    ensure_topic(bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for event in events:
        producer.produce(topic, key=event["deployment"], value=json.dumps(event).encode())
    assert producer.flush(30) == 0


def outcome(ticks: list[TickRecord], dead: list[DeadLetter]) -> tuple[list, list, list]:
    decisions = [r.decision.model_dump() for r in ticks if r.decision is not None]
    return decisions, [r.model_dump() for r in ticks], [d.reason for d in dead]


def replay(configs: dict[str, PlannerConfig], source: Source) -> tuple[list, list, list]:
    ticks: list[TickRecord] = []
    dead: list[DeadLetter] = []
    sinks = PlannerSinks(ticks=[TestingSink(ticks)], dead_letters=[TestingSink(dead)])
    run_main(build_flow(configs, [source], sinks))
    return outcome(ticks, dead)


def live_until(
    configs: dict[str, PlannerConfig], sources: list[Source], clock: JumpingClock, last_tick: float
) -> tuple[list, list, list]:
    """Run live until the tick at ``last_tick`` (or the dead letter of a last event) is out,
    then interrupt the worker (SIGINT, as ``flowplanner run``'s handler does on SIGTERM)."""
    ticks: list[TickRecord] = []
    dead: list[DeadLetter] = []
    sinks = PlannerSinks(ticks=[TestingSink(ticks)], dead_letters=[TestingSink(dead)])
    flow = build_flow(configs, sources, sinks, live=True, host_clock=clock)
    finished = threading.Event()

    def stop_when_done() -> None:
        def done() -> bool:
            return any(r.time >= last_tick for r in ticks) or any(
                f"event time {SECONDS}" in d.reason or f'"time":{SECONDS}' in (d.raw or "")
                for d in dead
            )

        while not finished.wait(0.05) and not done():
            pass
        if not finished.is_set():
            _thread.interrupt_main()

    watcher = threading.Thread(target=stop_when_done, daemon=True)
    watcher.start()
    try:
        run_main(flow)
    except (KeyboardInterrupt, BytewaxRuntimeError) as stopped:
        assert interrupted(stopped), stopped
    else:
        raise AssertionError("a live run ended by itself")
    finally:
        finished.set()
        watcher.join()
    return outcome(ticks, dead)


def interrupted(error: BaseException | None) -> bool:
    """``error`` is (or was caused by) the interrupt: bytewax wraps it in a runtime error."""
    while error is not None:
        if isinstance(error, KeyboardInterrupt):
            return True
        error = error.__cause__
    return False


@pytest.mark.services
@pytest.mark.parametrize("backlog", ["followed topic", "recording joined with a live input"])
def test_a_host_stall_in_the_backlog_changes_nothing(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic: str, backlog: str
) -> None:
    events = decode_ramp("alpha", engines=2, seconds=SECONDS)
    configs = {"alpha": PlannerConfig.model_validate(DECODE_CONFIG)}
    if backlog == "followed topic":
        publish(kafka_bootstrap, kafka_topic, events)
        expected = replay(configs, KafkaEventSource(kafka_bootstrap, kafka_topic, until_end=True))
        live_sources: list[Source] = [KafkaEventSource(kafka_bootstrap, kafka_topic)]
    else:
        stream = write_stream(tmp_path / "history.jsonl", events)
        expected = replay(configs, RecordedSource([stream]))
        ensure_topic(kafka_bootstrap, kafka_topic, partitions=1)  # live, and silent
        live_sources = [RecordedSource([stream]), KafkaEventSource(kafka_bootstrap, kafka_topic)]
    decisions, ticks, dead = expected
    assert decisions and dead == []  # the history decides something, and nothing is late
    clock = JumpingClock(JUMP_AT_READING)

    got = live_until(configs, live_sources, clock, last_tick=ticks[-1]["time"])

    assert got[2] == []  # without the backlog rule: every event after the stall is late
    assert got == expected
    assert clock.jumped_while_behind is True  # the stall did happen in the backlog
    assert not BACKLOG.is_behind  # the interrupted run left nothing behind in the registry
