"""Warm start from traces (spec §7.6): bucketing, and feeding the buckets to the predictors."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.traces import read_trace
from operators.predictors import KalmanPredictor, Predictor, SelectorPredictor, build_predictor
from operators.predictors.warmup import bucket_requests, trace_observations
from operators.traffic_intake import SCORED_WARM_UP_WINDOWS, TrafficForecaster
from schemas import PlannerConfig, TrafficObservation
from schemas.trace import TraceRequest

TRACES = Path(__file__).parents[1] / "data" / "traces"


def test_buckets_fill_gaps_with_zeros_and_average_lengths() -> None:
    rows = [(65_000, 10, 1), (1_000, 300, 30), (2_500, 100, 10), (245_000, 7, 3)]
    obs = bucket_requests(rows, 60)
    assert [(o.num_req, o.isl, o.osl) for o in obs] == [
        (2.0, 200.0, 20.0),  # origin = the earliest arrival (1 000 ms), input order is irrelevant
        (1.0, 10.0, 1.0),
        (0.0, 0.0, 0.0),  # a gap
        (0.0, 0.0, 0.0),
        (1.0, 7.0, 3.0),
    ]
    assert all(o.duration_s == 60 for o in obs)


def test_bucket_edges_follow_floor_of_elapsed_time() -> None:
    obs = bucket_requests([(0, 1, 1), (59_999, 1, 1), (60_000, 1, 1)], 60)
    assert [o.num_req for o in obs] == [2.0, 1.0]


def test_a_fixed_origin_counts_buckets_from_it() -> None:
    # the closed-loop benchmark's minutes start at the replay clock's 0, not the first arrival
    rows = [(125_000, 4, 2), (130_000, 8, 6)]
    assert [o.num_req for o in bucket_requests(rows, 60)] == [2.0]
    obs = bucket_requests(rows, 60, origin_ms=0)
    assert [(o.num_req, o.isl, o.osl) for o in obs] == [(0, 0, 0), (0, 0, 0), (2.0, 6.0, 4.0)]
    reqs = [TraceRequest(arrival_s=59.5, isl=1, osl=1), TraceRequest(arrival_s=60.5, isl=1, osl=1)]
    assert [o.num_req for o in trace_observations(reqs, 60, origin_s=0.0)] == [1.0, 1.0]
    assert [o.num_req for o in trace_observations(reqs, 60)] == [2.0]


@pytest.mark.parametrize("origin", [1.0, float("nan")])
def test_an_arrival_before_a_fixed_origin_is_rejected(origin: float) -> None:
    with pytest.raises(ValueError, match="at or after origin_ms"):
        bucket_requests([(0.5, 1, 1)], 60, origin_ms=origin)


@pytest.mark.parametrize("rows", [[(float("nan"), 1, 1)], [(0, -1, 1)], [(0, 1, float("inf"))]])
def test_bad_rows_are_rejected_with_the_row_index(rows: list) -> None:
    with pytest.raises(ValueError, match="row 0"):
        bucket_requests(rows, 60)


@pytest.mark.parametrize("interval", [0, -5, float("nan")])
def test_bad_interval_is_rejected(interval: float) -> None:
    with pytest.raises(ValueError, match="interval_s"):
        bucket_requests([(0, 1, 1)], interval)


@pytest.mark.parametrize(
    ("name", "requests"),
    [("mooncake_arxiv_first1000.jsonl", 1000), ("dynamo_request_trace_v1_sample.jsonl.gz", 17)],
)
def test_trace_buckets_keep_every_request(name: str, requests: int) -> None:
    trace = read_trace(TRACES / name)
    obs = trace_observations(trace, 30)
    assert sum(o.num_req for o in obs) == requests
    assert len(obs) == int(max(r.arrival_s for r in trace) // 30) + 1
    total_isl = sum(o.isl * o.num_req for o in obs)
    assert total_isl == pytest.approx(sum(r.isl for r in trace))


def test_warm_start_from_a_trace_then_skip_idle_again() -> None:
    config = PlannerConfig(load_predictor="kalman", throughput_adjustment_interval_seconds=30)
    forecaster = TrafficForecaster.from_config(config)
    obs = trace_observations(read_trace(TRACES / "mooncake_arxiv_first1000.jsonl"), 30)
    assert forecaster.warm_up(obs) == len(obs)
    assert isinstance(forecaster.num_req, KalmanPredictor)
    assert forecaster.num_req.values == [o.num_req for o in obs]
    warm = forecaster.forecast()
    # the forecast is a Kalman filter's on the trace's windows: a fresh filter that learns the
    # same series one by one (idle windows carry the last lengths) forecasts the same numbers
    series: dict[str, list[float]] = {"num_req": [], "isl": [], "osl": []}
    shape = None
    for o in obs:
        shape = o if o.num_req > 0 else shape
        if shape is None:
            continue  # idle windows before any traffic seed nothing
        series["num_req"].append(float(o.num_req))
        series["isl"].append(float(shape.isl))
        series["osl"].append(float(shape.osl))
    for name, values in series.items():
        reference = build_predictor(config)
        for value in values:
            reference.learn_one(value)
        assert getattr(warm, name) == reference.forecast(), name
    # after the warm-up, the deployment's own idle start is skipped again (spec §7.1)
    for _ in range(3):
        forecaster.num_req.learn_one(0.0)
    assert forecaster.num_req.values == [o.num_req for o in obs]


def test_selector_warm_start_propagates_idle_skip_to_candidates() -> None:
    config = PlannerConfig(load_predictor="selector", throughput_adjustment_interval_seconds=30)
    forecaster = TrafficForecaster.from_config(config)
    obs = trace_observations(read_trace(TRACES / "dynamo_request_trace_v1_sample.jsonl.gz"), 30)
    forecaster.warm_up(obs)
    selector = forecaster.num_req
    assert isinstance(selector, SelectorPredictor)
    stored = [list(c.values) for c in selector.candidates]
    selector.learn_one(0.0)
    assert [list(c.values) for c in selector.candidates] == stored


class CountingMean(Predictor):
    """The mean, counting how often it was asked to forecast."""

    def __init__(self) -> None:
        super().__init__()
        self.forecasts = 0

    def _forecast(self) -> float:
        self.forecasts += 1
        return sum(self.values) / len(self.values)


def test_a_long_warm_up_scores_only_its_last_windows() -> None:
    """Scoring a window forecasts with every candidate (ARIMA, Holt-Winters, ...): 40-60 ms a
    window, minutes for a week of 3-minute windows, all inside the first window's tick."""
    candidates = [CountingMean() for _ in range(3)]
    forecaster = TrafficForecaster(*(SelectorPredictor((c,)) for c in candidates))
    history = [
        TrafficObservation(duration_s=60, num_req=10 + i % 7, isl=100, osl=10) for i in range(5000)
    ]
    assert forecaster.warm_up(history) == 5000
    assert [c.forecasts for c in candidates] == [SCORED_WARM_UP_WINDOWS] * 3
    assert [len(c.values) for c in candidates] == [5000] * 3  # every window trained them
    assert all(p.scored for p in (forecaster.num_req, forecaster.isl, forecaster.osl))


