"""bench.scale: its step-by-step harness ticks as the real flow does, and its report is whole.

No timing is asserted (performance is the bench's output, not a test's): only that the harness
measures the same work as the dataflow and that every table has its rows.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.scale import Scale, fleet_config, fleet_lines, run_flow, run_steps
from schemas import RawEvent, parse_event

ROOT = Path(__file__).resolve().parents[2]


def test_steps_harness_runs_the_ticks_the_flow_runs() -> None:
    scale = Scale(deployments=2, engines=3, seconds=130)
    lines = fleet_lines(scale, fpm_hz=4, req_hz=5)
    raws = [RawEvent("bench", i, line) for i, line in enumerate(lines)]
    configs = {f"dep{d}": fleet_config(60.0) for d in range(scale.deployments)}

    flow = run_flow(raws, configs)
    steps = run_steps(raws, configs, chunk=97)  # chunks that split windows and deployments

    assert flow.events == steps.events == len(lines)
    # every 5 s window with events closes once per deployment (the last stays open), and the
    # throughput loop runs at 60 and 120 s of each deployment
    assert flow.ticks == len(steps.load_ticks) + len(steps.throughput_ticks) == 2 * 26
    assert flow.throughput_ticks == len(steps.throughput_ticks) == 2 * 2


def test_stream_is_time_ordered_and_counts_heartbeats() -> None:
    lines = fleet_lines(Scale(deployments=2, engines=2, seconds=3), fpm_hz=5, req_hz=0)
    events = [parse_event(line) for line in lines]
    times = [e.time for e in events]
    assert times == sorted(times)
    fpms = [e for e in events if e.type == "fpm"]
    heartbeats = [e for e in fpms if e.payload.fpm.wall_time == 0.0]
    assert len(fpms) == 2 * 2 * (3 * 5 + 3) and len(heartbeats) == 2 * 2 * 3


def test_quick_run_prints_every_table() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.scale", "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout.splitlines()
    labels = ("1 dep x 4 eng x 60 s", "2 dep x 4 eng x 60 s")
    for section in ("1. flow", "2. steps", "3. one deployment", "4. the same"):
        assert any(line.startswith(section) for line in out), section
    flow_rows = [line for line in out if line.startswith(labels) and len(line.split()) == 15]
    assert len(flow_rows) == 2
    # the first scale is the baseline of its own ratio; events and ticks are the stream's
    assert flow_rows[0].split()[12] == "1.00"
    expected_events = [len(fleet_lines(Scale.parse(s))) for s in ("1x4x60", "2x4x60")]
    assert [int(row.split()[8]) for row in flow_rows] == expected_events
    assert [int(row.split()[-1]) for row in flow_rows] == [12, 24]
    assert sum(1 for line in out if line.startswith("  ticks ")) == 6
    assert "forecasts identical: yes" in out[-1]
