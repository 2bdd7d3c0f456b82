"""Run a ZmqFpmSource inside a real bytewax dataflow (in a thread, so a hang fails the test)."""

from __future__ import annotations

import threading

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink

from connectors.zmq_source import ZmqFpmSource, ZmqItem
from schemas import FpmBatchEvent
from tests.flow.cluster import run_flow
from tests.zmq.publisher_process import PublisherProcess

RUN_TIMEOUT_S = 120.0
"""For the publisher process to start (spawned: it imports afresh) and the run to end, even on a
loaded machine; a passing run ends as soon as the source has its messages."""


def messages_in(item: ZmqItem) -> int:
    """How many ZMQ messages one source item stands for."""
    return len(item.payload.rows) if isinstance(item, FpmBatchEvent) else 1


def run_source(source: ZmqFpmSource, publisher: PublisherProcess, *, workers: int) -> list[ZmqItem]:
    """Run ``input → count → sink`` until the source ends; returns every item it yielded."""
    out: list[ZmqItem] = []
    flow = Dataflow("zmq_source_test")
    stream = op.input("zmq", flow, source)
    stream = op.inspect("count", stream, lambda _step, item: publisher.count(messages_in(item)))
    op.output("out", stream, TestingSink(out))
    errors: list[BaseException] = []

    def target() -> None:
        try:
            run_flow(flow, workers)
        except BaseException as exc:  # surfaced in the test thread below
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    if not publisher.urls:  # started by the test to learn its URLs, or now
        publisher.start()
    thread.start()
    thread.join(RUN_TIMEOUT_S)
    exitcode = publisher.join()
    assert not thread.is_alive(), f"dataflow did not finish; received {len(out)} items"
    if errors:
        raise errors[0]
    assert exitcode == 0, f"publisher process failed with exit code {exitcode}"
    return out
