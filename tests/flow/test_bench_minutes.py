"""The closed-loop benchmark's per-minute loads (the hindsight row's input), and the fleets the
hindsight plan sizes from them: its own, agg engines that carry both jobs, the static rows'."""

from __future__ import annotations

import pytest

from bench.closed_loop import agg_engine_rate, hindsight_replicas, minute_loads, run_bench
from flows.scenario import Scenario, fleet_spec, load_requests, run_schedule
from schemas import PlannerConfig
from schemas.trace import TraceRequest
from sim.workload import LengthSampler, poisson_load

SPEC = fleet_spec(PlannerConfig(mode="agg"))


def test_minutes_follow_the_replay_clock_and_cover_the_whole_replay() -> None:
    arrivals = [(90.0, 100, 10), (100.0, 300, 30), (179.9, 200, 20), (180.0, 50, 5)]
    requests = [TraceRequest(arrival_s=t, isl=i, osl=o) for t, i, o in arrivals]
    scenario = Scenario(requests, SPEC, end_s=360.0)
    assert minute_loads(scenario) == [
        (0.0, 0.0, 0.0),  # before the first arrival: minutes count from the clock's 0
        (2 / 60, 200.0, 20.0),
        (1 / 60, 200.0, 20.0),  # 179.9 s is still minute 2
        (1 / 30, 50.0, 5.0),  # 180 s opens minute 3, which the trace's span (210 s) covers 30 s of
        (0.0, 0.0, 0.0),  # padded with idle minutes up to end_s
        (0.0, 0.0, 0.0),
    ]


def test_an_empty_replay_has_idle_minutes() -> None:
    assert minute_loads(Scenario([], SPEC, end_s=120.0)) == [(0.0, 0.0, 0.0)] * 2


def steady(rate_rps: float, span_s: float, isl: int = 500, osl: int = 50) -> list[TraceRequest]:
    count = round(rate_rps * span_s)
    return [TraceRequest(arrival_s=i / rate_rps, isl=isl, osl=osl) for i in range(count)]


@pytest.mark.parametrize("span_s", [90.0, 141.0, 180.0])
def test_the_last_partial_minute_counts_over_the_span_the_trace_covers(span_s: float) -> None:
    # a steady 40 req/s that stops part-way through a minute: that minute is just as busy
    scenario = Scenario(steady(40.0, span_s), SPEC)
    rates = [rps for rps, _, _ in minute_loads(scenario)]
    busy = rates[: int(-(-span_s // 60))]
    assert busy == pytest.approx([40.0] * len(busy))
    assert rates[len(busy) :] == [0.0] * (len(rates) - len(busy))


def test_the_hindsight_plan_keeps_the_fleet_of_a_steady_load_to_its_last_minute() -> None:
    config = PlannerConfig(mode="disagg")
    scenario = Scenario(steady(50.0, 150.0, isl=2000, osl=300), fleet_spec(config))
    # minute 2 is half covered, at the same rate: it needs the same fleet; minute 3 is idle
    assert hindsight_replicas(scenario, config) == [(2, 2), (2, 2), (2, 2), (1, 1)]


AGG = PlannerConfig(mode="agg", ttft_ms=500, itl_ms=50)


def attainment(scenario: Scenario, fleet: tuple[int, int]) -> float:
    result = run_schedule(scenario, [(0.0, *fleet)], name="static").result
    assert result.sla_attainment is not None
    return result.sla_attainment


def test_an_agg_hindsight_fleet_runs_prefill_and_decode_on_the_same_engines() -> None:
    # 40 req/s of 3000-token prompts: 2.1 engines of prefill and 0.8 of decode, each at its
    # full throughput; on agg engines the two share the time, and prefill stretches every ITL
    requests = load_requests(synthetic="poisson", rate_rps=40.0, duration_s=180.0)
    scenario = Scenario(requests, fleet_spec(AGG))
    engines = max(d for _, d in hindsight_replicas(scenario, AGG))
    assert attainment(scenario, (0, engines)) > 0.95
    assert attainment(scenario, (0, engines - 1)) < 0.5  # the fewest: one fewer misses ITL


@pytest.mark.parametrize(("isl", "osl"), [(3000, 150), (1000, 200), (500, 50), (300, 500)])
def test_an_agg_engine_holds_the_targets_below_its_rate_and_not_above(isl: int, osl: int) -> None:
    # long and short prompts, short outputs (several prompts per iteration), and long ones
    # (the batch reaches max_num_seqs)
    spec = fleet_spec(AGG)
    rate = agg_engine_rate(spec, isl, osl, AGG.itl_ms)
    lengths = LengthSampler(isl_mean=isl, osl_mean=osl)
    below, above = (
        Scenario(poisson_load(rate * f, 240.0, lengths, seed=1), spec) for f in (0.8, 1.25)
    )
    assert attainment(below, (0, 1)) > 0.95
    assert attainment(above, (0, 1)) < 0.5


def test_the_static_mean_fleet_averages_the_minutes_the_trace_covers() -> None:
    # two minutes that need 3 prefill engines, then the idle drain margin at the floor fleet:
    # averaged with it, the mean was 2.33 prefill engines, rounded to 2 (SLA well below 95 %)
    config = PlannerConfig(mode="disagg")
    requests = load_requests(synthetic="poisson", rate_rps=45.0, duration_s=120.0)
    scenario = Scenario(requests, fleet_spec(config))
    assert hindsight_replicas(scenario, config) == [(3, 1), (3, 1), (1, 1)]
    rows = {outcome.name: outcome.result for outcome in run_bench(scenario, config)}
    assert rows["static mean"].max_replicas == {"prefill": 3, "decode": 1}
    assert rows["static mean"].sla_attainment == rows["static peak"].sla_attainment == 1.0
