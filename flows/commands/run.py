"""``flowplanner run``: run the planner dataflow on recorded or live inputs."""

from __future__ import annotations

import argparse
import sys

from bytewax._bytewax import cli_main
from prometheus_client import REGISTRY

from connectors.console import JsonlFileSink, LineSink
from flows.endpoints import EndpointError, decision_sink, input_source, is_live
from flows.planner import PlannerSinks, build_flow
from schemas import ConfigError, load_config


def _counter_total(name: str) -> int:
    total = 0.0
    for metric in REGISTRY.collect():
        for sample in metric.samples:
            if sample.name == f"{name}_total":
                total += sample.value
    return int(total)


def run(args: argparse.Namespace) -> int:
    try:
        configs = load_config(args.config)
        inputs = [input_source(address) for address in args.input]
        sinks = PlannerSinks(
            decisions=[decision_sink(address) for address in args.output or ["-"]],
            ticks=[JsonlFileSink(args.ticks)] if args.ticks else [],
            dead_letters=[
                JsonlFileSink(args.dead_letters)
                if args.dead_letters
                else LineSink(lambda d: f"dead-letter: {d.model_dump_json()}", "stderr")
            ],
        )
    except (ConfigError, EndpointError, FileNotFoundError) as exc:
        print(f"flowplanner run: {exc}", file=sys.stderr)
        return 2
    live = any(is_live(address) for address in args.input)
    flow = build_flow(configs, inputs, sinks, live=live)
    cli_main(flow, workers_per_process=args.workers)
    print(
        f"flowplanner run: {_counter_total('flowplanner_events_in')} events in, "
        f"{_counter_total('flowplanner_dead_letters')} dead-lettered, "
        f"{_counter_total('flowplanner_decisions_out')} decisions",
        file=sys.stderr,
    )
    return 0


def add_to(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run the planner dataflow",
        description="Run the planner on recorded (JSONL) or live inputs and emit decisions.",
    )
    parser.add_argument("--config", required=True, help="YAML/JSON planner config, or inline JSON")
    parser.add_argument(
        "--input", action="append", required=True, help="recorded stream PATH (repeatable)"
    )
    parser.add_argument(
        "--output",
        action="append",
        help="where decisions go: '-' (stdout, default) or PATH (JSON lines); repeatable",
    )
    parser.add_argument("--ticks", help="also write one JSON tick record per tick to PATH")
    parser.add_argument("--dead-letters", help="write dead letters to PATH (default: stderr)")
    parser.add_argument("-w", "--workers", type=int, default=1, help="bytewax worker threads")
    parser.set_defaults(func=run)
