"""The planner core, tick in → effects out (reference spec §16.3, with the §16.1a errata).

Every case drives :class:`PlannerStateMachine` through ``on_tick`` with real perf models and a
real constant predictor; the numbers are exact consequences of the spec formulas on the
training data (OLS fits of exactly linear data).
"""

from __future__ import annotations

import math
import pickle

import pytest

from operators.state_machine import PlannerStateMachine
from operators.tick import FpmObservations, ScheduledTick, TickInput
from schemas import (
    EngineCapabilities,
    PlannerConfig,
    TrafficObservation,
    WorkerCapabilities,
    WorkerCounts,
)
from tests.core.planner_inputs import (
    AGG_TRAINING,
    DECODE_TRAINING,
    PREFILL_TRAINING,
    agg_caps,
    core,
    default_caps,
    engines,
    fpm,
    run_tick,
    saturated_prefill,
)

TRAFFIC = TrafficObservation(duration_s=60, num_req=100, isl=1000, osl=150)


def prefill_core(**overrides) -> PlannerStateMachine:
    machine = core(mode="prefill", **overrides)
    machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
    return machine


def decode_core(caps=None, **overrides) -> PlannerStateMachine:
    machine = core(caps, mode="decode", **overrides)
    machine.load_benchmark_fpms("decode", DECODE_TRAINING)
    return machine


def hot_prefill(**fields):
    values = {
        "queued_prefill": 10_000,
        "prefill_tokens": 500,
        "prefill_requests": 1,
        "wall_time": 0.5,
    }
    values.update(fields)
    return fpm(**values)


# --- case 1, 2, 13: cadence ----------------------------------------------------------------


class TestCadence:
    def test_both_loops_first_tick_is_a_load_tick_without_traffic(self):
        tick = core().initial_tick(100.0)
        assert (tick.at_s, tick.run_load_scaling, tick.run_throughput_scaling) == (
            105.0,
            True,
            False,
        )
        assert tick.need_worker_fpm and tick.need_worker_states
        assert not tick.need_traffic_metrics

    @pytest.mark.parametrize("interval", [5.0, 7.0])
    def test_load_only_ticks_scrape_traffic_over_the_load_interval(self, interval):
        machine = core(enable_throughput_scaling=False, load_adjustment_interval_seconds=interval)
        tick = machine.initial_tick(0.0)
        assert tick.at_s == interval and tick.need_worker_fpm
        assert tick.need_traffic_metrics and tick.traffic_metrics_duration_s == interval

    def test_throughput_only_still_schedules_load_ticks_for_training(self):
        tick = core(enable_load_scaling=False).initial_tick(0.0)
        assert (tick.at_s, tick.run_load_scaling, tick.need_worker_fpm) == (5.0, True, True)
        assert not tick.run_throughput_scaling

    def test_fpm_tick_trains_the_model_and_schedules_the_next_load_tick(self):
        machine = core(mode="prefill")
        assert machine.prefill_model.num_observations == 0
        one = {("w1", 0): fpm(prefill_tokens=500, prefill_requests=1, wall_time=0.5)}
        run_tick(machine, now_s=5.0, prefill=one, counts=WorkerCounts(ready_num_prefill=1))
        assert machine.prefill_model.num_observations == 1
        effects = run_tick(
            machine, now_s=10.0, prefill=one, counts=WorkerCounts(ready_num_prefill=1)
        )
        assert effects.next_tick.at_s == 15.0 and effects.next_tick.need_worker_fpm

    def test_coincident_cadences_merge_and_the_traffic_tick_repeats_every_interval(self):
        machine = prefill_core()
        tick = machine.initial_tick(0.0)
        seen = []
        while tick.at_s <= 130.0:
            seen.append((tick.at_s, tick.run_load_scaling, tick.run_throughput_scaling))
            tick = machine.on_tick(
                tick,
                TickInput(now_s=tick.at_s, traffic=TRAFFIC if tick.need_traffic_metrics else None),
            ).next_tick
        throughput_ticks = [at for at, _, thr in seen if thr]
        assert throughput_ticks == [60.0, 120.0]
        assert (60.0, True, True) in seen and (120.0, True, True) in seen
        assert [at for at, _, _ in seen] == [5.0 * i for i in range(1, 27)]

    def test_merge_tolerance_is_half_a_second(self):
        machine = core(
            load_adjustment_interval_seconds=5.0, throughput_adjustment_interval_seconds=60.4
        )
        machine.initial_tick(0.0)
        machine.cadence.next_load_s = 60.0
        tick = machine.cadence.next_tick(machine.config)
        assert (tick.at_s, tick.run_load_scaling, tick.run_throughput_scaling) == (60.0, True, True)
        machine.cadence.next_throughput_s = 60.6
        assert not machine.cadence.next_tick(machine.config).run_throughput_scaling

    def test_a_load_tick_due_within_the_tolerance_after_a_throughput_tick_merges_into_it(self):
        # protects: the merge tolerance applies to the later load cadence too (one tick, both)
        machine = core()
        machine.initial_tick(0.0)
        machine.cadence.next_throughput_s = 60.0
        machine.cadence.next_load_s = 60.3
        tick = machine.cadence.next_tick(machine.config)
        assert (tick.at_s, tick.run_load_scaling, tick.run_throughput_scaling) == (60.0, True, True)
        machine.cadence.next_load_s = 60.6  # past the 0.5 s tolerance: a tick of its own
        tick = machine.cadence.next_tick(machine.config)
        assert (tick.run_load_scaling, tick.run_throughput_scaling) == (False, True)

    def test_after_a_late_tick_the_next_load_tick_is_one_interval_after_it_ran(self):
        # protects: a tick run late (due 55 s, run at 205 s) reschedules from when it ran, not
        # from when it was due (which would leave the load loop 150 s behind, firing at once)
        machine = core()
        machine.initial_tick(0.0)
        machine.cadence.next_load_s = 55.0
        tick = machine.cadence.next_tick(machine.config, due_by_s=205.0)
        assert tick.at_s == 55.0 and tick.run_load_scaling and tick.run_throughput_scaling
        machine.cadence.advance(machine.config, tick, now_s=205.0)
        assert machine.cadence.next_load_s == 205.0 + 5.0
        assert machine.cadence.next_throughput_s == 205.0 + 60.0


