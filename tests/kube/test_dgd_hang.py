"""A hanging API server must not freeze the dataflow: while a DGD read or apply is held by the
test API server, another input of the same dataflow keeps flowing to the output.

Nothing here is timed: the server holds the DGD request until the dataflow's output has grown
by :data:`ENOUGH` items written while it was held, and only then lets it go. A dataflow that
blocked on the request would never write them; the hold then ends by a safety bound and the
test fails on ``released_by_flow``.

These run on one worker only: they check that a held DGD request does not block the one worker
thread that also carries the other input. With a second worker the other input could flow on
that worker whatever the connectors do, so the test could no longer fail.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.inputs import DynamicSource, StatelessSourcePartition
from bytewax.outputs import DynamicSink, StatelessSinkPartition

from connectors.dgd import ApplyResult, DgdActuator
from connectors.dgd_api import kube_api_client
from connectors.dgd_dataflow import DgdInventorySource, DgdSink
from schemas import InventoryEvent
from tests.decisions import decision
from tests.flow.cluster import run_flow

from .conftest import DgdFixture

pytestmark = pytest.mark.services

ENOUGH = 5
"""Items of the other input that must reach the output while the DGD request is held."""
SAFETY_S = 30.0
"""Longest a request is held if the dataflow never releases it (a failing test ends)."""


class Hold:
    """A ``before_request`` hook: holds the ``nth`` GET of the DGD until :meth:`release`."""

    def __init__(self, dgd: DgdFixture, nth: int) -> None:
        self.path = dgd.path
        self.nth = nth
        self.gets = itertools.count(1)
        self.holding = threading.Event()
        self.released = threading.Event()
        self.released_by_flow = False

    def __call__(self, method: str, path: str) -> None:
        if method == "GET" and path == self.path and next(self.gets) == self.nth:
            self.holding.set()
            self.released.wait(SAFETY_S)
            self.released.set()  # by the safety bound, if nobody did

    def release(self) -> None:
        self.released_by_flow = not self.released.is_set()
        self.released.set()


class _Ticks(StatelessSourcePartition[int]):
    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.count = itertools.count(1)

    def next_batch(self) -> list[int]:
        if self.stop.is_set():
            raise StopIteration
        return [next(self.count)]

    def next_awake(self) -> datetime:
        return datetime.now(UTC) + timedelta(milliseconds=5)


class Ticks(DynamicSource[int]):
    """1, 2, 3, ... until ``stop`` is set."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _Ticks:
        return _Ticks(self.stop)


class _Watch(StatelessSinkPartition[Any]):
    def __init__(self, sink: Watch) -> None:
        self.sink = sink

    def write_batch(self, items: list[Any]) -> None:
        hold = self.sink.hold
        for item in items:
            self.sink.items.append(item)
            if isinstance(item, int) and hold.holding.is_set() and not hold.released.is_set():
                self.sink.during_hold.append(item)
        if len(self.sink.during_hold) >= ENOUGH and not hold.released.is_set():
            hold.release()


class Watch(DynamicSink[Any]):
    """Collects the output; releases ``hold`` once :data:`ENOUGH` ticks were written during it."""

    def __init__(self, hold: Hold) -> None:
        self.hold = hold
        self.items: list[Any] = []
        self.during_hold: list[int] = []

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _Watch:
        return _Watch(self)


def factory(dgd: DgdFixture) -> Callable[[], DgdActuator]:
    # The client would give up after the safety bound only: the hold is ended by the flow.
    return lambda: DgdActuator(
        kube_api_client(dgd.server.url),
        dgd.namespace,
        dgd.name,
        sleep=lambda s: None,
        request_timeout_s=2 * SAFETY_S,
    )


