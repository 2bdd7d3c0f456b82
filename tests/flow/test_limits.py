"""``limits`` events change a deployment's replica floors and GPU budgets while it runs: from
the next tick, through the real flow, the same on 1 and 2 workers; a change the config would
refuse at start is a dead letter and changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from connectors.pipeline_metrics import dead_letter_kind
from schemas import Limits, parse_event
from tests.flow.runner import run_recorded, write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp, write_stream


def limits(time: float, **payload: int | None) -> dict:
    return {"type": "limits", "deployment": "alpha", "time": time, "payload": payload}


def test_a_raised_floor_holds_from_the_next_tick_until_it_is_lowered_again(tmp_path: Path):
    ramp = decode_ramp("alpha", engines=2, seconds=120)
    clock = {"type": "clock", "deployment": "alpha", "time": 125.0, "payload": {}}
    changes = [
        limits(30.0, decode_min_endpoint=6),
        limits(60.0, decode_min_endpoint=20),  # 20 GPUs > max_gpu_budget 16: refused
        limits(90.0, decode_min_endpoint=None),  # back to min_endpoint (1)
    ]
    config = write_config(tmp_path / "c.yaml", {"alpha": DECODE_CONFIG})
    base = write_stream(tmp_path / "base.jsonl", [*ramp, clock])
    changed = write_stream(
        tmp_path / "changed.jsonl", sorted([*ramp, *changes, clock], key=lambda e: e["time"])
    )

    want = run_recorded(config, [base], tmp_path / "base")
    got = run_recorded(config, [changed], tmp_path / "changed")  # on 1 and on 2 workers

    def plan(decisions: list[dict], after: float) -> list[tuple[float, int]]:
        return [(d["time"], d["num_decode"]) for d in decisions if d["time"] > after]

    floor = [(d["time"], d["num_decode"]) for d in got["decisions"] if d["time"] <= 90.0]
    assert floor == [(t, 6) for t in range(35, 95, 5)]  # from the first tick after 30 s
    assert want["decisions"] and max(n for _, n in plan(want["decisions"], 0)) < 6
    assert plan(got["decisions"], 90.0) == plan(want["decisions"], 90.0)
    [refused] = got["dead"]
    assert refused["source"] == "limits" and refused["deployment"] == "alpha"
    assert refused["reason"].startswith("limits refused: ")
    assert "max_gpu_budget 16 is below the 20 GPUs the minimum endpoints need" in refused["reason"]
    assert dead_letter_kind(refused["reason"]) == "limits"  # a metric label of its own


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ({}, "give at least one of"),
        ({"min_endpoint": None}, "min_endpoint cannot be null"),
        ({"decode_min_endpoint": 0}, "greater than or equal to 1"),
        ({"max_gpu_budget": "16"}, "valid integer"),
        ({"max_replicas": 4}, "Extra inputs are not permitted"),
    ],
)
def test_limits_that_say_nothing_or_something_wrong_are_refused(payload, problem):
    with pytest.raises(ValidationError, match=problem):
        Limits.model_validate(payload)


def test_later_limits_override_earlier_ones_field_by_field():
    first = parse_event('{"type": "limits", "deployment": "d", "time": 1, "payload": '
                        '{"min_endpoint": 2, "decode_min_endpoint": 4}}')  # fmt: skip
    later = Limits.model_validate({"decode_min_endpoint": None, "max_gpu_budget": -1})
    assert first.payload.merged(later).changes() == {
        "min_endpoint": 2,
        "decode_min_endpoint": None,
        "max_gpu_budget": -1,
    }


def run_changes(tmp_path: Path, config: dict, ramp: list[dict], changes: list[dict]) -> dict:
    """A recorded ramp with ``changes`` through ``flowplanner run`` (1 and 2 workers)."""
    clock = {"type": "clock", "deployment": "alpha", "time": ramp[-1]["time"] + 5, "payload": {}}
    events = [*sorted([*ramp, *changes], key=lambda e: e["time"]), clock]
    stream = write_stream(tmp_path / "s.jsonl", events)
    return run_recorded(write_config(tmp_path / "c.yaml", {"alpha": config}), [stream], tmp_path)


@pytest.mark.parametrize("requests", [0, 1], ids=["idle", "one request"])
def test_a_lowered_floor_holds_at_once_even_where_the_throughput_loop_set_it(
    tmp_path: Path, requests: int
):
    # the throughput loop's lower bound was floored at the old min_endpoint (3) by its one
    # sizing (of no or one request: the floor); it sizes no more, and the bound went stale
    config = {
        **DECODE_CONFIG,
        "enable_throughput_scaling": True,
        "throughput_adjustment_interval_seconds": 30.0,
        "max_gpu_budget": -1,
        "min_endpoint": 3,
        "scale_down_stabilization_seconds": 0,
        "load_rate_window_seconds": 0,
    }
    ramp = decode_ramp("alpha", engines=3, seconds=120, kv_start=2000, kv_end=30000)
    traffic = {"duration_s": 30.0, "num_req": requests, "isl": 100 * requests, "osl": 10}
    changes = [
        {"type": "traffic", "deployment": "alpha", "time": 20.0, "payload": traffic},
        limits(40.0, min_endpoint=1),
    ]
    got = run_changes(tmp_path, config, ramp, changes)
    assert got["dead"] == []
    assert [(d["time"], d["num_decode"]) for d in got["decisions"]][:2] == [(45.0, 2), (50.0, 2)]


def test_floors_the_engines_gpus_cannot_fund_are_refused(tmp_path: Path):
    ramp = decode_ramp("alpha", engines=2, seconds=60)
    ramp[0]["payload"]["decode"]["num_gpu"] = 2  # the config says nothing: 1 GPU per replica
    got = run_changes(
        tmp_path, DECODE_CONFIG, ramp, [limits(30.0, decode_min_endpoint=3, max_gpu_budget=4)]
    )
    [refused] = got["dead"]
    assert refused["reason"].startswith(
        "limits refused: at what the engines report, max_gpu_budget 4 is below the 6 GPUs the "
        "minimum endpoints need"
    )
    assert all(d["num_decode"] > 0 for d in got["decisions"])


def test_floors_the_engines_power_caps_cannot_fund_are_refused(tmp_path: Path):
    power = {"enable_power_awareness": True, "total_gpu_power_limit": 2000, "max_gpu_budget": -1}
    ramp = decode_ramp("alpha", engines=2, seconds=60)
    ramp[0]["payload"]["decode"]["gpu_power_limit_w"] = 700  # 4 replicas draw 2800 W
    got = run_changes(tmp_path, DECODE_CONFIG | power, ramp, [limits(30.0, decode_min_endpoint=4)])
    [refused] = got["dead"]
    assert refused["reason"].startswith(
        "limits refused: at what the engines report, total_gpu_power_limit 2000 W is below the "
        "2800 W the minimum endpoints draw"
    )
    assert all(d["num_decode"] < 4 for d in got["decisions"])


def test_each_change_in_one_window_is_applied_or_refused_on_its_own(tmp_path: Path):
    ramp = decode_ramp("alpha", engines=2, seconds=60)
    changes = [limits(30.0, decode_min_endpoint=6), limits(31.0, max_gpu_budget=1)]
    got = run_changes(tmp_path, DECODE_CONFIG, ramp, changes)
    assert [(d["time"], d["num_decode"]) for d in got["decisions"]] == [
        (t, 6) for t in range(35, 65, 5)
    ]
    [refused] = got["dead"]
    assert json.loads(refused["raw"]) == {"max_gpu_budget": 1}
