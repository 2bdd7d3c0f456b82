"""Power awareness (spec §8.2's last bullet): the budget's arithmetic, its place in the load and
throughput decisions, its config rules and its diagnostics."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from operators.gpu_budget import GpuBudget
from operators.power_budget import PowerBudget
from operators.state_machine import PlannerStateMachine
from operators.window import merge_capabilities
from schemas import EngineCapabilities, PlannerConfig, WorkerCapabilities, WorkerCounts
from tests.core.planner_inputs import (
    DECODE_TRAINING,
    PREFILL_TRAINING,
    core,
    engines,
    run_tick,
    saturated_prefill,
    sla_config,
)
from tests.core.test_easy_scaling import decode_engines, prefill_engines
from tests.core.test_load_target import DECODE as LOAD_DECODE
from tests.core.test_load_target import PREFILL as LOAD_PREFILL
from tests.core.test_throughput_scaling import pin_capacity, window

H200 = 700
"""An H200's power cap, W."""


def watts(prefill: int | None = H200, decode: int | None = H200) -> dict:
    return {"prefill": prefill, "decode": decode}


ENDPOINTS = {"prefill": 1, "decode": 1}


class TestPowerBudget:
    def test_a_scale_up_keeps_the_part_the_limit_funds(self):
        budget = PowerBudget(2000, {"decode": H200}, {"decode": 1})
        assert budget.cap({"decode": 1}, {"decode": 4}) == {"decode": 2}
        assert budget.cap({"decode": 2}, {"decode": 4}) == {"decode": 2}  # held
        assert PowerBudget(2100, {"decode": H200}, {"decode": 1}).cap(
            {"decode": 1}, {"decode": 4}
        ) == {"decode": 3}  # exactly at the limit is within it

    def test_a_fleet_above_the_limit_is_never_forced_down(self):
        budget = PowerBudget(2000, {"decode": H200}, {"decode": 1})  # 5 replicas draw 3500 W
        assert budget.cap({"decode": 5}, {"decode": 6}) == {"decode": 5}
        assert budget.cap({"decode": 5}, {"decode": 5}) == {"decode": 5}
        assert budget.cap({"decode": 5}, {"decode": 4}) == {"decode": 4}

    def test_headroom_is_shared_in_proportion_to_the_two_moves(self):
        budget = PowerBudget(10 * H200, watts(), ENDPOINTS)
        assert budget.cap(watts(2, 4), watts(6, 8)) == watts(4, 6)
        assert budget.cap(watts(2, 2), watts(4, 10)) == watts(3, 7)

    def test_a_down_leg_frees_power_for_the_up_leg(self):
        budget = PowerBudget(6000, watts(), ENDPOINTS)
        assert budget.cap(watts(4, 4), watts(2, 7)) == watts(2, 6)  # 8 × 700 <= 6000 < 9 × 700

    def test_each_role_draws_its_gpus_times_its_cap(self):
        budget = PowerBudget(6000, watts(2 * 500, 1 * H200), ENDPOINTS)
        assert budget.projected_w(watts(3, 2)) == 3 * 1000 + 2 * H200
        assert budget.cap(watts(1, 2), watts(8, 2)) == watts(4, 2)  # 4 000 + 1 400 W

    def test_minimum_endpoints_are_always_funded(self):
        budget = PowerBudget(1000, {"decode": H200}, {"decode": 2})
        assert budget.cap({"decode": 0}, {"decode": 3}) == {"decode": 2}
        assert budget.cap({"decode": None}, {"decode": 3}) == {"decode": 2}

    def test_an_unknown_cap_leaves_the_counts_alone(self):
        budget = PowerBudget(1000, watts(decode=None), ENDPOINTS)
        assert budget.projected_w(watts(5, 5)) is None
        assert budget.cap(watts(1, 1), watts(5, 5)) == watts(5, 5)


def power_caps(prefill_gpus: int = 1, cap: int | None = H200) -> WorkerCapabilities:
    return WorkerCapabilities(
        prefill=EngineCapabilities(
            num_gpu=prefill_gpus, max_num_batched_tokens=2048, gpu_power_limit_w=cap
        ),
        decode=EngineCapabilities(num_gpu=1, max_num_batched_tokens=2048, gpu_power_limit_w=cap),
    )


