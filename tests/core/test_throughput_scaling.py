"""Throughput scaling: traffic intake, capacity per role, reasons (reference spec §5, §7.1).

Current-tree semantics (no latency-ratio SLA floor), G3 last-value KV hit rate / accept length.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from connectors.profiles import load_profile
from operators.bootstrap import profile_to_fpms
from operators.perf import AggPerfModel, DecodePerfModel, PrefillPerfModel
from operators.predictors import ConstantPredictor
from operators.state_machine import PlannerStateMachine
from operators.throughput_scaling import (
    NOT_READY,
    Capacity,
    agg_capacity,
    decode_capacity,
    prefill_capacity,
    replicas_for,
    sizing_lengths,
)
from operators.traffic_intake import RuntimeMetadata, TrafficForecaster
from schemas import (
    EngineCapabilities,
    PlannerConfig,
    TrafficObservation,
    WorkerCapabilities,
    WorkerCounts,
)
from schemas.events import MAX_REPLICAS
from tests.core.planner_inputs import (
    AGG_TRAINING,
    DECODE_TRAINING,
    PREFILL_TRAINING,
    core,
    engines,
    run_tick,
)


def window(num_req: float, isl: float, osl: float, duration_s: float = 60.0, **extra):
    return TrafficObservation(duration_s=duration_s, num_req=num_req, isl=isl, osl=osl, **extra)


def forecaster() -> TrafficForecaster:
    return TrafficForecaster(ConstantPredictor(), ConstantPredictor(), ConstantPredictor())


class TestTrafficIntake:
    def test_idle_windows_carry_the_last_lengths_forward(self):
        f = forecaster()
        for obs in (window(10, 512, 128), window(0, 0, 0), window(0, 0, 0)):
            f.observe(obs)
        assert f.num_req.values == [10.0, 0.0, 0.0]
        assert f.isl.values == [512.0] * 3
        assert f.osl.values == [128.0] * 3

    def test_leading_idle_windows_seed_nothing(self):
        f = forecaster()
        for obs in (window(0, 0, 0), window(0, 300, 20), window(4, 100, 10)):
            f.observe(obs)
        assert (f.num_req.values, f.isl.values, f.osl.values) == ([4.0], [100.0], [10.0])

    def test_warm_up_then_skip_the_post_deploy_idle_period_again(self):
        f = forecaster()
        assert f.warm_up([window(10, 512, 128), window(0, 0, 0)]) == 2
        f.observe(window(0, 0, 0))  # idle after deploy: skipped again
        assert f.num_req.values == [10.0, 0.0] and f.isl.values == [512.0, 512.0]
        f.observe(window(6, 1000, 100))
        assert f.forecast().num_req == 6.0 and f.forecast().isl == 1000.0

    def test_runtime_metadata_is_last_value(self):
        meta = RuntimeMetadata()
        assert (meta.kv_hit_rate, meta.accept_length(nextn=3)) == (None, 1.0)
        meta.observe(window(1, 1, 1, kv_hit_rate=0.25, accept_length=9.0))
        meta.observe(window(1, 1, 1))
        meta.observe(
            TrafficObservation.model_construct(
                duration_s=5, num_req=0, isl=0, osl=0, kv_hit_rate=math.nan, accept_length=math.inf
            )
        )
        assert meta.kv_hit_rate == 0.25
        assert meta.accept_length(nextn=3) == 4.0  # clamped to nextn + 1
        assert meta.accept_length(nextn=0) == 1.0  # no speculation: forced to 1

    def test_engine_reported_nextn_wins_over_the_configured_one(self):
        caps = WorkerCapabilities(decode=EngineCapabilities(speculative_nextn=1))
        machine = core(caps, mode="decode", enable_load_scaling=False, speculative_nextn=4)
        run_tick(machine, now_s=60.0, traffic=window(1, 1000, 150, accept_length=4.5))
        assert machine.accept_length == 2.0
        machine.set_capabilities(WorkerCapabilities(decode=EngineCapabilities()))
        assert machine.accept_length == 4.5


class TestCapacity:
    def test_replicas_for_rounds_up_and_respects_the_min_endpoint(self):
        assert replicas_for(2.1, 1.0, 1) == 3
        assert replicas_for(2.0, 1.0, 1) == 2
        assert replicas_for(0.0, 1.0, 2) == 2

    def test_prefill_capacity_discounts_cache_hits(self):
        model = PrefillPerfModel(50, 5, 16)
        model.load_benchmark_fpms(PREFILL_TRAINING)
        kwargs = dict(ttft_sla_ms=500.0, max_num_batched_tokens=2048, min_endpoint=1)
        cold = prefill_capacity(model, 500 / 60, 4000, kv_hit_rate=None, **kwargs)
        warm = prefill_capacity(model, 500 / 60, 4000, kv_hit_rate=0.8, **kwargs)
        capped = prefill_capacity(model, 500 / 60, 4000, kv_hit_rate=1.0, **kwargs)
        assert (cold.replicas, warm.replicas) == (34, 7)
        assert cold.latency_ms == pytest.approx(4004.0)  # 2048 + 1952 tokens: 2.050 + 1.954 s
        assert capped.engine_rps == pytest.approx(1 / 0.202)  # hit clamped to 0.95: 200 tokens

    def test_decode_capacity_uses_the_average_lifetime_context(self):
        model = DecodePerfModel(50, 5, 16)
        model.load_benchmark_fpms(DECODE_TRAINING)
        cap = decode_capacity(
            model,
            100 / 60,
            1000,
            150,
            itl_sla_ms=50.0,
            max_kv_tokens=None,
            max_num_seqs=None,
            accept_length=1.0,
            min_endpoint=1,
        )
        # ctx 1075, batch 4 at 44 ms → 0.606 rps → 3 replicas
        assert (cap.replicas, cap.latency_ms) == (3, pytest.approx(44.0))
        assert cap.engine_rps == pytest.approx(4 / (150 * 0.044))

    @pytest.mark.parametrize("tiny", [5e-324, 1e-300, 0.4])
    def test_lengths_under_one_token_count_as_one(self, tiny):
        # traffic admits any finite non-negative mean; a subnormal one made the batch searches
        # divide by it and int() an infinity, which crashed the tick
        prefill = PrefillPerfModel(50, 5, 16)
        prefill.load_benchmark_fpms(PREFILL_TRAINING)
        decode = DecodePerfModel(50, 5, 16)
        decode.load_benchmark_fpms(DECODE_TRAINING)

        def prefill_at(isl: float) -> Capacity:
            return prefill_capacity(
                prefill, 1.0, isl, kv_hit_rate=None, ttft_sla_ms=500.0,
                max_num_batched_tokens=2048, min_endpoint=1, max_batch_requests=256,
            )  # fmt: skip

        def decode_at(isl: float, osl: float) -> Capacity:
            return decode_capacity(
                decode, 1.0, isl, osl, itl_sla_ms=50.0, max_kv_tokens=100_000,
                max_num_seqs=None, accept_length=1.0, min_endpoint=1,
            )  # fmt: skip

        for sized, one in (
            (prefill_at(tiny), prefill_at(1.0)),
            (decode_at(tiny, tiny), decode_at(1.0, 1.0)),
        ):
            assert sized.engine_rps is not None and math.isfinite(sized.engine_rps)
            assert sized.replicas == one.replicas

    def test_accept_length_raises_decode_capacity(self):
        replicas = {}
        for accept in (None, 2.0):
            machine = core(mode="decode", enable_load_scaling=False, speculative_nextn=2)
            machine.load_benchmark_fpms("decode", DECODE_TRAINING)
            effects = run_tick(
                machine,
                now_s=60.0,
                traffic=window(100, 1000, 150, accept_length=accept),
                counts=WorkerCounts(ready_num_decode=1),
            )
            replicas[accept] = (effects.scale_to.num_decode, effects.diagnostics.engine_rps_decode)
        # wall = 1e-5 · kv + 1 ms with 1075 KV tokens a request (ISL + OSL / 2).
        # accept 1: ITL = forward ≤ 50 ms → batch 4 at 44 ms → 4 / (150 × 0.044) rps;
        # accept 2: ITL = forward/2 ≤ 50 ms → batch 9 at 97.75 ms forward → 1.2276 rps
        assert replicas[None] == (3, pytest.approx(4 / (150 * 0.044)))
        assert replicas[2.0] == (2, pytest.approx(18 / (150 * 0.09775)))

    def test_not_ready_models_answer_nothing(self):
        kwargs = dict(
            itl_sla_ms=50.0,
            max_kv_tokens=None,
            max_num_seqs=None,
            accept_length=1.0,
            min_endpoint=1,
        )
        assert decode_capacity(DecodePerfModel(), 1.0, 1000, 150, **kwargs) is NOT_READY
        assert (
            prefill_capacity(
                PrefillPerfModel(),
                1.0,
                1000,
                kv_hit_rate=None,
                ttft_sla_ms=500.0,
                max_num_batched_tokens=2048,
                min_endpoint=1,
            )
            is NOT_READY
        )
        trained = AggPerfModel(50, 5, 16)
        trained.load_benchmark_fpms(AGG_TRAINING)
        assert (
            agg_capacity(
                trained,
                1.0,
                1000,
                150,
                max_num_batched_tokens=None,
                ttft_sla_ms=500.0,
                itl_sla_ms=50.0,
                max_kv_tokens=None,
                max_num_seqs=None,
                kv_hit_rate=None,
                accept_length=1.0,
                min_endpoint=1,
            )
            is NOT_READY
        )

    def test_demand_is_the_forecast_count_over_the_window(self):
        machine = core(mode="prefill", enable_load_scaling=False)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        # 100 requests in 30 s = 3.33 rps / 0.998 → 4 (vs 2 over 60 s)
        effects = run_tick(
            machine,
            now_s=30.0,
            traffic=window(100, 1000, 150, duration_s=30.0),
            counts=WorkerCounts(ready_num_prefill=1),
        )
        assert effects.scale_to.num_prefill == 4

    def test_a_demand_too_large_to_size_skips_the_tick(self):
        # protects: a count over 1e-306 s was an infinite demand, and math.ceil raised in the
        # flow (admission refuses such windows: schemas.events.MIN_TRAFFIC_WINDOW_S)
        machine = core(mode="prefill", enable_load_scaling=False)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        counts = WorkerCounts(ready_num_prefill=1)
        run_tick(machine, now_s=60.0, traffic=window(100, 1000, 150), counts=counts)
        effects = run_tick(
            machine, now_s=120.0, traffic=window(1000, 1000, 150, duration_s=1e-306), counts=counts
        )
        assert effects.scale_to is None
        assert effects.diagnostics.throughput_decision_reason == "predict_failed"


class TestQuantileSizing:
    SHAPE = window(
        100, 1000, 150, isl_quantiles={"p50": 800.0, "p90": 3000.0}, osl_quantiles={"p90": 300.0}
    )

    def test_sizing_lengths(self):
        assert sizing_lengths(1000, 150, self.SHAPE, isl_quantile=None, osl_quantile=None) == (
            1000,
            150,
        )
        assert sizing_lengths(1000, 150, self.SHAPE, isl_quantile=0.9, osl_quantile=0.9) == (
            3000.0,
            300.0,
        )
        # a quantile the window does not carry, or a window without quantiles: the mean
        assert sizing_lengths(1000, 150, self.SHAPE, isl_quantile=0.99, osl_quantile=0.5) == (
            1000.0,
            150.0,
        )
        assert sizing_lengths(
            1000, 150, window(1, 1000, 150), isl_quantile=0.9, osl_quantile=None
        ) == (1000.0, 150.0)

    def test_a_window_without_lengths_sizes_for_the_forecast(self):
        # protects: a window whose mean ISL/OSL is 0 (idle, or a traffic event whose quantiles
        # disagree with its means) has no ratio to scale by — capacity is sized for the
        # forecast means, with no division by the zero mean failing the tick
        for quantiles in ({"p90": 0.0}, {"p90": 3000.0}):
            idle = window(0, 0, 0, isl_quantiles=quantiles, osl_quantiles=quantiles)
            assert sizing_lengths(1000, 100, idle, isl_quantile=0.9, osl_quantile=0.9) == (
                1000.0,
                100.0,
            )

    def test_a_zero_length_quantile_sizes_for_the_mean(self):
        # protects: a window whose p90 output is 0 tokens (most requests cancelled before their
        # first token) cannot size a request — a zero-token request makes every perf model
        # answer "not ready" — so capacity is sized for the mean, as without a quantile
        zero = window(100, 1000, 150, osl_quantiles={"p90": 0.0})
        assert sizing_lengths(1000, 150, zero, isl_quantile=None, osl_quantile=0.9) == (
            1000,
            150.0,
        )
        # a quantile one token above zero still scales by its ratio
        one = window(100, 1000, 150, osl_quantiles={"p90": 1.5})
        assert sizing_lengths(1000, 150, one, isl_quantile=None, osl_quantile=0.9) == (1000, 1.5)

    def test_a_zero_length_quantile_does_not_stall_throughput_scaling(self):
        # protects: the decision, not only the lengths — with osl p90 = 0 the throughput tick
        # still sizes decode (for the mean, 150 tokens: 3 replicas) instead of reporting its
        # ready model as model_not_ready and holding
        machine = core(mode="decode", enable_load_scaling=False, capacity_osl_quantile=0.9)
        machine.load_benchmark_fpms("decode", DECODE_TRAINING)
        shape = window(100, 1000, 150, osl_quantiles={"p90": 0.0})
        effects = run_tick(
            machine, now_s=60.0, traffic=shape, counts=WorkerCounts(ready_num_decode=2)
        )
        assert effects.diagnostics.throughput_decision_reason == "scale"
        assert effects.scale_to is not None and effects.scale_to.num_decode == 3

    @pytest.mark.parametrize(("quantile", "expected"), [(None, 2), (0.9, 6), (0.5, 2)])
    def test_prefill_sized_for_the_isl_quantile(self, quantile, expected):
        machine = core(mode="prefill", enable_load_scaling=False, capacity_isl_quantile=quantile)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        effects = run_tick(
            machine, now_s=60.0, traffic=self.SHAPE, counts=WorkerCounts(ready_num_prefill=1)
        )
        # p90 ISL 3000 = 2048 + 952 tokens → 3.004 s → 0.333 rps → 1.667 / 0.333 → 6
        assert effects.scale_to.num_prefill == expected
        assert effects.diagnostics.predicted_isl == 1000.0  # the forecast itself is the mean

    def test_quantile_shape_survives_idle_windows(self):
        machine = core(mode="prefill", enable_load_scaling=False, capacity_isl_quantile=0.9)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        run_tick(machine, now_s=60.0, traffic=self.SHAPE, counts=WorkerCounts(ready_num_prefill=1))
        assert machine.forecaster.last_shape == self.SHAPE
        run_tick(
            machine, now_s=120.0, traffic=window(0, 0, 0), counts=WorkerCounts(ready_num_prefill=6)
        )
        assert machine.forecaster.last_shape == self.SHAPE


class TestChangeCap:
    """Spec §5.4 / §16.5: ``max_throughput_scaling_replicas`` (8) per observation, from the
    ready count; the endpoint floor may exceed it. Engine: 0.998 req/s at ISL 1000."""

    def tick(self, machine, num_req: float, ready: int, now_s: float = 60.0):
        counts = WorkerCounts(ready_num_prefill=ready)
        return run_tick(machine, now_s=now_s, traffic=window(num_req, 1000, 150), counts=counts)

    def machine(self, **overrides):
        machine = core(mode="prefill", **overrides)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        return machine

    def test_scale_up_is_capped_from_the_ready_count(self):
        machine = self.machine(enable_load_scaling=False)
        assert self.tick(machine, 6000, ready=10).scale_to.num_prefill == 18  # raw 101
        capped = self.machine(enable_load_scaling=False, max_throughput_scaling_replicas=3)
        assert self.tick(capped, 6000, ready=10).scale_to.num_prefill == 13

    def test_lower_bounds_are_capped_and_do_not_ratchet(self):
        machine = self.machine()
        for now_s in (60.0, 120.0):  # the same observation twice, the fleet still at 10
            self.tick(machine, 6000, ready=10, now_s=now_s)
            assert machine.throughput_lower_bounds["prefill"] == 18

    def test_scale_down_is_capped_too(self):
        machine = self.machine(enable_load_scaling=False)
        assert self.tick(machine, 1, ready=64).scale_to.num_prefill == 56  # raw 1

    def test_the_endpoint_floor_may_exceed_the_cap(self):
        machine = self.machine(enable_load_scaling=False, prefill_min_endpoint=30)
        assert self.tick(machine, 1, ready=1).scale_to.num_prefill == 30


class TestDisaggChangeCap:
    """Spec §16.5 on a disagg pair: the cap and the endpoint floors act per role, each from its
    own ready count. Engines: prefill 0.998 req/s at ISL 1000; decode (``DECODE_TRAINING``)."""

    def machine(self, **overrides):
        machine = core(**overrides)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        machine.load_benchmark_fpms("decode", DECODE_TRAINING)
        return machine

    def tick(self, machine, traffic, ready, now_s: float = 60.0):
        counts = WorkerCounts(ready_num_prefill=ready[0], ready_num_decode=ready[1])
        return run_tick(machine, now_s=now_s, traffic=traffic, counts=counts)

    # 7.5 req/s of 1000 in, 600 out: prefill needs 8, decode (ctx 1300: batch 3 at 40 ms,
    # 0.125 req/s per engine) needs 60 — raw (8, 60), the shape of §16.5's raw (8, 180)
    SKEWED = window(7.5 * 60, 1000, 600)

    def test_raw_sizing_is_the_skewed_pair(self):
        machine = self.machine(enable_load_scaling=False, max_throughput_scaling_replicas=100)
        effects = self.tick(machine, self.SKEWED, (24, 40))
        assert (effects.scale_to.num_prefill, effects.scale_to.num_decode) == (8, 60)

    def test_bounds_move_at_most_the_cap_and_do_not_ratchet(self):
        machine = self.machine()
        for now_s in (60.0, 120.0):  # the same observation twice, the fleet still at (24, 40)
            effects = self.tick(machine, self.SKEWED, (24, 40), now_s=now_s)
            assert effects.scale_to is None
            assert dict(machine.throughput_lower_bounds) == {"prefill": 16, "decode": 48}
        capped = self.machine(max_throughput_scaling_replicas=3)
        self.tick(capped, self.SKEWED, (24, 40))
        assert dict(capped.throughput_lower_bounds) == {"prefill": 21, "decode": 43}

    def test_endpoint_recovery_exceeds_the_cap(self):
        # 28 req/s, OSL 50: raw prefill 29, decode 15 (batch 4 at 42 ms: 1.9 req/s)
        machine = self.machine(
            enable_load_scaling=False,
            max_gpu_budget=64,
            prefill_min_endpoint=30,
            decode_min_endpoint=34,
        )
        effects = self.tick(machine, window(28 * 60, 1000, 50), (21, 34))
        assert (effects.scale_to.num_prefill, effects.scale_to.num_decode) == (30, 34)
        machine = self.machine(
            enable_load_scaling=False, prefill_min_endpoint=30, max_gpu_budget=64
        )
        effects = self.tick(machine, window(1.5 * 60, 1000, 50), (1, 1))
        assert (effects.scale_to.num_prefill, effects.scale_to.num_decode) == (30, 1)


def pin_capacity(machine, role: str, engine_rps: float) -> None:
    """Pin what one engine of ``role`` sustains (the perf model's other answers stay real)."""
    if role == "prefill":
        machine.prefill_model.find_best_engine_prefill_rps = lambda *a, **k: (engine_rps, 100.0)
    elif machine.config.mode == "agg":
        machine.agg_model.find_best_engine_agg_rps = lambda *a, **k: (engine_rps, 100.0, 10.0)
    else:
        machine.decode_model.find_best_engine_decode_rps = lambda *a, **k: (engine_rps, 10.0)


class TestBudgetBand:
    """Spec §16.5: the §8.2 budget band (``min = max = 64`` GPUs unless said, 1 GPU per
    replica, change cap 8) on throughput targets, and on the load actions they floor. Demand is
    1 req/s; each engine's rate is pinned to ``1 / (raw - 0.5)`` so the sizing is exactly the
    case's raw count. Load ticks see idle engines, so the load rule proposes N − 1 per role."""

    DEMAND = window(60, 1000, 150)

    def machine(self, raw, *, load: bool, lo: int = 64, hi: int = 64, mode="disagg", **kw):
        machine = core(
            mode=mode,
            enable_load_scaling=load,
            min_gpu_budget=lo,
            max_gpu_budget=hi,
            ttft_ms=5000.0,
            **kw,
        )
        roles = machine.config.roles
        for role, n in zip(roles, raw if isinstance(raw, tuple) else (raw,), strict=True):
            machine.load_benchmark_fpms(
                role, PREFILL_TRAINING if role == "prefill" else DECODE_TRAINING
            )
            pin_capacity(machine, role, 1.0 / (n - 0.5))
        return machine

    @staticmethod
    def counts(current):
        if isinstance(current, tuple):
            return WorkerCounts(ready_num_prefill=current[0], ready_num_decode=current[1])
        return WorkerCounts(ready_num_decode=current)

    def tick(self, machine, current, *, idle_load: bool = False, now_s: float = 60.0):
        fpms = {}
        if idle_load:  # every engine idle: the load rule proposes one fewer of each role
            fpms = {
                "prefill": engines(
                    current[0], prefill_tokens=1000, prefill_requests=1, wall_time=1.002
                ),
                "decode": engines(current[1], decode_kv=1000, decode_requests=1, wall_time=0.011),
            }
        return run_tick(
            machine, now_s=now_s, traffic=self.DEMAND, counts=self.counts(current), **fpms
        )

    @staticmethod
    def pair(effects):
        return effects.scale_to.num_prefill, effects.scale_to.num_decode

    def test_lower_bounds_fit_the_band_and_do_not_ratchet(self):
        machine = self.machine((8, 180), load=True)
        for now_s in (60.0, 120.0):
            assert self.tick(machine, (24, 40), now_s=now_s).scale_to is None
            assert dict(machine.throughput_lower_bounds) == {"prefill": 16, "decode": 48}
        capped = self.machine((8, 180), load=True, max_throughput_scaling_replicas=3)
        self.tick(capped, (24, 40))
        assert dict(capped.throughput_lower_bounds) == {"prefill": 21, "decode": 43}

    def test_two_scale_ups_at_the_ceiling_are_held(self):
        effects = self.tick(self.machine((32, 48), load=False), (24, 40))
        assert effects.scale_to is None
        assert effects.diagnostics.throughput_decision_reason == "gpu_budget_guard_hold"
        machine = self.machine((32, 48), load=True)
        effects = self.tick(machine, (24, 40))
        assert dict(machine.throughput_lower_bounds) == {"prefill": 24, "decode": 40}
        assert effects.diagnostics.throughput_decision_reason == "gpu_budget_guard_hold"

    def test_a_hold_never_reverts_a_scale_in_flight(self):
        # prefill 24 ready of 25 expected: the held target is "nothing moves", not "back to 24"
        machine = self.machine((32, 48), load=False)
        counts = WorkerCounts(ready_num_prefill=24, ready_num_decode=40, expected_num_prefill=25)
        effects = run_tick(machine, now_s=60.0, traffic=self.DEMAND, counts=counts)
        assert effects.scale_to is None
        assert effects.diagnostics.throughput_decision_reason == "gpu_budget_guard_hold"

    def test_a_natural_no_op_is_not_a_budget_hold(self):
        effects = self.tick(self.machine((24, 40), load=False), (24, 40))
        assert effects.scale_to is None
        assert effects.diagnostics.throughput_decision_reason == "no_change"
        effects = self.tick(self.machine(64, load=False, mode="decode"), 64)
        assert effects.scale_to is None
        assert effects.diagnostics.throughput_decision_reason == "no_change"

    def test_scale_down_at_the_floor_is_held(self):
        effects = self.tick(self.machine((27, 36), load=False), (28, 36))
        assert effects.scale_to is None
        assert effects.diagnostics.throughput_decision_reason == "gpu_budget_guard_hold"

    def test_single_decode_at_the_ceiling_and_the_tolerance_edge(self):
        machine = self.machine(180, load=True, mode="decode")
        effects = self.tick(machine, 64)
        assert machine.throughput_lower_bounds["decode"] == 64
        assert effects.diagnostics.throughput_decision_reason == "gpu_budget_guard_hold"
        effects = self.tick(self.machine(62, load=False, mode="decode"), 63)
        assert effects.scale_to is None
        assert effects.diagnostics.throughput_decision_reason == "gpu_budget_guard_hold"

    def test_a_lower_bound_is_not_inflated_by_the_minimum_budget(self):
        machine = self.machine(1, load=True, mode="decode")
        self.tick(machine, 64)
        assert machine.throughput_lower_bounds["decode"] == 56  # the cap, not the 64 floor

    def test_only_the_headroom_is_used(self):
        assert self.pair(self.tick(self.machine((40, 36), load=False, lo=-1), (24, 36))) == (
            28,
            36,
        )
        assert self.pair(self.tick(self.machine((1, 20), load=False, lo=-1), (20, 20))) == (
            12,
            20,
        )

    def test_endpoint_recovery_exceeds_the_cap_and_may_pick_a_donor(self):
        mins = {"prefill_min_endpoint": 30, "decode_min_endpoint": 34}
        machine = self.machine((30, 34), load=False, **mins)
        assert self.pair(self.tick(machine, (21, 34))) == (30, 34)
        # the spec's fixture (min = max = 64): growing (30, 1) to the floor, each ×64/31
        # ceiled, is (62, 3) = 65 GPUs, over the ceiling; the reference then keeps (30, 1)
        # (spec §16.5), half the floor; ours fills the floor with decode: (62, 2) = 64 GPUs
        machine = self.machine((30, 1), load=False, prefill_min_endpoint=30)
        assert self.pair(self.tick(machine, (1, 1))) == (62, 2)
        donor = {"prefill_min_endpoint": 30, "decode_min_endpoint": 8}
        machine = self.machine((8, 180), load=False, **donor)
        assert self.pair(self.tick(machine, (24, 40))) == (30, 34)

    def test_mixed_endpoint_recovery_reconciles_the_load_action(self):
        donor = {"prefill_min_endpoint": 30, "decode_min_endpoint": 8}
        machine = self.machine((8, 180), load=True, **donor)
        effects = self.tick(machine, (24, 40), idle_load=True)
        assert dict(machine.throughput_lower_bounds) == {"prefill": 30, "decode": 34}
        assert self.pair(effects) == (30, 34)
        assert effects.scale_to.reason == "gpu_budget_reconcile"
        assert effects.diagnostics.load_decision_reason == "gpu_budget_reconcile"

    def test_load_only_endpoint_recovery_reconciles(self):
        machine = core(
            enable_throughput_scaling=False,
            ttft_ms=5000.0,
            min_gpu_budget=64,
            max_gpu_budget=64,
            prefill_min_endpoint=30,
            decode_min_endpoint=8,
        )
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        machine.load_benchmark_fpms("decode", DECODE_TRAINING)
        effects = run_tick(
            machine,
            prefill=engines(24, prefill_tokens=1000, prefill_requests=1, wall_time=1.002),
            decode=engines(40, decode_kv=1000, decode_requests=1, wall_time=0.011),
            counts=self.counts((24, 40)),
        )
        assert self.pair(effects) == (30, 34)
        assert effects.diagnostics.load_decision_reason == "gpu_budget_reconcile"

    def test_mixed_load_action_gets_the_funded_part_of_the_rebalance(self):
        # bounds (16, 48) lift the load proposal (23, 39) to (23, 48): at a full budget only
        # one prefill replica is freed, so decode gets one
        effects = self.tick(self.machine((8, 180), load=True), (24, 40), idle_load=True)
        assert self.pair(effects) == (23, 41)

    def test_a_capped_floor_keeps_the_floor_guard(self):
        machine = self.machine((8, 8), load=True)
        effects = self.tick(machine, (27, 36), idle_load=True)
        assert dict(machine.throughput_lower_bounds) == {"prefill": 19, "decode": 28}
        assert effects.scale_to is None  # (26, 35) would leave 61 GPUs, under 64 - 1
        assert effects.diagnostics.load_decision_reason == "gpu_budget_guard_hold"

    def test_agg_scale_up_is_capped(self):
        machine = core(mode="agg", enable_load_scaling=False, max_gpu_budget=100)
        machine.load_benchmark_fpms("decode", AGG_TRAINING)
        pin_capacity(machine, "decode", 1.0)
        effects = run_tick(
            machine, now_s=60.0, traffic=window(6000, 1000, 150), counts=self.counts(10)
        )
        assert effects.scale_to.num_decode == 18  # raw 100: 10 + cap 8

    @pytest.mark.parametrize("gpus", [4, 5])
    def test_prefill_replicas_do_not_depend_on_gpus_per_replica(self, gpus):
        caps = WorkerCapabilities(
            prefill=EngineCapabilities(num_gpu=gpus, max_num_batched_tokens=2048)
        )
        machine = core(caps, mode="prefill", enable_load_scaling=False)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        pin_capacity(machine, "prefill", 1.0)
        effects = run_tick(machine, now_s=60.0, traffic=window(126, 1000, 150))
        assert effects.scale_to.num_prefill == 3  # 2.1 req/s / 1.0


class TestReasons:
    def test_throughput_disabled_on_a_throughput_tick(self):
        machine = core(mode="prefill", enable_throughput_scaling=False)
        effects = run_tick(machine, now_s=60.0, traffic=window(10, 100, 10))
        assert effects.diagnostics.throughput_decision_reason == "disabled"

    def test_single_model_not_ready_holds_at_the_min_endpoint(self):
        machine = core(mode="decode", enable_load_scaling=False, decode_min_endpoint=3)
        effects = run_tick(
            machine,
            now_s=60.0,
            traffic=window(100, 1000, 150),
            counts=WorkerCounts(ready_num_decode=1),
        )
        assert (effects.scale_to.num_decode, effects.scale_to.reason) == (3, "model_not_ready")
        effects = run_tick(
            machine,
            now_s=120.0,
            traffic=window(100, 1000, 150),
            counts=WorkerCounts(ready_num_decode=3),
        )
        assert effects.scale_to is None
        assert effects.diagnostics.throughput_decision_reason_decode == "model_not_ready"

    def test_agg_model_not_ready_holds_at_the_min_endpoint(self):
        # §16.5: an agg engine without a ready perf model (rate 0) → the endpoint floor, 3
        machine = core(mode="agg", enable_load_scaling=False, min_endpoint=3)
        effects = run_tick(
            machine,
            now_s=60.0,
            traffic=window(100, 1000, 150),
            counts=WorkerCounts(ready_num_decode=1),
        )
        assert (effects.scale_to.num_decode, effects.scale_to.reason) == (3, "model_not_ready")

    def test_single_decode_lower_bound_is_capped_from_the_ready_count(self):
        # §16.5: decode at 64 ready, raw 1, load scaling on → bound 64 − 8 = 56
        machine = core(mode="decode")
        machine.load_benchmark_fpms("decode", DECODE_TRAINING)
        effects = run_tick(
            machine,
            now_s=60.0,
            traffic=window(1, 1000, 150),
            counts=WorkerCounts(ready_num_decode=64),
        )
        assert effects.scale_to is None
        assert machine.throughput_lower_bounds["decode"] == 56

    def test_agg_without_batched_tokens_is_not_ready(self):
        caps = WorkerCapabilities(decode=EngineCapabilities(num_gpu=1))
        machine = core(caps, mode="agg", enable_load_scaling=False, min_endpoint=1)
        machine.load_benchmark_fpms("decode", AGG_TRAINING)
        effects = run_tick(
            machine,
            now_s=60.0,
            traffic=window(100, 1000, 150),
            counts=WorkerCounts(ready_num_decode=1),
        )
        assert effects.scale_to is None
        assert effects.diagnostics.throughput_decision_reason == "model_not_ready"

    def test_with_load_scaling_on_not_ready_keeps_the_old_bounds(self):
        machine = core(mode="decode", decode_min_endpoint=3)
        effects = run_tick(
            machine,
            now_s=60.0,
            traffic=window(100, 1000, 150),
            counts=WorkerCounts(ready_num_decode=1),
        )
        assert effects.scale_to is None
        assert machine.throughput_lower_bounds["decode"] == 1

    def test_non_finite_forecast_is_predict_failed(self):
        machine = core(mode="prefill", enable_load_scaling=False)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)

        class Wild(ConstantPredictor):
            def forecast(self) -> float:
                return math.inf

        machine.forecaster.isl = Wild()
        effects = run_tick(machine, now_s=60.0, traffic=window(100, 1000, 150))
        assert effects.diagnostics.throughput_decision_reason == "predict_failed"
        assert effects.diagnostics.predicted_num_req is None


