"""Load decisions through the state machine where two rules meet: an aggregated deployment's
TTFT and ITL steps (spec §4.7), and the GPU budget band (§8.2) while a role is below its
minimum endpoint. Plus what the reference does with a disagg role at zero replicas."""

from __future__ import annotations

import pytest

from operators.state_machine import PlannerStateMachine
from schemas import WorkerCounts
from tests.core.planner_inputs import (
    AGG_TRAINING,
    DECODE_TRAINING,
    agg_caps,
    core,
    default_caps,
    engines,
    run_tick,
    sla_config,
)

# -- agg: the larger of the two rules' scale-ups ------------------------------------------------

# Two agg engines on AGG_TRAINING (wall = 1 ms/prefill token + 0.1 ms/KV token + 1 ms): the
# estimated TTFT (~499 ms) is just over 420 ms, the ITL (~424 ms) ten times over 40 ms.
AGG_HOT = {
    "decode_kv": 1000,
    "decode_requests": 10,
    "prefill_tokens": 300,
    "prefill_requests": 1,
    "queued_prefill": 100,
    "wall_time": 0.4,
}
AGG_SLA = {"mode": "agg", "ttft_ms": 420.0, "itl_ms": 40.0, "enable_throughput_scaling": False}


def agg_tick(machine: PlannerStateMachine):
    machine.load_benchmark_fpms("decode", AGG_TRAINING)
    return run_tick(
        machine,
        load=True,
        decode=engines(2, **AGG_HOT),
        counts=WorkerCounts(ready_num_decode=2, expected_num_decode=2),
    )


def test_agg_takes_the_itl_rules_larger_step_over_the_ttft_rules():
    effects = agg_tick(core(max_load_step=3, **AGG_SLA))
    diag = effects.diagnostics
    assert 420.0 < diag.estimated_ttft_ms < 2 * 420.0  # TTFT asks one replica ...
    assert diag.estimated_itl_ms > 3 * 40.0  # ... ITL a full step of three
    assert effects.scale_to is not None
    assert (effects.scale_to.num_decode, effects.scale_to.reason) == (5, "scale_up")


def test_agg_reference_variant_still_steps_by_one():
    machine = PlannerStateMachine(sla_config(**AGG_SLA).reference_variant(), agg_caps())
    effects = agg_tick(machine)
    assert effects.scale_to is not None
    assert (effects.scale_to.num_decode, effects.scale_to.reason) == (3, "scale_up")


# -- band budget: a role below its minimum endpoint --------------------------------------------

# Two decode engines far over a 5 ms ITL (DECODE_TRAINING: ~510 ms): the SLA rule asks +1.
HOT_DECODE = {"decode_kv": 30000, "decode_requests": 30, "queued_decode_kv": 20000}


def hot_decode_tick(machine: PlannerStateMachine, counts: WorkerCounts):
    machine.load_benchmark_fpms("decode", DECODE_TRAINING)
    return run_tick(
        machine, load=True, decode=engines(2, wall_time=0.3, **HOT_DECODE), counts=counts
    )


@pytest.mark.parametrize("budget", [-1, 16])
def test_band_keeps_a_funded_scale_up_while_lifting_a_role_from_zero(budget):
    """Prefill at 0/0 (min endpoint 1), decode asks 2 → 3: 4 GPUs under 16 bind nothing, so the
    decision is the one without a budget (and the reference's pair clamp): (1, 3)."""
    machine = core(
        itl_ms=5.0,
        max_gpu_budget=budget,
        gpu_budget_rule="band",
        enable_throughput_scaling=False,
    )
    counts = WorkerCounts(
        ready_num_prefill=0, expected_num_prefill=0, ready_num_decode=2, expected_num_decode=2
    )
    effects = hot_decode_tick(machine, counts)
    assert effects.scale_to is not None
    assert (effects.scale_to.num_prefill, effects.scale_to.num_decode) == (1, 3)
    assert effects.diagnostics.load_decision_reason_decode == "scale_up"
    assert effects.scale_to.reason == "scale_up"


