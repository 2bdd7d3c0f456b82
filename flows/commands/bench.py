"""``flowplanner bench``: the same workload under baselines and our planner, one table."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.closed_loop import bench_table, run_bench
from flows.commands.replay import add_scenario_args, announced_scenario, check_outputs


def run(args: argparse.Namespace) -> int:
    if not check_outputs(args, json=args.json):
        return 2
    found = announced_scenario(args, "bench on")
    if found is None:
        return 2
    scenario, config = found
    outcomes = run_bench(
        scenario,
        config,
        on_row=lambda o: print(
            f"  {o.name}: done in {o.wall_s:.1f} s ({o.speed:,.0f}x)", file=sys.stderr
        ),
    )
    print(bench_table(outcomes))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as out:
            json.dump({o.name: json.loads(o.result.to_json()) for o in outcomes}, out, indent=2)
    return 0


def add_to(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="compare the planner with baselines on one replayed workload",
        description="Replay one workload under static peak/mean fleets, the reference "
        "algorithm, our planner (load; throughput+load; p90 sizing) and a hindsight bound. "
        "Every row picks its own starting fleet (the static ones theirs, the planners the first "
        "minute's need, hindsight its plan), so there is no --prefill/--decode.",
    )
    add_scenario_args(parser, initial_fleet=False)
    parser.add_argument("--json", help="write every row's scores as JSON here")
    parser.set_defaults(func=run)