class TestZeroDemand:
    """Ours (``zero_demand_to_min_endpoint``): a forecast of zero requests needs the minimum
    endpoint count whatever the capacity; the reference holds a fleet idle since its start."""

    IDLE = window(0, 0, 0)
    BUSY = window(100, 1000, 150)

    @staticmethod
    def trained(**overrides):
        machine = core(enable_load_scaling=False, **overrides)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        machine.load_benchmark_fpms("decode", DECODE_TRAINING)
        return machine

    @staticmethod
    def tick(machine, now_s, traffic, prefill=4, decode=4):
        counts = WorkerCounts(ready_num_prefill=prefill, ready_num_decode=decode)
        return run_tick(machine, now_s=now_s, traffic=traffic, counts=counts)

    def test_a_fleet_idle_from_the_start_scales_to_the_min_endpoints(self):
        machine = self.trained(prefill_min_endpoint=2)
        effects = self.tick(machine, 60.0, self.IDLE)
        target, diag = effects.scale_to, effects.diagnostics
        assert (target.num_prefill, target.num_decode) == (2, 1)
        assert (target.reason, target.prefill_reason, target.decode_reason) == ("scale",) * 3
        assert diag.predicted_num_req == 0.0 and diag.predicted_isl == 0.0
        effects = self.tick(machine, 120.0, self.IDLE, prefill=2, decode=1)
        assert effects.scale_to is None
        assert effects.diagnostics.throughput_decision_reason == "no_change"

    def test_zero_demand_needs_no_ready_model(self):
        machine = core(enable_load_scaling=False)  # no perf model can answer
        effects = self.tick(machine, 60.0, self.IDLE)
        assert (effects.scale_to.num_prefill, effects.scale_to.num_decode) == (1, 1)
        assert effects.scale_to.reason == "scale"
        busy = self.tick(machine, 120.0, self.BUSY, prefill=1, decode=1)
        assert busy.diagnostics.throughput_decision_reason == "model_not_ready"

    def test_with_load_scaling_on_the_bounds_fall_to_the_min_endpoints(self):
        machine = core(prefill_min_endpoint=2)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        machine.load_benchmark_fpms("decode", DECODE_TRAINING)
        effects = self.tick(machine, 60.0, self.IDLE)
        assert effects.scale_to is None
        assert effects.diagnostics.throughput_decision_reason == "set_lower_bound"
        assert machine.throughput_lower_bounds == {"prefill": 2, "decode": 1}

    def test_the_reference_holds_a_fleet_idle_from_the_start(self):
        machine = self.trained(zero_demand_to_min_endpoint=False)
        for now_s in (60.0, 120.0):
            effects = self.tick(machine, now_s, self.IDLE)
            assert effects.scale_to is None
            diag = effects.diagnostics
            assert diag.throughput_decision_reason == "model_not_ready"
            assert diag.throughput_decision_reason_prefill == "model_not_ready"
        assert machine.prefill_model.is_ready and machine.decode_model.is_ready
        assert not machine.config.reference_variant().zero_demand_to_min_endpoint

    @pytest.mark.parametrize("ours", [True, False])
    def test_an_idle_window_after_traffic_scales_down_as_before(self, ours):
        # the lengths carry forward (spec §7.1): the models answer, the demand is 0 → floor
        machine = self.trained(zero_demand_to_min_endpoint=ours)
        busy = self.tick(machine, 60.0, self.BUSY)
        assert (busy.scale_to.num_prefill, busy.scale_to.num_decode) == (2, 3)
        idle = self.tick(machine, 120.0, self.IDLE, prefill=2, decode=3)
        target, diag = idle.scale_to, idle.diagnostics
        assert (target.num_prefill, target.num_decode, target.reason) == (1, 1, "scale")
        assert (diag.predicted_num_req, diag.predicted_isl, diag.predicted_osl) == (0, 1000, 150)
        assert diag.engine_rps_prefill > 0 and diag.engine_rps_decode > 0


