"""Forecast bench: every load predictor and the selector on recorded load, in one run.

For each series the bench walks the points in order; before each point every predictor
forecasts it, then learns it (one-step-ahead, as the planner does once per throughput
interval). Until a value is stored — the first point, and the zeros before the first non-zero
value, which the predictors skip — every predictor forecasts 0 alike, and those points are not
scored (by any predictor nor the hindsight references). It prints, per predictor: MAPE (over
non-zero actuals), the under-forecast rate and the asymmetric loss of
:mod:`operators.predictors.loss` (summed loss / summed actuals), and the ratio of each loss to
the best single predictor's loss measured in the same run (of the summed losses over the same
points: defined even when the actuals sum to 0; undefined when the best lost nothing).

For reference it also scores every option (candidate + learned margin), *selection* — the
forecast of the selector's heaviest option alone, i.e. what picking one option would have done
instead of mixing them — and the **hindsight constant**: the one fixed forecast with the lowest
loss over the scored points, chosen knowing all of them (their ``τ``-quantile). It measures how
much of a series is predictable from its past at all: a predictor that beats it has found
structure (a trend, a cycle, persistence) that a perfectly chosen fixed level cannot use. On
the Azure code trace the best single predictor is only 2 % better than it, while on ServeGen
and Azure conv the predictors are 2.5× and 1.8× better (their load moves and persists).

The **hindsight autoregression** goes one step further: the ``τ``-quantile regression of each
scored point on the two points before it (a level plus two coefficients), fitted on the very
points it is scored on (an exact linear program). No online forecaster that uses the last two
points linearly can beat it, so it bounds what persistence can buy on a series. On Azure code
it is only 6 % better than the best single predictor, while the goal asks the selector for
15 %; on ServeGen the selector, online, beats it. It is not a bound on every method: Azure
code has a cycle of five points, and a regression on lags 1–5 fitted on the very points it is
scored on reaches 0.73× (six coefficients on 56 points, knowing the future). The firmer
evidence that the goal is out of reach there came from a review: the best fixed mix of the
selector's options, chosen in hindsight, is 1.006× — the most Hedge can approach — and the best
online forecaster found, the value five points back plus a learned 75 % margin (the lag read
off this very series), 0.966×.

Under the verdict it prints a 95 % interval of the ratio (:meth:`BenchResult.ratio_interval`,
a seeded moving-block bootstrap): on a one-hour trace at 60 s the ratio rests on 56 points.

Traces are bucketed per interval from the first arrival on, and the **last bucket is dropped**:
the recording ends inside it (its last arrival is somewhere in the bucket, so it holds a part
of an interval's requests — 16 s of 60 in the Azure code trace, 22 s in conv), and scoring a
forecast of a full interval against it measures the cut, not the forecaster.

The single predictors are the selector's own candidates: a candidate inside the selector gets
exactly the calls a standalone predictor would get (``forecast()`` then ``learn_one(y)`` per
point), so each model is fitted once per run (tests check the equivalence).
"""

from __future__ import annotations

import csv
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from operators.predictors import SINGLE_PREDICTORS, SelectorPredictor, build_single
from operators.predictors.loss import UNDER_WEIGHT, ForecastScore, asymmetric_loss, loss_quantile
from operators.predictors.warmup import trace_observations
from schemas import PlannerConfig, TrafficObservation
from schemas.config import INTERVAL_LIMITS

RATE_COLUMNS = ("total_rate_rps", "rate_rps", "rps", "requests_per_second")
TIME_COLUMNS = ("window_start_s", "time_s", "t_s", "timestamp_s")
GOAL_RATIO = 0.85
"""The selector's loss should be at most this share of the best single predictor's loss."""
INTERVAL_BLOCK = 5
"""Points per block of the bootstrap behind :meth:`BenchResult.ratio_interval`."""
INTERVAL_RESAMPLES = 2000
MAX_RATE_RPS = 1e6
"""The highest rate :func:`read_rates` accepts (per second; 10× the most a replay generates):
far above any fleet, and it keeps every count and loss well inside what the models and the
hindsight linear program handle (1e200 broke HiGHS, 1e307 overflowed to inf)."""


