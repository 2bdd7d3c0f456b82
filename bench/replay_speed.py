"""Simulator speed: simulated seconds per second of computation, for one hour of Azure conv.

Scenarios (static fleets, no planner: the simulator's own cost, driven in 5 s lock-step ticks
exactly as the closed loop drives it, every event built):

* ``native``: the trace as recorded (19 366 requests in 58 min), disaggregated 1 prefill +
  2 decode engines (and aggregated 2 engines);
* ``load-scale 10``: ten superimposed copies (``sim.workload.scale_load``, seed 0),
  disaggregated 4 prefill + 8 decode engines (and aggregated 10 engines).

The ratio printed is simulated time / CPU time of this process (``time.process_time``), so a
busy machine distorts it less; wall-clock ratios are printed beside it. Goals: ≥ 1500× native
and ≥ 250× at load-scale 10 (the planner in the loop shares the budget of ≥ 300× / ≥ 50×).
Measured in nine runs of one session on a shared 2-core machine: 3 180-3 840× native disagg,
3 660-4 320× agg, 305-352× and 342-424× at load-scale 10. CPU time is not immune to other
work on the machine (shared caches): a native run takes under 1 s of CPU, one run beside
other work fell to 2 160× / 2 660×, and another session's runs measured 10-25 % lower.

Run: ``python -m bench.replay_speed [--trace PATH] [--profile DIR] [--tick S] [--only NAME]``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from connectors.profiles import load_profile
from connectors.traces import read_trace
from schemas import FpmBatchEvent
from schemas.profile import PerformanceProfile
from schemas.trace import TraceRequest
from sim.fleet import FleetSim, FleetSpec
from sim.workload import scale_load

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT / "tests" / "data" / "traces" / "azure_2023_conv.csv"
DEFAULT_PROFILE = ROOT / "tests" / "data" / "profiles" / "h200_llama3.1-8b-fp8_tp1"
GOALS = {1: 1500.0, 10: 250.0}


@dataclass(frozen=True)
class StaticFleet:
    """A static fleet replaying the trace ``scale`` times superimposed.

    >>> FLEETS[2].scale, FLEETS[2].prefill, FLEETS[2].decode
    (10, 4, 8)
    """

    name: str
    scale: int
    mode: Literal["disagg", "agg"]
    prefill: int
    decode: int


FLEETS = (
    StaticFleet("native disagg 1P+2D", 1, "disagg", 1, 2),
    StaticFleet("native agg 2", 1, "agg", 0, 2),
    StaticFleet("load-scale 10 disagg 4P+8D", 10, "disagg", 4, 8),
    StaticFleet("load-scale 10 agg 10", 10, "agg", 0, 10),
)


@dataclass(frozen=True)
class Measurement:
    """One fleet's run.

    >>> m = Measurement(FLEETS[0], simulated_s=3600, cpu_s=2.0, wall_s=3.0, rows=0,
    ...                 events=0, requests=0, sla=None)
    >>> m.speed, m.wall_speed
    (1800.0, 1200.0)
    """

    fleet: StaticFleet
    simulated_s: float
    cpu_s: float
    wall_s: float
    rows: int
    events: int
    requests: int
    sla: float | None

    @property
    def speed(self) -> float:
        """Simulated seconds per CPU second."""
        return self.simulated_s / self.cpu_s

    @property
    def wall_speed(self) -> float:
        """Simulated seconds per wall second."""
        return self.simulated_s / self.wall_s


def measure(
    fleet: StaticFleet, profile: PerformanceProfile, trace: list[TraceRequest], tick_s: float
) -> Measurement:
    """Replay to completion in lock-step ticks, consuming every event."""
    requests = scale_load(trace, fleet.scale, seed=0)
    spec = FleetSpec(
        profile=profile,
        mode=fleet.mode,
        prefill_replicas=fleet.prefill,
        decode_replicas=fleet.decode,
    )
    sim = FleetSim(spec, requests, deployment="bench")
    rows = events = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while not sim.done:
        batch = sim.advance(sim.now_s + tick_s)
        events += len(batch)
        for e in batch:
            if isinstance(e, FpmBatchEvent):
                rows += len(e.payload.rows)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return Measurement(
        fleet, sim.now_s, cpu, wall, rows, events, len(requests), sim.result().sla_attainment
    )


def main(argv: list[str] | None = None) -> int:
    """Run the scenarios and print one line each, with the ratio to its goal."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--profile", type=Path, default=DEFAULT_PROFILE)
    parser.add_argument("--tick", type=float, default=5.0, help="lock-step tick (s)")
    parser.add_argument("--only", default=None, help="run the scenarios whose name contains this")
    args = parser.parse_args(argv)
    profile = load_profile(args.profile)
    trace = read_trace(args.trace)
    print(
        f"trace {args.trace.name}: {len(trace)} requests over {trace[-1].arrival_s:.0f} s; "
        f"tick {args.tick:g} s"
    )
    print(
        f"{'scenario':<28} {'requests':>8} {'FPM rows':>10} {'sim s':>7} {'cpu s':>7} "
        f"{'speed':>8} {'wall':>8} {'goal':>6} {'vs goal':>7} {'SLA %':>6}"
    )
    for fleet in FLEETS:
        if args.only and args.only not in fleet.name:
            continue
        m = measure(fleet, profile, trace, args.tick)
        goal = GOALS.get(fleet.scale)
        sla = "-" if m.sla is None else f"{100 * m.sla:.1f}"
        print(
            f"{fleet.name:<28} {m.requests:>8} {m.rows:>10} {m.simulated_s:>7.0f} {m.cpu_s:>7.2f} "
            f"{m.speed:>7.0f}x {m.wall_speed:>7.0f}x {goal or 0:>5.0f}x "
            f"{m.speed / goal if goal else float('nan'):>6.2f}x {sla:>6}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
