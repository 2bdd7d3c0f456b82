"""Ours: SLA load ticks also read the recent request rate (``load_rate_window_seconds``,
default 30 s; reference 0 = off).

The latency estimates see queues, not utilisation: a prefill engine that has just drained its
queue looks idle whether it is 20 % or 95 % busy, so the reference drops replicas until a queue
reappears; and a load step shows in the estimates only once the queues have grown. The rate,
sized with the throughput loop's own capacity model, covers both: a role that cannot carry it
scales up at once, and a scale-down must leave the survivors within ``load_rate_utilization``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from operators.cadence import Cadence
from operators.state_machine import PlannerStateMachine
from operators.tick import FpmObservations, ScheduledTick, TickInput
from schemas import (
    EngineCapabilities,
    ForwardPassMetrics,
    PlannerConfig,
    TickRecord,
    TrafficObservation,
    WorkerCapabilities,
    WorkerCounts,
)
from tests.core.planner_inputs import core, fpm

CAPS = WorkerCapabilities(
    prefill=EngineCapabilities(num_gpu=1, max_num_batched_tokens=8192, max_num_seqs=256)
)
TRAINING = [
    fpm(prefill_tokens=t, prefill_requests=1, wall_time=0.02 + 2e-5 * t)
    for t in (1000, 2000, 4000, 6000, 8000)
]
"""wall = 20 ms + 20 µs/token: eight 1 000-token prompts per 180 ms pass = 44.4 req/s/engine."""

ENGINE_RPS = 8 / 0.18


def machine(**overrides) -> PlannerStateMachine:
    values = {
        "mode": "prefill",
        "load_rate_window_seconds": 30.0,
        "prefill_capacity_batching": True,
        "max_load_step": 3,
        **overrides,
    }
    core_ = core(CAPS, **values)
    core_.load_benchmark_fpms("prefill", TRAINING)
    core_.initial_tick(0.0)
    return core_


def cool(worker: str) -> ForwardPassMetrics:
    """A prefill engine with nothing queued: far within the 500 ms TTFT SLA."""
    return fpm(worker_id=worker, prefill_tokens=1000, prefill_requests=1, wall_time=0.04)


def load_tick(core_: PlannerStateMachine, now_s: float, n: int, rps: float | None):
    traffic = None
    if rps is not None:
        traffic = TrafficObservation(duration_s=30.0, num_req=rps * 30.0, isl=1000, osl=100)
    tick = ScheduledTick(
        at_s=now_s,
        run_load_scaling=True,
        need_traffic_metrics=traffic is not None,
        traffic_metrics_duration_s=30.0 if traffic is not None else 0.0,
        need_worker_states=True,
        need_worker_fpm=True,
    )
    engines = {(f"w{i}", 0): cool(f"w{i}") for i in range(n)}
    return core_.on_tick(
        tick,
        TickInput(
            now_s=now_s,
            traffic=traffic,
            worker_counts=WorkerCounts(ready_num_prefill=n),
            fpm_observations=FpmObservations(prefill=engines),
        ),
    )


# -- cadence -----------------------------------------------------------------------------------


def test_load_ticks_ask_for_the_recent_window() -> None:
    cfg = PlannerConfig(
        optimization_target="sla",
        enable_load_scaling=True,
        throughput_adjustment_interval_seconds=60,
        load_rate_window_seconds=30,
    )
    cadence = Cadence.starting_at(cfg, 0.0)
    first = cadence.next_tick(cfg)
    assert (first.need_traffic_metrics, first.traffic_metrics_duration_s) == (True, 30.0)
    for _ in range(11):  # to the merged load + throughput tick at 60 s
        tick = cadence.next_tick(cfg)
        cadence.advance(cfg, tick, tick.at_s)
    merged = cadence.next_tick(cfg)
    assert merged.at_s == 60.0 and merged.run_throughput_scaling
    assert merged.traffic_metrics_duration_s == 60.0  # the forecaster's window wins
    for off in (cfg.reference_variant(), cfg.model_copy(update={"optimization_target": "latency"})):
        assert not Cadence.starting_at(off, 0.0).next_tick(off).need_traffic_metrics


# -- scale up on the rate ----------------------------------------------------------------------


def test_a_role_that_cannot_carry_the_rate_scales_up_before_its_queues_show_it() -> None:
    core_ = machine()
    effects = load_tick(core_, 30.0, 2, rps=200.0)  # needs ceil(200 / 44.4) = 5
    assert effects.diagnostics.estimated_ttft_ms < 500  # the latency rule sees nothing yet
    assert (effects.scale_to.num_prefill, effects.scale_to.reason) == (5, "scale_up")
    # at most max_load_step at once
    effects = load_tick(machine(), 30.0, 1, rps=400.0)
    assert effects.scale_to.num_prefill == 4


def test_no_rate_before_a_full_window_or_without_traffic() -> None:
    assert load_tick(machine(), 25.0, 1, rps=200.0).scale_to is None  # partial window
    assert load_tick(machine(), 30.0, 1, rps=None).scale_to is None
    assert load_tick(machine(load_rate_window_seconds=0.0), 30.0, 1, rps=200.0).scale_to is None


# -- scale down within the utilisation bound ---------------------------------------------------


@pytest.mark.parametrize(
    ("rps", "allowed"),
    [
        (0.5 * 2 * ENGINE_RPS, True),  # two survivors at 50 %
        (0.89 * 2 * ENGINE_RPS, True),
        (0.91 * 2 * ENGINE_RPS, False),  # above load_rate_utilization = 0.9
    ],
)
def test_scale_down_leaves_survivors_within_the_utilisation_bound(rps, allowed) -> None:
    effects = load_tick(machine(scale_down_stabilization_seconds=0.0), 30.0, 3, rps=rps)
    if allowed:
        assert (effects.scale_to.num_prefill, effects.scale_to.reason) == (2, "scale_down")
    else:
        assert effects.scale_to is None
        assert effects.diagnostics.load_decision_reason == "scale_down_refused_rate"


def test_reference_drops_replicas_whatever_the_rate() -> None:
    core_ = machine(load_rate_window_seconds=0.0, scale_down_stabilization_seconds=0.0)
    assert load_tick(core_, 30.0, 3, rps=2.5 * ENGINE_RPS).scale_to.num_prefill == 2


def test_the_floor_is_the_highest_of_the_stabilization_window() -> None:
    core_ = machine(scale_down_stabilization_seconds=20.0)
    busy, light = 2.5 * ENGINE_RPS, 0.5 * ENGINE_RPS
    assert load_tick(core_, 30.0, 3, rps=busy).scale_to is None  # 3 engines needed at 90 %
    for now in (35.0, 40.0, 45.0, 50.0):  # light again, but the busy tick is within 20 s
        effects = load_tick(core_, now, 3, rps=light)
        assert effects.scale_to is None, now
        assert effects.diagnostics.load_decision_reason == "scale_down_refused_rate"
    effects = load_tick(core_, 55.0, 3, rps=light)
    assert (effects.scale_to.num_prefill, effects.scale_to.reason) == (2, "scale_down")


def queued(worker: str, tokens: int) -> ForwardPassMetrics:
    return fpm(worker_id=worker, queued_prefill=tokens, prefill_tokens=1000, prefill_requests=1)


def burst_tick(core_: PlannerStateMachine, rps: float | None):
    traffic = (
        None
        if rps is None
        else TrafficObservation(duration_s=30.0, num_req=rps * 30.0, isl=1000, osl=100)
    )
    tick = ScheduledTick(
        at_s=30.0,
        run_load_scaling=True,
        need_traffic_metrics=traffic is not None,
        traffic_metrics_duration_s=30.0 if traffic is not None else 0.0,
        need_worker_fpm=True,
    )
    engines = {(f"w{i}", 0): queued(f"w{i}", 60_000) for i in range(2)}  # TTFT ~1.6 s each
    return core_.on_tick(
        tick,
        TickInput(
            now_s=30.0,
            traffic=traffic,
            worker_counts=WorkerCounts(ready_num_prefill=2),
            fpm_observations=FpmObservations(prefill=engines),
        ),
    )


def test_a_burst_the_rate_fits_buys_one_replica_not_a_proportional_step() -> None:
    # without the rate: ceil(2 × 1.6 s / 0.5 s) − 2 = 5 more, capped at 3
    assert burst_tick(machine(), rps=None).scale_to.num_prefill == 5
    # the last 30 s averaged 50 % of two engines: the queue is a burst's, it drains long
    # before a new replica starts; one more replica, not three
    assert burst_tick(machine(), rps=0.5 * 2 * ENGINE_RPS).scale_to.num_prefill == 3
    # and a rate above what two engines carry sizes the step by the rate: ceil(4.5) = 5
    assert burst_tick(machine(), rps=4.5 * ENGINE_RPS).scale_to.num_prefill == 5


@pytest.mark.parametrize("throughput_interval", [20.0, 180.0])
def test_the_rate_window_keeps_every_request_window_it_reads(throughput_interval: float) -> None:
    # the deployment kept only a throughput interval of 5 s request windows: with a 20 s
    # interval, 30 s of traffic summed 25 s of requests and under-stated the rate by a sixth
    from operators.deployment import DeploymentPlanner
    from operators.window import TickWindow
    from schemas import RequestRecord

    config = PlannerConfig(
        mode="prefill",
        throughput_adjustment_interval_seconds=throughput_interval,
        load_adjustment_interval_seconds=5,
        load_rate_window_seconds=30,
    )
    planner = DeploymentPlanner("d", config, window_s=5.0)
    for i in range(1, 13):  # one minute at 2 req/s
        window = TickWindow(requests=[RequestRecord(isl=1000, osl=100) for _ in range(10)])
        planner.on_window(5.0 * i, window)
    traffic = planner.traffic_over(30.0, 60.0)
    assert traffic is not None and traffic.num_req / traffic.duration_s == pytest.approx(2.0)


def merged_minute(busy: Callable[[float], bool], **config: Any) -> tuple[Any, list[TickRecord]]:
    """A minute of two prefill engines passing 1000-token prompts, every 5 s, with 1000
    requests in each window that ``busy(end)`` picks: the planner and its records. The minute
    ends in a load tick merged with a throughput tick (60 s interval, 30 s rate window)."""
    from operators.deployment import DeploymentPlanner
    from operators.window import TickWindow, fold_event
    from schemas import parse_event

    planner = DeploymentPlanner(
        "d",
        PlannerConfig(
            mode="prefill",
            optimization_target="sla",
            enable_load_scaling=True,
            enable_throughput_scaling=True,
            throughput_adjustment_interval_seconds=60,
            load_rate_window_seconds=30,
            prefill_capacity_batching=True,
            max_gpu_budget=-1,
            capabilities=CAPS,
            **config,
        ),
        window_s=5.0,
    )
    planner.machine.load_benchmark_fpms("prefill", TRAINING)
    prefilling = {"num_prefill_requests": 1, "sum_prefill_tokens": 1000}
    records = []
    for i in range(1, 13):
        end = 5.0 * i
        events = [{"type": "inventory", "payload": {"ready_num_prefill": 2}}]
        events += [
            {
                "type": "fpm",
                "payload": {
                    "role": "prefill",
                    "fpm": {"worker_id": w, "wall_time": 0.04, "scheduled_requests": prefilling},
                },
            }
            for w in ("w0", "w1")
        ]
        if busy(end):
            events += [{"type": "request", "payload": {"isl": 1000, "osl": 100}}] * 1000
        window = TickWindow()
        for event in events:
            line = {"deployment": "d", "time": end - 0.5, **event}
            window = fold_event(window, parse_event(json.dumps(line)))
        records.append(planner.on_window(end, window))
    return planner, records


def test_a_load_tick_merged_with_a_throughput_tick_reads_the_rate_window() -> None:
    # the merged tick reads the throughput interval's traffic (60 s) for the forecaster; the
    # rate must still be the last 30 s, not the 60 s average that a quiet first half halves
    # (quiet for 30 s, then 200 req/s: 5 engines' worth, 3 on average)
    _, records = merged_minute(lambda end: end > 30.0, max_load_step=3)
    merged = records[-1]
    assert merged.ran_load and merged.ran_throughput
    assert merged.decision is not None and merged.decision.num_prefill == 5  # 2 + max_load_step


def test_a_merged_tick_whose_rate_window_is_unknown_sizes_nothing_for_the_rate() -> None:
    # 30 s of 200 req/s, then the request feed stops while the engines keep prefilling: at the
    # merged tick (60 s) the last 30 s are unknown traffic. The rate guard must size nothing,
    # not fall back to the throughput interval's 60 s average (100 req/s: 3 engines' worth).
    planner, records = merged_minute(lambda end: end <= 30.0)
    record = records[-1]
    assert record is not None and record.ran_load and record.ran_throughput
    assert planner.traffic_over(30.0, 60.0, readings_stand=True) is None  # unknown
    assert record.observed_traffic is not None and record.observed_traffic.num_req == 6000
    assert planner.machine.load.rate_guard.needs == {}
