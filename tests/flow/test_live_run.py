"""The in-process live-run helper stops its run even when its interrupts are lost: it then
ends the inputs, as ``flowplanner run`` does on SIGTERM."""

from __future__ import annotations

import signal
import threading
from datetime import UTC, datetime, timedelta
from types import FrameType

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.inputs import DynamicSource, StatelessSourcePartition
from bytewax.testing import TestingSink

from connectors.stopping import inputs_ended
from tests.flow.live_run import run_until_interrupted


class _Ticking(StatelessSourcePartition[int]):
    """A live partition: one item every 10 ms, for ever."""

    def next_batch(self) -> list[int]:
        if inputs_ended():
            raise StopIteration
        return [1]

    def next_awake(self) -> datetime:
        return datetime.now(UTC) + timedelta(milliseconds=10)


class _Live(DynamicSource[int]):
    def build(self, step_id: str, worker_index: int, worker_count: int) -> _Ticking:
        return _Ticking()


def test_a_run_whose_interrupts_are_lost_is_stopped_by_ending_its_inputs():
    swallowed: list[int] = []

    def swallow(signum: int, frame: FrameType | None) -> None:
        swallowed.append(signum)

    out: list[int] = []
    flow = Dataflow("swallowing")
    op.output("out", op.input("in", flow, _Live()), TestingSink(out))

    def watch(finished: threading.Event) -> None:
        while not out:
            finished.wait(0.01)

    previous = signal.signal(signal.SIGINT, swallow)
    try:
        run_until_interrupted(flow, watch)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert swallowed and set(swallowed) == {signal.SIGINT} and out
    assert not inputs_ended()  # the next run reads on
