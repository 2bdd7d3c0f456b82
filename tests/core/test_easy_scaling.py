"""Threshold ("easy") targets: throughput / latency (reference spec §4.3, §16.4 + §16.1a).

Capabilities: context_length 4096 (prefill queue ratio) and max_kv_tokens 100 000 (KV load).
"""

from __future__ import annotations

import pytest

from operators.load_scaling import LoadProposal, Thresholds
from operators.state_machine import PlannerStateMachine
from schemas import EngineCapabilities, PlannerConfig, WorkerCapabilities, WorkerCounts
from tests.core.planner_inputs import fpm, run_tick

CAPS = EngineCapabilities(context_length=4096, max_kv_tokens=100_000)


def machine(mode: str, target: str = "throughput", caps=None, **overrides) -> PlannerStateMachine:
    config = PlannerConfig(mode=mode, optimization_target=target, **overrides)
    if caps is None:
        caps = WorkerCapabilities(
            prefill=CAPS if mode in ("prefill", "disagg") else None,
            decode=CAPS if mode != "prefill" else None,
        )
    return PlannerStateMachine(config, caps)


def prefill_engines(*queued: int):
    return {(f"w{i}", 0): fpm(worker_id=f"w{i}", queued_prefill=q) for i, q in enumerate(queued)}


def decode_engines(*loads: tuple[int, int] | int, queued_prefill: int = 0):
    out = {}
    for i, load in enumerate(loads):
        sched, queued = load if isinstance(load, tuple) else (load, 0)
        out[(f"w{i}", 0)] = fpm(
            worker_id=f"w{i}",
            decode_kv=sched,
            queued_decode_kv=queued,
            queued_prefill=queued_prefill,
            decode_requests=1,
        )
    return out


def prefill_outcome(target: str, *queued: int, **overrides):
    effects = run_tick(
        machine("prefill", target, **overrides),
        prefill=prefill_engines(*queued),
        counts=WorkerCounts(ready_num_prefill=len(queued)),
    )
    num = effects.scale_to.num_prefill if effects.scale_to is not None else None
    return num, effects.diagnostics.load_decision_reason


def decode_outcome(mode: str, target: str, *loads, queued_prefill: int = 0, **overrides):
    effects = run_tick(
        machine(mode, target, **overrides),
        decode=decode_engines(*loads, queued_prefill=queued_prefill),
        counts=WorkerCounts(ready_num_decode=len(loads)),
    )
    num = effects.scale_to.num_decode if effects.scale_to is not None else None
    return num, effects.diagnostics.load_decision_reason


@pytest.mark.parametrize(
    ("queued", "expected"),
    [
        ((4096,), (2, "scale_up")),  # ratio 1.0 ≥ 1.0
        ((2048, 2048), (None, "no_change")),
        ((204, 204), (1, "scale_down")),  # ratio 0.0498 < 0.1 on all
        ((0,), (None, "no_change")),  # N = 1 never scales down
    ],
)
def test_prefill_throughput_target(queued, expected):
    assert prefill_outcome("throughput", *queued) == expected


@pytest.mark.parametrize(
    ("queued", "expected"),
    [
        ((410,), (2, "scale_up")),  # ratio 0.1001 ≥ 0.1
        ((0, 0), (1, "scale_down")),  # all queues empty
        ((10, 10), (None, "no_change")),
    ],
)
def test_prefill_latency_target(queued, expected):
    assert prefill_outcome("latency", *queued) == expected


@pytest.mark.parametrize(
    ("target", "loads", "expected"),
    [
        ("throughput", [(80_000, 30_000)], (2, "scale_up")),  # util 1.1 > 1.0
        ("throughput", [40_000, 40_000], (1, "scale_down")),  # 0.4 < 0.6 on all
        ("throughput", [70_000, 70_000], (None, "no_change")),
        ("latency", [45_000], (2, "scale_up")),  # 0.45 > 0.4
        ("latency", [5_000, 5_000], (1, "scale_down")),  # 0.05 < 0.1 on all
    ],
)
def test_decode_targets(target, loads, expected):
    assert decode_outcome("decode", target, *loads) == expected


@pytest.mark.parametrize(
    ("loads", "expected"),
    [
        ([50_000, (80_000, 30_000)], (3, "scale_up")),
        ([20_000, 70_000], (None, "no_change")),
        ([20_000, 30_000, 25_000], (2, "scale_down")),
    ],
)
def test_any_hot_engine_scales_up_all_cool_engines_scale_down(loads, expected):
    assert decode_outcome("decode", "throughput", *loads) == expected


