"""A stop request (SIGTERM/SIGINT → :func:`connectors.stopping.stop_waiting`) spares the DGD
sink's ``close`` the wait for applies held by a hung API server, and reports each decision the
stop leaves unapplied; the end of a finite input still waits for every apply.

Nothing is timed: the test API server holds the apply's read of the DGD until the test lets it
go, so "close returned while the request was still held" is an ordering fact. A close that
waited would return only after the hold's safety bound released the request, and the test
fails on ``closed_while_held``.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import bytewax.operators as op
import pytest
from bytewax._bytewax import cli_main
from bytewax.dataflow import Dataflow
from bytewax.inputs import DynamicSource, StatelessSourcePartition
from prometheus_client import REGISTRY

from connectors.dgd import ApplyResult
from connectors.dgd_dataflow import DgdSink
from connectors.stopping import end_inputs, inputs_ended, stop_waiting
from flows.commands.run import StopRequest
from schemas import ScalingDecision
from tests.decisions import decision
from tests.kube.test_dgd_hang import SAFETY_S, Hold, factory, threads_named

from .conftest import DgdFixture

pytestmark = pytest.mark.services

DGD = "dynamo/vllm-disagg"


def stopped_count() -> float:
    labels = {"dgd": DGD, "outcome": "stopped"}
    return REGISTRY.get_sample_value("flowplanner_dgd_actions_total", labels) or 0.0


def stop_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "not applied: stopped" in r.getMessage()
    ]


@pytest.fixture
def hold(dgd: DgdFixture) -> Iterator[Hold]:
    """Holds the DGD's second GET (the first validates it: the second is the first apply's
    read); released at the end of the test whatever happened."""
    held = Hold(dgd, nth=2)
    dgd.server.before_request(held)
    yield held
    held.released.set()
    for thread in threads_named(f"dgd-apply-{DGD}"):
        thread.join(SAFETY_S)


def test_after_a_stop_close_does_not_wait_for_a_held_apply(
    dgd: DgdFixture, hold: Hold, caplog: pytest.LogCaptureFixture
):
    results: list[ApplyResult] = []
    partition = DgdSink(factory(dgd), on_result=results.append).build("dgd", 0, 1)
    partition.write_batch(
        [decision(decision_id=1, num_decode=2)]
    )  # in flight, held by the API server
    assert hold.holding.wait(SAFETY_S)
    partition.write_batch(
        [
            decision(decision_id=2, num_decode=3),
            decision(decision_id=3, num_decode=4, deployment="d"),
        ]
    )
    before = stopped_count()

    with caplog.at_level(logging.WARNING, logger="connectors.dgd_dataflow"):
        stop_waiting()
        partition.close()
        closed_while_held = not hold.released.is_set()

    assert closed_while_held, "close() waited for the held apply after a stop request"
    assert stop_warnings(caplog) == [
        f"DGD {DGD} decision llama/1: not applied: stopped (its apply was in flight and is "
        "abandoned)",
        f"DGD {DGD} decision d/3: not applied: stopped (its apply had not started)",
        f"DGD {DGD} decision llama/2: not applied: stopped (its apply had not started)",
    ]
    assert stopped_count() == before + 3
    hold.release()
    [applier] = threads_named(f"dgd-apply-{DGD}")
    applier.join(SAFETY_S)
    assert not applier.is_alive()
    # The abandoned apply finished after the stop: it is not reported as well, and the queued
    # decisions were never sent (only decision 1's patch reached the DGD).
    assert results == []
    replicas = [p.body["spec"]["services"]["VllmDecodeWorker"]["replicas"] for p in dgd.patches()]
    assert replicas == [2]


def test_a_stop_ends_the_wait_of_a_sink_closing_at_the_end_of_its_input(
    dgd: DgdFixture, hold: Hold, caplog: pytest.LogCaptureFixture
):
    partition = DgdSink(factory(dgd)).build("dgd", 0, 1)
    partition.write_batch([decision(decision_id=1, num_decode=2)])
    assert hold.holding.wait(SAFETY_S)
    closing = threading.Event()
    closed = threading.Event()

    def close() -> None:
        closing.set()
        partition.close()  # the end of the input: waits for the held apply ...
        closed.set()

    with caplog.at_level(logging.WARNING, logger="connectors.dgd_dataflow"):
        closer = threading.Thread(target=close)
        closer.start()
        assert closing.wait(SAFETY_S)
        stop_waiting()  # ... until a stop is requested
        closer.join(SAFETY_S)
        closed_while_held = closed.is_set() and not hold.released.is_set()

    assert closed_while_held, "a stop request did not end close()'s wait for the held apply"
    assert stop_warnings(caplog) == [
        f"DGD {DGD} decision llama/1: not applied: stopped (its apply was in flight and is "
        "abandoned)"
    ]


def test_the_end_of_the_input_still_waits_for_every_apply(dgd: DgdFixture, hold: Hold):
    results: list[ApplyResult] = []
    partition = DgdSink(factory(dgd), on_result=results.append).build("dgd", 0, 1)
    before = stopped_count()
    partition.write_batch([decision(decision_id=1, num_decode=2)])  # held ...
    assert hold.holding.wait(SAFETY_S)
    partition.write_batch(
        [decision(decision_id=3, num_prefill=2, deployment="d")]
    )  # ... and one queued
    threading.Thread(target=hold.release).start()  # while (or before) close() waits

    partition.close()

    # Both applies ended before close returned: neither was dropped at the end of the input.
    assert sorted(r.decision_id for r in results) == [1, 3]
    assert "stopped" not in {r.outcome for r in results}
    assert stopped_count() == before


class _TwoDecisions(StatelessSourcePartition[ScalingDecision]):
    def __init__(self) -> None:
        self.sent = False

    def next_batch(self) -> list[ScalingDecision]:
        if inputs_ended():  # as every input of ours: the stop ends it
            raise StopIteration
        if self.sent:
            return []  # never ends by itself: only the stop ends the run
        self.sent = True
        return [
            decision(decision_id=1, num_decode=2),
            decision(decision_id=2, num_decode=3, deployment="d"),
        ]

    def next_awake(self) -> datetime:
        return datetime.now(UTC) + timedelta(milliseconds=20)


class TwoDecisions(DynamicSource[ScalingDecision]):
    def build(self, step_id: str, worker_index: int, worker_count: int) -> _TwoDecisions:
        return _TwoDecisions()


def test_a_signal_stop_of_a_running_dataflow_does_not_wait_for_a_held_apply(
    dgd: DgdFixture, hold: Hold, caplog: pytest.LogCaptureFixture
):
    """The real runtime: bytewax closes the sink as the dataflow finishes on a SIGTERM, caught
    by ``flowplanner run``'s own handler (which stops the waits and ends the inputs)."""
    results: list[ApplyResult] = []
    flow = Dataflow("dgd_stop")
    sink = DgdSink(factory(dgd), on_result=results.append)
    op.output("dgd", op.input("decisions", flow, TwoDecisions()), sink)

    def terminate_once_held() -> None:
        if hold.holding.wait(SAFETY_S):
            os.kill(os.getpid(), signal.SIGTERM)

    stop = StopRequest()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGALRM)}
    try:
        threading.Thread(target=terminate_once_held, daemon=True).start()
        with caplog.at_level(logging.WARNING, logger="connectors.dgd_dataflow"):
            cli_main(flow, workers_per_process=1)  # finishes: its input ended
            stopped_while_held = not hold.released.is_set()
    finally:
        signal.alarm(0)
        end_inputs(False)
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    assert stopped_while_held, "the stop waited for the held apply"
    assert stop_warnings(caplog) == [
        f"DGD {DGD} decision llama/1: not applied: stopped (its apply was in flight and is "
        "abandoned)",
        f"DGD {DGD} decision d/2: not applied: stopped (its apply had not started)",
    ]
    assert results == []