@pytest.mark.parametrize(
    "kind", ["constant", "arima", "kalman", "holt_winters", "periodic", "selector"]
)
def test_idle_carry_forward_for_every_predictor_kind(kind: str) -> None:
    """Spec §7.1: idle windows after traffic push the last ISL/OSL; leading idle seeds nothing."""
    forecaster = TrafficForecaster.from_config(PlannerConfig(load_predictor=kind))
    for num_req, isl, osl in ((0, 0, 0), (10, 512, 128), (0, 0, 0), (0, 0, 0)):
        forecaster.observe(TrafficObservation(duration_s=60, num_req=num_req, isl=isl, osl=osl))
    assert forecaster.num_req.values == [10.0, 0.0, 0.0]
    assert forecaster.isl.values == [512.0] * 3
    assert forecaster.osl.values == [128.0] * 3
    if isinstance(forecaster.isl, SelectorPredictor):
        assert all(c.values == [512.0] * 3 for c in forecaster.isl.candidates)


def test_dynamo_trace_buckets_from_the_raw_request_end_events() -> None:
    """Spec §7.6 computed straight from the file: only ``request_end`` events, arrival
    ``request.request_received_ms``, ISL ``request.replay.input_length``, OSL
    ``request.output_tokens``, origin the earliest arrival, every interval emitted."""
    import gzip
    import json
    import math

    rows = []
    with gzip.open(TRACES / "dynamo_request_trace_v1_sample.jsonl.gz", "rt") as f:
        for line in f:
            event = json.loads(line)["event"]
            if event["event_type"] == "request_end":
                request = event["request"]
                rows.append(
                    (
                        request["request_received_ms"],
                        request["replay"]["input_length"],
                        request["output_tokens"],
                    )
                )
    origin = min(r[0] for r in rows)
    buckets: dict[int, list[tuple[int, int, int]]] = {}
    for row in rows:
        buckets.setdefault(math.floor((row[0] - origin) / 30_000), []).append(row)
    expected = []
    for index in range(max(buckets) + 1):
        members = buckets.get(index, [])
        n = len(members)
        expected.append(
            (
                float(n),
                sum(m[1] for m in members) / n if n else 0.0,
                sum(m[2] for m in members) / n if n else 0.0,
            )
        )
    obs = trace_observations(read_trace(TRACES / "dynamo_request_trace_v1_sample.jsonl.gz"), 30)
    got = [(o.num_req, o.isl, o.osl) for o in obs]
    assert len(got) == len(expected) and sum(n for n, _, _ in got) == 17
    for (n, isl, osl), (en, eisl, eosl) in zip(got, expected, strict=True):
        assert n == en and abs(isl - eisl) < 1e-9 * max(1.0, eisl)
        assert abs(osl - eosl) < 1e-9 * max(1.0, eosl)


@pytest.mark.parametrize("interval", [0.1, 0.3, 0.7, 1.1, 2.3, 4.1])
def test_arrivals_on_a_fractional_second_boundary_open_their_bucket(
    tmp_path: Path, interval: float
) -> None:
    """One request per interval, at Unix milliseconds: ``interval · 1000`` is not exact in a
    float (1.1 · 1000 = 1100.0000000000002) and seconds since 1970 are good to 0.2 µs, so each
    arrival exactly on a boundary landed a hair before it (1.1 s gave [2, 1, 1, …, 0])."""
    width_ms = round(interval * 1000)
    start = 1_708_031_021_982
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            f'{{"timestamp": {start + k * width_ms}, "input_length": 10, "output_length": 1}}\n'
            for k in range(30)
        )
    )
    assert [o.num_req for o in trace_observations(read_trace(trace), interval)] == [1.0] * 30
    rows = [(k * width_ms, 10, 1) for k in range(30)]  # relative ms straight to the bucketing
    assert [o.num_req for o in bucket_requests(rows, interval)] == [1.0] * 30


def test_an_interval_too_long_to_count_in_nanoseconds_is_rejected() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        bucket_requests([(0, 1, 1), (1e300, 1, 1)], 1e296)