PROFILE = Path(__file__).resolve().parents[1] / "data/profiles/h200_llama3.1-8b-fp8_tp1"


@pytest.mark.skipif(not PROFILE.is_dir(), reason="shipped H200 profile not present")
def test_real_profile_bootstrap_sizes_a_disagg_fleet_under_the_budget():
    profile = load_profile(PROFILE)
    caps = WorkerCapabilities(
        prefill=EngineCapabilities(num_gpu=1, max_num_batched_tokens=8192),
        decode=EngineCapabilities(
            num_gpu=1, max_num_batched_tokens=8192, max_kv_tokens=profile.decode.max_kv_tokens
        ),
    )
    machine = core(caps, enable_load_scaling=False, ttft_ms=200.0, itl_ms=20.0, max_gpu_budget=16)
    loaded = {
        role: machine.load_benchmark_fpms(role, fpms)
        for role, fpms in profile_to_fpms(profile).items()
    }
    assert loaded == {"prefill": 17, "decode": 41}
    outcomes = []
    # ready counts from which the raw sizing is within the §5.4 change cap (8)
    for num_req, ready in ((600, (1, 1)), (6_000, (1, 1)), (30_000, (30, 10))):
        counts = WorkerCounts(ready_num_prefill=ready[0], ready_num_decode=ready[1])
        effects = run_tick(machine, now_s=60.0, traffic=window(num_req, 3000, 150), counts=counts)
        diag = effects.diagnostics
        raw = (
            math.ceil(num_req / 60 / diag.engine_rps_prefill),
            math.ceil(num_req / 60 / diag.engine_rps_decode),
        )
        target = effects.scale_to
        outcomes.append((raw, None if target is None else (target.num_prefill, target.num_decode)))
    # 10 rps fits one engine each (no change); 100 rps needs (7, 3); 500 rps needs (33, 12) =
    # 45 GPUs, clamped to 16: prefill floor(33·16/45) = 11, decode the remaining 5
    assert outcomes == [((1, 1), None), ((7, 3), (7, 3)), ((33, 12), (11, 5))]