@pytest.mark.parametrize(("budget", "expected"), [(-1, 5), (16, 5), (4, 4)])
def test_band_below_a_raised_min_endpoint_keeps_the_sla_step(budget, expected):
    """decode-only, 2 ready, decode_min_endpoint 3, the SLA asks a full step of +3: 5 — or
    the funded part under a binding 4-GPU ceiling (reported as the budget's)."""
    machine = core(
        mode="decode",
        itl_ms=5.0,
        max_gpu_budget=budget,
        gpu_budget_rule="band",
        enable_throughput_scaling=False,
        decode_min_endpoint=3,
        max_load_step=3,
    )
    counts = WorkerCounts(ready_num_decode=2, expected_num_decode=2)
    effects = hot_decode_tick(machine, counts)
    assert effects.scale_to is not None
    assert effects.scale_to.num_decode == expected
    bound = budget >= 0 and expected < 5
    assert effects.scale_to.reason == ("gpu_budget_reconcile" if bound else "scale_up")


def test_band_lifts_a_role_at_zero_to_its_throughput_floor_not_just_its_min_endpoint():
    machine = core(mode="decode", min_endpoint=1, max_gpu_budget=8, gpu_budget_rule="band")
    machine.throughput.lower_bounds["decode"] = 3  # as a throughput tick would have set it
    counts = WorkerCounts(ready_num_decode=0, expected_num_decode=0)
    effects = run_tick(machine, load=True, counts=counts)
    assert effects.scale_to is not None
    assert (effects.scale_to.num_decode, effects.scale_to.reason) == (3, "scale_up")


@pytest.mark.parametrize("target", ["sla", "throughput"])
def test_agg_reference_variant_decides_nothing_without_an_opinion(target: str):
    """§4.2 guard 4 and §4.3 hold in agg mode too: an untrained model (SLA target) and a
    threshold rule between its bounds decide nothing, even below the minimum endpoint. Ours
    (``load_hold_applies_floors``) lifts the engine to its minimum on the same tick."""
    config = sla_config(mode="agg", min_endpoint=2, optimization_target=target)
    counts = WorkerCounts(ready_num_decode=1, expected_num_decode=1)
    busy = engines(1, decode_kv=30_000, decode_requests=10, prefill_tokens=100, wall_time=0.05)
    caps = agg_caps(max_kv_tokens=100_000)  # the KV use is 0.3: between the bounds
    reference = run_tick(
        PlannerStateMachine(config.reference_variant(), caps),
        load=True,
        decode=busy,
        counts=counts,
    )
    assert reference.scale_to is None
    expected = "insufficient_data" if target == "sla" else "no_change"
    assert reference.diagnostics.load_decision_reason == expected
    ours = run_tick(PlannerStateMachine(config, caps), load=True, decode=busy, counts=counts)
    assert ours.scale_to is not None
    assert (ours.scale_to.num_decode, ours.scale_to.reason) == (2, "scale_up")


# -- the reference with a disagg role at zero ---------------------------------------------------


def test_reference_lifts_a_disagg_role_at_zero_when_the_other_has_forward_passes():
    """§4.7 disagg: a role without forward passes keeps its count (0) and min endpoints apply,
    so the reference (``load_hold_applies_floors=False``) lifts it too, while the other role
    has forward passes; it is only without any that it decides nothing."""
    config = sla_config(min_endpoint=1, prefill_min_endpoint=2, enable_throughput_scaling=False)
    machine = PlannerStateMachine(config.reference_variant(), default_caps())
    assert not machine.config.load_hold_applies_floors
    machine.load_benchmark_fpms("decode", DECODE_TRAINING)
    counts = WorkerCounts(
        ready_num_prefill=0, expected_num_prefill=0, ready_num_decode=2, expected_num_decode=2
    )
    decode = engines(2, decode_kv=20000, decode_requests=20, wall_time=0.2)  # ITL over 50 ms
    effects = run_tick(machine, load=True, decode=decode, counts=counts)
    assert effects.scale_to is not None
    assert (effects.scale_to.num_prefill, effects.scale_to.num_decode) == (2, 3)
    assert effects.diagnostics.load_decision_reason_prefill == "scale_up"
    nothing = run_tick(machine, now_s=10.0, load=True, counts=counts)
    assert nothing.scale_to is None
    assert nothing.diagnostics.load_decision_reason == "no_fpm_data"
