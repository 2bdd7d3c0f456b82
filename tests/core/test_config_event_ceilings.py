"""The config takes no value its own events would refuse.

Replica floors above ``MAX_REPLICAS`` were decided every tick while the inventory reporting
them was dead-lettered (``min_endpoint: 70000``: ``num_decode 70000`` re-issued forever), and
``min_endpoint: 100000`` crashed ``flowplanner replay``'s simulator with a traceback; GPUs per
replica and ``capabilities`` had no ceiling while a ``capabilities`` event has. Each such
field is now held to the ceiling of the event that carries it, and the error names it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from schemas import ConfigError, load_config, parse_event
from schemas.events import (
    MAX_ENGINE_GPUS,
    MAX_GPU_BUDGET,
    MAX_GPU_POWER_W,
    MAX_REPLICAS,
    MAX_SPECULATIVE_TOKENS,
)
from tests.flow.runner import flowplanner

REPO = Path(__file__).resolve().parents[2]
DISAGG = {"mode": "disagg", "optimization_target": "sla", "max_gpu_budget": -1}


def config_error(**fields: object) -> str:
    text = json.dumps({"deployments": {"d": {**DISAGG, **fields}}})
    with pytest.raises(ConfigError) as caught:
        load_config(text)
    return str(caught.value)


def loads(**fields: object) -> bool:
    try:
        load_config(json.dumps({"deployments": {"d": {**DISAGG, **fields}}}))
    except ConfigError:
        return False
    return True


def event_taken(kind: str, payload: dict) -> bool:
    line = json.dumps({"type": kind, "deployment": "d", "time": 1, "payload": payload})
    try:
        parse_event(line)
    except ValidationError:
        return False
    return True


POWER = {"enable_power_awareness": True}
ABOVE = [
    ("min_endpoint", MAX_REPLICAS + 1, {}),
    ("prefill_min_endpoint", MAX_REPLICAS + 1, {}),
    ("decode_min_endpoint", MAX_REPLICAS + 1, {}),
    ("prefill_engine_num_gpu", MAX_ENGINE_GPUS + 1, {}),
    ("decode_engine_num_gpu", MAX_ENGINE_GPUS + 1, {}),
    ("max_throughput_scaling_replicas", MAX_REPLICAS + 1, {}),
    ("max_load_step", MAX_REPLICAS + 1, {}),
    ("speculative_nextn", MAX_SPECULATIVE_TOKENS + 1, {}),
    ("max_gpu_budget", MAX_GPU_BUDGET + 1, {}),
    ("min_gpu_budget", MAX_GPU_BUDGET + 1, {}),
    ("total_gpu_power_limit", MAX_GPU_BUDGET * MAX_GPU_POWER_W + 1, POWER),
]


@pytest.mark.parametrize(("field", "value", "extra"), ABOVE, ids=[a[0] for a in ABOVE])
def test_a_value_above_its_event_ceiling_is_refused_naming_the_field(field, value, extra):
    message = config_error(**{field: value}, **extra)
    assert f"deployments.d.{field}: Input should be less than or equal to {value - 1}" in message


def test_the_ceilings_themselves_load():
    assert loads(min_endpoint=MAX_REPLICAS, max_load_step=MAX_REPLICAS)
    assert loads(prefill_min_endpoint=MAX_REPLICAS, decode_min_endpoint=MAX_REPLICAS)
    assert loads(prefill_engine_num_gpu=MAX_ENGINE_GPUS, speculative_nextn=MAX_SPECULATIVE_TOKENS)
    assert loads(max_gpu_budget=MAX_GPU_BUDGET, min_gpu_budget=MAX_GPU_BUDGET)


@pytest.mark.parametrize("floor", [MAX_REPLICAS, MAX_REPLICAS + 1])
def test_a_floor_the_config_takes_is_one_an_inventory_and_a_limits_event_can_carry(floor):
    inventory = {"ready_num_decode": floor, "expected_num_decode": floor}
    assert loads(min_endpoint=floor) == event_taken("inventory", inventory)
    assert loads(min_endpoint=floor) == event_taken("limits", {"min_endpoint": floor})
    assert loads(decode_min_endpoint=floor) == event_taken("limits", {"decode_min_endpoint": floor})


@pytest.mark.parametrize(
    ("engine", "needle"),
    [
        ({"num_gpu": 100_000}, "decode.num_gpu = 100000 is implausible (above MAX_ENGINE_GPUS"),
        ({"max_kv_tokens": 10**22}, "decode.max_kv_tokens = 10000000000000000000000 is impl"),
        ({"max_num_seqs": 2**40}, "decode.max_num_seqs = 1099511627776 is implausible"),
        ({"gpu_power_limit_w": 10**6}, "decode.gpu_power_limit_w = 1000000 is implausible"),
        ({"speculative_nextn": 2**20}, "decode.speculative_nextn = 1048576 is implausible"),
    ],
)
def test_configured_capabilities_are_held_to_the_capabilities_events_ceilings(engine, needle):
    caps = {"decode": engine}
    assert not event_taken("capabilities", caps)
    message = config_error(capabilities=caps)
    assert "deployments.d.capabilities: " in message and needle in message


def test_plausible_configured_capabilities_load():
    caps = {"decode": {"num_gpu": MAX_ENGINE_GPUS, "max_kv_tokens": 2_000_000}}
    assert event_taken("capabilities", caps) and loads(capabilities=caps)


def test_the_run_refuses_a_floor_no_inventory_can_report():
    config = {"deployments": {"llama": {**DISAGG, "mode": "decode", "min_endpoint": 70000}}}
    recording = str(REPO / "examples/decode_burst.jsonl")
    done = flowplanner("run", "--config", json.dumps(config), "--input", recording, "--output", "-")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "min_endpoint: Input should be less than or equal to 65536" in done.stderr
    assert done.stdout == ""  # no decision for 70 000 replicas