def test_disagg_sizes_each_role_from_its_own_engines():
    core = machine("disagg")
    counts = WorkerCounts(ready_num_prefill=1, ready_num_decode=1)
    effects = run_tick(
        core, prefill=prefill_engines(4096), decode=decode_engines(50_000), counts=counts
    )
    target = effects.scale_to
    assert (target.num_prefill, target.num_decode) == (2, 1)
    assert (target.prefill_reason, target.decode_reason, target.reason) == (
        "scale_up",
        "no_change",
        "scale_up",
    )
    effects = run_tick(
        core, prefill=prefill_engines(0), decode=decode_engines(110_000), counts=counts
    )
    assert (effects.scale_to.num_prefill, effects.scale_to.num_decode) == (1, 2)


@pytest.mark.parametrize(
    ("loads", "queued_prefill", "expected"),
    [
        ([(80_000, 30_000)], 0, (2, "scale_up")),
        ([20_000], 90_000, (2, "scale_up")),  # queued prefill counts as future KV
        ([30_000, 30_000], 0, (1, "scale_down")),
    ],
)
def test_agg_counts_queued_prefill_as_kv(loads, queued_prefill, expected):
    assert decode_outcome("agg", "throughput", *loads, queued_prefill=queued_prefill) == expected


def test_missing_capabilities_are_insufficient_data():
    no_caps = WorkerCapabilities(prefill=EngineCapabilities(), decode=EngineCapabilities())
    assert prefill_outcome("throughput", 8192, caps=no_caps) == (None, "insufficient_data")
    assert decode_outcome("decode", "throughput", 200_000, caps=no_caps) == (
        None,
        "insufficient_data",
    )
    assert decode_outcome("agg", "latency", 200_000, caps=no_caps) == (
        None,
        "insufficient_data",
    )


def test_scaling_in_progress_holds():
    effects = run_tick(
        machine("prefill"),
        prefill=prefill_engines(8192),
        counts=WorkerCounts(ready_num_prefill=1, expected_num_prefill=2),
    )
    assert effects.scale_to is None
    assert effects.diagnostics.load_decision_reason == "scaling_in_progress"


def test_min_endpoint_holds_an_idle_pair():
    # erratum §16.1a: with an FPM from both workers the rule proposes 2 = current → no decision
    assert prefill_outcome("throughput", 0, 0, min_endpoint=2) == (None, "no_change")
    assert prefill_outcome("throughput", 0, 0, 0, min_endpoint=2) == (2, "scale_down")


def test_gpu_budget_caps_the_scale_up():
    caps = WorkerCapabilities(
        prefill=EngineCapabilities(num_gpu=4, context_length=4096, max_kv_tokens=100_000)
    )
    # the budget band (default) names the hold; the §8.1 pair clamp lands back on 1 silently
    held = (None, "gpu_budget_guard_hold")
    assert prefill_outcome("throughput", 8192, caps=caps, max_gpu_budget=4) == held
    clamp = {"caps": caps, "max_gpu_budget": 4, "gpu_budget_rule": "pair_clamp"}
    assert prefill_outcome("throughput", 8192, **clamp) == (None, "no_change")
    assert prefill_outcome("throughput", 8192, caps=caps, max_gpu_budget=8) == (2, "scale_up")


class TestConfig:
    @pytest.mark.parametrize("target", ["throughput", "latency"])
    def test_easy_targets_force_load_on_and_throughput_off(self, target):
        config = PlannerConfig(
            optimization_target=target, enable_load_scaling=False, enable_throughput_scaling=True
        )
        assert (config.enable_load_scaling, config.enable_throughput_scaling) == (True, False)

    def test_sla_keeps_the_flags(self):
        config = PlannerConfig(
            optimization_target="sla", enable_load_scaling=True, enable_throughput_scaling=False
        )
        assert (config.enable_load_scaling, config.enable_throughput_scaling) == (True, False)

    @pytest.mark.parametrize("mode", ["disagg", "prefill", "decode", "agg"])
    def test_easy_mode_creates_no_perf_models_and_no_predictors(self, mode):
        core = machine(mode)
        assert (core.prefill_model, core.decode_model, core.agg_model) == (None, None, None)
        assert core.forecaster is None
        role = "decode" if mode != "prefill" else "prefill"
        assert core.load_benchmark_fpms(role, [fpm(prefill_tokens=10, wall_time=0.1)]) == 0
        tick = core.initial_tick(0.0)
        assert not tick.need_traffic_metrics  # threshold targets use no traffic metadata


def test_the_last_replica_is_never_scaled_away_at_min_endpoint_zero():
    # protects: a threshold rule scales down only from two replicas (§4.3 "N>1"), so an idle
    # deployment allowed to reach zero (min_endpoint 0) keeps its last serving replica
    assert Thresholds(0.9, 0.5).step([0.1], n=1, min_endpoint=0) == LoadProposal(None, "no_change")
    assert Thresholds(0.9, 0.5).step([0.1, 0.1], n=2, min_endpoint=0).desired == 1
    # the same through the state machine: one decode replica at 1 % KV use stays
    assert decode_outcome("decode", "throughput", 1_000, min_endpoint=0) == (None, "no_change")
