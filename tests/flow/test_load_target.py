"""``optimization_target: load`` through the real CLI (bytewax runtime, 1 and 2 workers): a
prefill deployment scales on its engines' raw queued prompt tokens against the user's
thresholds (spec §4.3) — up when ANY engine reaches ``prefill_scale_up_queue_tokens``, down when
ALL are at or below ``prefill_scale_down_queue_tokens``.

The stream plays the orchestrator too: after each decision an inventory event marks the scale
in flight (expected ≠ ready), then landed, so the planner sees the fleet it asked for."""

from __future__ import annotations

import pytest

from tests.flow.runner import run_recorded, write_config
from tests.flow.streams import write_stream

UP_TOKENS, DOWN_TOKENS = 2000, 100
CONFIG = {
    "mode": "prefill",
    "optimization_target": "load",
    "prefill_scale_up_queue_tokens": UP_TOKENS,
    "prefill_scale_down_queue_tokens": DOWN_TOKENS,
    # ignored (and warned about): the load target forces load scaling on, throughput off
    "enable_throughput_scaling": True,
}
PERIOD_S = 0.5
END_S = 60.0


def queue_of(worker: int, t: float) -> int | None:
    """Queued prompt tokens of engine ``w<worker>`` at time ``t`` (``None``: not running)."""
    if worker == 0:
        if t < 10:
            return 600  # between the thresholds: hold
        if t < 20:
            return UP_TOKENS  # exactly at the scale-up threshold: one hot engine
        if t < 40:
            return 1200
        return DOWN_TOKENS  # exactly at the scale-down threshold
    if t < 20 or t >= 45:
        return None  # the second engine runs from 20 s to 45 s
    return 1900 if t < 40 else 40


def inventory(t: float, ready: int, expected: int) -> dict:
    payload = {"ready_num_prefill": ready, "expected_num_prefill": expected}
    return {"type": "inventory", "deployment": "queue", "time": t, "payload": payload}


def load_target_stream() -> list[dict]:
    events: list[dict] = [
        {
            "type": "capabilities",
            "deployment": "queue",
            "time": 0.0,
            "payload": {"prefill": {"num_gpu": 1}},  # no context_length: raw tokens need none
        },
        inventory(0.0, 1, 1),
        inventory(15.0, 1, 2),  # the scale-up decided at 15 s is in flight ...
        inventory(20.0, 2, 2),  # ... and has landed
        inventory(45.0, 2, 1),  # the scale-down decided at 45 s is in flight ...
        inventory(45.5, 1, 1),  # ... and has landed
    ]
    for step in range(1, int(END_S / PERIOD_S) + 1):
        t = step * PERIOD_S
        for worker in (0, 1):
            queued = queue_of(worker, t)
            if queued is None:
                continue
            fpm = {
                "worker_id": f"w{worker}",
                "counter_id": step,
                "wall_time": 0.02,
                "scheduled_requests": {"num_prefill_requests": 1, "sum_prefill_tokens": 512},
                "queued_requests": {"sum_prefill_tokens": queued},
            }
            events.append(
                {
                    "type": "fpm",
                    "deployment": "queue",
                    "time": t,
                    "payload": {"role": "prefill", "fpm": fpm},
                }
            )
    return sorted(events, key=lambda e: e["time"])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("load-target")
    config = write_config(root / "planner.yaml", {"queue": CONFIG})
    stream = write_stream(root / "stream.jsonl", load_target_stream())
    return run_recorded(config, [stream], root / "out")


def test_load_target_scales_a_prefill_fleet_on_its_queue(run):
    assert run["dead"] == []
    decisions = [
        (d["time"], d["reason"], d["current_prefill"], d["num_prefill"], d["source"])
        for d in run["decisions"]
    ]
    assert decisions == [
        (15.0, "scale_up", 1, 2, "load"),  # w0 at exactly 2000 queued tokens
        (45.0, "scale_down", 2, 1, "load"),  # w0 at exactly 100, w1 at 40
    ]
    reasons = {t["time"]: t["diagnostics"]["load_decision_reason"] for t in run["ticks"]}
    assert reasons == {
        5.0: "no_change",  # 600 tokens: between the thresholds
        10.0: "no_change",
        15.0: "scale_up",
        20.0: "scaling_in_progress",  # expected 2, ready 1
        25.0: "no_change",  # 1200 and 1900: neither hot nor all cool
        30.0: "no_change",
        35.0: "no_change",
        40.0: "no_change",
        45.0: "scale_down",
        50.0: "no_change",  # one replica never scales down
        55.0: "no_change",
        60.0: "no_change",
    }
    assert {(t["ran_load"], t["ran_throughput"]) for t in run["ticks"]} == {(True, False)}
    assert "optimization_target load ignores enable_throughput_scaling: true" in run["stderr"]