def profiled_throughput_only() -> PlannerStateMachine:
    """A disagg throughput-only machine on the shipped profile, without a GPU budget."""
    machine = core(enable_load_scaling=False, max_gpu_budget=-1, ttft_ms=200.0, itl_ms=20.0)
    for role, fpms in profile_to_fpms(load_profile(PROFILE)).items():
        machine.load_benchmark_fpms(role, fpms)
    return machine


@pytest.mark.parametrize("ready", [None, MAX_REPLICAS])
def test_no_sizing_goes_above_the_most_replicas_a_role_can_have(ready):
    # requests at the longest lengths admission takes: sized at ~1e11 decode replicas with no
    # count known, or the change cap above a fleet at the ceiling; a decision past
    # MAX_REPLICAS would be refused by the planner's own inventory readers once applied
    machine = profiled_throughput_only()
    counts = None
    if ready is not None:
        counts = WorkerCounts(ready_num_prefill=ready - 1, ready_num_decode=ready - 1)
    effects = run_tick(machine, now_s=60.0, traffic=window(6000, 2**27, 2**27), counts=counts)
    assert effects.scale_to is not None
    assert (effects.scale_to.num_prefill, effects.scale_to.num_decode) == (MAX_REPLICAS,) * 2


class TestRequestWindows:
    """Item 1a: request records aggregated per throughput interval inside the planner (the
    tumbling windows of the dataflow feed ``DeploymentPlanner.on_window``)."""

    @staticmethod
    def planner():
        from operators.deployment import DeploymentPlanner

        config = PlannerConfig(
            mode="prefill",
            optimization_target="sla",
            enable_load_scaling=False,
            throughput_adjustment_interval_seconds=60,
            load_adjustment_interval_seconds=5,
        )
        return DeploymentPlanner("d", config, window_s=5.0)

    @staticmethod
    def interval(planner, start_s: float, seed: int, scale: float):
        from operators.window import TickWindow
        from schemas import RequestRecord

        rng = random.Random(seed)
        isls, osls, hits, record = [], [], [], None
        for i in range(1, 13):
            requests = []
            for j in range(50):
                isl, osl = int(scale * rng.lognormvariate(7, 0.8)), rng.randint(10, 400)
                isls.append(isl)
                osls.append(osl)
                hit = 0.2 + 0.4 * (j % 2) if j % 3 else None  # every third without a hit rate
                if hit is not None:
                    hits.append(hit)
                requests.append(RequestRecord(isl=isl, osl=osl, kv_hit_rate=hit, accept_length=2.5))
            record = planner.on_window(start_s + 5.0 * i, TickWindow(requests=requests))
        return record, isls, osls, hits

    def test_counts_means_rates_and_quantiles(self):
        planner = self.planner()
        record, isls, osls, hits = self.interval(planner, 0.0, seed=1, scale=1.0)
        assert record.ran_throughput and record.time == 60.0
        obs = record.observed_traffic
        assert (obs.duration_s, obs.num_req) == (60.0, 600.0)
        assert abs(obs.isl - sum(isls) / 600) < 1e-9 and abs(obs.osl - sum(osls) / 600) < 1e-9
        # the hit rate averages only the requests that carried one (396 of 600)
        assert len(hits) == 396 and abs(obs.kv_hit_rate - sum(hits) / 396) < 1e-12
        assert obs.accept_length == 2.5
        for series, values, quantiles in (
            ("isl", isls, obs.isl_quantiles),
            ("osl", osls, obs.osl_quantiles),
        ):
            assert set(quantiles) == {"p50", "p90", "p99"}, series
            for q in (0.5, 0.9, 0.99):
                exact = float(np.quantile(values, q))
                assert abs(quantiles[f"p{round(q * 100)}"] / exact - 1) < 0.002, (series, q)
        # OSLs are all below 512 tokens: their quantiles are exact
        assert obs.osl_quantiles == {
            f"p{round(q * 100)}": float(np.quantile(osls, q)) for q in (0.5, 0.9, 0.99)
        }

    def test_quantiles_cover_one_throughput_interval(self):
        planner = self.planner()
        _, first, _, _ = self.interval(planner, 0.0, seed=1, scale=1.0)
        record, isls, _, _ = self.interval(planner, 60.0, seed=2, scale=4.0)  # longer prompts
        obs = record.observed_traffic
        assert record.time == 120.0 and obs.num_req == 600.0
        assert abs(obs.isl - sum(isls) / 600) < 1e-9
        for q in (0.5, 0.9, 0.99):
            value = obs.isl_quantiles[f"p{round(q * 100)}"]
            assert abs(value / float(np.quantile(isls, q)) - 1) < 0.002
            assert abs(value / float(np.quantile(isls + first, q)) - 1) > 0.05  # not both

    def test_quantiles_of_a_quiet_window_are_its_own(self):
        """Six requests a minute: river's streaming estimator put all three quantiles at 3000,
        below the mean (3500); the window's own are numpy's, to 0.2 %."""
        from operators.window import TickWindow
        from schemas import RequestRecord

        planner = self.planner()
        isls = [1000, 2000, 3000, 4000, 5000, 6000]
        for i in range(1, 13):
            requests = [RequestRecord(isl=isls[i - 1], osl=100)] if i <= 6 else []
            record = planner.on_window(5.0 * i, TickWindow(requests=requests))
        quantiles = record.observed_traffic.isl_quantiles
        expected = {"p50": 3500.0, "p90": 5500.0, "p99": 5950.0}
        assert all(abs(quantiles[k] / v - 1) < 0.002 for k, v in expected.items()), quantiles

    def test_quantiles_do_not_depend_on_the_order_of_equal_time_requests(self):
        from operators.window import TickWindow
        from schemas import RequestRecord

        rng = random.Random(7)
        requests = [
            RequestRecord(isl=int(rng.lognormvariate(8, 1)), osl=rng.randint(1, 2000))
            for _ in range(40)
        ]
        observed = []
        for order in (requests, requests[::-1], sorted(requests, key=lambda r: r.isl)):
            planner = self.planner()
            for i in range(1, 13):
                record = planner.on_window(5.0 * i, TickWindow(requests=order if i == 1 else []))
            observed.append(record.observed_traffic)
        assert observed[0] == observed[1] == observed[2]


