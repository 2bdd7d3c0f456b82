"""Run the planner flow live in this process, on an injected host clock, and compare it with a
replay (the in-process backlog and partition tests share these).

A live run never ends by itself: :func:`live_until` interrupts it (SIGINT, as ``flowplanner
run``'s handler does on SIGTERM) once the tick a replay ended with — or the dead letter of the
stream's last event — is out. Its host clock (:class:`HostClock`) stands still, so the
idle rule never closes the window a replay leaves open, and may jump once (a stall).
"""

from __future__ import annotations

import _thread
import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from bytewax.dataflow import Dataflow
from bytewax.errors import BytewaxRuntimeError
from bytewax.inputs import Source
from bytewax.testing import TestingSink, run_main
from confluent_kafka import Producer

from connectors.backlog import BACKLOG
from connectors.kafka import ensure_topic
from connectors.stopping import end_inputs, inputs_ended
from flows.planner import PlannerSinks, build_flow
from schemas import DeadLetter, PlannerConfig, TickRecord
from tests.flow.cluster import run_flow

INTERRUPT_AGAIN_S = 5.0
"""An interrupt the run has not stopped on within this long is sent again, and the inputs are
told to end (:func:`connectors.stopping.end_inputs`, the stop ``flowplanner run`` makes on
SIGTERM: each input ends at its next read). Full-suite runs of fresh clones hung in
tests/flow/test_backlog_clock.py: the interrupt was sent, the Kafka reader went on being
polled on the main thread, and no ``KeyboardInterrupt`` ever ended the run, not even one sent
every 5 s; where it is lost is not known. A run ended so finishes as a stopped worker does."""

Outcome = tuple[list[dict], list[dict], list[str]]
"""A run's decisions, tick records and dead-letter reasons."""


class HostClock:
    """A host clock that stands still and, given ``jump_at``, jumps an hour at that reading
    (a worker that stalls once), noting whether an input was behind then."""

    def __init__(self, jump_at: int | None = None) -> None:
        self.start = datetime.now(UTC)
        self.jump_at = jump_at
        self.readings = 0
        self.jumped_while_behind: bool | None = None

    def __call__(self) -> datetime:
        self.readings += 1
        if self.readings == self.jump_at:
            self.jumped_while_behind = BACKLOG.is_behind
        jumped = self.jump_at is not None and self.readings >= self.jump_at
        return self.start + (timedelta(hours=1) if jumped else timedelta(0))


def publish(
    bootstrap: str, topic: str, events: list[dict], partition_of: list[int] | None = None
) -> None:
    """``events`` into a new topic, in order; event ``i`` to partition ``partition_of[i]``."""
    ensure_topic(bootstrap, topic, partitions=1 + max(partition_of or [0]))
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, event in enumerate(events):
        value = json.dumps(event).encode()
        if partition_of is None:
            producer.produce(topic, key=event["deployment"], value=value)
        else:
            producer.produce(topic, value=value, partition=partition_of[i])
    assert producer.flush(30) == 0


def outcome(ticks: list[TickRecord], dead: list[DeadLetter]) -> Outcome:
    decisions = [r.decision.model_dump() for r in ticks if r.decision is not None]
    return decisions, [r.model_dump() for r in ticks], [d.reason for d in dead]


def replay(configs: dict[str, PlannerConfig], source: Source) -> Outcome:
    ticks: list[TickRecord] = []
    dead: list[DeadLetter] = []
    sinks = PlannerSinks(ticks=[TestingSink(ticks)], dead_letters=[TestingSink(dead)])
    run_main(build_flow(configs, [source], sinks))
    return outcome(ticks, dead)


def live_until(
    configs: dict[str, PlannerConfig],
    sources: list[Source],
    clock: HostClock,
    last_tick: float,
    last_event: float,
) -> Outcome:
    """Run live until the tick at ``last_tick`` or the dead letter of an event at
    ``last_event`` is out, then interrupt the worker."""
    ticks: list[TickRecord] = []
    dead: list[DeadLetter] = []
    sinks = PlannerSinks(ticks=[TestingSink(ticks)], dead_letters=[TestingSink(dead)])
    flow = build_flow(configs, sources, sinks, live=True, host_clock=clock)

    def done() -> bool:
        return any(r.time >= last_tick for r in ticks) or any(
            f"event time {last_event}" in d.reason or f'"time":{last_event}' in (d.raw or "")
            for d in dead
        )

    def watch(finished: threading.Event) -> None:
        while not finished.wait(0.05) and not done():
            pass

    run_until_interrupted(flow, watch)
    return outcome(ticks, dead)


def run_until_interrupted(
    flow: Dataflow, watch: Callable[[threading.Event], None], workers: int = 1
) -> None:
    """Run live ``flow`` on ``workers`` while ``watch(finished)`` runs on a thread beside it;
    once ``watch`` returns, the worker is interrupted (``finished`` is set when the run has
    stopped). A live run that ends by itself fails."""
    finished = threading.Event()

    def beside() -> None:
        try:
            watch(finished)
        finally:
            while not finished.is_set():  # until the run stops: see INTERRUPT_AGAIN_S
                _thread.interrupt_main()
                if finished.wait(INTERRUPT_AGAIN_S):
                    break
                end_inputs()

    watcher = threading.Thread(target=beside, daemon=True)
    watcher.start()
    try:
        run_flow(flow, workers)
    except (KeyboardInterrupt, BytewaxRuntimeError) as stopped:
        finished.set()
        assert interrupted(stopped), stopped
    else:
        finished.set()
        assert inputs_ended(), "a live run ended by itself"
    finally:
        finished.set()
        watcher.join()
        end_inputs(False)


def interrupted(error: BaseException | None) -> bool:
    """``error`` is (or was caused by) the interrupt: bytewax wraps it in a runtime error."""
    while error is not None:
        if isinstance(error, KeyboardInterrupt):
            return True
        error = error.__cause__
    return False
