"""Ours: the scaling-in-progress guard per role (``in_progress_guard="role"``, the default).

The reference blocks BOTH roles of a disagg deployment while either has a scale in flight
(spec §4.2, PR #9774): in a closed-loop replay that was 600 of 712 ticks, most of them with the
other role overloaded. Per role, the no-stacking property is kept for the role in flight, and
the other role still moves.
"""

from __future__ import annotations

from operators.state_machine import PlannerStateMachine
from schemas import WorkerCounts
from tests.core.planner_inputs import DECODE_TRAINING, PREFILL_TRAINING, core, fpm, run_tick

HOT_PREFILL = fpm(queued_prefill=10_000, prefill_tokens=500, prefill_requests=1, wall_time=0.5)
"""A prefill engine far above a 5 ms TTFT SLA."""

DECODE = fpm(decode_kv=5000, decode_requests=5, wall_time=0.051)

IN_FLIGHT_DECODE = WorkerCounts(ready_num_prefill=1, ready_num_decode=1, expected_num_decode=2)


def trained(**overrides) -> PlannerStateMachine:
    machine = core(**{"ttft_ms": 5.0, "itl_ms": 5.0, **overrides})
    machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
    machine.load_benchmark_fpms("decode", DECODE_TRAINING)
    return machine


def test_the_other_role_moves_while_one_is_in_flight() -> None:
    machine = trained(in_progress_guard="role")
    effects = run_tick(
        machine,
        prefill={("p1", 0): HOT_PREFILL},
        decode={("d1", 0): DECODE},
        counts=IN_FLIGHT_DECODE,
    )
    target = effects.scale_to
    assert (target.num_prefill, target.num_decode) == (2, None)  # decode's 2 is left in flight
    assert (target.reason, target.prefill_reason, target.decode_reason) == (
        "scale_up",
        "scale_up",
        "scaling_in_progress",
    )
    diag = effects.diagnostics
    assert (diag.load_decision_reason_prefill, diag.load_decision_reason_decode) == (
        "scale_up",
        "scaling_in_progress",
    )
    # both perf models still train on the tick's forward passes
    assert machine.prefill_model.num_observations == 6
    assert machine.decode_model.num_observations == 6


def test_reference_guard_blocks_both_roles() -> None:
    effects = run_tick(
        trained(in_progress_guard="deployment"),
        prefill={("p1", 0): HOT_PREFILL},
        decode={("d1", 0): DECODE},
        counts=IN_FLIGHT_DECODE,
    )
    assert effects.scale_to is None
    assert effects.diagnostics.load_decision_reason_prefill == "scaling_in_progress"


def test_no_stacking_on_the_role_in_flight() -> None:
    # decode is hot too, but its previous step has not landed: no second decode step
    hot_decode = fpm(decode_kv=30_000, queued_decode_kv=20_000, decode_requests=30)
    effects = run_tick(
        trained(in_progress_guard="role", ttft_ms=5000.0),  # prefill comfortably within SLA
        prefill={("p1", 0): fpm(prefill_tokens=500, prefill_requests=1)},
        decode={("d1", 0): hot_decode},
        counts=IN_FLIGHT_DECODE,
    )
    assert effects.scale_to is None
    diag = effects.diagnostics
    assert diag.load_decision_reason == "scaling_in_progress"
    assert diag.load_decision_reason_decode == "scaling_in_progress"
    assert diag.load_decision_reason_prefill == "no_change"


def test_both_roles_in_flight_hold_everything() -> None:
    counts = WorkerCounts(
        ready_num_prefill=1, expected_num_prefill=2, ready_num_decode=1, expected_num_decode=2
    )
    effects = run_tick(
        trained(in_progress_guard="role"),
        prefill={("p1", 0): HOT_PREFILL},
        decode={("d1", 0): DECODE},
        counts=counts,
    )
    assert effects.scale_to is None
    assert effects.diagnostics.load_decision_reason_prefill == "scaling_in_progress"


def test_the_held_roles_engines_are_not_reconciled() -> None:
    # a decode engine still starting may already publish: 2 decode FPMs, 1 ready
    decode = {("d1", 0): DECODE, ("d2", 0): fpm(worker_id="d2", decode_kv=100)}
    effects = run_tick(
        trained(in_progress_guard="role"),
        prefill={("p1", 0): HOT_PREFILL},
        decode=decode,
        counts=IN_FLIGHT_DECODE,
    )
    assert effects.scale_to.num_prefill == 2
    # ... but the moving role's own engines still must match its ready count
    effects = run_tick(
        trained(in_progress_guard="role"),
        prefill={("p1", 0): HOT_PREFILL, ("p2", 0): HOT_PREFILL},
        decode=decode,
        counts=IN_FLIGHT_DECODE,
    )
    assert effects.scale_to is None
    assert effects.diagnostics.load_decision_reason_prefill == "worker_count_mismatch"


def test_budget_is_checked_with_the_held_role_at_its_in_flight_target() -> None:
    # 3 GPUs: prefill 1 -> 2 next to decode's in-flight 2 needs 4, and the pair clamp would
    # have to shrink the role in flight: nothing moves
    effects = run_tick(
        trained(in_progress_guard="role", max_gpu_budget=3),
        prefill={("p1", 0): HOT_PREFILL},
        decode={("d1", 0): DECODE},
        counts=IN_FLIGHT_DECODE,
    )
    assert effects.scale_to is None
    assert effects.diagnostics.load_decision_reason_prefill == "gpu_budget_guard_hold"
    # with room for it, the same tick scales prefill
    effects = run_tick(
        trained(in_progress_guard="role", max_gpu_budget=4),
        prefill={("p1", 0): HOT_PREFILL},
        decode={("d1", 0): DECODE},
        counts=IN_FLIGHT_DECODE,
    )
    assert (effects.scale_to.num_prefill, effects.scale_to.num_decode) == (2, None)