class TestTrafficReadings:
    """Explicit traffic readings (Prometheus, or traffic events of a stream) and the load
    tick's rate window."""

    planner = staticmethod(TestRequestWindows.planner)

    def test_a_reading_stamped_on_a_tick_is_read_by_the_next_throughput_tick(self):
        """A producer stamping each minute's reading at the minute's end (time 60, duration
        60): the reading joins the window [60, 65), read by the tick at 120 — it was lost."""
        from operators.window import TickWindow

        planner = self.planner()
        seen = []
        for i in range(1, 37):
            end = 5.0 * i
            reading = end - 5.0  # on the start of the window that closes now
            traffic = (
                [(reading, TrafficObservation(duration_s=60, num_req=60 * reading, isl=10, osl=1))]
                if reading % 60 == 0 and reading > 0
                else []
            )
            record = planner.on_window(end, TickWindow(traffic=traffic))
            if record.ran_throughput:
                obs = record.observed_traffic
                seen.append((record.time, None if obs is None else obs.num_req))
        assert seen == [(60.0, None), (120.0, 3600.0), (180.0, 7200.0)]

    def test_the_rate_window_reads_the_newest_reading_it_lies_within(self):
        from operators.window import TickWindow

        planner = self.planner()
        reading = TrafficObservation(duration_s=60, num_req=600, isl=10, osl=1)
        planner.on_window(5.0, TickWindow(traffic=[(2.0, reading)]))
        assert planner.traffic_over(30, 40.0) is None  # a throughput tick's span: not in it
        assert planner.traffic_over(30, 40.0, readings_stand=True) == reading
        assert planner.traffic_over(30, 62.0, readings_stand=True) == reading
        assert planner.traffic_over(30, 62.5, readings_stand=True) is None  # older than 60 s

    def test_the_rate_window_says_the_span_it_counts(self):
        """A 30 s rate window on 7 s tick windows counts five windows: 35 s of requests."""
        from operators.deployment import DeploymentPlanner
        from operators.window import TickWindow
        from schemas import RequestRecord

        config = PlannerConfig(
            mode="prefill",
            throughput_adjustment_interval_seconds=63,
            load_adjustment_interval_seconds=7,
            load_rate_window_seconds=30,
        )
        planner = DeploymentPlanner("d", config, window_s=7.0)
        for i in range(1, 11):
            planner.on_window(7.0 * i, TickWindow(requests=[RequestRecord(isl=10, osl=1)] * 10))
        obs = planner.traffic_over(30, 70.0)
        assert (obs.num_req, obs.duration_s) == (50, 35.0)
        assert obs.num_req / obs.duration_s == 10 / 7  # the real rate


