"""What a deployment knows before live data: profile bootstrap and predictor warm-up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.commands.run import preload
from schemas import PlannerConfig
from tests.flow.runner import run_recorded, write_config

DATA = Path(__file__).resolve().parents[1] / "data"
PROFILE = DATA / "profiles/h200_llama3.1-8b-fp8_tp1"
MOONCAKE = DATA / "traces/mooncake_arxiv_first1000.jsonl"


def test_preload_reads_the_profile_and_the_warmup_trace():
    config = PlannerConfig(
        optimization_target="sla",
        profile_results_dir=str(PROFILE),
        load_predictor_warmup_trace=str(MOONCAKE),
        throughput_adjustment_interval_seconds=60,
    )
    bootstrap, warmup = preload({"d": config})
    assert len(bootstrap["d"]["prefill"]) == 17 and len(bootstrap["d"]["decode"]) == 41
    rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines()]
    last_ms = max(r["timestamp"] for r in rows)
    assert len(warmup["d"]) == last_ms // 60_000 + 1
    assert sum(o.num_req for o in warmup["d"]) == len(rows)


DECODE_PASS = {
    "worker_id": "w0",
    "wall_time": 0.018,
    "scheduled_requests": {"num_decode_requests": 64, "sum_decode_kv_tokens": 80_000},
}


def one_tick_stream(path: Path, role: str = "decode", fpm: dict = DECODE_PASS) -> Path:
    """One engine of ``role``, one forward pass, one tick at 5 s."""
    events = [
        {
            "type": "inventory",
            "deployment": "d",
            "time": 0.0,
            "payload": {f"ready_num_{role}": 1, f"expected_num_{role}": 1},
        },
        {"type": "fpm", "deployment": "d", "time": 4.5, "payload": {"role": role, "fpm": fpm}},
        {"type": "clock", "deployment": "d", "time": 5.0, "payload": {}},
    ]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def self_benchmark(path: Path) -> Path:
    """A worker's saved self-benchmark: decode passes of 10 ms + 0.1 µs per KV token, whatever
    the batch (the live pass of :func:`one_tick_stream` lies on the same plane)."""
    points = ((8, 1000), (16, 1500), (32, 1000), (64, 1500), (128, 1250))  # batch, KV/request
    passes = [
        {
            "wall_time": 0.010 + 1e-7 * batch * length,
            "scheduled_requests": {
                "num_decode_requests": batch,
                "sum_decode_kv_tokens": batch * length,
            },
        }
        for batch, length in points
    ]
    heartbeat = {"wall_time": 0.0}
    document = {"results": [{"point": {"point_type": "decode"}, "fpms": [*passes, heartbeat]}]}
    path.write_text(json.dumps(document))
    return path


def test_a_self_benchmark_comes_before_the_profile(tmp_path):
    config = PlannerConfig(
        profile_results_dir=str(PROFILE), self_benchmark_file=str(self_benchmark(tmp_path / "b"))
    )
    bootstrap, _ = preload({"d": config})
    assert [f.scheduled_requests.num_decode_requests for f in bootstrap["d"]["decode"]] == [
        8,
        16,
        32,
        64,
        128,
    ]
    assert bootstrap["d"]["prefill"] == []
    (tmp_path / "broken").write_text(
        '{"results": [{"point": {"point_type": "decode"}, "fpms": 1}]}'
    )
    with pytest.raises(ValueError, match=r"broken: results\[0\]\.fpms is not a list"):
        preload({"d": PlannerConfig(self_benchmark_file=str(tmp_path / "broken"))})


def test_a_bootstrapped_planner_estimates_from_its_first_tick(tmp_path):
    stream = one_tick_stream(tmp_path / "s.jsonl")
    benchmark = self_benchmark(tmp_path / "bench.json")
    estimates = {}
    for name, extra in (
        ("cold", {}),
        ("warm", {"profile_results_dir": str(PROFILE)}),
        ("benchmarked", {"self_benchmark_file": str(benchmark)}),
    ):
        config = write_config(
            tmp_path / f"{name}.yaml",
            {
                "d": {
                    "mode": "decode",
                    "optimization_target": "sla",
                    "enable_load_scaling": True,
                    "enable_throughput_scaling": False,
                    **extra,
                }
            },
        )
        (tick,) = run_recorded(config, [stream], tmp_path / name)["ticks"]
        estimates[name] = tick["diagnostics"]
    assert estimates["cold"]["load_decision_reason"] == "insufficient_data"
    assert estimates["cold"]["estimated_itl_ms"] is None
    # one live pass is not enough to learn from, but the profile's 41 decode points are
    assert estimates["warm"]["estimated_itl_ms"] > 0
    # and so are the benchmark's 5 passes: the next step (80 000 KV tokens plus one request of
    # the mean 1 250) takes 10 ms + 0.1 µs × 81 250
    assert estimates["benchmarked"]["estimated_itl_ms"] == pytest.approx(18.125, rel=1e-9)


def test_configured_capabilities_let_prefill_scale_before_any_capabilities_event(tmp_path):
    # ZMQ inputs carry no engine limits; the prefill rule needs max_num_batched_tokens
    fpm = {
        "worker_id": "p0",
        "wall_time": 0.5,
        "scheduled_requests": {"num_prefill_requests": 2, "sum_prefill_tokens": 8192},
        "queued_requests": {"num_prefill_requests": 40, "sum_prefill_tokens": 400_000},
    }
    stream = one_tick_stream(tmp_path / "prefill.jsonl", "prefill", fpm)
    reasons = {}
    for name, extra in (
        ("unknown", {}),
        ("configured", {"capabilities": {"prefill": {"max_num_batched_tokens": 8192}}}),
    ):
        deployment = {
            "mode": "prefill",
            "optimization_target": "sla",
            "enable_load_scaling": True,
            "enable_throughput_scaling": False,
            "profile_results_dir": str(PROFILE),
            **extra,
        }
        config = write_config(tmp_path / f"{name}.yaml", {"d": deployment})
        (tick,) = run_recorded(config, [stream], tmp_path / name)["ticks"]
        reasons[name] = tick["diagnostics"]["load_decision_reason_prefill"]
        if name == "configured":
            assert tick["decision"]["num_prefill"] > 1  # 400 k queued tokens: far over 500 ms
    assert reasons == {"unknown": "insufficient_data", "configured": "scale_up"}


def test_a_profile_point_no_engine_could_run_is_refused_naming_the_profile(tmp_path):
    decode = {
        "x_kv_usage": [0.5, 0.5],
        "y_context_length": [4096, 4096],
        "z_itl": [10.0, 61_000.0],  # a minute per token: no forward pass takes that long
        "z_thpt_per_gpu": [1.0, 1.0],
        "max_kv_tokens": 100_000,
    }
    (tmp_path / "decode_raw_data.json").write_text(json.dumps(decode))
    with pytest.raises(ValueError, match=rf"^{tmp_path}: profile decode point 1 .* wall_time"):
        preload({"d": PlannerConfig(profile_results_dir=str(tmp_path))})