class TestLoadActions:
    """A saturated prefill role asks for one more replica; 2 GPUs × 500 W each."""

    def tick(self, limit: int, cap: int | None = 500):
        machine = core(
            power_caps(prefill_gpus=2, cap=cap),
            mode="prefill",
            ttft_ms=5.0,
            enable_power_awareness=True,
            total_gpu_power_limit=limit,
        )
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        return run_tick(
            machine,
            prefill=saturated_prefill(2),
            counts=WorkerCounts(ready_num_prefill=2),
        )

    def test_a_scale_up_the_limit_funds_goes_ahead(self):
        effects = self.tick(limit=3000)
        assert effects.scale_to.num_prefill == 3
        assert effects.diagnostics.load_decision_reason == "scale_up"
        assert effects.diagnostics.power_budget_total_watts == 3000
        assert effects.diagnostics.power_projected_watts == 3000  # 3 × 2 × 500

    def test_a_scale_up_beyond_the_limit_is_held_and_says_so(self):
        effects = self.tick(limit=2999)
        assert effects.scale_to is None
        assert effects.diagnostics.load_decision_reason == "power_budget_clamp"
        assert effects.diagnostics.load_decision_reason_prefill == "power_budget_clamp"
        assert effects.diagnostics.power_projected_watts == 2000  # the ready replicas

    def test_without_a_cap_the_power_budget_cannot_act(self):
        effects = self.tick(limit=1000, cap=None)
        assert effects.scale_to.num_prefill == 3
        assert effects.diagnostics.power_budget_total_watts == 1000
        assert effects.diagnostics.power_projected_watts is None

    def test_a_disagg_pair_is_cut_to_the_limit(self):
        machine = core(
            power_caps(),
            ttft_ms=5.0,
            itl_ms=5.0,
            enable_power_awareness=True,
            total_gpu_power_limit=5 * H200,
        )
        machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
        machine.load_benchmark_fpms("decode", DECODE_TRAINING)
        saturated = {
            "prefill": saturated_prefill(2),
            "decode": engines(2, decode_kv=30_000, decode_requests=30, wall_time=0.301),
        }
        effects = run_tick(
            machine, counts=WorkerCounts(ready_num_prefill=2, ready_num_decode=2), **saturated
        )
        assert (effects.scale_to.num_prefill, effects.scale_to.num_decode) in ((3, 2), (2, 3))
        assert effects.diagnostics.load_decision_reason == "power_budget_clamp"
        assert effects.diagnostics.power_projected_watts == 5 * H200


class TestThroughputTargets:
    """Demand 1 req/s; each engine's rate pinned so the sizing asks for (8, 8) replicas."""

    DEMAND = window(60, 1000, 150)

    def machine(self, *, load: bool = False, caps: WorkerCapabilities | None = None):
        machine = core(
            caps or power_caps(),
            enable_load_scaling=load,
            ttft_ms=5000.0,
            enable_power_awareness=True,
            total_gpu_power_limit=10 * H200,
        )
        for role, training in (("prefill", PREFILL_TRAINING), ("decode", DECODE_TRAINING)):
            machine.load_benchmark_fpms(role, training)
            pin_capacity(machine, role, 1.0 / 7.5)
        return machine

    def tick(self, machine, counts: WorkerCounts):
        return run_tick(machine, now_s=60.0, traffic=self.DEMAND, counts=counts)

    def test_targets_keep_what_the_limit_funds(self):
        effects = self.tick(self.machine(), WorkerCounts(ready_num_prefill=4, ready_num_decode=4))
        assert (effects.scale_to.num_prefill, effects.scale_to.num_decode) == (5, 5)
        assert effects.diagnostics.throughput_decision_reason == "power_budget_clamp"
        assert effects.diagnostics.power_projected_watts == 10 * H200

    def test_at_the_limit_nothing_moves_not_even_a_scale_in_flight(self):
        counts = WorkerCounts(
            ready_num_prefill=4, ready_num_decode=5, expected_num_prefill=5, expected_num_decode=5
        )
        effects = self.tick(self.machine(), counts)
        assert effects.scale_to is None
        assert effects.diagnostics.throughput_decision_reason == "power_budget_clamp"

    def test_lower_bounds_are_not_cut(self):
        machine = self.machine(load=True)
        effects = self.tick(machine, WorkerCounts(ready_num_prefill=4, ready_num_decode=4))
        assert dict(machine.throughput_lower_bounds) == {"prefill": 8, "decode": 8}
        assert effects.diagnostics.throughput_decision_reason == "set_lower_bound"

    def test_a_cap_learned_later_merges_into_the_engine_capabilities(self):
        machine = self.machine(caps=power_caps(cap=None))
        counts = WorkerCounts(ready_num_prefill=4, ready_num_decode=4)
        effects = self.tick(machine, counts)
        assert (effects.scale_to.num_prefill, effects.scale_to.num_decode) == (8, 8)
        dgd = WorkerCapabilities(
            prefill=EngineCapabilities(gpu_power_limit_w=H200),
            decode=EngineCapabilities(gpu_power_limit_w=H200),
        )
        machine.set_capabilities(merge_capabilities(machine.capabilities, dgd))
        assert machine.capabilities.prefill.max_num_batched_tokens == 2048
        effects = self.tick(machine, counts)
        assert (effects.scale_to.num_prefill, effects.scale_to.num_decode) == (5, 5)


