"""A deployment's tick windows are its own: adding a deployment with shorter intervals to the
config changes none of its decisions, tick records or dead letters.

The windows were the gcd of every deployment's intervals: beside one with a 1 s load interval,
a 5 s deployment trained its perf models on up to 8 passes per engine per 1 s window (40 a
tick, its estimates moved), and an engine's 5 s forward-pass batch, arriving after another
engine's, found four of its five seconds in windows already closed: late. Each run here goes
through the real CLI, on 1 and 2 workers."""

from __future__ import annotations

import pytest

from tests.flow.runner import run_recorded, write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp, write_stream
from tests.flow.test_fpm_batch_bad_rows import batched

QUICK = {**DECODE_CONFIG, "load_adjustment_interval_seconds": 1}  # a 1 s tick window


@pytest.mark.parametrize("batches", [False, True])
def test_a_deployment_decides_the_same_beside_one_with_shorter_intervals(tmp_path, batches):
    events = decode_ramp("llama", engines=2, seconds=120)  # 4 passes a second, each engine
    if batches:  # a 5 s batch per window and engine
        events = batched(batched(events, "w0"), "w1")
    stream = write_stream(tmp_path / "s.jsonl", events)
    alone = run_recorded(
        write_config(tmp_path / "alone.yaml", {"llama": DECODE_CONFIG}), [stream], tmp_path / "a"
    )
    beside = run_recorded(
        write_config(tmp_path / "beside.yaml", {"llama": DECODE_CONFIG, "quick": QUICK}),
        [stream],
        tmp_path / "b",
    )
    assert alone["decisions"] and alone["dead"] == []
    assert beside["dead"] == []
    assert beside["decisions"] == alone["decisions"]
    assert beside["ticks"] == alone["ticks"]  # "quick" has no events: it never ticks
