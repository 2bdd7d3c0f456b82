"""Recorded streams for flow tests, built from a synthetic decode fleet with a known cost.

Each engine's forward pass costs ``wall = 8 ms + 20 µs * n + 0.1 µs * kv`` (n decode requests
holding kv tokens — the shape of a real decode engine); the load ramps linearly, so a decode
deployment with an ITL target must scale up partway through, and the expected decisions follow
from the formulas.
"""

from __future__ import annotations

import json
from pathlib import Path

FPM_PERIOD_S = 0.25
"""Each engine reports a forward pass every 0.25 s (a sampled stream, as a recorder keeps)."""


def decode_wall_s(kv: int, n: int) -> float:
    """The synthetic engine's iteration time."""
    return 0.008 + 2e-5 * n + 1e-7 * kv


def decode_fpm(worker: str, kv: int, n: int, counter: int) -> dict:
    wall = decode_wall_s(kv, n)
    return {
        "worker_id": worker,
        "counter_id": counter,
        "wall_time": round(wall, 9),
        "scheduled_requests": {"num_decode_requests": n, "sum_decode_kv_tokens": kv},
        "queued_requests": {"sum_decode_kv_tokens": 0},
    }


def decode_ramp(
    deployment: str,
    engines: int,
    seconds: float,
    kv_start: int = 5_000,
    kv_end: int = 600_000,
    max_kv_tokens: int = 2_000_000,
) -> list[dict]:
    """Events of a decode deployment whose per-engine KV load ramps from start to end."""
    events: list[dict] = [
        {
            "type": "capabilities",
            "deployment": deployment,
            "time": 0.0,
            "payload": {"decode": {"num_gpu": 1, "max_kv_tokens": max_kv_tokens}},
        },
        {
            "type": "inventory",
            "deployment": deployment,
            "time": 0.0,
            "payload": {"ready_num_decode": engines, "expected_num_decode": engines},
        },
    ]
    steps = int(seconds / FPM_PERIOD_S)
    for step in range(1, steps + 1):
        t = round(step * FPM_PERIOD_S, 6)
        kv = int(kv_start + (kv_end - kv_start) * step / steps)
        for e in range(engines):
            # engines differ slightly so the regression sees spread in both features
            kv_e = kv + 3700 * e + (step % 7) * 1100
            n = max(1, kv_e // 2000 + (step % 3))
            events.append(
                {
                    "type": "fpm",
                    "deployment": deployment,
                    "time": t,
                    "payload": {"role": "decode", "fpm": decode_fpm(f"w{e}", kv_e, n, step)},
                }
            )
    return events


def merge_streams(*streams: list[dict]) -> list[dict]:
    """Interleave streams by event time (stable)."""
    return sorted((e for s in streams for e in s), key=lambda e: e["time"])


def write_stream(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


DECODE_CONFIG = {
    "mode": "decode",
    "optimization_target": "sla",
    "enable_load_scaling": True,
    "enable_throughput_scaling": False,
    "itl_ms": 60.0,
    "max_gpu_budget": 16,
}
