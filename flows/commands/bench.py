"""``flowplanner bench``: the same workload under baselines and our planner, one table."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.closed_loop import Score, bench_table, run_bench, summarize
from flows.cli import bounded
from flows.commands.replay import add_scenario_args, announced_scenario, check_outputs

MAX_SEEDS = 100
MAX_NUM_SEQS = 65536


def run(args: argparse.Namespace) -> int:
    if not check_outputs(args, json=args.json):
        return 2
    runs: list[list[Score]] = []
    for seed in range(args.seed, args.seed + args.seeds):
        found = announced_scenario(argparse.Namespace(**{**vars(args), "seed": seed}), "bench on")
        if found is None:
            return 2
        scenario, config = found
        if args.max_num_seqs is not None:
            scenario.spec = scenario.spec.model_copy(update={"max_num_seqs": args.max_num_seqs})
        outcomes = run_bench(
            scenario,
            config,
            on_row=lambda o: print(
                f"  {o.name}: done in {o.wall_s:.1f} s ({o.speed:,.0f}x)", file=sys.stderr
            ),
        )
        runs.append([Score.of(o) for o in outcomes])
    print(bench_table(summarize(runs)))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        scores = {
            name: [json.loads(run[row].result.to_json()) for run in runs]
            for row, name in enumerate(score.name for score in runs[0])
        }
        with open(args.json, "w") as out:
            json.dump(
                {name: seeds[0] if args.seeds == 1 else seeds for name, seeds in scores.items()},
                out,
                indent=2,
            )
    return 0


def add_to(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="compare the planner with baselines on one replayed workload",
        description="Replay one workload under static peak/mean fleets, the reference "
        "algorithm (with the config's load predictor, and with the spec's defaults), our "
        "planner (load; throughput+load; p90 sizing) and a hindsight bound. Every row picks its "
        "own starting fleet (the static ones theirs, the planners the first minute's need, "
        "hindsight its plan), so there is no --prefill/--decode.",
    )
    add_scenario_args(parser, initial_fleet=False)
    parser.add_argument(
        "--seeds",
        type=bounded(int, 1, MAX_SEEDS),
        default=1,
        metavar="N",
        help="run every row for the seeds --seed .. --seed+N-1 and show the mean over them, "
        f"with the range of SLA attainment; N <= {MAX_SEEDS} (default: %(default)s)",
    )
    parser.add_argument(
        "--max-num-seqs",
        type=bounded(int, 1, MAX_NUM_SEQS),
        metavar="N",
        help="most sequences an engine batches at once (vLLM's max_num_seqs; default: the "
        "simulator's 256, vLLM's long-standing default)",
    )
    parser.add_argument(
        "--json",
        help="write every row's scores as JSON here (per row, a list over seeds with --seeds > 1)",
    )
    parser.set_defaults(func=run)
