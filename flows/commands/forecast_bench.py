"""``flowplanner forecast-bench``: score every load predictor and the selector on recorded load."""

from __future__ import annotations

import argparse
import json
import sys

from bench.forecast import (
    BenchResult,
    format_result,
    read_rates,
    read_trace_series,
    run_series,
)
from flows.cli import positive_float
from operators.predictors.loss import UNDER_WEIGHT, ForecastScore

SERIES_KINDS = ("num_req", "isl", "osl")
UNDER_WEIGHT_RANGE = (1e-6, 1e6)
"""Bounds of ``--under-weight``: beyond them the loss quantile w / (1 + w) rounds to 0 or 1."""


def under_weight(text: str) -> float:
    """Argument type of ``--under-weight``: a number within :data:`UNDER_WEIGHT_RANGE`.

    >>> under_weight("1e16")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: must be <= 1e+06, got 1e16
    """
    value = positive_float(text)
    low, high = UNDER_WEIGHT_RANGE
    if value < low:
        raise argparse.ArgumentTypeError(f"must be >= {low:g}, got {text}")
    if value > high:
        raise argparse.ArgumentTypeError(f"must be <= {high:g}, got {text}")
    return value


def _as_json(result: BenchResult) -> dict:
    def score(s: ForecastScore) -> dict:
        return {"mape": s.mape, "under_rate": s.under_rate, "loss": s.loss, "points": s.points}

    return {
        "series": result.series.name,
        "points": len(result.series.values),
        "interval_s": result.series.interval_s,
        "singles": {name: score(s) for name, s in result.singles.items()},
        "selector": score(result.selector),
        "options": {name: score(s) for name, s in result.options.items()},
        "hindsight_constant": score(result.hindsight),
        "hindsight_autoregression": score(result.hindsight_ar),
        "best_single": result.best_single[0],
        "ratio": result.ratio,
        "ratio_interval": list(result.ratio_interval()) if result.selector.points >= 2 else None,
    }


def run(args: argparse.Namespace) -> int:
    if not args.rates and not args.trace:
        print(
            "flowplanner forecast-bench: give at least one --rates FILE or --trace FILE",
            file=sys.stderr,
        )
        return 2
    kinds = tuple(k.strip() for k in args.series.split(",") if k.strip())
    unknown = [k for k in kinds if k not in SERIES_KINDS]
    if unknown or not kinds:
        print(
            f"flowplanner forecast-bench: --series takes {','.join(SERIES_KINDS)}",
            file=sys.stderr,
        )
        return 2
    try:
        series = [read_rates(path, args.rate_column) for path in args.rates or []]
        for path in args.trace or []:
            series.extend(read_trace_series(path, args.interval, kinds))
    except (OSError, ValueError) as error:
        print(f"flowplanner forecast-bench: {error}", file=sys.stderr)
        return 2
    results = []
    for item in series:
        result = run_series(item, args.seasonal_period, args.under_weight)
        results.append(result)
        if not args.json:
            print(format_result(result), flush=True)
            print()
    if args.json:
        print(json.dumps([_as_json(r) for r in results], indent=2))
    return 0


def add_to(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "forecast-bench",
        help="score the load predictors and the selector (MAPE, under-forecasts, asymmetric loss)",
        description="Score every load predictor and the selector, one-step-ahead, on recorded "
        "load: rate CSVs (--rates) and/or request traces bucketed into series (--trace).",
    )
    parser.add_argument(
        "--rates", action="append", metavar="FILE", help="rate CSV (window_start_s, total_rate_rps)"
    )
    parser.add_argument(
        "--trace", action="append", metavar="FILE", help="request trace (Mooncake, Azure, Dynamo)"
    )
    parser.add_argument(
        "--interval",
        type=positive_float,
        default=60.0,
        help="bucket width for --trace, s (default 60)",
    )
    parser.add_argument("--rate-column", default=None, help="rate column of --rates files")
    parser.add_argument(
        "--series",
        default="num_req",
        help="trace series to score: num_req,isl,osl (default num_req)",
    )
    parser.add_argument(
        "--seasonal-period",
        type=positive_float,
        default=86400.0,
        help="Holt-Winters season length in seconds (default one day)",
    )
    parser.add_argument(
        "--under-weight",
        type=under_weight,
        default=UNDER_WEIGHT,
        help="cost of an under-forecast relative to an over-forecast, "
        f"{UNDER_WEIGHT_RANGE[0]:g} to {UNDER_WEIGHT_RANGE[1]:g} (default {UNDER_WEIGHT:g})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.set_defaults(func=run)
