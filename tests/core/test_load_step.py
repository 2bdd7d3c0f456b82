"""Ours: how far one SLA load tick moves a role.

* ``max_load_step`` (default 3, reference 1): scale-ups proportional to how far the least
  loaded engine is above the SLA. A replica takes about a minute to start and no further step
  is taken while it does, so ±1 climbs one replica a minute while the queues grow.
* ``scale_down_stabilization_seconds`` (default 300, reference 0): a scale-down needs that long
  in which every load tick wanted it and nothing changed the role — without it, a queue that
  has just drained (the TTFT estimate sees queues, not utilisation) drops one replica per tick.
"""

from __future__ import annotations

import pytest

from operators.load_scaling import ScaleDownCheck, scale_up_step, sla_step
from operators.state_machine import PlannerStateMachine
from schemas import (
    EngineCapabilities,
    ForwardPassMetrics,
    PlannerConfig,
    WorkerCapabilities,
    WorkerCounts,
)
from tests.core.planner_inputs import DECODE_TRAINING, PREFILL_TRAINING, core, fpm, run_tick

# -- the step ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("estimates", "n", "max_step", "step"),
    [
        ([900.0, 1200.0], 2, 1, 1),  # the reference: always one
        ([900.0, 1200.0], 2, 3, 2),  # ceil(2 × 900 / 500) − 2: the least loaded engine decides
        ([80_000.0], 1, 3, 3),  # capped
        ([510.0, 520.0, 530.0, 540.0], 4, 3, 1),  # just above: ceil(4.08) − 4
        ([1000.0, 1000.0], 2, 10, 2),  # twice the SLA on two engines: two more
    ],
)
def test_scale_up_step(estimates, n, max_step, step) -> None:
    assert scale_up_step(estimates, 500.0, n, max_step) == step
    proposal = sla_step(estimates, 500.0, n, 1, ScaleDownCheck(False, False), max_step)
    assert (proposal.desired, proposal.reason) == (n + step, "scale_up")


def hot(worker: str, queued: int) -> ForwardPassMetrics:
    return fpm(worker_id=worker, queued_prefill=queued, prefill_tokens=500, prefill_requests=1)


def prefill_machine(**overrides) -> PlannerStateMachine:
    machine = core(mode="prefill", **overrides)
    machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)  # wall = 1 ms/token + 2 ms
    return machine


def test_state_machine_steps_by_the_ratio_up_to_the_cap() -> None:
    # two engines with 10 000 queued tokens: TTFT ≈ 11.3 s against a 5 s SLA -> ceil(2 × 2.27)
    engines = {("w1", 0): hot("w1", 10_000), ("w2", 0): hot("w2", 10_000)}
    counts = WorkerCounts(ready_num_prefill=2)
    for max_step, expected in ((1, 3), (2, 4), (3, 5), (8, 5)):
        machine = prefill_machine(ttft_ms=5000.0, max_load_step=max_step)
        effects = run_tick(machine, prefill=engines, counts=counts)
        assert effects.scale_to.num_prefill == expected, max_step
        assert effects.scale_to.reason == "scale_up"


# -- the stabilization window ------------------------------------------------------------------


def idle(worker: str) -> ForwardPassMetrics:
    return fpm(worker_id=worker, prefill_tokens=500, prefill_requests=1)


def tick(machine, now_s, engines, n):
    return run_tick(
        machine,
        now_s=now_s,
        prefill={(f"w{i}", 0): e for i, e in enumerate(engines)},
        counts=WorkerCounts(ready_num_prefill=n),
    )


def test_scale_down_waits_for_a_window_of_agreement() -> None:
    machine = prefill_machine(ttft_ms=5000.0, scale_down_stabilization_seconds=20.0)
    machine.initial_tick(0.0)
    cool = [idle("w0"), idle("w1")]
    # t=5: one engine above the SLA (no scale-up: not ALL are) -> not a scale-down tick
    assert tick(machine, 5.0, [hot("w0", 10_000), idle("w1")], 2).scale_to is None
    # t=10..20: every tick wants 2 -> 1, but the window since t=5 is not full yet
    for now in (10.0, 15.0, 20.0):
        effects = tick(machine, now, cool, 2)
        assert effects.scale_to is None, now
        assert effects.diagnostics.load_decision_reason == "scale_down_stabilizing"
    # t=25: twenty seconds of agreement
    effects = tick(machine, 25.0, cool, 2)
    assert (effects.scale_to.num_prefill, effects.scale_to.reason) == (1, "scale_down")


