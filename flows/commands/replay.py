"""``flowplanner replay``: a trace through the simulated fleet under the real planner flow."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from connectors.profiles import load_profile
from connectors.report import closed_loop_panels, render_report, write_report
from flows.cli import bounded, non_negative_float, non_negative_int
from flows.progress import ProgressBar
from flows.scenario import (
    DEFAULT_CONFIG,
    DEFAULT_PROFILE,
    DEFAULT_TRACE,
    SYNTHETIC,
    Outcome,
    Scenario,
    fleet_spec,
    load_requests,
    run_planner,
)
from operators.bootstrap import profile_to_fpms
from schemas import ConfigError, PlannerConfig, load_config
from sim.workload import trace_span

RATE_RPS, DURATION_S = 5.0, 3600.0
"""Defaults of ``--rate`` and ``--duration`` (synthetic workloads only)."""
MAX_RATE_RPS = 100_000.0
MAX_SIMULATED_REPLICAS = 1024
"""The most replicas of a role a simulated fleet starts with: each is an engine simulated in
memory (65 536 of each role took 2.6 GB before a 60-request replay had started)."""
REPLICA_COUNT = bounded(int, 0, MAX_SIMULATED_REPLICAS)
"""Argument type of ``--prefill``/``--decode``."""
MAX_DURATION_S = 30 * 86400.0
SPEEDUP_RANGE = (1e-3, 1e6)
MAX_LOAD_SCALE = 1000


def add_scenario_args(parser: argparse.ArgumentParser, initial_fleet: bool = True) -> None:
    """Options that define a replay scenario (shared by replay, bench, demo and fleet).

    ``initial_fleet=False`` leaves out ``--prefill``/``--decode`` for a command that picks
    every run's starting fleet itself (``bench``); they default to one replica each.
    Numbers are bounded so that a typo cannot ask for a run that never ends; options that
    would be ignored (``--rate``/``--duration`` with a trace, ``--prefill`` for an aggregated
    deployment) are refused by :func:`scenario_from_args`.
    """
    workload = parser.add_mutually_exclusive_group()
    workload.add_argument("--trace", help=f"trace file (default: {DEFAULT_TRACE.name})")
    workload.add_argument("--synthetic", choices=SYNTHETIC, help="a synthetic workload instead")
    parser.add_argument(
        "--rate",
        type=bounded(float, 0.0, MAX_RATE_RPS, strict_low=True),
        help=f"synthetic mean rate, req/s, up to {MAX_RATE_RPS:,.0f} (default: {RATE_RPS:g}; "
        "only with --synthetic)",
    )
    parser.add_argument(
        "--duration",
        type=bounded(float, 0.0, MAX_DURATION_S, strict_low=True),
        help=f"synthetic length, s, up to 30 days (default: {DURATION_S:g}; only with --synthetic)",
    )
    parser.add_argument("--config", help="planner config (default: examples/planner.yaml)")
    parser.add_argument("--deployment", help="which deployment of the config (default: the only)")
    parser.add_argument("--profile", help="engine profile directory (default: shipped H200)")
    parser.add_argument(
        "--load-scale",
        type=bounded(int, 1, MAX_LOAD_SCALE),
        default=1,
        metavar="K",
        help=f"superimpose K time-shifted copies of the trace, K <= {MAX_LOAD_SCALE} "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--speedup",
        type=bounded(float, *SPEEDUP_RANGE),
        default=1.0,
        help=f"compress time by this factor, {SPEEDUP_RANGE[0]:g} to {SPEEDUP_RANGE[1]:g} "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=non_negative_int,
        default=0,
        help="seed of the time shifts, synthetic arrivals and the simulator (default: %(default)s)",
    )
    if initial_fleet:
        parser.add_argument(
            "--prefill",
            type=REPLICA_COUNT,
            help="initial prefill replicas, disagg deployments only (default: 1)",
        )
        parser.add_argument(
            "--decode",
            type=REPLICA_COUNT,
            default=1,
            help="initial decode (or agg) replicas (default: %(default)s)",
        )
    else:
        parser.set_defaults(prefill=None, decode=1)
    parser.add_argument(
        "--startup-delay",
        type=non_negative_float,
        default=60.0,
        help="replica start-up, s (default: %(default)s)",
    )


def output_problem(option: str, path: str | None) -> str | None:
    """Why ``path`` cannot be written (checked before a long run), or ``None``.

    >>> output_problem("--json", "/")
    '--json /: is a directory'
    """
    if not path:
        return None
    target = Path(path)
    if target.is_dir():
        return f"{option} {path}: is a directory"
    parent = target.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        return f"{option} {path}: cannot write in {parent}"
    return None


def check_outputs(args: argparse.Namespace, **paths: str | None) -> bool:
    """Print why the first unwritable output cannot be written; ``True`` if all can be."""
    for option, path in paths.items():
        problem = output_problem(f"--{option}", path)
        if problem:
            print(f"flowplanner {args.command}: {problem}", file=sys.stderr)
            return False
    return True


def scenario_from_args(args: argparse.Namespace) -> tuple[Scenario, PlannerConfig]:
    """Build the scenario and pick the planner config; raises ConfigError/ValueError."""
    configs = load_config(args.config or DEFAULT_CONFIG)
    name = args.deployment or (next(iter(configs)) if len(configs) == 1 else None)
    if name not in configs:
        raise ConfigError(
            f"choose one deployment with --deployment (config has {', '.join(configs)})"
        )
    config = configs[name]
    if args.synthetic is None:
        given = [o for o, v in (("--rate", args.rate), ("--duration", args.duration)) if v]
        if given:
            verb = "apply" if len(given) > 1 else "applies"
            raise ValueError(f"{' and '.join(given)} {verb} only to --synthetic workloads")
    if args.prefill is not None and config.mode != "disagg":
        raise ValueError(
            f"--prefill applies only to disagg deployments ({name!r} is {config.mode}; "
            "--decode sets its engines)"
        )
    requests = load_requests(
        args.trace,
        synthetic=args.synthetic,
        rate_rps=args.rate or RATE_RPS,
        duration_s=args.duration or DURATION_S,
        load_scale=args.load_scale,
        speedup=args.speedup,
        seed=args.seed,
    )
    source = args.synthetic or Path(args.trace or DEFAULT_TRACE).name
    span = trace_span(requests)
    if span > MAX_DURATION_S:  # one arrival in ms among seconds would simulate for days
        raise ValueError(
            f"{source}: its requests span {span:,.0f} s, more than 30 days (after --speedup): "
            "mixed time units?"
        )
    profile = load_profile(args.profile or DEFAULT_PROFILE)
    profile_to_fpms(profile, source=str(args.profile or DEFAULT_PROFILE))  # refused before a run
    spec = fleet_spec(
        config,
        profile,
        prefill_replicas=1 if args.prefill is None else args.prefill,
        decode_replicas=args.decode,
        startup_delay_s=args.startup_delay,
    )
    label = f"{source} ×{args.load_scale}" if args.load_scale > 1 else source
    return Scenario(requests, spec, deployment=name, seed=args.seed, label=label), config


def write_html(path: str, outcome: Outcome, scenario: Scenario, config: PlannerConfig) -> Path:
    """The offline HTML report of one closed-loop replay."""
    panels = closed_loop_panels(
        outcome.fleet.timeline(),
        outcome.records,
        ttft_ms=config.ttft_ms,
        itl_ms=config.itl_ms,
        max_kv_tokens=scenario.spec.kv_capacity,
    )
    page = render_report(
        panels,
        title=f"flowplanner replay — {scenario.label}",
        notes=outcome.result.table(),
    )
    return write_report(path, page)


def announced_scenario(
    args: argparse.Namespace, doing: str
) -> tuple[Scenario, PlannerConfig] | None:
    """The scenario of ``args``, announced on stderr; ``None`` (after saying why) if unusable."""
    try:
        scenario, config = scenario_from_args(args)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"flowplanner {args.command}: {exc}", file=sys.stderr)
        return None
    print(
        f"{doing} {scenario.label}: {len(scenario.requests):,} requests over "
        f"{scenario.end_s:,.0f} s, deployment {scenario.deployment!r} ({config.mode}), "
        f"seed {scenario.seed}",
        file=sys.stderr,
    )
    return scenario, config


def replay_once(args: argparse.Namespace, default_report: str | None = None) -> int:
    """Run one closed-loop replay and print/write its results (also used by ``demo``)."""
    report = args.report or default_report
    if not check_outputs(args, json=args.json, report=report):
        return 2
    found = announced_scenario(args, "replaying")
    if found is None:
        return 2
    scenario, config = found
    bar = ProgressBar(scenario.end_s, enabled=not args.quiet)
    outcome = run_planner(scenario, config, on_step=bar.update)
    bar.close()
    print(
        f"replayed {outcome.result.duration_s:,.0f} s in {outcome.wall_s:.1f} s: "
        f"{outcome.speed:,.0f}x real time",
        file=sys.stderr,
    )
    print(outcome.result.table())
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(outcome.result.to_json())
    if report:
        print(f"report: {write_html(report, outcome, scenario, config)}", file=sys.stderr)
    return 0


def add_to(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay a trace through the simulated fleet under the planner (closed loop)",
        description="Replay a request trace through the simulated engine fleet, driven by the "
        "real planner dataflow on virtual time (no sleeping, bit-for-bit repeatable).",
    )
    add_scenario_args(parser)
    parser.add_argument("--report", help="write an offline HTML report here")
    parser.add_argument("--json", help="write the run's scores as JSON here")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=replay_once)