FLOOR_CAPS = WorkerCapabilities(
    prefill=EngineCapabilities(
        num_gpu=1, max_kv_tokens=100_000, max_num_batched_tokens=2048, gpu_power_limit_w=700
    ),
    decode=EngineCapabilities(
        num_gpu=1, max_kv_tokens=100_000, max_num_batched_tokens=2048, gpu_power_limit_w=1000
    ),
)
FLOOR_BAND = {
    "min_gpu_budget": 8,
    "max_gpu_budget": -1,
    "enable_power_awareness": True,
    "total_gpu_power_limit": 4 * 700 + 4 * 1000,
}


class TestWithTheGpuFloor:
    """Prefill GPUs capped at 700 W, decode at 1000 W; the (4, 4) fleet is at both the GPU
    floor (8) and the power limit, so only a rebalance whose both legs move keeps it in band,
    and the power budget cannot fund its up leg."""

    def test_a_load_rebalance_waits_instead_of_flapping_across_the_floor(self):
        thresholds = {**LOAD_PREFILL, **LOAD_DECODE}
        config = PlannerConfig(
            mode="disagg", optimization_target="load", **thresholds, **FLOOR_BAND
        )
        machine = PlannerStateMachine(config, FLOOR_CAPS)
        for i in range(3):  # prefill idle (wants one fewer), decode hot (wants one more)
            effects = run_tick(
                machine,
                now_s=5.0 * (i + 1),
                prefill=prefill_engines(0, 0, 0, 0),
                decode=decode_engines(*[90_000] * 4),
                counts=WorkerCounts(ready_num_prefill=4, ready_num_decode=4),
            )
            assert effects.scale_to is None  # before: (3, 4), then reconciled back to (4, 4)
            assert effects.diagnostics.load_decision_reason == "power_budget_clamp"

    def test_a_throughput_rebalance_waits_too(self):
        machine = core(FLOOR_CAPS, enable_load_scaling=False, ttft_ms=5000.0, **FLOOR_BAND)
        for role, training, rps in (
            ("prefill", PREFILL_TRAINING, 1 / 2.5),
            ("decode", DECODE_TRAINING, 1 / 4.5),
        ):
            machine.load_benchmark_fpms(role, training)
            pin_capacity(machine, role, rps)  # sizing asks for (3, 5)
        effects = run_tick(
            machine,
            now_s=60.0,
            traffic=window(60, 1000, 150),
            counts=WorkerCounts(ready_num_prefill=4, ready_num_decode=4),
        )
        assert effects.scale_to is None  # before: (3, 4), 7 GPUs, below the band for good
        assert effects.diagnostics.throughput_decision_reason == "power_budget_clamp"

    def test_a_fleet_below_the_floor_still_climbs_as_far_as_the_power_goes(self):
        budget = PowerBudget(6 * 700, {"decode": 700}, {"decode": 1})
        config = PlannerConfig(mode="decode", min_gpu_budget=8, max_gpu_budget=-1)
        gpu = GpuBudget(config, {"prefill": None, "decode": 1}, {"decode": 4}, power=budget)
        assert gpu.guard_single("decode", 4, 4) == (6, "power_budget_clamp")  # reconcile to 8

    def test_a_cut_landing_within_the_floor_tolerance_goes_ahead(self):
        # protects: the band's floor is min_gpu_budget less its tolerance (spec §8.2) when the
        # power budget cuts a rebalance, so the cut is not held back at a fleet over the limit
        power = PowerBudget(5 * H200, watts(), ENDPOINTS)  # funds 5 one-GPU replicas
        config = PlannerConfig(
            mode="disagg", gpu_budget_rule="band", min_gpu_budget=6, max_gpu_budget=20
        )
        gpu = GpuBudget(config, watts(1, 1), watts(4, 2), power=power)
        # (4, 2) draws 4 200 W; (2, 5) is cut to (2, 3) = 5 GPUs >= floor 6 - tolerance 1
        assert gpu.guard_pair((4, 2), (2, 5)) == (2, 3, "power_budget_clamp")
        # without a ceiling there is no tolerance (§8.2): 5 < 6 leaves the band, the move waits
        floor_only = PlannerConfig(
            mode="disagg", gpu_budget_rule="band", min_gpu_budget=6, max_gpu_budget=-1
        )
        held = GpuBudget(floor_only, watts(1, 1), watts(4, 2), power=power)
        assert held.guard_pair((4, 2), (2, 5)) == (4, 2, "power_budget_clamp")


