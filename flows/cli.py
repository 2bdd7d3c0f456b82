"""The ``flowplanner`` command line. Each subcommand lives in ``flows/commands/<name>.py``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Small-matrix BLAS calls (statsmodels fits in the load predictors) run ~10x slower with
# OpenBLAS worker threads on a busy machine; set before any command module imports numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Modules that each define ``add_to(subparsers)``; the parser they add sets ``func``.
COMMAND_MODULES = [
    "flows.commands.ack",
    "flows.commands.bench",
    "flows.commands.decisions",
    "flows.commands.demo",
    "flows.commands.fleet",
    "flows.commands.forecast_bench",
    "flows.commands.replay",
    "flows.commands.run",
    "flows.commands.schema",
]


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (every registered subcommand)."""
    parser = argparse.ArgumentParser(
        prog="flowplanner",
        description="SLA-aware autoscaling planner for LLM inference fleets (bytewax dataflow).",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_to(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``flowplanner`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
