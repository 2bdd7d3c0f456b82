"""A GPU budget that cannot fund the minimum endpoints (spec §8.1, §8.2, §8.3).

The config is refused at start when its own GPUs per replica (``capabilities.<role>.num_gpu``,
else ``<role>_engine_num_gpu``, else 1) make it so. Engines that report more GPUs at run time
cannot be refused: the spec then scales the deployment to 0, which the reference variant
(``gpu_budget_rule: pair_clamp``) keeps; ours (``band``) keeps the minimum endpoints, says so
once in a warning, and no more.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import logging
import math
import pickle

import pytest
from pydantic import ValidationError

from operators.deployment import DeploymentPlanner
from operators.gpu_budget import GpuBudget
from operators.window import TickWindow
from schemas import EngineCapabilities, PlannerConfig, WorkerCapabilities, WorkerCounts
from tests.core.planner_inputs import DECODE_TRAINING, core, engines, run_tick

RECONCILE, HOLD = "gpu_budget_reconcile", "gpu_budget_guard_hold"


def caps(decode: int, prefill: int | None = None) -> WorkerCapabilities:
    """Engines with ``decode`` (and ``prefill``) GPUs per replica."""
    return WorkerCapabilities(
        prefill=None if prefill is None else EngineCapabilities(num_gpu=prefill),
        decode=EngineCapabilities(num_gpu=decode),
    )


# --- the config (refused at start) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "floor"),
    [
        ({"mode": "decode", "max_gpu_budget": 4, "capabilities": caps(8)}, 8),
        # capabilities win over *_engine_num_gpu, as they do at run time
        (
            {
                "mode": "decode",
                "max_gpu_budget": 4,
                "decode_engine_num_gpu": 1,
                "capabilities": caps(8),
            },
            8,
        ),
        (
            {
                "mode": "disagg",
                "max_gpu_budget": 5,
                "decode_engine_num_gpu": 2,
                "capabilities": WorkerCapabilities(prefill=EngineCapabilities(num_gpu=4)),
            },
            6,
        ),
        ({"mode": "decode", "max_gpu_budget": 15, "min_endpoint": 2, "capabilities": caps(8)}, 16),
    ],
)
def test_a_budget_the_capabilities_cannot_fund_is_refused(fields: dict, floor: int) -> None:
    # protects: the floor read only *_engine_num_gpu, so capabilities.<role>.num_gpu of 8
    # under a budget of 4 loaded, and the planner then scaled the deployment to 0
    budget = fields["max_gpu_budget"]
    with pytest.raises(ValidationError, match=f"max_gpu_budget {budget} is below the {floor} GPUs"):
        PlannerConfig(**fields)
    PlannerConfig(**{**fields, "max_gpu_budget": floor})  # just enough


def test_the_capabilities_gpus_replace_the_configured_ones_in_the_floor() -> None:
    config = PlannerConfig(
        mode="decode", max_gpu_budget=4, decode_engine_num_gpu=8, capabilities=caps(2)
    )
    assert config.configured_gpus_per_replica("decode") == 2
    assert config.configured_gpus_per_replica("prefill") is None


@pytest.mark.parametrize("field", ["load_scaling_down_sensitivity", "load_rate_utilization"])
def test_nan_is_refused_as_not_finite(field: str) -> None:
    # protects: without allow_inf_nan=False the message was "less than or equal to"
    with pytest.raises(ValidationError, match="Input should be a finite number"):
        PlannerConfig(**{field: math.nan})


def test_decode_min_endpoint_is_refused_in_agg_mode_as_documented() -> None:
    # protects: the docstring said "Fewest decode (or agg) replicas"
    body = ast.parse(inspect.getsource(PlannerConfig)).body[0].body
    (doc,) = [
        str(docstring.value.value)
        for field, docstring in itertools.pairwise(body)
        if isinstance(field, ast.AnnAssign)
        and isinstance(field.target, ast.Name)
        and field.target.id == "decode_min_endpoint"
        and isinstance(docstring, ast.Expr)
        and isinstance(docstring.value, ast.Constant)
    ]
    assert "or agg" not in doc and "agg mode is refused" in " ".join(doc.split())
    with pytest.raises(ValidationError, match="decode_min_endpoint is set but mode 'agg'"):
        PlannerConfig(mode="agg", decode_min_endpoint=1)


# --- the budget at run time (engines report more GPUs) ----------------------------------------


def budget(config: PlannerConfig, prefill: int | None, decode: int, ready: int) -> GpuBudget:
    return GpuBudget(
        config,
        {"prefill": prefill, "decode": decode},
        {"prefill": None if prefill is None else ready, "decode": ready},
    )


DECODE = PlannerConfig(mode="decode", max_gpu_budget=4)
PAIR = PlannerConfig(mode="disagg", max_gpu_budget=4)
REFERENCE = {"gpu_budget_rule": "pair_clamp"}


def test_the_band_keeps_the_minimum_endpoints_of_a_single_role() -> None:
    big = budget(DECODE, None, 8, ready=2)
    assert (big.unfunded_minimum(), big.max_gpus) == (8, 8)
    assert big.guard_single("decode", 2, 2) == (1, RECONCILE)  # not 0
    assert big.guard_single("decode", 1, 3) == (1, HOLD)  # and no more
    assert big.fit_throughput({"decode": 3}, lower_bounds=False)[0] == {"decode": 1}
    assert big.fit_throughput({"decode": 3}, lower_bounds=True)[0] == {"decode": 1}
    # a budget that funds the minimum is the budget
    funded = budget(DECODE, None, 4, ready=2)
    assert (funded.unfunded_minimum(), funded.max_gpus) == (None, 4)
    assert funded.guard_single("decode", 1, 2) == (1, HOLD)


def test_the_band_keeps_the_minimum_endpoints_of_a_pair() -> None:
    big = budget(PAIR, 4, 4, ready=2)
    assert big.unfunded_minimum() == 8
    assert big.guard_pair((2, 2), (3, 3)) == (1, 1, RECONCILE)
    assert big.guard_pair((1, 1), (2, 1)) == (1, 1, HOLD)
    fitted, _ = big.fit_throughput({"prefill": 3, "decode": 3}, lower_bounds=False)
    assert fitted == {"prefill": 1, "decode": 1}


def test_the_reference_rule_still_scales_an_unfunded_deployment_to_zero() -> None:
    single = budget(DECODE.model_copy(update=REFERENCE), None, 8, ready=2)
    assert single.max_gpus == 4  # pair_clamp: the budget as configured (§8.1)
    assert single.guard_single("decode", 2, 2) == (0, None)
    pair = budget(PAIR.model_copy(update=REFERENCE), 4, 4, ready=2)
    assert pair.guard_pair((2, 2), (3, 3)) == (0, 0, None)


def decode_machine(rule: str, **overrides):
    machine = core(caps(8), mode="decode", max_gpu_budget=4, gpu_budget_rule=rule, **overrides)
    machine.load_benchmark_fpms("decode", DECODE_TRAINING)
    return machine


@pytest.mark.parametrize(("min_endpoint", "ready"), [(1, 2), (2, 3)])
def test_a_load_tick_never_scales_below_the_minimum_endpoint(min_endpoint: int, ready: int):
    # protects: engines reporting 8 GPUs under a budget of 4 were reconciled 2 -> 0 each tick
    machine = decode_machine("band", itl_ms=5.0, min_endpoint=min_endpoint)
    hot = engines(ready, decode_kv=30_000, decode_requests=30, wall_time=0.3)
    effects = run_tick(machine, decode=hot, counts=WorkerCounts(ready_num_decode=ready))
    assert effects.scale_to.num_decode == min_endpoint
    assert effects.scale_to.reason == RECONCILE
    # the reference variant keeps the spec's infeasible-budget rule
    machine = decode_machine("pair_clamp", itl_ms=5.0, min_endpoint=min_endpoint)
    effects = run_tick(machine, decode=hot, counts=WorkerCounts(ready_num_decode=ready))
    assert effects.scale_to.num_decode == 0


def test_a_throughput_tick_never_scales_below_the_minimum_endpoint():
    from schemas import TrafficObservation

    traffic = TrafficObservation(duration_s=60, num_req=100, isl=1000, osl=150)
    for rule, expected in (("band", 1), ("pair_clamp", 0)):
        machine = decode_machine(rule, enable_load_scaling=False)
        effects = run_tick(
            machine, now_s=60.0, traffic=traffic, counts=WorkerCounts(ready_num_decode=2)
        )
        assert effects.scale_to.num_decode == expected, rule


def test_without_a_gpu_count_a_replica_counts_as_one_gpu_of_the_budget() -> None:
    # protects: with neither the engines nor the config giving GPUs per replica, the budget
    # that the config check accepted at 1 GPU a replica was never applied at run time
    unknown = WorkerCapabilities(decode=EngineCapabilities(max_num_batched_tokens=2048))
    hot = engines(2, decode_kv=30_000, decode_requests=30, wall_time=0.3)
    for budget_gpus, expected in ((2, (2, HOLD)), (3, (3, "scale_up")), (-1, (3, "scale_up"))):
        machine = core(unknown, mode="decode", max_gpu_budget=budget_gpus, itl_ms=5.0)
        machine.load_benchmark_fpms("decode", DECODE_TRAINING)
        effects = run_tick(machine, decode=hot, counts=WorkerCounts(ready_num_decode=2))
        decided = effects.scale_to.num_decode if effects.scale_to else 2
        assert (decided, effects.diagnostics.load_decision_reason) == expected, budget_gpus


# --- the warning ------------------------------------------------------------------------------


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "operators.deployment" and r.levelno == logging.WARNING
    ]


def test_an_unfunded_minimum_is_warned_once_naming_the_deployment(caplog) -> None:
    planner = DeploymentPlanner("llama", DECODE, window_s=5.0)
    with caplog.at_level(logging.WARNING, logger="operators.deployment"):
        planner.on_window(5.0, TickWindow(capabilities=caps(8)))
        planner = pickle.loads(pickle.dumps(planner))  # the state still pickles
        planner.on_window(10.0, TickWindow(capabilities=caps(8)))  # the same: not again
    assert warnings(caplog) == [
        "llama: max_gpu_budget 4 cannot fund the minimum endpoints, which need 8 GPUs at the "
        "GPUs per replica the engines report; the planner keeps the minimum endpoints and no "
        "more"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="operators.deployment"):
        planner.on_window(15.0, TickWindow(capabilities=caps(4)))  # funded again: silent
        planner.on_window(20.0, TickWindow(capabilities=caps(16)))  # unfunded anew: warned
    assert [m.split(", which")[1] for m in warnings(caplog)] == [
        " need 16 GPUs at the GPUs per replica the engines report; the planner keeps the "
        "minimum endpoints and no more"
    ]


def test_the_reference_variant_warns_of_the_scale_to_zero(caplog) -> None:
    planner = DeploymentPlanner("llama", DECODE.reference_variant(), window_s=5.0)
    with caplog.at_level(logging.WARNING, logger="operators.deployment"):
        planner.on_window(5.0, TickWindow(capabilities=caps(8)))
    (message,) = warnings(caplog)
    assert message.endswith("scales the deployment to 0 (gpu_budget_rule pair_clamp, spec §8.1)")