@dataclass
class Series:
    """One series to forecast: a name, its points (one per interval) and the interval.

    >>> Series("api", [120.0, 130.0, 90.0], interval_s=60.0).values[-1]
    90.0
    """

    name: str
    values: list[float]
    interval_s: float


@dataclass
class BenchResult:
    """Scores of one series: single predictors, selector options, the selector.

    >>> result = run_series(Series("steady", [100.0] * 12, 60.0))
    >>> result.best_single[1], result.selector.loss, result.hindsight.loss
    (0.0, 0.0, 0.0)
    """

    series: Series
    singles: dict[str, ForecastScore] = field(default_factory=dict)
    options: dict[str, ForecastScore] = field(default_factory=dict)
    selector: ForecastScore = field(default_factory=ForecastScore)
    selection: ForecastScore = field(default_factory=ForecastScore)
    hindsight: ForecastScore = field(default_factory=ForecastScore)
    hindsight_ar: ForecastScore = field(default_factory=ForecastScore)
    chosen: dict[str, int] = field(default_factory=dict)
    point_losses: dict[str, list[float]] = field(default_factory=dict)
    """Each scored point's loss, for ``selector`` and every single predictor."""

    @property
    def best_single(self) -> tuple[str, float]:
        """Name and loss of the single predictor with the lowest loss.

        Ranked by summed loss (every predictor is scored on the same points, so that is the
        order of the losses, and it stays defined when the actuals sum to 0 and the scale-free
        loss is NaN); ties go to the first name in alphabetical order.
        """
        name = min(self.singles, key=lambda n: (self.singles[n].loss_sum, n))
        return name, self.singles[name].loss

    @property
    def ratio(self) -> float:
        """Selector loss / best single predictor loss: their summed losses over the same
        points, so defined whenever the best single predictor lost anything (NaN when not)."""
        return self.versus_best(self.selector)

    def versus_best(self, score: ForecastScore) -> float:
        """``score``'s summed loss / the best single predictor's (NaN when that is 0)."""
        best = self.singles[self.best_single[0]].loss_sum if self.singles else 0.0
        return score.loss_sum / best if best > 0 else math.nan

    def ratio_interval(
        self, block: int = INTERVAL_BLOCK, resamples: int = INTERVAL_RESAMPLES, seed: int = 0
    ) -> tuple[float, float]:
        """A 95 % interval of :attr:`ratio`: the moving-block bootstrap (blocks of ``block``
        consecutive points, so a burst stays in one piece) of the selector's and the best
        single predictor's summed losses, that predictor fixed to the one the whole series
        picked. Seeded, so a run always prints the same interval.

        >>> values = [float(100 + (i * 37) % 23) for i in range(60)]
        >>> low, high = run_series(Series("synthetic", values, 60.0)).ratio_interval()
        >>> low < high
        True
        """
        selector = np.asarray(self.point_losses["selector"])
        best = np.asarray(self.point_losses[self.best_single[0]])
        n = len(selector)
        block = max(1, min(block, n))
        rng = np.random.default_rng(seed)
        starts = rng.integers(0, n - block + 1, size=(resamples, -(-n // block)))
        picks = (starts[:, :, None] + np.arange(block)).reshape(resamples, -1)[:, :n]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = selector[picks].sum(axis=1) / best[picks].sum(axis=1)
        ratios = ratios[~np.isnan(ratios)]  # 0 / 0: neither lost anything in that resample
        if not ratios.size:
            return math.nan, math.nan
        # x / 0 is inf (the best single predictor lost nothing in that resample): a bound that
        # lands among those is inf, not the NaN that interpolating between infs gives
        finite_max = float(ratios[np.isfinite(ratios)].max(initial=0.0))
        capped = np.minimum(ratios, np.finfo(float).max)
        low, high = (float(v) for v in np.percentile(capped, [2.5, 97.5]))
        return (math.inf if low > finite_max else low, math.inf if high > finite_max else high)


def read_rates(path: str | Path, column: str | None = None) -> Series:
    """A request-rate CSV (one row per window) as requests per interval.

    The time column (``window_start_s`` …) gives the interval; the rate column
    (``total_rate_rps`` … or ``column``) is in requests per second. The rows must be sorted and
    evenly spaced (a missing window is not zero load: a gap, a repeated or an out-of-order row is
    refused, naming it), the interval a tick interval the planner accepts (0.1 s to a day, whole
    10 ms), and every rate finite, >= 0 and at most :data:`MAX_RATE_RPS`. Anything else raises
    ``ValueError`` naming the file and line.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "r.csv")
    >>> _ = open(path, "w").write("window_start_s,total_rate_rps\\n0,2\\n60,3\\n120,2.5\\n")
    >>> read_rates(path).values
    [120.0, 180.0, 150.0]
    >>> _ = open(path, "w").write("window_start_s,total_rate_rps\\n0,2\\n60,3\\n180,2.5\\n")
    >>> read_rates(path)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: ...r.csv:4: window_start_s 180 is 120 s after the row before, not 60 s: ...
    """
    path = Path(path)
    times, rates, lines = [], [], []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        try:
            header = reader.fieldnames or []
            time_col = next((c for c in TIME_COLUMNS if c in header), None)
            rate_col = column or next((c for c in RATE_COLUMNS if c in header), None)
            if time_col is None or rate_col is None or rate_col not in header:
                raise ValueError(
                    f"{path}: need a time column ({', '.join(TIME_COLUMNS)}) and a rate column "
                    f"({column or ', '.join(RATE_COLUMNS)}); header is {header}"
                )
            for row in reader:
                lineno = reader.line_num
                try:
                    time, rate = float(row[time_col]), float(row[rate_col])
                except (TypeError, ValueError) as error:
                    raise ValueError(f"{path}:{lineno}: {error}") from error
                if not math.isfinite(time):
                    raise ValueError(f"{path}:{lineno}: {time_col} = {time} is not finite")
                if not (math.isfinite(rate) and 0 <= rate <= MAX_RATE_RPS):
                    raise ValueError(
                        f"{path}:{lineno}: {rate_col} = {row[rate_col]!r} must be a finite "
                        f"rate from 0 to {MAX_RATE_RPS:g} per second"
                    )
                times.append(time)
                rates.append(rate)
                lines.append(lineno)
        except (csv.Error, UnicodeDecodeError) as error:
            raise ValueError(f"{path}:{reader.line_num + 1}: unreadable CSV: {error}") from None
    if len(times) < 2:
        raise ValueError(f"{path}: need at least 2 rows, got {len(times)}")
    steps = [round(b - a, 9) for a, b in itertools.pairwise(times)]
    forward = [s for s in steps if s > 0]  # the interval is the commonest step forward
    interval = max(set(forward), key=lambda s: (forward.count(s), -s)) if forward else math.nan
    for step, time, lineno in zip(steps, times[1:], lines[1:], strict=True):
        if step != interval:
            expected = f", not {interval:g} s" if forward else ""
            raise ValueError(
                f"{path}:{lineno}: {time_col} {time:g} is {step:g} s after the row before"
                f"{expected}: rows must be sorted and evenly spaced (a gap, a repeated or an "
                "out-of-order window)"
            )
    low, high, grid = INTERVAL_LIMITS
    if not low <= interval <= high or abs(interval / grid - round(interval / grid)) > 1e-6:
        raise ValueError(
            f"{path}: the rows are {interval:g} s apart; the interval must be {low:g} s to "
            f"{high:g} s, a whole number of {grid * 1000:g} ms"
        )
    return Series(name=path.name, values=[r * interval for r in rates], interval_s=interval)


def trace_series(
    observations: list[TrafficObservation], name: str, interval_s: float, kinds: tuple[str, ...]
) -> list[Series]:
    """The num_req / isl / osl series of bucketed observations (idle ISL/OSL carried forward).

    >>> from schemas import TrafficObservation as T
    >>> obs = [T(duration_s=60, num_req=n, isl=i, osl=1) for n, i in ((2, 10), (0, 0), (1, 30))]
    >>> [(s.name, s.values) for s in trace_series(obs, "t", 60, ("num_req", "isl"))]
    [('t num_req', [2.0, 0.0, 1.0]), ('t isl', [10.0, 10.0, 30.0])]
    """
    columns: dict[str, list[float]] = {"num_req": [], "isl": [], "osl": []}
    last_isl = last_osl = 0.0
    for obs in observations:
        if obs.num_req > 0:
            last_isl, last_osl = obs.isl, obs.osl
        columns["num_req"].append(obs.num_req)
        columns["isl"].append(last_isl)
        columns["osl"].append(last_osl)
    return [Series(f"{name} {kind}", columns[kind], interval_s) for kind in kinds]


def read_trace_series(
    path: str | Path, interval_s: float = 60.0, kinds: tuple[str, ...] = ("num_req",)
) -> list[Series]:
    """A trace file (any format :func:`connectors.traces.read_trace` reads), bucketed.

    The last bucket is cut off by the end of the recording and is dropped (module docstring).
    """
    from connectors.traces import read_trace

    observations = trace_observations(read_trace(path), interval_s)[:-1]
    if len(observations) < 2:
        raise ValueError(f"{path}: need at least 3 buckets of {interval_s:g} s")
    return trace_series(observations, Path(path).name, interval_s, kinds)


def hindsight_constant(actuals: list[float], under_weight: float = UNDER_WEIGHT) -> float:
    """The fixed forecast with the lowest summed asymmetric loss over ``actuals``.

    The loss is the pinball loss of ``τ = w/(1+w)``, minimised by the ``τ``-quantile: the
    ``⌈τ·n⌉``-th smallest actual.

    >>> hindsight_constant([0, 10, 20, 30, 40, 50, 60, 70])  # τ = 0.75: the 6th of 8
    50
    """
    ordered = sorted(actuals)
    rank = math.ceil(loss_quantile(under_weight) * len(ordered))
    return ordered[max(rank, 1) - 1]


def hindsight_autoregression(
    values: list[float], lags: int = 2, under_weight: float = UNDER_WEIGHT
) -> list[float]:
    """Forecasts of ``values[1:]`` by the ``τ``-quantile regression on the ``lags`` points
    before each (points before the first count as 0), fitted on those same points.

    Solved exactly as a linear program (HiGHS): minimise ``Σ τ·u⁺ + (1−τ)·u⁻`` subject to
    ``y = X·β + u⁺ − u⁻``. A constant is a special case, so its loss is never above the
    hindsight constant's.

    >>> [round(f, 6) for f in hindsight_autoregression([1.0, 4.0, 7.0, 10.0, 13.0, 16.0, 19.0])]
    [4.0, 7.0, 10.0, 13.0, 16.0, 19.0]
    """
    from scipy import sparse
    from scipy.optimize import linprog

    target = np.asarray(values[1:], dtype=float)
    padded = np.concatenate([np.zeros(lags), np.asarray(values[:-1], dtype=float)])
    n = len(target)
    design = np.column_stack(
        [np.ones(n)] + [padded[lags + 1 - k : lags + 1 - k + n] for k in range(1, lags + 1)]
    )
    tau = loss_quantile(under_weight)
    width = design.shape[1]
    solution = linprog(
        np.concatenate([np.zeros(width), np.full(n, tau), np.full(n, 1.0 - tau)]),
        A_eq=sparse.hstack([design, sparse.eye(n), -sparse.eye(n)], format="csr"),
        b_eq=target,
        bounds=[(None, None)] * width + [(0.0, None)] * (2 * n),
        method="highs",
    )
    if not solution.success:
        raise RuntimeError(f"hindsight autoregression: {solution.message}")
    return [float(f) for f in design @ solution.x[:width]]


def run_series(
    series: Series,
    seasonal_period_s: float = 86400.0,
    under_weight: float = UNDER_WEIGHT,
) -> BenchResult:
    """Forecast every point of ``series`` with every predictor and score them.

    A point is scored once a value is stored: the first point, and every zero before the first
    non-zero value (the predictors skip leading zeros, as after a deployment's idle start), is
    forecast as 0 by every predictor alike and is not scored.

    >>> result = run_series(Series("idle start", [0.0, 0.0, 100.0, 100.0, 100.0], 60.0))
    >>> result.selector.points, result.hindsight.points, result.ratio
    (2, 2, nan)
    """
    config = PlannerConfig(
        throughput_adjustment_interval_seconds=series.interval_s,
        seasonal_period_seconds=seasonal_period_s,
    )
    selector = SelectorPredictor(
        candidates=tuple(build_single(kind, config) for kind in SINGLE_PREDICTORS),
        under_weight=under_weight,
    )
    result = BenchResult(series=series)
    result.singles = {n: ForecastScore(under_weight) for n in selector.names}
    result.options = {n: ForecastScore(under_weight) for n in selector.option_names}
    result.selector = ForecastScore(under_weight)
    result.selection = ForecastScore(under_weight)
    losses = result.point_losses = {name: [] for name in ("selector", *selector.names)}
    first = len(series.values)  # the first scored point
    for index, actual in enumerate(series.values):
        forecast = selector.forecast()
        if selector.values:  # else no history: every predictor says 0 (docstring)
            first = min(first, index)
            result.selector.add(actual, forecast)
            result.chosen[selector.chosen or "-"] = result.chosen.get(selector.chosen or "-", 0) + 1
            losses["selector"].append(asymmetric_loss(actual, forecast, under_weight))
            for name, value in zip(selector.names, selector.candidate_forecasts or [], strict=True):
                result.singles[name].add(actual, value)
                losses[name].append(asymmetric_loss(actual, value, under_weight))
            options = selector.option_forecasts()
            for name, value in zip(selector.option_names, options, strict=True):
                result.options[name].add(actual, value)
            heaviest = selector.chosen  # None while nothing is stored (the forecast is 0)
            alone = options[selector.option_names.index(heaviest)] if heaviest else forecast
            result.selection.add(actual, alone)
        selector.learn_one(actual)
    result.hindsight = ForecastScore(under_weight)
    scored = series.values[first:]
    level = hindsight_constant(scored, under_weight) if scored else 0.0
    for actual in scored:
        result.hindsight.add(actual, level)
    result.hindsight_ar = ForecastScore(under_weight)
    if scored:  # the lags of the first scored point: the first stored value, then zeros
        fitted = hindsight_autoregression(series.values[first - 1 :])
        for actual, value in zip(scored, fitted, strict=True):
            result.hindsight_ar.add(actual, value)
    return result


def format_result(result: BenchResult) -> str:
    """The table of one series."""
    series = result.series
    best_name = result.best_single[0]
    lines = [
        f"== {series.name}: {len(series.values)} points of {series.interval_s:g} s "
        f"(scored: {result.selector.points}); loss = asymmetric, under-forecast weight "
        f"{result.selector.under_weight:g}",
        f"{'predictor':<26}{'MAPE':>9}{'under':>8}{'loss':>9}{'÷best':>8}",
    ]

    def row(name: str, score: ForecastScore) -> str:
        ratio = result.versus_best(score)
        return (
            f"{name:<26}{score.mape:>9.4f}{score.under_rate:>8.3f}{score.loss:>9.4f}{ratio:>8.3f}"
        )

    for name in SINGLE_PREDICTORS:
        if name in result.singles:
            lines.append(row(name, result.singles[name]))
    lines.append(row("selector", result.selector))
    lines.append(
        "  for reference: selection (the heaviest option alone), the best fixed forecast "
        "and the best 2-lag quantile autoregression in hindsight, and every option:"
    )
    lines.append(row("  selection", result.selection))
    lines.append(row("  hindsight constant", result.hindsight))
    lines.append(row("  hindsight autoregression", result.hindsight_ar))
    for name, score in result.options.items():
        lines.append(row(f"  {name}", score))
    chosen = ", ".join(f"{k} {v}" for k, v in sorted(result.chosen.items(), key=lambda kv: -kv[1]))
    chosen = chosen or "- (no point scored)"
    lines.append(f"  heaviest option: {chosen}")
    if math.isnan(result.ratio):
        why = "no point to score" if not result.selector.points else "its loss is 0"
        lines.append(f"selector loss / best single ({best_name}): undefined ({why})")
    else:
        verdict = "meets" if result.ratio <= GOAL_RATIO else "misses"
        lines.append(
            f"selector loss / best single ({best_name}) = {result.ratio:.3f} "
            f"({verdict} the goal <= {GOAL_RATIO})"
        )
    if result.selector.points >= 2 and not math.isnan(result.ratio):
        low, high = result.ratio_interval()
        lines.append(
            f"  95 % interval of that ratio: [{low:.3f}, {high:.3f}] (moving-block bootstrap, "
            f"{INTERVAL_BLOCK}-point blocks, {INTERVAL_RESAMPLES} resamples)"
        )
    return "\n".join(lines)