# --- cases 3-9, 15, 16: load scaling -------------------------------------------------------


def test_case3_prefill_scale_up_when_every_engine_breaks_the_ttft_sla():
    machine = prefill_core(ttft_ms=5.0)
    effects = run_tick(
        machine, prefill={("w1", 0): hot_prefill()}, counts=WorkerCounts(ready_num_prefill=1)
    )
    assert effects.scale_to.num_prefill == 2 and effects.scale_to.num_decode is None
    assert (effects.scale_to.source, effects.scale_to.reason) == ("load", "scale_up")
    assert effects.diagnostics.load_decision_reason == "scale_up"
    # queue 10 000 + avg ISL 1333.3 in 2048-token chunks on the refitted model
    assert effects.diagnostics.estimated_ttft_ms == pytest.approx(11345.0, rel=1e-9)


def test_case4_untrained_model_is_insufficient_data_and_disabled_load_scaling_says_so():
    machine = core(mode="prefill")
    effects = run_tick(
        machine,
        prefill={("w1", 0): fpm(queued_prefill=5000, prefill_tokens=100, wall_time=0.1)},
        counts=WorkerCounts(ready_num_prefill=1),
    )
    assert effects.scale_to is None
    assert effects.diagnostics.load_decision_reason == "insufficient_data"

    machine = prefill_core(enable_load_scaling=False)
    effects = run_tick(
        machine, prefill={("w1", 0): hot_prefill()}, counts=WorkerCounts(ready_num_prefill=1)
    )
    assert effects.scale_to is None
    assert effects.diagnostics.load_decision_reason == "disabled"
    assert machine.prefill_model.num_observations == 6  # still trained


def test_case5_decode_scale_up_when_every_engine_breaks_the_itl_sla():
    machine = decode_core(itl_ms=5.0)
    hot = fpm(decode_kv=30_000, queued_decode_kv=20_000, decode_requests=30, wall_time=0.3)
    effects = run_tick(machine, decode={("w1", 0): hot}, counts=WorkerCounts(ready_num_decode=1))
    assert effects.scale_to.num_decode == 2 and effects.scale_to.num_prefill is None
    assert effects.diagnostics.load_decision_reason == "scale_up"
    assert effects.diagnostics.estimated_itl_ms > 500