def test_decode_capacity_ignores_the_kv_hit_rate():
    """Spec §5.3 / §6.5: the discount is for prefill compute only, never decode KV residency."""
    outcome = {}
    for hit in (None, 0.8):
        machine = core(enable_load_scaling=False)
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        machine.load_benchmark_fpms("decode", DECODE_TRAINING)
        effects = run_tick(
            machine,
            now_s=60.0,
            traffic=window(100, 1000, 150, kv_hit_rate=hit),
            counts=WorkerCounts(ready_num_prefill=1, ready_num_decode=1),
        )
        diag = effects.diagnostics
        outcome[hit] = (
            effects.scale_to.num_prefill,
            effects.scale_to.num_decode,
            diag.engine_rps_prefill,
            diag.engine_rps_decode,
        )
    # prefill: 1000 tokens → 1.002 s → 2 replicas; hit 0.8: 200 tokens → 0.202 s → 1
    assert outcome[None][:2] == (2, 3) and outcome[0.8][:2] == (1, 3)
    assert outcome[None][2] == pytest.approx(1 / 1.002, rel=1e-12)
    assert outcome[0.8][2] == pytest.approx(1 / 0.202, rel=1e-12)
    assert outcome[None][3] == outcome[0.8][3] == pytest.approx(4 / (150 * 0.044), rel=1e-6)


