"""``flowplanner demo``: the shipped Azure trace through the planner in the closed-loop fleet."""

from __future__ import annotations

import argparse

from flows.commands.replay import add_scenario_args, replay_once

DEMO_LOAD_SCALE = 10
"""The demo superimposes 10 shifted copies of the Azure conversation trace (≈ 54 req/s at the
mean), so the fleet needs several replicas and the planner has something to do."""


def run(args: argparse.Namespace) -> int:
    return replay_once(args, default_report=args.report)


def add_to(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="replay the shipped Azure LLM trace through the planner (no services needed)",
        description="Replay the Azure LLM inference trace (conversation, 1 h) ×10 through the "
        "simulated H200 fleet under the planner, print the scores and write an HTML report.",
    )
    add_scenario_args(parser)
    parser.set_defaults(load_scale=DEMO_LOAD_SCALE)
    parser.add_argument(
        "--report", default="flowplanner-demo.html", help="HTML report path (default: %(default)s)"
    )
    parser.add_argument("--json", help="write the run's scores as JSON here")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)