def test_a_change_restarts_the_window() -> None:
    machine = prefill_machine(ttft_ms=5000.0, scale_down_stabilization_seconds=10.0)
    machine.initial_tick(0.0)
    cool3 = [idle("w0"), idle("w1"), idle("w2")]
    cool2 = cool3[:2]
    # the first load tick starts the window: 3 -> 2 only after ten seconds of agreement
    assert tick(machine, 5.0, cool3, 3).scale_to is None
    assert tick(machine, 10.0, cool3, 3).scale_to is None
    assert tick(machine, 15.0, cool3, 3).scale_to.num_prefill == 2
    # the scale-down itself restarts the window: 2 -> 1 only ten seconds later
    assert tick(machine, 20.0, cool2, 2).scale_to is None
    assert tick(machine, 25.0, cool2, 2).scale_to.num_prefill == 1


def test_reference_scales_down_every_tick() -> None:
    machine = prefill_machine(ttft_ms=5000.0, scale_down_stabilization_seconds=0.0)
    machine.initial_tick(0.0)
    cool3 = [idle("w0"), idle("w1"), idle("w2")]
    assert tick(machine, 5.0, cool3, 3).scale_to.num_prefill == 2
    assert tick(machine, 10.0, cool3[:2], 2).scale_to.num_prefill == 1


def test_scale_ups_are_never_delayed() -> None:
    machine = prefill_machine(ttft_ms=5000.0, scale_down_stabilization_seconds=600.0)
    machine.initial_tick(0.0)
    tick(machine, 5.0, [idle("w0"), idle("w1")], 2)
    effects = tick(machine, 10.0, [hot("w0", 10_000), hot("w1", 10_000)], 2)
    assert effects.scale_to.reason == "scale_up"


def test_threshold_targets_keep_the_reference_behaviour() -> None:
    # easy (throughput) target: queued/context ratio below 0.1 on both engines -> 2 -> 1 at once
    machine = PlannerStateMachine(
        PlannerConfig(mode="prefill", optimization_target="throughput"),
        WorkerCapabilities(prefill=EngineCapabilities(context_length=4096)),
    )
    machine.initial_tick(0.0)
    effects = tick(machine, 5.0, [idle("w0"), idle("w1")], 2)
    assert effects.scale_to.num_prefill == 1


def test_a_prefill_scale_up_does_not_restart_decodes_window() -> None:
    # protects: a disagg decision names both roles (decode at its current count when only
    # prefill moves); that unchanged decode count must not restart decode's stabilization
    # window, or a fleet whose prefill keeps growing would never release idle decode replicas
    machine = core(mode="disagg", ttft_ms=5000.0, scale_down_stabilization_seconds=10.0)
    machine.load_benchmark_fpms("prefill", PREFILL_TRAINING)
    machine.load_benchmark_fpms("decode", DECODE_TRAINING)
    machine.initial_tick(0.0)
    cool_decode = {
        (f"d{i}", 0): fpm(worker_id=f"d{i}", decode_kv=1_000, decode_requests=1, wall_time=0.011)
        for i in range(2)
    }

    def disagg_tick(now_s: float, prefill: list[ForwardPassMetrics]):
        return run_tick(
            machine,
            now_s=now_s,
            prefill={(f"w{i}", 0): e for i, e in enumerate(prefill)},
            decode=cool_decode,
            counts=WorkerCounts(ready_num_prefill=len(prefill), ready_num_decode=2),
        )

    # t=5: the first load tick starts decode's window (it wants 2 -> 1 on every tick)
    first = disagg_tick(5.0, [idle("w0")])
    assert first.scale_to is None
    assert first.diagnostics.load_decision_reason_decode == "scale_down_stabilizing"
    # t=10: prefill scales up; the decision carries decode at its current 2
    grown = disagg_tick(10.0, [hot("w0", 10_000)])
    assert grown.scale_to is not None
    assert (grown.scale_to.num_prefill, grown.scale_to.num_decode) == (2, 2)
    # t=15: ten seconds since t=5 of decode wanting down, and nothing changed decode
    down = disagg_tick(15.0, [idle("w0"), idle("w1")])
    assert down.scale_to is not None
    assert (down.scale_to.num_decode, down.scale_to.decode_reason) == (1, "scale_down")