@pytest.mark.parametrize(
    ("intervals", "expected"),
    [
        ({"a": (5, 60)}, 5.0),
        ({"a": (7, 60)}, 1.0),
        ({"a": (4.5, 60)}, 1.5),
        ({"a": (5, 180), "b": (10, 90)}, 5.0),
        ({"a": (6, 180), "b": (10, None)}, 2.0),  # b: throughput off, only its load interval
        ({"a": (0.25, None)}, 0.25),
    ],
)
def test_the_outer_tick_is_the_gcd_of_the_enabled_intervals(intervals, expected):
    """Spec §1.3 (G3): the outer tick is the gcd of the enabled intervals (ms resolution)."""
    from flows.planner import window_seconds

    configs = {
        name: PlannerConfig(
            optimization_target="sla",
            enable_load_scaling=True,
            load_adjustment_interval_seconds=load,
            enable_throughput_scaling=throughput is not None,
            throughput_adjustment_interval_seconds=throughput or 180,
        )
        for name, (load, throughput) in intervals.items()
    }
    window = window_seconds(configs)
    assert window == expected
    for config in configs.values():  # every enabled interval is a whole number of windows
        assert (config.load_adjustment_interval_seconds / window).is_integer()


def test_ticks_run_at_their_time_when_windows_are_shorter_than_the_merge_tolerance():
    # a throughput interval of 60.1 s makes the outer window 0.1 s: a tick due at 5.0 s must
    # not run at the window ending 4.5 s because 5.0 is within the 0.5 s merge tolerance
    from operators.deployment import DeploymentPlanner
    from operators.window import TickWindow

    config = PlannerConfig(
        mode="decode",
        optimization_target="sla",
        enable_load_scaling=True,
        enable_throughput_scaling=True,
        load_adjustment_interval_seconds=5,
        throughput_adjustment_interval_seconds=60.1,
    )
    planner = DeploymentPlanner("d", config, window_s=0.1)
    ends = [round(0.1 * k, 1) for k in range(1, 301)]
    ticked = [end for end in ends if planner.on_window(end, TickWindow()).ran_load]
    assert ticked == [5.0, 10.0, 15.0, 20.0, 25.0, 30.0]