def decode_tick(machine, n: int, kv: int):
    return run_tick(
        machine,
        decode=engines(
            n, decode_kv=kv, decode_requests=max(1, kv // 1000), wall_time=1e-5 * kv + 0.001
        ),
        counts=WorkerCounts(ready_num_decode=n),
    )


class TestCase6DecodeConsolidation:
    def test_light_load_scales_two_to_one(self):
        machine = decode_core(default_caps(max_kv_tokens=100_000), itl_ms=100.0)
        effects = decode_tick(machine, 2, 1_500)
        assert effects.scale_to.num_decode == 1
        assert effects.diagnostics.load_decision_reason == "scale_down"
        assert effects.diagnostics.estimated_itl_ms == pytest.approx(27.43, abs=0.01)

    def test_survivor_itl_above_sla_margin_refuses(self):
        machine = decode_core(default_caps(max_kv_tokens=100_000), itl_ms=100.0)
        effects = decode_tick(machine, 2, 8_000)
        assert effects.scale_to is None
        assert effects.diagnostics.load_decision_reason == "scale_down_refused_consolidation"
        # the survivor would hold 16 000 KV tokens: ITL ≈ 171 ms ≥ 80 ms
        assert machine.decode_model.estimate_next_itl(16_000, 0) == pytest.approx(0.171, abs=1e-3)

    def test_survivor_kv_beyond_the_cache_refuses(self):
        machine = decode_core(default_caps(max_kv_tokens=100_000), itl_ms=10_000.0)
        effects = decode_tick(machine, 2, 60_000)
        assert effects.scale_to is None
        assert effects.diagnostics.load_decision_reason == "scale_down_refused_consolidation"

    def test_without_max_kv_only_the_sla_check_applies(self):
        machine = decode_core(itl_ms=100.0)
        assert decode_tick(machine, 2, 1_500).scale_to.num_decode == 1


def slow_prefill_core(ttft_ms: float, tokens=(500, 1000, 1500, 2000, 2500)) -> PlannerStateMachine:
    machine = core(mode="prefill", ttft_ms=ttft_ms)
    machine.load_benchmark_fpms(
        "prefill",
        [fpm(prefill_tokens=t, prefill_requests=1, wall_time=1e-5 * t + 1e-3) for t in tokens],
    )
    return machine


class TestCase7PrefillConsolidation:
    def tick(self, machine, n: int, queued: int):
        return run_tick(
            machine,
            prefill=engines(
                n, queued_prefill=queued, prefill_tokens=500, prefill_requests=1, wall_time=0.006
            ),
            counts=WorkerCounts(ready_num_prefill=n),
        )

    def test_n2_with_a_deep_queue_scales_up_not_down(self):
        # erratum §16.1a: ≈328 ms > 100 ms on every engine → scale UP to 3
        effects = self.tick(slow_prefill_core(100.0), 2, 30_000)
        assert effects.scale_to.num_prefill == 3
        assert effects.diagnostics.estimated_ttft_ms == pytest.approx(328.14, abs=0.01)

    def test_n2_with_empty_queues_scales_to_one(self):
        assert self.tick(slow_prefill_core(100.0), 2, 0).scale_to.num_prefill == 1

    def test_consolidation_inflates_the_queue_not_the_own_compute(self):
        assert self.tick(slow_prefill_core(100.0), 10, 2_000).scale_to.num_prefill == 9


class TestCase8QueueBudget:
    def tick(self, ttft_ms: float, queued: int):
        machine = slow_prefill_core(ttft_ms, tokens=(1500, 1750, 2000, 2250, 2500))
        assert machine.prefill_model.estimate_next_ttft(0, 2048) == pytest.approx(0.021)
        return run_tick(
            machine,
            prefill=engines(
                2, queued_prefill=queued, prefill_tokens=2000, prefill_requests=1, wall_time=0.021
            ),
            counts=WorkerCounts(ready_num_prefill=2),
        )

    def test_queue_induced_ttft_within_the_margin_allows_scale_down(self):
        # post TTFT ≈ 42 ms (> 40 = flat 80 %), queue part ≈ 21 ms < (50 − 21) × 0.8 = 23.2 ms
        effects = self.tick(50.0, 1_000)
        assert effects.scale_to.num_prefill == 1

    def test_own_compute_above_the_sla_scales_up(self):
        # erratum §16.1a: 21 ms > 15 ms on every engine → scale up to 3
        assert self.tick(15.0, 0).scale_to.num_prefill == 3


def test_case9_disagg_rejected_decode_fit_keeps_decode_and_scales_prefill():
    # erratum §16.1a: the loaded decode FPM makes the decode fit negative → rejected
    machine = core(ttft_ms=5.0, itl_ms=5.0)
    machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
    machine.load_benchmark_fpms("decode", DECODE_TRAINING)
    effects = run_tick(
        machine,
        prefill={("w1", 0): hot_prefill()},
        decode={
            ("w1", 0): fpm(decode_kv=5000, queued_decode_kv=3000, decode_requests=20, wall_time=0.6)
        },
        counts=WorkerCounts(ready_num_prefill=1, ready_num_decode=1),
    )
    target = effects.scale_to
    assert (target.num_prefill, target.num_decode) == (2, 1)
    assert (target.reason, target.prefill_reason, target.decode_reason) == (
        "scale_up",
        "scale_up",
        "insufficient_data",
    )
    assert not machine.decode_model.is_ready


def test_case15_fpm_from_fewer_workers_than_ready_is_a_mismatch():
    machine = prefill_core(ttft_ms=5.0)
    effects = run_tick(
        machine,
        prefill={("w1", 0): hot_prefill(), ("w2", 0): hot_prefill(worker_id="w2")},
        counts=WorkerCounts(ready_num_prefill=3),
    )
    assert effects.scale_to is None
    assert effects.diagnostics.load_decision_reason == "worker_count_mismatch"


AGG_CONSOLIDATION_TRAINING = [
    fpm(
        prefill_tokens=p,
        prefill_requests=1,
        decode_kv=d,
        decode_requests=10,
        wall_time=1e-4 * p + 1e-5 * d + 1e-3,
    )
    for p, d in ((100, 5000), (200, 15000), (300, 25000), (400, 35000), (500, 45000))
]


class TestCase16AggConsolidation:
    def tick(self, ttft_ms: float, sched_kv: int, queued_kv: int = 0, **overrides):
        caps = agg_caps(max_kv_tokens=100_000)
        machine = core(caps, mode="agg", ttft_ms=ttft_ms, itl_ms=1000.0, **overrides)
        machine.load_benchmark_fpms("decode", AGG_CONSOLIDATION_TRAINING)
        effects = run_tick(
            machine,
            decode=engines(
                2,
                prefill_tokens=200,
                prefill_requests=1,
                decode_kv=sched_kv,
                decode_requests=10,
                queued_decode_kv=queued_kv,
                wall_time=1e-4 * 200 + 1e-5 * sched_kv + 1e-3,
            ),
            counts=WorkerCounts(ready_num_decode=2),
        )
        return machine, effects

    def test_prefill_veto_blocks_the_decode_only_scale_down(self):
        machine, effects = self.tick(500.0, 30_000)
        assert effects.scale_to is None
        assert effects.diagnostics.load_decision_reason == "scale_down_refused_consolidation"
        # erratum §16.1a: T_own_post ≈ 628 ms > 500 ms at 60 000 decode KV
        own_post = machine.agg_model.estimate_next_ttft(0, 2048, 60_000)
        assert own_post * 1000 == pytest.approx(628.14, abs=0.01)

    def test_queued_decode_kv_counts_toward_the_survivor_when_queue_aware(self):
        # spec §4.6: only the scheduled decode KV moves to the survivor (5 000 · 2: allowed)
        _, effects = self.tick(500.0, 5_000, queued_kv=25_000)
        assert effects.scale_to.num_decode == 1
        # ours: the queued KV moves too (30 000 · 2 leaves the TTFT no budget)
        _, effects = self.tick(500.0, 5_000, queued_kv=25_000, queue_aware_estimates=True)
        assert effects.scale_to is None
        assert effects.diagnostics.load_decision_reason == "scale_down_refused_consolidation"

    def test_both_sides_safe_scale_down(self):
        _, effects = self.tick(2000.0, 10_000)
        assert effects.scale_to.num_decode == 1 and effects.scale_to.num_prefill is None
        assert effects.scale_to.reason == "scale_down"


# --- cases 10-12, 14, 17, 18: throughput scaling ------------------------------------------


def test_case10_throughput_only_prefill_decides():
    machine = prefill_core(enable_load_scaling=False)
    effects = run_tick(
        machine, now_s=60.0, traffic=TRAFFIC, counts=WorkerCounts(ready_num_prefill=1)
    )
    target = effects.scale_to
    # demand 100/60 = 1.667 rps, one engine 1/1.002 s = 0.998 rps → 2 (no SLA floor)
    assert (target.num_prefill, target.source, target.reason) == (2, "throughput", "scale")
    assert effects.diagnostics.engine_rps_prefill == pytest.approx(1 / 1.002)
    assert effects.diagnostics.throughput_decision_reason == "scale"


def test_case11_both_loops_set_lower_bounds_only():
    machine = core()
    machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
    machine.load_benchmark_fpms("decode", DECODE_TRAINING)
    assert machine.throughput_lower_bounds == {"prefill": 1, "decode": 1}
    effects = run_tick(
        machine,
        now_s=60.0,
        traffic=TRAFFIC,
        counts=WorkerCounts(ready_num_prefill=1, ready_num_decode=1),
    )
    assert effects.scale_to is None
    assert effects.diagnostics.throughput_decision_reason == "set_lower_bound"
    # decode: ctx 1075, kv cap 37, best batch 4 at 44 ms → 4/(150·0.044) = 0.606 rps → 3
    assert machine.throughput_lower_bounds == {"prefill": 2, "decode": 3}
    assert effects.diagnostics.engine_rps_decode == pytest.approx(4 / (150 * 0.044), rel=1e-6)
    diag = effects.diagnostics
    assert (diag.throughput_lower_bound_prefill, diag.throughput_lower_bound_decode) == (2, 3)


@pytest.mark.parametrize(("min_endpoint", "expected"), [(None, 1), (3, 3)])
def test_case12_engine_missing_the_sla_alone_does_not_multiply_replicas(min_endpoint, expected):
    machine = prefill_core(
        enable_load_scaling=False, ttft_ms=200.0, prefill_min_endpoint=min_endpoint
    )
    effects = run_tick(
        machine,
        now_s=60.0,
        traffic=TrafficObservation(duration_s=60, num_req=1, isl=1000, osl=150),
        counts=WorkerCounts(ready_num_prefill=2),
    )
    # one engine: 1.0 rps at TTFT 1002 ms (> 200 ms SLA); demand 0.017 rps
    assert effects.diagnostics.engine_rps_prefill == pytest.approx(0.998, abs=1e-3)
    assert effects.scale_to.num_prefill == expected


class TestCase14KvHitRate:
    def test_load_only_adopts_the_observed_hit_rate_and_has_no_predictors(self):
        machine = core(enable_throughput_scaling=False)
        assert machine.forecaster is None and machine.kv_hit_rate is None
        tick = machine.initial_tick(0.0)
        assert tick.need_traffic_metrics and not tick.run_throughput_scaling
        traffic = TrafficObservation(duration_s=5, num_req=0, isl=0, osl=0, kv_hit_rate=0.3)
        machine.on_tick(tick, TickInput(now_s=5.0, traffic=traffic))
        assert machine.kv_hit_rate == 0.3

    @pytest.mark.parametrize(
        "missing",
        [
            TrafficObservation(duration_s=5, num_req=0, isl=0, osl=0),
            TrafficObservation.model_construct(
                duration_s=5, num_req=0, isl=0, osl=0, kv_hit_rate=math.nan, accept_length=math.nan
            ),
        ],
    )
    def test_missing_or_nan_observations_keep_the_last_value(self, missing):
        machine = core(enable_throughput_scaling=False, speculative_nextn=2)
        tick = machine.initial_tick(0.0)
        first = TrafficObservation(
            duration_s=5, num_req=0, isl=0, osl=0, kv_hit_rate=0.42, accept_length=2.5
        )
        tick = machine.on_tick(tick, TickInput(now_s=5.0, traffic=first)).next_tick
        machine.on_tick(tick, TickInput(now_s=10.0, traffic=missing))
        assert (machine.kv_hit_rate, machine.accept_length) == (0.42, 2.5)

    def test_mixed_mode_adopts_the_hit_rate_on_the_throughput_tick(self):
        machine = prefill_core()
        run_tick(
            machine,
            prefill=engines(1, prefill_tokens=500, prefill_requests=1, wall_time=0.502),
            counts=WorkerCounts(ready_num_prefill=1),
        )
        assert machine.kv_hit_rate is None
        traffic = TrafficObservation(duration_s=60, num_req=100, isl=1000, osl=150, kv_hit_rate=0.6)
        effects = run_tick(
            machine, now_s=60.0, traffic=traffic, counts=WorkerCounts(ready_num_prefill=1)
        )
        assert machine.kv_hit_rate == 0.6
        assert machine.forecaster.num_req.values == [100.0]
        assert effects.diagnostics.predicted_kv_hit_rate == 0.6

    def test_warm_up_feeds_the_predictors_but_never_the_hit_rate(self):
        machine = core()
        fed = machine.warm_up_predictors(
            TrafficObservation(
                duration_s=60, num_req=50 * i, isl=1000, osl=150, kv_hit_rate=0.1 * i
            )
            for i in range(1, 4)
        )
        assert fed == 3
        assert len(machine.forecaster.num_req.values) == 3
        assert machine.forecaster.isl.values == [1000.0] * 3
        assert machine.kv_hit_rate is None

    def test_throughput_diagnostics_report_the_hit_rate_in_use(self):
        machine = prefill_core(enable_load_scaling=False)
        traffic = TrafficObservation(duration_s=60, num_req=100, isl=1000, osl=150, kv_hit_rate=0.4)
        effects = run_tick(
            machine, now_s=60.0, traffic=traffic, counts=WorkerCounts(ready_num_prefill=1)
        )
        assert effects.diagnostics.predicted_kv_hit_rate == 0.4

    def test_a_high_hit_rate_needs_fewer_prefill_replicas(self):
        replicas = {}
        for hit, ready in ((0.0, 30), (0.8, 5)):  # ready: the §5.4 change cap (8) stays out
            machine = prefill_core(enable_load_scaling=False)
            traffic = TrafficObservation(
                duration_s=60, num_req=500, isl=4000, osl=150, kv_hit_rate=hit
            )
            counts = WorkerCounts(ready_num_prefill=ready)
            effects = run_tick(machine, now_s=60.0, traffic=traffic, counts=counts)
            replicas[hit] = effects.scale_to.num_prefill
        # no hit: 4000 tokens = 2048 + 1952 → 4.004 s → 8.33 rps / 0.2498 = 34
        # hit 0.8: 800 tokens → 0.802 s → 8.33 rps / 1.2469 = 7
        assert replicas == {0.0: 34, 0.8: 7}


def test_case17_agg_throughput_only_decides():
    machine = core(mode="agg", enable_load_scaling=False)
    machine.load_benchmark_fpms("decode", AGG_TRAINING)
    effects = run_tick(
        machine, now_s=60.0, traffic=TRAFFIC, counts=WorkerCounts(ready_num_decode=1)
    )
    target = effects.scale_to
    assert target.num_prefill is None
    rps = effects.diagnostics.engine_rps_decode
    assert effects.diagnostics.engine_rps_prefill == rps
    # case 12's p and d are collinear (d = 10 p): the fit is the min-norm split of 0.002·p,
    # wall = 0.001 + 0.002·(p + 10 d)/101. Batch 1 (1000/150 prefill tokens a pass, 1000 + 75
    # KV tokens) already misses the 50 ms ITL, so its decode egress 1/(150·wall) is the rate
    forward_s = 0.001 + 0.002 * (1000 / 150 + 10 * (1000 + 75)) / 101
    assert rps == pytest.approx(1 / (150 * forward_s), rel=1e-9)
    assert math.ceil((100 / 60) / rps) > 1 + 8  # 54 engines needed: the per-tick cap binds
    assert target.num_decode == 1 + 8  # §5.4: at most max_throughput_scaling_replicas per tick


class TestCase18Diagnostics:
    def test_diagnostics_reset_every_tick(self):
        machine = prefill_core(ttft_ms=5.0)
        first = run_tick(
            machine, prefill={("w1", 0): hot_prefill()}, counts=WorkerCounts(ready_num_prefill=1)
        )
        assert first.diagnostics.estimated_ttft_ms is not None
        idle = machine.on_tick(
            ScheduledTick(at_s=10.0, need_worker_states=True), TickInput(now_s=10.0)
        )
        assert idle.scale_to is None
        assert idle.diagnostics.estimated_ttft_ms is None
        assert idle.diagnostics.load_decision_reason is None

    def test_missing_fpms_are_no_fpm_data(self):
        machine = prefill_core()
        tick = ScheduledTick(at_s=5.0, run_load_scaling=True, need_worker_fpm=True)
        effects = machine.on_tick(
            tick,
            TickInput(
                now_s=5.0,
                fpm_observations=FpmObservations(prefill=None),
                worker_counts=WorkerCounts(ready_num_prefill=1),
            ),
        )
        assert effects.diagnostics.load_decision_reason == "no_fpm_data"

    def test_throughput_tick_populates_the_forecast(self):
        machine = prefill_core(enable_load_scaling=False)
        diag = run_tick(
            machine, now_s=60.0, traffic=TRAFFIC, counts=WorkerCounts(ready_num_prefill=1)
        ).diagnostics
        assert (diag.predicted_num_req, diag.predicted_isl, diag.predicted_osl) == (
            100.0,
            1000.0,
            150.0,
        )
        # a 1000-token prompt fits one pass (budget 2048): case 3's 0.001·1000 + 0.002 s each
        assert diag.engine_rps_prefill == pytest.approx(1 / (0.001 * 1000 + 0.002), rel=1e-9)


# --- guards, floors, budget, order --------------------------------------------------------


class TestGuards:
    def test_scaling_in_progress_blocks_disagg_decisions_but_not_training(self):
        machine = core(ttft_ms=5.0, itl_ms=5.0)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        effects = run_tick(
            machine,
            prefill={("w1", 0): hot_prefill()},
            decode={("w1", 0): fpm(decode_kv=5000, decode_requests=5, wall_time=0.051)},
            counts=WorkerCounts(ready_num_prefill=1, ready_num_decode=1, expected_num_decode=2),
        )
        assert effects.scale_to is None
        diag = effects.diagnostics
        assert (
            diag.load_decision_reason,
            diag.load_decision_reason_prefill,
            diag.load_decision_reason_decode,
        ) == ("scaling_in_progress",) * 3
        assert machine.prefill_model.num_observations == 6
        assert machine.decode_model.num_observations == 1

    def test_connector_in_progress_flag_blocks_single_mode(self):
        machine = prefill_core(ttft_ms=5.0)
        effects = run_tick(
            machine,
            prefill={("w1", 0): hot_prefill()},
            counts=WorkerCounts(ready_num_prefill=1, prefill_scaling_in_progress=True),
        )
        assert effects.scale_to is None
        assert effects.diagnostics.load_decision_reason == "scaling_in_progress"

    def test_guard_order_in_progress_then_no_fpm_then_mismatch_then_data(self):
        machine = core(mode="prefill")  # untrained: insufficient data
        in_progress = WorkerCounts(ready_num_prefill=3, expected_num_prefill=2)
        mismatch = WorkerCounts(ready_num_prefill=3)
        two = {("w1", 0): hot_prefill(), ("w2", 0): hot_prefill(worker_id="w2")}

        def reason(prefill, counts, load=None):
            return run_tick(
                machine, prefill=prefill, counts=counts, load=load
            ).diagnostics.load_decision_reason

        assert reason(None, in_progress, load=True) == "scaling_in_progress"
        assert reason(None, mismatch, load=True) == "no_fpm_data"
        assert reason(two, mismatch) == "worker_count_mismatch"
        assert reason(two, WorkerCounts(ready_num_prefill=2)) == "insufficient_data"

    def test_dp_ranks_must_cover_every_worker_equally(self):
        machine = prefill_core(ttft_ms=5.0)
        ranks = {
            ("w1", 0): hot_prefill(),
            ("w1", 1): hot_prefill(dp_rank=1),
            ("w2", 0): hot_prefill(worker_id="w2"),
        }
        effects = run_tick(machine, prefill=ranks, counts=WorkerCounts(ready_num_prefill=2))
        assert effects.diagnostics.load_decision_reason == "worker_count_mismatch"
        ranks[("w2", 1)] = hot_prefill(worker_id="w2", dp_rank=1)
        effects = run_tick(machine, prefill=ranks, counts=WorkerCounts(ready_num_prefill=2))
        assert effects.scale_to.num_prefill == 3

    def test_unknown_inventory_cannot_be_reconciled(self):
        effects = run_tick(prefill_core(ttft_ms=5.0), prefill={("w1", 0): hot_prefill()})
        assert effects.diagnostics.load_decision_reason == "worker_count_mismatch"


class TestFloorsAndOrder:
    def test_throughput_runs_first_so_its_floor_lifts_the_same_ticks_load_decision(self):
        """Relies on ``load_hold_applies_floors`` (ours, on in OURS_IN_FIXTURE): the untrained
        prefill-only load rule holds, and only that flag lifts the hold to the floor of 2."""
        machine = prefill_core(ttft_ms=5000.0)
        machine.initial_tick(0.0)
        tick = ScheduledTick(
            at_s=60.0,
            run_load_scaling=True,
            run_throughput_scaling=True,
            need_traffic_metrics=True,
            traffic_metrics_duration_s=60.0,
            need_worker_states=True,
            need_worker_fpm=True,
        )
        effects = machine.on_tick(
            tick,
            TickInput(
                now_s=60.0,
                traffic=TRAFFIC,
                worker_counts=WorkerCounts(ready_num_prefill=1),
                fpm_observations=FpmObservations(
                    prefill=engines(1, prefill_tokens=500, prefill_requests=1, wall_time=0.502)
                ),
            ),
        )
        target = effects.scale_to
        assert (target.num_prefill, target.source, target.reason) == (2, "load", "scale_up")
        assert effects.diagnostics.throughput_decision_reason == "set_lower_bound"
        assert effects.next_tick.at_s == 65.0

    def test_bounds_start_at_one_and_survive_missing_traffic(self):
        machine = prefill_core(ttft_ms=5000.0)
        assert machine.throughput_lower_bounds["prefill"] == 1
        run_tick(
            machine,
            now_s=60.0,
            traffic=TrafficObservation(duration_s=60, num_req=150, isl=1000, osl=150),
            counts=WorkerCounts(ready_num_prefill=3),
        )
        assert machine.throughput_lower_bounds["prefill"] == 3  # 2.5 rps / 0.998
        tick = ScheduledTick(
            at_s=120.0,
            run_throughput_scaling=True,
            need_traffic_metrics=True,
            traffic_metrics_duration_s=60.0,
        )
        for traffic in (None, TrafficObservation(duration_s=0, num_req=0, isl=0, osl=0)):
            effects = machine.on_tick(tick, TickInput(now_s=120.0, traffic=traffic))
            assert effects.diagnostics.throughput_decision_reason == "no_traffic_data"
            assert machine.cadence.next_throughput_s == 180.0  # rescheduled even so
            assert machine.throughput_lower_bounds["prefill"] == 3
        assert machine.forecaster.num_req.values == [150.0]

    def test_capped_by_throughput(self):
        machine = prefill_core(ttft_ms=5000.0)
        run_tick(
            machine,
            now_s=60.0,
            traffic=TrafficObservation(duration_s=60, num_req=150, isl=1000, osl=150),
            counts=WorkerCounts(ready_num_prefill=3),
        )
        effects = run_tick(
            machine,
            now_s=65.0,
            prefill=engines(3, prefill_tokens=500, prefill_requests=1, wall_time=0.502),
            counts=WorkerCounts(ready_num_prefill=3),
        )
        assert effects.scale_to is None
        assert effects.diagnostics.load_decision_reason == "scale_down_capped_by_throughput"


class TestBudget:
    def test_single_scale_up_clamped_by_the_gpu_budget(self):
        caps = WorkerCapabilities(
            prefill=EngineCapabilities(num_gpu=2, max_num_batched_tokens=2048)
        )
        machine = core(caps, mode="prefill", ttft_ms=5.0, max_gpu_budget=4)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        effects = run_tick(
            machine,
            prefill=saturated_prefill(2),
            counts=WorkerCounts(ready_num_prefill=2),
        )
        assert effects.scale_to is None  # 3 × 2 GPUs > 4
        # the band (default) names the hold; the §8.1 clamp just lands back on 2
        assert effects.diagnostics.load_decision_reason == "gpu_budget_guard_hold"
        machine = core(
            caps, mode="prefill", ttft_ms=5.0, max_gpu_budget=4, gpu_budget_rule="pair_clamp"
        )
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        effects = run_tick(
            machine,
            prefill=saturated_prefill(2),
            counts=WorkerCounts(ready_num_prefill=2),
        )
        assert effects.scale_to is None
        assert effects.diagnostics.load_decision_reason == "no_change"

    def test_configured_gpus_per_replica_apply_when_capabilities_lack_them(self):
        caps = WorkerCapabilities(prefill=EngineCapabilities(max_num_batched_tokens=2048))
        machine = core(
            caps, mode="prefill", ttft_ms=5.0, max_gpu_budget=4, prefill_engine_num_gpu=2
        )
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        effects = run_tick(
            machine, prefill={("w1", 0): hot_prefill()}, counts=WorkerCounts(ready_num_prefill=1)
        )
        assert effects.scale_to.num_prefill == 2
        effects = run_tick(
            machine,
            prefill=saturated_prefill(2),
            counts=WorkerCounts(ready_num_prefill=2),
        )
        assert effects.scale_to is None

    def test_disagg_pair_clamp(self):
        machine = core(ttft_ms=5.0, itl_ms=5.0, max_gpu_budget=3)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        machine.load_benchmark_fpms("decode", DECODE_TRAINING)
        effects = run_tick(
            machine,
            prefill={("w1", 0): hot_prefill(wall_time=0.502)},
            decode={
                ("w1", 0): fpm(
                    decode_kv=30_000, queued_decode_kv=20_000, decode_requests=30, wall_time=0.301
                )
            },
            counts=WorkerCounts(ready_num_prefill=1, ready_num_decode=1),
        )
        # both want 2 (4 GPUs > 3): prefill floor(2·3/4) = 1, decode gets the rest = 2
        target = effects.scale_to
        assert (target.num_prefill, target.num_decode) == (1, 2)
        assert (target.prefill_reason, target.decode_reason, target.reason) == (
            "no_change",
            "scale_up",
            "scale_up",
        )

    @pytest.mark.parametrize(
        ("rule", "expected"),
        [
            # raw (2, 3) = 5 GPUs > 4: prefill floor(2·4/5) = 1, decode the other 3 (§8.1)
            ("pair_clamp", (1, 3)),
            # the band funds both scale-ups in proportion (L1-closest, least skew): (2, 2)
            ("band", (2, 2)),
        ],
    )
    def test_throughput_only_disagg_under_the_budget(self, rule, expected):
        machine = core(enable_load_scaling=False, max_gpu_budget=4, gpu_budget_rule=rule)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        machine.load_benchmark_fpms("decode", DECODE_TRAINING)
        effects = run_tick(
            machine,
            now_s=60.0,
            traffic=TRAFFIC,
            counts=WorkerCounts(ready_num_prefill=1, ready_num_decode=1),
        )
        assert (effects.scale_to.num_prefill, effects.scale_to.num_decode) == expected

    def test_a_role_only_raised_to_its_minimum_endpoint_keeps_its_own_reason(self):
        # protects: the budget's reason tags only a role the budget moved off what it asked
        # for; prefill, below its minimum endpoint (1 < 2) and without FPMs, is lifted to 2 by
        # the endpoint floor, while decode's scale-up to 3 is held at 2 by the 4-GPU ceiling
        machine = core(min_endpoint=2, max_gpu_budget=4, enable_throughput_scaling=False)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        machine.load_benchmark_fpms("decode", DECODE_TRAINING)
        # ITL 1e-5 · 10 000 + 0.001 = 101 ms > the 50 ms SLA on both engines: decode wants 3
        hot = engines(2, decode_kv=10_000, decode_requests=10, wall_time=0.101)
        effects = run_tick(
            machine,
            decode=hot,
            prefill={},
            counts=WorkerCounts(ready_num_prefill=1, ready_num_decode=2),
        )
        target = effects.scale_to
        assert (target.num_prefill, target.num_decode) == (2, 2)
        assert target.prefill_reason == "scale_up"
        assert target.decode_reason == target.reason
        assert target.reason.startswith("gpu_budget")


class TestBudgetBand:
    """Spec §8.2 on load actions: min = max = 4 GPUs, 1 GPU per replica. Prefill engines are
    over a 5 ms TTFT SLA (the rule wants one more); decode engines sit at 45 ms of a 50 ms ITL
    SLA (too busy to consolidate: no change)."""

    def tick(self, current: tuple[int, int], **overrides):
        settings = {"min_gpu_budget": 4, "max_gpu_budget": 4, **overrides}
        machine = core(ttft_ms=5.0, enable_throughput_scaling=False, **settings)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        machine.load_benchmark_fpms("decode", DECODE_TRAINING)
        return run_tick(
            machine,
            prefill=engines(
                current[0],
                **{
                    "queued_prefill": 10_000,
                    "prefill_tokens": 500,
                    "prefill_requests": 1,
                    "wall_time": 0.502,
                },
            ),
            decode=engines(current[1], decode_kv=3400, decode_requests=3, wall_time=0.035),
            counts=WorkerCounts(ready_num_prefill=current[0], ready_num_decode=current[1]),
        )

    def test_scale_up_at_a_full_budget_is_held(self):
        effects = self.tick((2, 2))
        diag = effects.diagnostics
        assert effects.scale_to is None
        assert diag.load_decision_reason == "gpu_budget_guard_hold"
        assert diag.load_decision_reason_prefill == "gpu_budget_guard_hold"
        assert diag.load_decision_reason_decode == "scale_down_refused_consolidation"

    @pytest.mark.parametrize(
        ("current", "expected"),
        [((3, 3), (2, 2)), ((1, 1), (2, 2)), ((4, 1), (3, 1))],
        ids=["above-the-ceiling", "below-the-floor", "above-with-a-tiny-decode"],
    )
    def test_an_out_of_band_fleet_is_reconciled(self, current, expected):
        effects = self.tick(current)
        target = effects.scale_to
        assert (target.num_prefill, target.num_decode) == expected
        assert target.reason == "gpu_budget_reconcile"
        assert effects.diagnostics.load_decision_reason == "gpu_budget_reconcile"

    def test_the_pair_clamp_rule_ignores_the_band(self):
        effects = self.tick((1, 1), min_gpu_budget=-1, gpu_budget_rule="pair_clamp")
        assert (effects.scale_to.num_prefill, effects.scale_to.num_decode) == (2, 1)
        assert effects.scale_to.reason == "scale_up"


class TestThroughputOnlyOutcomes:
    def test_target_equal_to_the_current_count_is_no_change(self):
        machine = prefill_core(enable_load_scaling=False)
        effects = run_tick(
            machine, now_s=60.0, traffic=TRAFFIC, counts=WorkerCounts(ready_num_prefill=2)
        )
        assert effects.scale_to is None
        assert effects.diagnostics.throughput_decision_reason == "no_change"

    def test_a_target_equal_to_ready_still_overrides_an_inflight_target(self):
        machine = prefill_core(enable_load_scaling=False)
        counts = WorkerCounts(ready_num_prefill=2, expected_num_prefill=4)
        effects = run_tick(machine, now_s=60.0, traffic=TRAFFIC, counts=counts)
        assert effects.scale_to.num_prefill == 2

    def test_disagg_model_not_ready_names_the_partner(self):
        machine = core(enable_load_scaling=False, decode_min_endpoint=3)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        effects = run_tick(
            machine,
            now_s=60.0,
            traffic=TRAFFIC,
            counts=WorkerCounts(ready_num_prefill=1, ready_num_decode=1),
        )
        diag = effects.diagnostics
        assert (
            diag.throughput_decision_reason,
            diag.throughput_decision_reason_prefill,
            diag.throughput_decision_reason_decode,
        ) == ("model_not_ready", "partner_not_ready", "model_not_ready")
        # the current counts are held, but never below the min endpoints
        target = effects.scale_to
        assert (target.num_prefill, target.num_decode, target.reason) == (1, 3, "model_not_ready")
        effects = run_tick(
            machine,
            now_s=120.0,
            traffic=TRAFFIC,
            counts=WorkerCounts(ready_num_prefill=1, ready_num_decode=3),
        )
        assert effects.scale_to is None
        assert effects.diagnostics.throughput_decision_reason == "model_not_ready"

    def test_predictor_failure_is_predict_failed(self):
        machine = prefill_core(enable_load_scaling=False)

        class Broken(type(machine.forecaster.num_req)):
            def forecast(self):
                raise RuntimeError("boom")

        machine.forecaster.num_req = Broken()
        effects = run_tick(
            machine, now_s=60.0, traffic=TRAFFIC, counts=WorkerCounts(ready_num_prefill=1)
        )
        assert effects.scale_to is None
        assert effects.diagnostics.throughput_decision_reason == "predict_failed"


def test_state_pickles_and_replays_identically():
    machine = core()
    machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
    machine.load_benchmark_fpms("decode", DECODE_TRAINING)
    machine.initial_tick(0.0)
    run_tick(
        machine,
        now_s=60.0,
        traffic=TRAFFIC,
        counts=WorkerCounts(ready_num_prefill=1, ready_num_decode=1),
    )
    clone = pickle.loads(pickle.dumps(machine))
    inputs = {
        "now_s": 65.0,
        "prefill": {("w1", 0): hot_prefill(wall_time=0.502)},
        "decode": {("w1", 0): fpm(decode_kv=9000, decode_requests=9, wall_time=0.091)},
        "counts": WorkerCounts(ready_num_prefill=1, ready_num_decode=1),
    }
    a, b = run_tick(machine, **inputs), run_tick(clone, **inputs)
    assert a.scale_to == b.scale_to and a.scale_to is not None
    assert a.diagnostics == b.diagnostics and a.next_tick == b.next_tick


def test_bootstrap_feeds_only_the_models_a_deployment_has():
    machine = core(mode="decode")
    assert machine.load_benchmark_fpms("prefill", PREFILL_TRAINING) == 0
    assert machine.load_benchmark_fpms("decode", DECODE_TRAINING) == 5
    assert (machine.prefill_model, machine.decode_model.num_observations) == (None, 5)
    agg = core(mode="agg")
    assert agg.load_benchmark_fpms("prefill", PREFILL_TRAINING) == 5
    assert agg.load_benchmark_fpms("decode", DECODE_TRAINING) == 5
    assert agg.agg_model.num_observations == 10


class TestSingleRoleHoldAndFloors:
    """Spec §4.7, single (prefill-only / decode-only) mode: a rule without an opinion returns
    ``None`` — the throughput floor acts only on ticks where the rule has one. Ours
    (``load_hold_applies_floors``): the floors apply to the held count too, as in disagg/agg."""

    def tick_below_the_floor(self, machine):
        # throughput tick: 150 req / 60 s at 0.998 rps per engine → lower bound 3
        run_tick(
            machine,
            now_s=60.0,
            traffic=TrafficObservation(duration_s=60, num_req=150, isl=1000, osl=150),
            counts=WorkerCounts(ready_num_prefill=1),
        )
        assert machine.throughput_lower_bounds["prefill"] == 3
        # load tick, one engine well within the SLA: N = 1 never scales down → no opinion
        return run_tick(
            machine,
            now_s=65.0,
            prefill=engines(1, prefill_tokens=500, prefill_requests=1, wall_time=0.502),
            counts=WorkerCounts(ready_num_prefill=1),
        )

    def test_reference_holds_without_a_decision(self):
        machine = prefill_core(ttft_ms=5000.0, load_hold_applies_floors=False)
        effects = self.tick_below_the_floor(machine)
        assert effects.scale_to is None
        assert effects.diagnostics.load_decision_reason == "no_change"

    def test_reference_variant_is_the_reference(self):
        machine = PlannerStateMachine(
            PlannerConfig(
                mode="prefill",
                optimization_target="sla",
                enable_load_scaling=True,
                ttft_ms=5000.0,
                throughput_adjustment_interval_seconds=60,
                load_predictor="constant",
                max_gpu_budget=-1,
            ).reference_variant(),
            default_caps(),
        )
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        assert self.tick_below_the_floor(machine).scale_to is None

    def test_ours_lifts_the_held_count_to_the_floor(self):
        machine = prefill_core(ttft_ms=5000.0)
        effects = self.tick_below_the_floor(machine)
        assert (effects.scale_to.num_prefill, effects.scale_to.reason) == (3, "scale_up")

    def test_reference_still_applies_the_floor_when_the_rule_has_an_opinion(self):
        machine = prefill_core(ttft_ms=5000.0, load_hold_applies_floors=False)
        run_tick(
            machine,
            now_s=60.0,
            traffic=TrafficObservation(duration_s=60, num_req=150, isl=1000, osl=150),
            counts=WorkerCounts(ready_num_prefill=4),
        )
        effects = run_tick(  # 4 idle engines: the rule wants 3, the floor keeps 3
            machine,
            now_s=65.0,
            prefill=engines(4, prefill_tokens=500, prefill_requests=1, wall_time=0.502),
            counts=WorkerCounts(ready_num_prefill=4),
        )
        assert (effects.scale_to.num_prefill, effects.scale_to.reason) == (3, "scale_down")

    def test_agg_holds_at_n_and_the_floors_apply_in_the_reference_too(self):
        # §4.7 agg: the combiner returns N when neither side moves, then the floors apply
        machine = core(mode="agg", ttft_ms=1e6, itl_ms=1e6, load_hold_applies_floors=False)
        machine.load_benchmark_fpms("decode", AGG_TRAINING)
        run_tick(machine, now_s=60.0, traffic=TRAFFIC, counts=WorkerCounts(ready_num_decode=1))
        assert machine.throughput_lower_bounds["decode"] == 9  # 54 needed, 1 + cap 8
        effects = run_tick(
            machine,
            now_s=65.0,
            decode=engines(
                1,
                prefill_tokens=100,
                prefill_requests=1,
                decode_kv=1000,
                decode_requests=10,
                wall_time=0.201,
            ),
            counts=WorkerCounts(ready_num_decode=1),
        )
        assert (effects.scale_to.num_decode, effects.scale_to.reason) == (9, "scale_up")
