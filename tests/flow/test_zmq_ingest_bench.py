"""bench.zmq_ingest: every FPM it sends reaches the planner, and a run that loses any is INVALID.

Real pieces: a publisher process on a ZMQ socket, ZmqFpmSource, the planner flow in a real
bytewax run. No timing is asserted (the rates are the bench's output, not a test's): only that
the measured run does the work the bench claims it measures.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from bytewax.dataflow import Dataflow
from bytewax.inputs import DynamicSource, Source, StatelessSourcePartition

from bench.zmq_ingest import (
    EVENT_START,
    BenchItem,
    Fleet,
    FlowOutputs,
    main,
    measure_flow,
    planner_flow,
)
from schemas import ClockEvent

ENGINES = 3
MESSAGES = 6000
"""3 engines x 100 passes a second: 20 s of event time, four 5 s tick windows."""


def test_every_fpm_sent_reaches_the_planner() -> None:
    run = measure_flow(MESSAGES, ENGINES, planner_flow, batch_size=500)

    assert run.problems() == []
    assert run.delivered == MESSAGES  # the source handed the flow every FPM
    assert run.outputs.dead_letters == []  # no duplicate, late or refused FPM
    # the planner ticked on each window, the last one (the FPMs' end) included
    assert [t.time - EVENT_START for t in run.outputs.ticks] == [5.0, 10.0, 15.0, 20.0]
    workers = set(Fleet(ENGINES).worker_ids)
    for tick in run.outputs.ticks:
        assert {engine.worker_id for engine in tick.engines} == workers, tick.time
        assert tick.ready_decode == ENGINES  # the inventory reached it
        assert tick.ran_load and tick.diagnostics.estimated_itl_ms is not None, tick
        assert 8.0 < tick.diagnostics.estimated_itl_ms < 12.0  # the passes cost 8.5-10 ms
        assert tick.decision is None  # a fleet sized right: the planner holds


class _WithoutClocks(DynamicSource[BenchItem]):
    """The bench's source with its clock events dropped."""

    def __init__(self, inner: Source[BenchItem]) -> None:
        assert isinstance(inner, DynamicSource)
        self.inner = inner

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _WithoutClocksPart:
        return _WithoutClocksPart(self.inner.build(step_id, worker_index, worker_count))


class _WithoutClocksPart(StatelessSourcePartition[BenchItem]):
    def __init__(self, inner: StatelessSourcePartition[BenchItem]) -> None:
        self.inner = inner

    def next_batch(self) -> list[BenchItem]:
        return [item for item in self.inner.next_batch() if not isinstance(item, ClockEvent)]

    def next_awake(self) -> datetime | None:
        return self.inner.next_awake()

    def close(self) -> None:
        self.inner.close()


def planner_missing_last_tick(source: Source[BenchItem], outputs: FlowOutputs) -> Dataflow:
    """The planner flow, but event time never passes the last FPM's window (as in the old bench,
    whose last window was still open when the run ended)."""
    return planner_flow(_WithoutClocks(source), outputs)


def test_a_run_whose_planner_misses_fpms_is_invalid(capsys: pytest.CaptureFixture[str]) -> None:
    flow = f"{__name__}:planner_missing_last_tick"
    args = ["--messages", "3000", "--engines", "3", "--batch-size", "500", "--repeat", "1"]
    code = main([*args, "--flow", flow])  # 10 s of event time: two windows

    out = capsys.readouterr().out
    assert code == 1, out
    assert "INVALID: flow run 1: the planner ticked on 1 of the 2 windows holding FPMs" in out
