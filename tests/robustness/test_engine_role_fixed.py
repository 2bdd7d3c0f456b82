"""A worker's role is fixed: a forward pass a live decode engine reports as ``prefill`` (or the
reverse) is a dead letter (``role: …``), counted, and changes no decision (it was taken as a
new prefill engine's)."""

from __future__ import annotations

import copy

from schemas import PlannerConfig
from tests.flow.streams import decode_fpm, decode_ramp
from tests.robustness.inline_flow import run_lines

CONFIG = PlannerConfig(
    mode="disagg",
    optimization_target="sla",
    ttft_ms=300.0,
    itl_ms=60.0,
    enable_load_scaling=True,
    enable_throughput_scaling=False,
    max_gpu_budget=16,
)


def prefill_fpm(worker: str, t: float, counter: int, queued: int) -> dict:
    fpm = {
        "worker_id": worker,
        "counter_id": counter,
        "wall_time": 0.05 + queued * 1e-6,
        "scheduled_requests": {"num_prefill_requests": 1, "sum_prefill_tokens": 3000},
        "queued_requests": {"num_prefill_requests": queued // 3000, "sum_prefill_tokens": queued},
    }
    return {
        "type": "fpm",
        "deployment": "dis",
        "time": t,
        "payload": {"role": "prefill", "fpm": fpm},
    }


def stream() -> list[dict]:
    events = decode_ramp("dis", engines=2, seconds=60)
    events[0]["payload"]["prefill"] = {"num_gpu": 1, "max_kv_tokens": 1_000_000}
    events[1]["payload"] |= {"ready_num_prefill": 1, "expected_num_prefill": 1}
    prefill = [prefill_fpm("p0", t / 2, t, queued=t * 500) for t in range(1, 121)]
    return sorted(events + prefill, key=lambda e: e["time"])


def test_a_decode_engine_reporting_a_prefill_pass_is_a_dead_letter():
    clean = stream()
    turncoat = prefill_fpm("w0", 30.1, 9_001, queued=400_000)
    back = copy.deepcopy(clean[-1]) | {"time": 45.2}  # and a prefill engine turning decode
    back["payload"] = {"role": "decode", "fpm": decode_fpm("p0", 50_000, 20, 9_002)}
    mixed = sorted([*clean, turncoat, back], key=lambda e: e["time"])

    reference = run_lines({"dis": CONFIG}, clean)
    outputs = run_lines({"dis": CONFIG}, mixed)

    assert [d.reason for d in outputs.dead] == [
        "role: fpm of prefill engine 'w0' (dp_rank 0) at 30.1 comes from a live decode engine "
        "(a worker's role is fixed)",
        "role: fpm of decode engine 'p0' (dp_rank 0) at 45.2 comes from a live prefill engine "
        "(a worker's role is fixed)",
    ]
    assert outputs.counted == {"role": 2}
    assert reference.decisions
    assert outputs.decisions == reference.decisions
