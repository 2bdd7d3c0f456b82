"""``flowplanner forecast-bench`` and bench/forecast.py on small inputs."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
from pathlib import Path

import pytest

from bench.forecast import (
    MAX_RATE_RPS,
    Series,
    format_result,
    hindsight_constant,
    read_rates,
    read_trace_series,
    run_series,
)
from flows.commands import forecast_bench
from operators.predictors import build_single
from schemas import PlannerConfig

TRACES = Path(__file__).parents[1] / "data" / "traces"


def main(argv: list[str]) -> int:
    """The ``forecast-bench`` subcommand alone (independent of other commands' imports)."""
    parser = argparse.ArgumentParser(prog="flowplanner")
    forecast_bench.add_to(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


def test_registered_in_the_cli() -> None:
    from flows.cli import COMMANDS

    assert COMMANDS["forecast-bench"] == "flows.commands.forecast_bench"


def rates_csv(path: Path, count: int = 40) -> Path:
    lines = ["window_start_s,total_rate_rps"]
    for i in range(count):
        rate = 20 + 8 * math.sin(2 * math.pi * i / 12) + (3 if i % 5 == 0 else 0)
        lines.append(f"{i * 600},{rate:.4f}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_candidates_inside_the_selector_forecast_like_standalone_predictors() -> None:
    values = [float(20 + (i * 37) % 11 + i // 3) for i in range(30)]
    series = Series("synthetic", values, 60.0)
    result = run_series(series, seasonal_period_s=600)  # a season of 10 points
    config = PlannerConfig(throughput_adjustment_interval_seconds=60, seasonal_period_seconds=600)
    for kind, score in result.singles.items():
        alone = build_single(kind, config)
        standalone = type(score)()
        for i, y in enumerate(values):
            f = alone.forecast()
            if i:
                standalone.add(y, f)
            alone.learn_one(y)
        assert standalone == score, kind


def test_hindsight_constant_beats_every_other_fixed_forecast() -> None:
    values = [float((i * 53) % 17 + (40 if i % 7 == 0 else 0)) for i in range(50)]
    series = Series("synthetic", values, 60.0)
    result = run_series(series)
    best = hindsight_constant(values[1:])
    for level in [best + d for d in (-1.0, -0.5, 0.5, 1.0)] + values:
        other = type(result.hindsight)()
        for y in values[1:]:
            other.add(y, level)
        assert result.hindsight.loss <= other.loss + 1e-12
    assert result.hindsight.points == result.selector.points == 49
    assert "hindsight constant" in format_result(result)


def test_read_rates_converts_rates_to_counts_per_interval(tmp_path: Path) -> None:
    series = read_rates(rates_csv(tmp_path / "r.csv", 5))
    assert series.interval_s == 600
    assert series.values[0] == pytest.approx((20 + 3) * 600)


def test_read_rates_names_missing_columns(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n3,4\n")
    with pytest.raises(ValueError, match="time column"):
        read_rates(bad)


def test_cli_json_over_rates_and_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    status = main(
        [
            "forecast-bench",
            "--rates",
            str(rates_csv(tmp_path / "r.csv")),
            "--trace",
            str(TRACES / "dynamo_request_trace_v1_sample.jsonl.gz"),
            "--interval",
            "10",
            "--series",
            "num_req,isl",
            "--json",
        ]
    )
    assert status == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["series"] for r in results] == [
        "r.csv",
        "dynamo_request_trace_v1_sample.jsonl.gz num_req",
        "dynamo_request_trace_v1_sample.jsonl.gz isl",
    ]
    first = results[0]
    assert first["points"] == 40 and first["interval_s"] == 600
    assert set(first["singles"]) == {"constant", "arima", "kalman", "holt_winters", "periodic"}
    best = min(s["loss"] for s in first["singles"].values())
    assert first["ratio"] == pytest.approx(first["selector"]["loss"] / best)
    assert all(0 <= s["under_rate"] <= 1 for s in first["singles"].values())


def test_cli_table_names_the_goal(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["forecast-bench", "--rates", str(rates_csv(tmp_path / "r.csv", 20))]) == 0
    out = capsys.readouterr().out
    assert "selector loss / best single" in out and "goal <= 0.85" in out


def test_cli_bad_input_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["forecast-bench"]) == 2
    assert main(["forecast-bench", "--rates", str(tmp_path / "missing.csv")]) == 2
    assert main(["forecast-bench", "--trace", str(TRACES / "README.md")]) == 2
    assert "forecast-bench:" in capsys.readouterr().err


def test_trace_series_drop_the_bucket_the_recording_ends_in(tmp_path: Path) -> None:
    trace = tmp_path / "azure.csv"
    arrivals = (0.5, 30, 70, 130, 131, 185)  # seconds; the last bucket [180, 240) holds 5 s
    rows = [f"2023-11-16 18:00:{s:09.6f},100,10" for s in arrivals if s < 60]
    rows += [f"2023-11-16 18:01:{s - 60:09.6f},100,10" for s in arrivals if 60 <= s < 120]
    rows += [f"2023-11-16 18:02:{s - 120:09.6f},100,10" for s in arrivals if 120 <= s < 180]
    rows += [f"2023-11-16 18:03:{s - 180:09.6f},100,10" for s in arrivals if s >= 180]
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    (series,) = read_trace_series(trace, 60.0)
    assert series.values == [2.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="at least 3 buckets"):
        read_trace_series(trace, 120.0)


def test_bench_scores_selection_beside_the_mix() -> None:
    values = [float(100 + (i * 37) % 23) for i in range(60)]
    result = run_series(Series("synthetic", values, 60.0), seasonal_period_s=600)
    assert result.selection.points == result.selector.points == 59
    assert sum(result.chosen.values()) == 59
    assert "selection" in format_result(result)


def test_hindsight_autoregression_is_the_best_two_lag_quantile_fit() -> None:
    """Exactly optimal: no fixed level and no other two-lag linear rule, the last value among
    them, scores a lower loss on the points it was fitted on."""
    steps = random.Random(7).choices((-20.0, -5.0, 5.0, 20.0), k=80)
    values = list(itertools.accumulate(steps, initial=500.0))  # a walk: the last point matters
    result = run_series(Series("synthetic", values, 60.0))
    scored = values[1:]
    assert result.hindsight_ar.points == len(scored)
    assert result.hindsight_ar.loss < result.hindsight.loss
    padded = [0.0, 0.0, *values]
    for level, b1, b2 in ((0, 1, 0), (10, 0.8, 0.1), (-5, 0.5, 0.6), (30, 0.7, 0.0)):
        rule = type(result.hindsight_ar)()
        for t, actual in enumerate(scored, start=3):  # padded[t] is values[t - 2]
            rule.add(actual, level + b1 * padded[t - 1] + b2 * padded[t - 2])
        assert result.hindsight_ar.loss <= rule.loss + 1e-9
    assert "hindsight autoregression" in format_result(result)


def test_the_ratio_interval_brackets_the_ratio_and_narrows_with_more_points() -> None:
    draws = random.Random(3)
    values = [float(draws.choice((0, 40, 90, 300))) for _ in range(300)]  # on/off bursts
    short, long = (run_series(Series("bursts", values[:n], 60.0)) for n in (60, 300))
    widths = []
    for result in (short, long):
        low, high = result.ratio_interval()
        assert low <= result.ratio <= high
        assert result.ratio_interval() == (low, high)  # seeded: the same every run
        widths.append(high - low)
    assert widths[1] < 0.7 * widths[0]  # 5× the points: about 1/√5 of the width
    assert "95 % interval of that ratio" in format_result(long)


def write_rates(path: Path, rows: list[tuple[object, object]]) -> Path:
    path.write_text("window_start_s,total_rate_rps\n" + "".join(f"{t},{r}\n" for t, r in rows))
    return path


@pytest.mark.parametrize("zeros", [1, 2, 30])
def test_leading_zeros_are_scored_by_no_predictor(zeros: int) -> None:
    """Nothing is stored before the first non-zero value (the predictors skip leading zeros), so
    every predictor forecasts 0 there alike: those points are not scored, as the first point
    is not (a leading zero crashed the bench: the selector filled no candidate forecasts)."""
    tail = [float(100 + (i * 37) % 23) for i in range(20)]
    values = [0.0] * zeros + tail
    result = run_series(Series("idle start", values, 60.0))
    same = run_series(Series("no idle start", tail, 60.0))
    assert result.selector.points == result.hindsight_ar.points == len(tail) - 1
    assert result.point_losses == same.point_losses
    assert result.hindsight == same.hindsight and result.hindsight_ar == same.hindsight_ar
    assert result.ratio == same.ratio


def test_an_all_zero_series_has_no_point_to_score(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = write_rates(tmp_path / "zero.csv", [(i * 60, 0) for i in range(10)])
    assert main(["forecast-bench", "--rates", str(path)]) == 0
    assert "undefined (no point to score)" in capsys.readouterr().out
    assert main(["forecast-bench", "--rates", str(path), "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["selector"]["points"] == 0 and result["ratio"] is None


def test_json_is_strict_when_the_actuals_sum_to_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Load, then none: every scale-free loss is 0/0 (was NaN in the output: invalid JSON, and
    the best single predictor a min over NaN). The ratio compares summed losses, so it and its
    interval stay defined; what is not defined is null."""
    path = write_rates(
        tmp_path / "then_zero.csv", [(i * 60, 5 if i == 0 else 0) for i in range(10)]
    )
    assert main(["forecast-bench", "--rates", str(path), "--json"]) == 0
    text = capsys.readouterr().out
    (result,) = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))
    assert result["selector"]["loss"] is None and result["selector"]["mape"] is None
    singles = run_series(read_rates(path)).singles
    best = min(singles, key=lambda n: (singles[n].loss_sum, n))
    assert result["best_single"] == best
    assert result["ratio"] == pytest.approx(
        run_series(read_rates(path)).selector.loss_sum / singles[best].loss_sum
    )
    low, high = result["ratio_interval"]
    assert low <= result["ratio"] and high is None  # resamples where the best lost nothing: ∞


BAD_RATES = {
    "a gap": ([(0, 10), (60, 11), (120, 12), (3600, 10), (3660, 11)], r":5: window_start_s 3600"),
    "unsorted": ([(0, 1), (120, 3), (60, 2), (180, 4)], r":4: window_start_s 60 is -60 s"),
    "a repeated window": ([(0, 1), (60, 2), (60, 2), (120, 3)], r":4: window_start_s 60 is 0 s"),
    "nan rate": ([(0, 10), (60, "nan"), (120, 10)], r":3: total_rate_rps = 'nan' must be"),
    "inf rate": ([(0, 10), (60, "inf"), (120, 10)], r":3: total_rate_rps = 'inf' must be"),
    "negative rate": ([(0, 10), (60, -5), (120, 10)], r":3: total_rate_rps = '-5' must be"),
    "1e307 rate": ([(0, 5), (60, "1e307"), (120, 6)], r":3: .* from 0 to 1e\+06 per second"),
    "1e200 rate": ([(0, 5), (60, "1e200"), (120, 6)], r":3: .* from 0 to 1e\+06 per second"),
    "inf time": ([(0, 1), (60, 2), ("inf", 3)], r":4: window_start_s = inf is not finite"),
    "descending": (
        [(180, 4), (120, 3), (60, 2), (0, 1)],
        r":3: window_start_s 120 is -60 s after the row before: rows must be sorted",
    ),
    "all at once": (
        [(60, 1), (60, 2), (60, 3)],
        r":3: window_start_s 60 is 0 s after the row before: rows",
    ),
    "mostly backwards": (
        [(300, 1), (240, 2), (180, 3), (240, 4)],
        r":3: window_start_s 240 is -60 s after the row before, not 60 s",
    ),
    "a 2-day interval": ([(0, 1), (172_800, 2), (345_600, 3)], r"172800 s apart; the interval"),
    "a field beyond the csv limit": ([(0, 1), (60, "9" * 200_000)], r":3: unreadable CSV: field"),
}


@pytest.mark.parametrize("case", list(BAD_RATES))
def test_a_bad_rate_file_is_a_clear_error_naming_the_row(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture
) -> None:
    """Each was scored silently (gaps, unsorted windows, NaN/inf/negative rates as 0) or
    crashed the bench (inf after × interval, a HiGHS model error at 1e200, csv.Error, a
    PlannerConfig validation error for an interval over a day)."""
    rows, message = BAD_RATES[case]
    path = write_rates(tmp_path / "r.csv", rows)
    with pytest.raises(ValueError, match=message):
        read_rates(path)
    assert main(["forecast-bench", "--rates", str(path)]) == 2
    assert f"{path}:" in capsys.readouterr().err


def test_rates_that_are_not_utf8_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_bytes(b"window_start_s,total_rate_rps\n0,1\n60,caf\xe9\n")
    with pytest.raises(ValueError, match=r"r\.csv:\d+: unreadable CSV: 'utf-8' codec"):
        read_rates(path)


def test_the_highest_rate_accepted_is_scored(tmp_path: Path) -> None:
    rows = [(i * 86400, MAX_RATE_RPS if i % 3 else MAX_RATE_RPS / 2) for i in range(12)]
    result = run_series(read_rates(write_rates(tmp_path / "r.csv", rows)))
    assert result.selector.points == 11 and math.isfinite(result.hindsight_ar.loss)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--interval", "0.123", "--interval: must be a whole number of 10 ms"),
        ("--seasonal-period", "1e300", "--seasonal-period: Input should be less than or equal"),
    ],
)
def test_settings_the_planner_config_refuses_are_a_clear_error(
    option: str, value: str, message: str, capsys: pytest.CaptureFixture
) -> None:
    """They reached PlannerConfig inside the scoring loop: a pydantic traceback."""
    trace = str(TRACES / "azure_2023_code.csv")
    assert main(["forecast-bench", "--trace", trace, option, value]) == 2
    assert message in capsys.readouterr().err
