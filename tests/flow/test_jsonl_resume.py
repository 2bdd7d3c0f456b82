"""A resumable JSON-lines file output under bytewax recovery: a run resumed from a snapshot
keeps the lines written up to it (the sink emptied the file whenever it was made, and bytewax's
file sink then seeked to the snapshot's offset: the file began with that many NUL bytes)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.errors import BytewaxRuntimeError
from bytewax.recovery import RecoveryConfig, init_db_dir
from bytewax.testing import TestingSource, run_main

from connectors.console import JsonlFileSink
from schemas import ClockEvent


def clock_flow(path: Path, crash_at: float | None) -> Dataflow:
    flow = Dataflow("jsonl_resume")
    events = [("d", ClockEvent(deployment="d", time=t)) for t in range(6)]

    def crash(item: tuple[str, ClockEvent]) -> tuple[str, ClockEvent]:
        if item[1].time == crash_at:
            raise RuntimeError("the worker dies here")
        return item

    source = op.input("in", flow, TestingSource(events, batch_size=1))
    op.output("out", op.map("crash", source, crash), JsonlFileSink(path, resumable=True))
    return flow


def test_a_resumed_run_keeps_the_lines_written_before_its_snapshot(tmp_path: Path) -> None:
    recovery, path = tmp_path / "recovery", tmp_path / "ticks.jsonl"
    recovery.mkdir()
    init_db_dir(recovery, 1)
    every_item = {"epoch_interval": timedelta(0), "recovery_config": RecoveryConfig(str(recovery))}
    with pytest.raises(BytewaxRuntimeError):
        run_main(clock_flow(path, crash_at=4.0), **every_item)
    assert len(path.read_text().splitlines()) == 4
    run_main(clock_flow(path, crash_at=None), **every_item)
    lines = path.read_text().splitlines()
    assert [ClockEvent.model_validate_json(line).time for line in lines] == [0, 1, 2, 3, 4, 5]
    # a fresh run (no snapshot) starts the file anew
    run_main(clock_flow(path, crash_at=None))
    assert len(path.read_text().splitlines()) == 6