def test_a_silent_request_feed_while_the_engines_prefill_is_unknown_not_idle():
    """Requests were seen, then their feed stops while the engines keep scheduling prompts:
    the throughput tick holds (no traffic data) instead of sizing for zero demand; once the
    engines idle too, the idle interval is zero demand again."""
    from operators.window import TickWindow
    from schemas import ForwardPassMetrics, RequestRecord, ScheduledRequestMetrics, fpm_to_row

    planner = TestRequestWindows.planner()

    def window(end_s: float, requests: int, prompt_tokens: int) -> TickWindow:
        fpm = ForwardPassMetrics(
            worker_id="p0",
            wall_time=0.05 if prompt_tokens else 0.0,
            scheduled_requests=ScheduledRequestMetrics(
                num_prefill_requests=1 if prompt_tokens else 0, sum_prefill_tokens=prompt_tokens
            ),
        )
        return TickWindow(
            requests=[RequestRecord(isl=1000, osl=100)] * requests,
            rows={("prefill", "p0", 0): [fpm_to_row(end_s - 1.0, fpm)]},
        )

    observed = []
    for i in range(1, 37):
        interval = (i - 1) // 12  # 0: traffic and its requests; 1: prefill, no records; 2: idle
        end = 5.0 * i
        record = planner.on_window(
            end, window(end, 10 if interval == 0 else 0, 4000 * (interval < 2))
        )
        if record.ran_throughput:
            obs = record.observed_traffic
            observed.append(None if obs is None else obs.num_req)
    assert observed == [120, None, 0]


@pytest.mark.parametrize("stabilization", [0.0, 300.0])
def test_throughput_only_scale_downs_wait_out_the_stabilization_window(stabilization):
    """Ours (``scale_down_stabilization_seconds``, as an HPA): a throughput-only deployment's
    scale-down goes no lower than the highest sizing of the window's ticks. A load whose need
    sits at a replica boundary (2.7 then 1.7 replicas a minute) flapped 3↔2 on every tick; the
    reference (0 s) still does."""
    machine = core(
        mode="prefill",
        enable_load_scaling=False,
        throughput_adjustment_interval_seconds=60,
        scale_down_stabilization_seconds=stabilization,
    )
    machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
    ready, counts, reasons = 3, [], []
    for i, num_req in enumerate([160, 100] * 4):  # 3 replicas, then 2, a minute each
        effects = run_tick(
            machine,
            now_s=60.0 * (i + 1),
            traffic=window(num_req, 1000, 150),
            counts=WorkerCounts(ready_num_prefill=ready, expected_num_prefill=ready),
        )
        if effects.scale_to is not None:
            ready = effects.scale_to.num_prefill
        counts.append(ready)
        reasons.append(effects.diagnostics.throughput_decision_reason_prefill)
    if stabilization:
        assert counts == [3] * 8
        assert reasons[1::2] == ["scale_down_stabilizing"] * 4
    else:
        assert counts == [3, 2] * 4


def test_a_sizing_older_than_the_window_holds_nothing():
    # protects: the window was counted in sized ticks, so after an hour of ticks without
    # traffic data a sizing 61 minutes old still held a scale-down
    machine = core(
        mode="prefill",
        enable_load_scaling=False,
        throughput_adjustment_interval_seconds=60,
        scale_down_stabilization_seconds=300,
    )
    machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
    counts = WorkerCounts(ready_num_prefill=3, expected_num_prefill=3)
    run_tick(machine, now_s=60.0, traffic=window(160, 1000, 150), counts=counts)  # sizes 3
    for minute in range(2, 62):  # an hour without traffic data (its source was down)
        effects = run_tick(
            machine, now_s=60.0 * minute, traffic=window(0, 0, 0, 0.0), counts=counts
        )
        assert effects.diagnostics.throughput_decision_reason == "no_traffic_data"
    effects = run_tick(machine, now_s=60.0 * 62, traffic=window(100, 1000, 150), counts=counts)
    assert effects.scale_to is not None and effects.scale_to.num_prefill == 2


@pytest.mark.parametrize("floor", [10, None])
def test_a_length_forecast_overshooting_a_fall_still_sizes_the_requests(floor):
    """Kalman's trend overshoots a fall in ISL (8000 → 1000 while the request count triples):
    16 tokens (prefill sized for those, 10 replicas to 1), then 0, clamped (the tick held as
    ``model_not_ready`` for four minutes). The shortest recent length is the floor."""
    machine = core(
        mode="prefill",
        enable_load_scaling=False,
        throughput_adjustment_interval_seconds=60,
        load_predictor="kalman",
        length_forecast_floor_windows=floor,
    )
    machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
    ticks = []
    for i, (num_req, isl) in enumerate([(600, 8000)] * 20 + [(1800, 1000)] * 8):
        effects = run_tick(
            machine,
            now_s=60.0 * (i + 1),
            traffic=window(num_req, isl, 150),
            counts=WorkerCounts(ready_num_prefill=2, expected_num_prefill=2),
        )
        diag = effects.diagnostics
        target = None if effects.scale_to is None else effects.scale_to.num_prefill
        ticks.append((diag.predicted_isl, diag.throughput_decision_reason_prefill, target))
    after_the_fall = ticks[20:]
    if floor is None:  # the reference: held, as the overshoot reached 0
        assert [reason for _, reason, _ in after_the_fall][4:] == ["model_not_ready"] * 4
        return
    assert all(reason != "model_not_ready" for _, reason, _ in after_the_fall), after_the_fall
    assert all(isl >= 1000 for isl, _, _ in after_the_fall), after_the_fall
    targets = [target for _, _, target in after_the_fall if target is not None]
    assert targets == sorted(targets), after_the_fall  # up with the demand, never cut


def test_requests_of_no_length_are_warned_of_once_as_the_cause_of_the_hold(caplog):
    """Requests that count no prompt tokens (a traffic source that does not read them) leave
    no engine rate: the roles hold as ``model_not_ready`` (spec §5.3) though the model is
    trained. The log says what the reason cannot, once until a tick sizes again."""
    from operators.deployment import DeploymentPlanner
    from operators.window import TickWindow
    from schemas import RequestRecord

    config = PlannerConfig(
        mode="prefill",
        optimization_target="sla",
        enable_load_scaling=False,
        throughput_adjustment_interval_seconds=60,
        load_adjustment_interval_seconds=60,
        load_predictor="constant",  # the forecast is the last window
        length_forecast_floor_windows=None,  # (ours would lift it to the 2000 of minute 4)
    )
    planner = DeploymentPlanner(
        "llama", config, window_s=60.0, bootstrap={"prefill": PREFILL_TRAINING}
    )
    reasons = []
    with caplog.at_level("WARNING", logger="operators.deployment"):
        for minute, isl in enumerate((0, 0, 0, 2000, 0), start=1):
            requests = [RequestRecord(isl=isl, osl=100)] * 600
            record = planner.on_window(60.0 * minute, TickWindow(requests=requests))
            reasons.append(record.diagnostics.throughput_decision_reason)
    assert reasons == ["model_not_ready"] * 3 + ["scale", "model_not_ready"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2, warnings  # the first stretch, and again after the sizing
    assert warnings[0].startswith("llama: 600 requests forecast in 60 s with a mean ISL of 0 ")
    assert "though the perf models are ready" in warnings[0]

    caplog.clear()  # an untrained model is what holds a cold planner: nothing to add
    cold = DeploymentPlanner("cold", config, window_s=60.0)
    with caplog.at_level("WARNING", logger="operators.deployment"):
        record = cold.on_window(60.0, TickWindow(requests=[RequestRecord(isl=0, osl=100)] * 600))
    assert record.diagnostics.throughput_decision_reason == "model_not_ready"
    assert caplog.records == []