class TestConfig:
    def test_off_by_default(self):
        config = PlannerConfig()
        assert config.enable_power_awareness is False
        assert config.total_gpu_power_limit is None

    @pytest.mark.parametrize(
        ("fields", "message"),
        [
            ({"enable_power_awareness": True}, "needs total_gpu_power_limit"),
            ({"enable_power_awareness": True, "total_gpu_power_limit": 0}, "greater than or"),
            ({"total_gpu_power_limit": 5000}, "enable_power_awareness is false"),
            ({"enable_power_awareness": "yes", "total_gpu_power_limit": 5000}, "boolean"),
            ({"enable_power_awareness": True, "total_gpu_power_limit": 5e3}, "integer"),
        ],
    )
    def test_rejected(self, fields, message):
        with pytest.raises(ValidationError, match=message):
            PlannerConfig(**fields)

    def test_agg_mode_is_ours_to_allow(self):
        config = PlannerConfig(mode="agg", enable_power_awareness=True, total_gpu_power_limit=1)
        assert config.total_gpu_power_limit == 1

    def test_the_limit_must_fund_the_gpu_floor_at_the_lowest_configured_cap(self):
        fields = {"enable_power_awareness": True, "capabilities": power_caps(), "min_gpu_budget": 8}
        with pytest.raises(ValidationError, match="below the 5600 W the GPUs of min_gpu_budget 8"):
            sla_config(total_gpu_power_limit=5599, **fields)  # 8 GPUs at 700 W (no ceiling)
        assert sla_config(total_gpu_power_limit=5600, **fields).min_gpu_budget == 8
        banded = {**fields, "max_gpu_budget": 16}  # with a ceiling the floor has 1 GPU of slack
        assert sla_config(total_gpu_power_limit=4900, **banded).min_gpu_budget == 8

    def test_the_limit_must_fund_the_minimum_endpoints_at_configured_caps(self):
        caps = power_caps()
        fields = {"enable_power_awareness": True, "capabilities": caps, "min_endpoint": 2}
        with pytest.raises(ValidationError, match="below the 2800 W the minimum endpoints"):
            sla_config(total_gpu_power_limit=2799, **fields)
        assert sla_config(total_gpu_power_limit=2800, **fields).total_gpu_power_limit == 2800


def test_a_capability_record_clears_a_field_it_sets_to_null():
    old = WorkerCapabilities(decode=EngineCapabilities(num_gpu=2, gpu_power_limit_w=700))
    new = WorkerCapabilities.model_validate_json('{"decode": {"gpu_power_limit_w": null}}')
    merged = merge_capabilities(old, new).decode
    assert (merged.num_gpu, merged.gpu_power_limit_w) == (2, None)  # left out: kept
