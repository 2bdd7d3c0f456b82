"""``flowplanner forecast-bench``: score every load predictor and the selector on recorded load.

``--json`` prints strict JSON: a number that is undefined — a MAPE with no non-zero actual, a
loss when the actuals sum to 0, the ratio when the best single predictor lost nothing, an
unbounded end of the ratio's interval — is ``null``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from pydantic import ValidationError

from bench.forecast import (
    BenchResult,
    format_result,
    read_rates,
    read_trace_series,
    run_series,
)
from flows.cli import bounded, positive_float
from operators.predictors.loss import UNDER_WEIGHT, ForecastScore
from schemas import PlannerConfig

SERIES_KINDS = ("num_req", "isl", "osl")
UNDER_WEIGHT_RANGE = (1e-6, 1e6)
"""Bounds of ``--under-weight``: beyond them the loss quantile w / (1 + w) rounds to 0 or 1."""


def _json_number(value: float) -> float | None:
    """``value``, or ``None`` (JSON null) when it is NaN or infinite.

    >>> _json_number(0.5), _json_number(float("nan")), _json_number(float("inf"))
    (0.5, None, None)
    """
    return value if math.isfinite(value) else None


def _as_json(result: BenchResult) -> dict[str, object]:
    def score(s: ForecastScore) -> dict[str, float | None]:
        return {
            "mape": _json_number(s.mape),
            "under_rate": _json_number(s.under_rate),
            "loss": _json_number(s.loss),
            "points": s.points,
        }

    ratio = result.ratio
    interval = None
    if result.selector.points >= 2 and math.isfinite(ratio):
        interval = [_json_number(bound) for bound in result.ratio_interval()]

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
        "ratio": _json_number(ratio),
        "ratio_interval": interval,
    }


_OPTION_OF = {
    "throughput_adjustment_interval_seconds": "--interval",
    "seasonal_period_seconds": "--seasonal-period",
}


def _config_problem(interval_s: float, seasonal_period_s: float) -> str | None:
    """Why the planner config the bench scores with refuses these settings (``None``: it takes
    them); a rate file's interval is checked when it is read, so an interval here is
    ``--interval``'s.

    >>> _config_problem(60.0, 86400.0) is None
    True
    >>> _config_problem(100000.0, 86400.0)
    '--interval: must be between 0.1 s and 86400 s (one day), got 100000.0'
    """
    try:
        PlannerConfig(
            throughput_adjustment_interval_seconds=interval_s,
            seasonal_period_seconds=seasonal_period_s,
        )
    except ValidationError as error:
        return "; ".join(
            f"{_OPTION_OF.get(str(e['loc'][0]), e['loc'][0]) if e['loc'] else '?'}: "
            f"{str(e['msg']).removeprefix('Value error, ')}"
            for e in error.errors()
        )
    return None


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
    for interval in sorted({item.interval_s for item in series}):
        problem = _config_problem(interval, args.seasonal_period)
        if problem:
            print(f"flowplanner forecast-bench: {problem}", file=sys.stderr)
            return 2
    results = []
    for item in series:
        result = run_series(item, args.seasonal_period, args.under_weight)
        results.append(result)
        if not args.json:
            print(format_result(result), flush=True)
            print()
    if args.json:
        print(json.dumps([_as_json(r) for r in results], indent=2, allow_nan=False))
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
        type=bounded(float, *UNDER_WEIGHT_RANGE),
        default=UNDER_WEIGHT,
        help="cost of an under-forecast relative to an over-forecast, "
        f"{UNDER_WEIGHT_RANGE[0]:g} to {UNDER_WEIGHT_RANGE[1]:g} (default {UNDER_WEIGHT:g})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.set_defaults(func=run)
