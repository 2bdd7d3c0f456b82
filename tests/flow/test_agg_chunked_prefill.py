"""An aggregated engine's prompt chunks ride on one pass of several: the TTFT estimate counts them.

Under chunked prefill most passes of an agg engine carry no prefill, and its perf model trains
on the tick window's mean pass (``fpm_samples_per_engine_per_tick > 1``). That pass's counts
are means: a 2 048-token chunk in one pass of four is 0.25 requests of 512 tokens. Rounded to
0, the model never learned the tokens per prompt, and its TTFT estimate left out the new
request's own prefill — one chunk instead of two here, under the SLA, and no scale-up.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.recorded import RecordedSource
from schemas import PlannerConfig
from tests.flow.live_run import replay
from tests.flow.streams import write_stream

CHUNK = 2048
"""Prompt tokens of the chunk one pass in four carries (= max_num_batched_tokens)."""


def wall_time(prefill_tokens: int, kv_tokens: int) -> float:
    return 0.010 + 2e-5 * prefill_tokens + 1e-7 * kv_tokens


def agg_stream() -> list[dict]:
    events: list[dict] = [
        {
            "type": "capabilities",
            "deployment": "agg",
            "time": 0.0,
            "payload": {
                "decode": {
                    "num_gpu": 1,
                    "max_kv_tokens": 1_000_000,
                    "max_num_batched_tokens": CHUNK,
                }
            },
        },
        {
            "type": "inventory",
            "deployment": "agg",
            "time": 0.0,
            "payload": {"ready_num_decode": 1, "expected_num_decode": 1},
        },
    ]
    for step in range(1, 241):  # a pass every 0.25 s for 60 s; one in four with a chunk
        prefill = CHUNK if step % 4 == 0 else 0
        kv = 60_000 + (step % 9) * 2_000
        fpm = {
            "worker_id": "w0",
            "counter_id": step,
            "wall_time": round(wall_time(prefill, kv), 9),
            "scheduled_requests": {
                "num_prefill_requests": int(prefill > 0),
                "sum_prefill_tokens": prefill,
                "num_decode_requests": 30 + step % 5,
                "sum_decode_kv_tokens": kv,
            },
            "queued_requests": {"sum_prefill_tokens": CHUNK},  # one prompt waits
        }
        events.append(
            {
                "type": "fpm",
                "deployment": "agg",
                "time": step * 0.25,
                "payload": {"role": "decode", "fpm": fpm},
            }
        )
    events.append({"type": "clock", "deployment": "agg", "time": 61.0, "payload": {}})
    return events


def test_the_waiting_prompt_and_the_next_one_are_two_chunks(tmp_path: Path) -> None:
    config = PlannerConfig(
        mode="agg",
        optimization_target="sla",
        ttft_ms=100,
        itl_ms=200,
        enable_load_scaling=True,
        enable_throughput_scaling=False,
        max_gpu_budget=16,
    )
    decisions, ticks, dead = replay(
        {"agg": config}, RecordedSource([write_stream(tmp_path / "agg.jsonl", agg_stream())])
    )
    assert dead == []
    estimates = [t["diagnostics"]["estimated_ttft_ms"] for t in ticks]
    last = [e for e in estimates if e is not None][-1]
    # the queued prompt and one more of the learned 2 048 tokens: two chunks at the mean KV
    chunk_ms = 1000 * wall_time(CHUNK, 68_000)
    assert last == pytest.approx(2 * chunk_ms, rel=0.02)
    assert [(d["reason"], d["num_decode"]) for d in decisions][:1] == [("scale_up", 2)]
