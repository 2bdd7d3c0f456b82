"""Ours: a role with no replicas ready or starting has no forward passes to show, and the load
loop still lifts it to its floors (``load_hold_applies_floors``); the reference makes no
decision without forward passes, so a role scaled to zero never came back."""

from __future__ import annotations

import pytest

from operators.state_machine import PlannerStateMachine
from schemas import WorkerCounts
from tests.core.planner_inputs import (
    DECODE_TRAINING,
    core,
    default_caps,
    engines,
    run_tick,
    sla_config,
)


def zero(**counts: int) -> WorkerCounts:
    return WorkerCounts(**{f"{kind}_num_{role}": n for role, n in counts.items()
                           for kind in ("ready", "expected")})  # fmt: skip


@pytest.mark.parametrize("mode", ["decode", "agg"])
def test_a_single_role_at_zero_is_lifted_to_its_min_endpoint(mode):
    machine = core(mode=mode, min_endpoint=2, enable_throughput_scaling=False)
    effects = run_tick(machine, load=True, counts=zero(decode=0))
    assert effects.scale_to is not None
    assert (effects.scale_to.num_decode, effects.scale_to.reason) == (2, "scale_up")


def test_disagg_roles_at_zero_are_lifted_and_a_live_role_still_decides():
    machine = core(enable_throughput_scaling=False)
    both = run_tick(machine, load=True, counts=zero(prefill=0, decode=0))
    assert (both.scale_to.num_prefill, both.scale_to.num_decode) == (1, 1)

    machine = core(enable_throughput_scaling=False, prefill_min_endpoint=2)
    machine.load_benchmark_fpms("decode", DECODE_TRAINING)
    decode = engines(2, decode_kv=1000, decode_requests=2, wall_time=0.002)
    one = run_tick(machine, load=True, decode=decode, counts=zero(prefill=0, decode=2))
    assert one.scale_to.num_prefill == 2
    assert one.diagnostics.load_decision_reason_prefill == "scale_up"


def test_nothing_moves_a_role_at_zero_without_a_floor_or_while_it_starts():
    machine = core(mode="decode", min_endpoint=0, enable_throughput_scaling=False)
    assert run_tick(machine, load=True, counts=zero(decode=0)).scale_to is None
    starting = WorkerCounts(ready_num_decode=0, expected_num_decode=1)
    effects = run_tick(core(mode="decode"), load=True, counts=starting)
    assert effects.scale_to is None
    assert effects.diagnostics.load_decision_reason == "scaling_in_progress"


def test_the_reference_leaves_a_role_at_zero():
    config = sla_config(mode="decode", min_endpoint=2, enable_throughput_scaling=False)
    machine = PlannerStateMachine(config.reference_variant(), default_caps())
    effects = run_tick(machine, load=True, counts=zero(decode=0))
    assert effects.scale_to is None
    assert effects.diagnostics.load_decision_reason == "no_fpm_data"
