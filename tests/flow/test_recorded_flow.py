"""A recorded stream through the real bytewax runtime: decisions, determinism, -w 2 (every
:func:`run_recorded` also runs the stream as a 2-worker cluster and compares)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.flow.cluster import worker_of
from tests.flow.runner import flowplanner, run_recorded, write_config
from tests.flow.streams import (
    DECODE_CONFIG,
    decode_ramp,
    decode_wall_s,
    merge_streams,
    write_stream,
)

ITL_SLA_MS = DECODE_CONFIG["itl_ms"]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def true_itl_ms(kv: int, n: int) -> float:
    return 1000 * decode_wall_s(kv, n)


@pytest.fixture(scope="module")
def two_deployments(tmp_path_factory):
    root = tmp_path_factory.mktemp("recorded")
    stream = merge_streams(
        decode_ramp("alpha", engines=2, seconds=120), decode_ramp("llama", engines=3, seconds=120)
    )
    config = write_config(root / "planner.yaml", {"alpha": DECODE_CONFIG, "llama": DECODE_CONFIG})
    return root, config, write_stream(root / "stream.jsonl", stream), stream


def run_flow(root, config, stream, tag: str):
    """A recorded run; :func:`run_recorded` also checks that 2 workers write the same."""
    done = run_recorded(config, [stream], root / tag)
    return done["decisions"], done["ticks"], done["dead"]


def test_recorded_stream_yields_decisions_that_follow_the_load(two_deployments):
    root, config, stream_path, stream = two_deployments
    decisions, ticks, dead = run_flow(root, config, stream_path, "w1")
    assert dead == []
    for name, engines in (("alpha", 2), ("llama", 3)):
        mine = [t for t in ticks if t["deployment"] == name]
        # one tick per 5 s window of event time, the load loop running every time
        assert [t["time"] for t in mine] == [5.0 * k for k in range(1, 25)]
        assert all(t["ran_load"] for t in mine)
        # GPU-hours count what the workers report: one GPU per decode replica, no prefill role
        assert {(t["gpus_per_prefill"], t["gpus_per_decode"]) for t in mine} == {(None, 1)}
        own = [d for d in decisions if d["deployment"] == name]
        assert [d["decision_id"] for d in own] == list(range(1, len(own) + 1))
        assert own, "a ramp across the SLA must produce decisions"
        passes: dict[float, list[dict]] = {}
        for event in stream:
            if event["deployment"] == name and event["type"] == "fpm":
                passes.setdefault(event["time"], []).append(event["payload"]["fpm"])
        for d in own:
            # the newest passes before the tick (windows are [start, end) in event time)
            newest = passes[max(t for t in passes if t < d["time"])]
            itl = min(
                true_itl_ms(
                    fpm["scheduled_requests"]["sum_decode_kv_tokens"],
                    fpm["scheduled_requests"]["num_decode_requests"],
                )
                for fpm in newest
            )
            assert d["current_decode"] == engines and d["source"] == "load"
            if d["reason"] == "scale_up":
                assert d["num_decode"] == engines + 1
                assert itl > 0.8 * ITL_SLA_MS  # only near or above the target
                assert d["diagnostics"]["estimated_itl_ms"] > ITL_SLA_MS
            else:
                assert d["reason"] == "scale_down" and d["num_decode"] == engines - 1
                assert itl < ITL_SLA_MS
        # at the top of the ramp every engine is well past the target: the planner scales up
        assert own[-1]["reason"] == "scale_up" and own[-1]["time"] == 120.0
        # at the bottom the survivors would still meet the target, but one tick is no window of
        # agreement (the first tick starts it): the planner holds, and the ramp soon refuses it
        assert mine[0]["diagnostics"]["load_decision_reason"] == "scale_down_stabilizing"
        assert {d["reason"] for d in own} == {"scale_up"}


def test_replay_is_bit_for_bit_repeatable(two_deployments):
    root, config, stream_path, _ = two_deployments
    first = (root / "r1.jsonl", root / "r2.jsonl")
    for path in first:
        done = flowplanner(
            "run", "--config", str(config), "--input", str(stream_path), "--output", str(path)
        )
        assert done.returncode == 0, done.stderr
    assert first[0].read_bytes() == first[1].read_bytes()


def test_the_shipped_example_prints_decisions_with_reasons():
    done = flowplanner(
        "run", "--config", "examples/decode.yaml", "--input", "examples/decode_burst.jsonl"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "t=75.0s llama #1 prefill - decode 2->3 load:scale_up (decode scale_up)"
    ]
    assert "964 events in, 0 dead-lettered, 1 decisions" in done.stderr


def test_a_late_inventory_snapshot_applies_from_the_next_tick(tmp_path):
    events = decode_ramp("alpha", engines=2, seconds=30)
    late = {
        "type": "inventory",
        "deployment": "alpha",
        "time": 1.0,  # written at t=1, read late
        "payload": {"ready_num_decode": 3, "expected_num_decode": 3},
    }
    at = next(i for i, e in enumerate(events) if e["time"] > 17.0)
    events.insert(at, late)
    config = write_config(tmp_path / "c.yaml", {"alpha": DECODE_CONFIG})
    stream = write_stream(tmp_path / "s.jsonl", events)
    done = run_recorded(config, [stream], tmp_path / "out")
    assert done["dead"] == []  # a state snapshot is never dropped as late
    ready = {t["time"]: t["ready_decode"] for t in done["ticks"]}
    assert ready[15.0] == 2 and ready[20.0] == 3 and ready[25.0] == 3


def test_file_outputs_hold_one_run_even_one_that_writes_nothing(tmp_path):
    quiet = tmp_path / "quiet.jsonl"  # capabilities, inventory, a few passes: no decision
    lines = (EXAMPLES / "decode_burst.jsonl").read_text().splitlines(keepends=True)
    quiet.write_text("".join(lines[:10]))
    outputs = {name: tmp_path / f"{name}.jsonl" for name in ("decisions", "ticks", "dead")}
    for path in outputs.values():
        path.write_text('{"from": "an earlier run"}\n')
    done = flowplanner(
        "run",
        *("--config", str(EXAMPLES / "decode.yaml"), "--input", str(quiet)),
        *("--output", str(outputs["decisions"])),
        *("--ticks", str(outputs["ticks"]), "--dead-letters", str(outputs["dead"])),
    )
    assert done.returncode == 0, done.stderr
    assert "0 decisions" in done.stderr
    assert all(path.read_text() == "" for path in outputs.values())


def test_a_dash_writes_ticks_and_dead_letters_to_stdout(tmp_path):
    # as --output -: the two made a file named "-" in the working directory
    recording = tmp_path / "s.jsonl"
    burst = (EXAMPLES / "decode_burst.jsonl").read_text()
    recording.write_text(burst + "not json\n")
    command = ["run", "--config", str(EXAMPLES / "decode.yaml"), "--input", str(recording)]
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", *command, "--ticks", "-", "--dead-letters", "-"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(EXAMPLES.parent)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "-").exists()
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert any("ran_load" in r for r in records)  # tick records
    dead = len(burst.splitlines()) + 1
    assert [r["position"] for r in records if "reason" in r] == [dead]  # the dead letter


def test_the_test_deployments_cross_workers() -> None:
    # What makes the 2-worker runs of these tests worth running: their deployments' state
    # lives on different workers (bytewax hashes the key), so inputs cross between workers.
    placement = worker_of(["alpha", "beta", "llama", "d"], workers=2)
    assert placement["alpha"] == placement["beta"]
    assert placement["llama"] == placement["d"] != placement["alpha"]