def threads_named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_a_hanging_inventory_poll_does_not_stop_the_other_input(dgd: DgdFixture):
    hold = Hold(dgd, nth=2)  # GET 1 validates the DGD, GET 2 is the poll
    dgd.server.before_request(hold)
    flow = Dataflow("dgd_poll_hangs")
    source = DgdInventorySource(
        factory(dgd), "llama", timedelta(milliseconds=1), clock=lambda: 100.0, max_polls=1
    )
    inventory = op.input("inventory", flow, source)
    ticks = op.input("ticks", flow, Ticks(hold.released))
    watch = Watch(hold)
    op.output("out", op.merge("both", inventory, ticks), watch)

    run_flow(flow, workers=1)

    assert hold.released_by_flow, "the dataflow stopped while the DGD poll hung"
    assert len(watch.during_hold) >= ENOUGH
    [event] = [e for e in watch.items if isinstance(e, InventoryEvent)]
    assert (event.deployment, event.time, event.payload.ready_num_decode) == ("llama", 100.0, 1)
    assert watch.items.index(event) > watch.items.index(watch.during_hold[-1])
    for thread in threads_named("dgd-inventory-llama"):  # closed with the dataflow
        thread.join(SAFETY_S)
        assert not thread.is_alive()


def test_a_hanging_apply_does_not_stop_the_other_input(dgd: DgdFixture):
    hold = Hold(dgd, nth=2)  # GET 1 validates the DGD, GET 2 is the apply's read
    dgd.server.before_request(hold)
    results: list[ApplyResult] = []
    flow = Dataflow("dgd_apply_hangs")
    # One input feeds both outputs (so the sink's input lasts as long as the ticks): tick 1
    # becomes a decision for the DGD, every tick goes to the watched output.
    ticks = op.input("ticks", flow, Ticks(hold.released))
    decisions = op.filter_map(
        "decide", ticks, lambda n: decision(decision_id=1, num_decode=2) if n == 1 else None
    )
    op.output("dgd", decisions, DgdSink(factory(dgd), on_result=results.append))
    watch = Watch(hold)
    op.output("out", ticks, watch)

    run_flow(flow, workers=1)

    assert hold.released_by_flow, "the dataflow stopped while the DGD apply hung"
    assert len(watch.during_hold) >= ENOUGH
    assert [(r.decision_id, r.outcome) for r in results] == [(1, "applied")]
    assert dgd.get()["spec"]["services"]["VllmDecodeWorker"]["replicas"] == 2


def test_a_decision_waiting_on_a_hanging_apply_gives_way_to_a_newer_one(dgd: DgdFixture):
    hold = Hold(dgd, nth=2)  # GET 1 validates the DGD, GET 2 is the read of decision 1
    dgd.server.before_request(hold)
    results: list[ApplyResult] = []

    def report(result: ApplyResult) -> None:
        results.append(result)
        if result.decision_id == 1:
            dgd.operator.converge()  # the rollout ends, so decision 3 may follow

    partition = DgdSink(factory(dgd), on_result=report).build("dgd", 0, 1)
    partition.write_batch([decision(decision_id=1, num_decode=2)])
    hold.holding.wait(SAFETY_S)
    partition.write_batch([decision(decision_id=2, num_decode=5)])  # waits behind decision 1 ...
    partition.write_batch([decision(decision_id=4, num_decode=3)])  # ... and gives way to this one
    partition.write_batch([decision(decision_id=3, num_decode=7)])  # older than the one waiting
    hold.release()
    partition.close()

    assert [(r.decision_id, r.outcome, r.reason) for r in results] == [
        (2, "superseded", "decision 4 arrived before it was applied"),
        (3, "superseded", "decision 4 arrived before it was applied"),
        (1, "applied", "VllmDecodeWorker 1 → 2"),
        (4, "applied", "VllmDecodeWorker 2 → 3"),
    ]
    replicas = [p.body["spec"]["services"]["VllmDecodeWorker"]["replicas"] for p in dgd.patches()]
    assert replicas == [2, 3]


def test_an_error_on_the_applier_thread_reaches_the_dataflow(dgd: DgdFixture):
    def report(result: ApplyResult) -> None:
        raise RuntimeError(f"on_result failed on decision {result.decision_id}")

    partition = DgdSink(factory(dgd), on_result=report).build("dgd", 0, 1)
    partition.write_batch([decision(decision_id=1, num_decode=2)])
    with pytest.raises(RuntimeError, match="on_result failed on decision 1"):
        partition.close()
