"""What a deployment knows before live data: profile bootstrap and predictor warm-up."""

from __future__ import annotations

import json
from pathlib import Path

from flows.commands.run import preload
from schemas import PlannerConfig
from tests.flow.runner import flowplanner, read_jsonl, write_config

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


def one_tick_stream(path: Path) -> Path:
    fpm = {
        "worker_id": "w0",
        "wall_time": 0.02,
        "scheduled_requests": {"num_decode_requests": 64, "sum_decode_kv_tokens": 80_000},
    }
    events = [
        {
            "type": "inventory",
            "deployment": "d",
            "time": 0.0,
            "payload": {"ready_num_decode": 1, "expected_num_decode": 1},
        },
        {"type": "fpm", "deployment": "d", "time": 4.5, "payload": {"role": "decode", "fpm": fpm}},
        {"type": "clock", "deployment": "d", "time": 5.0, "payload": {}},
    ]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_a_bootstrapped_planner_estimates_from_its_first_tick(tmp_path):
    stream = one_tick_stream(tmp_path / "s.jsonl")
    estimates = {}
    for name, extra in (("cold", {}), ("warm", {"profile_results_dir": str(PROFILE)})):
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
        done = flowplanner(
            "run",
            "--config",
            str(config),
            "--input",
            str(stream),
            "--ticks",
            str(tmp_path / f"{name}.ticks.jsonl"),
        )
        assert done.returncode == 0, done.stderr
        (tick,) = read_jsonl(tmp_path / f"{name}.ticks.jsonl")
        estimates[name] = tick["diagnostics"]
    assert estimates["cold"]["load_decision_reason"] == "insufficient_data"
    assert estimates["cold"]["estimated_itl_ms"] is None
    # one live pass is not enough to learn from, but the profile's 41 decode points are
    assert estimates["warm"]["estimated_itl_ms"] > 0
