"""``flowplanner run --metrics-port`` scraped by a real Prometheus, checked against the tick
records and dead letters of the same run: the reference gauges hold the latest known value of
the records, and the flowplanner_* counters count each input, late event and decision once.

The recorded stream is joined by a ZMQ input nobody publishes on: that makes the run a live,
long-lived worker (the exporter stays up after the recording is read) and its clock closes the
last window once inputs are quiet.
"""

from __future__ import annotations

import itertools
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from connectors.metrics import PlannerMetrics
from schemas import TickRecord
from tests.flow.runner import metrics_port, read_jsonl, start_flowplanner, write_config
from tests.flow.streams import DECODE_CONFIG, decode_fpm, decode_ramp
from tests.services.process import free_port, wait_until
from tests.services.prometheus import PrometheusServer, StartPrometheus

SECONDS = 40
T = TypeVar("T")


def stream_with_bad_inputs(deployment: str) -> list[dict]:
    events = decode_ramp(deployment, engines=2, seconds=SECONDS)
    prefill = {"role": "prefill", "fpm": decode_fpm("p0", 1000, 1, 1)}
    bad = [
        "not json",  # invalid
        {"type": "clock", "deployment": "nobody", "time": 3.0, "payload": {}},  # unknown
        {"type": "fpm", "deployment": deployment, "time": 4.0, "payload": prefill},  # role
    ]
    late = {
        "type": "fpm",
        "deployment": deployment,
        "time": 1.0,  # after 40 s of data, with no allowed lateness
        "payload": {"role": "decode", "fpm": decode_fpm("w0", 5000, 3, 999)},
    }
    return events[:2] + bad + events[2:] + [late]


def write_lines(path: Path, items: list) -> Path:
    path.write_text("".join((i if isinstance(i, str) else json.dumps(i)) + "\n" for i in items))
    return path


def scalar(prometheus: PrometheusServer, promql: str) -> float | None:
    return prometheus.scalar(promql)


def wait_for_last_window(ticks: Path, end: float) -> list[dict]:
    def through_end() -> list[dict]:
        records = read_jsonl(ticks) if ticks.exists() else []
        return records if records and records[-1]["time"] >= end else []

    # includes the worker's start and the live clock closing the window: generous for a loaded
    # machine, and a passing wait ends at once
    return wait_until(through_end, f"a tick record at {end} s in {ticks}", timeout_s=120)


def last_known(records: list[dict], get: Callable[[dict], T | None]) -> T | None:
    values = [v for v in map(get, records) if v is not None]
    return values[-1] if values else None


def test_exported_metrics_match_the_tick_records_of_the_run(
    tmp_path: Path, start_prometheus: StartPrometheus
) -> None:
    d = "alpha"
    config = write_config(tmp_path / "c.yaml", {d: dict(DECODE_CONFIG)})
    stream = write_lines(tmp_path / "s.jsonl", stream_with_bad_inputs(d))
    ticks, dead = tmp_path / "ticks.jsonl", tmp_path / "dead.jsonl"
    err_path = tmp_path / "worker.err"
    worker = start_flowplanner(
        "run",
        "--config",
        str(config),
        "--input",
        str(stream),
        "--input",
        f"zmq+tcp://127.0.0.1:{free_port()}?deployment={d}&role=decode",
        "--metrics-port",
        "0",  # the worker picks its port as it binds it, and says which
        "--ticks",
        str(ticks),
        "--dead-letters",
        str(dead),
        stderr=err_path,
    )
    try:
        port = metrics_port(worker, err_path)
        # the last window [40, 45) closes once the live clock moves on
        records = wait_for_last_window(ticks, SECONDS + 5.0)
        prometheus = start_prometheus({"planner": [f"127.0.0.1:{port}"]})
        sel = f'{{deployment="{d}"}}'
        # liveness: every tick of the records has been counted, event time is the last window
        ran = [r for r in records if r["ran_load"] or r["ran_throughput"]]
        prometheus.wait_for_value(f"flowplanner_ticks_total{sel}", len(ran))
        assert scalar(prometheus, f"flowplanner_event_time_seconds{sel}") == records[-1]["time"]
        records = read_jsonl(ticks)  # nothing more arrived meanwhile
        assert len([r for r in records if r["ran_load"] or r["ran_throughput"]]) == len(ran)

        diag = [r["diagnostics"] for r in records]
        decisions = [r["decision"] for r in records if r["decision"] is not None]
        assert decisions, "the ramp must make the planner decide"
        expected = {
            "num_decode_replicas": last_known(records, lambda r: r["ready_decode"]),
            "estimated_itl_ms": last_known(diag, lambda g: g["estimated_itl_ms"]),
            "predicted_num_decode_replicas": decisions[-1]["num_decode"],
        }
        for name, number in expected.items():
            assert scalar(prometheus, f"dynamo_planner_{name}{sel}") == number, name
        # gpu_hours: ready decode replicas (1 GPU each) integrated over the records' event time
        gpu_s = sum(
            (b["time"] - a["time"]) * (a["ready_decode"] or 0)
            for a, b in itertools.pairwise(records)
        )
        assert abs(scalar(prometheus, f"dynamo_planner_gpu_hours{sel}") - gpu_s / 3600) < 1e-9
        reason = last_known(diag, lambda g: g["load_decision_reason"])
        on = prometheus.query(f"dynamo_planner_load_scaling_decision{sel} == 1")
        assert [s["metric"]["dynamo_planner_load_scaling_decision"] for s in on] == [reason]
        engines = last_known(records, lambda r: r["engines"] if r["ran_load"] else None)
        assert engines is not None, "a load tick records its engines"
        inflight = prometheus.query(f"dynamo_planner_engine_inflight_decode_kv_tokens{sel}")
        assert {s["metric"]["worker_id"]: float(s["value"][1]) for s in inflight} == {
            e["worker_id"]: e["inflight_decode_kv_tokens"] for e in engines
        }

        # each decision, dead letter and input line counted exactly once
        assert scalar(prometheus, f"flowplanner_decisions_out_total{sel}") == len(decisions)
        letters = read_jsonl(dead)
        assert len(letters) == 4
        by_kind = {
            s["metric"]["kind"]: float(s["value"][1])
            for s in prometheus.query("flowplanner_dead_letters_total")
        }
        assert by_kind == {"invalid": 1, "unknown": 1, "role": 1, "late": 1}
        lines = len(stream.read_text().splitlines())
        assert scalar(prometheus, 'flowplanner_events_in_total{source="recorded"}') == lines
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    err = err_path.read_text()
    assert worker.returncode == 0, err
    assert f"{lines} events in, 4 dead-lettered, {len(decisions)} decisions" in err


def test_a_window_without_a_tick_moves_event_time_but_is_not_a_tick() -> None:
    metrics = PlannerMetrics()
    metrics.observe(TickRecord(deployment="d", time=10.0, ran_load=True))
    metrics.observe(TickRecord(deployment="d", time=15.0))  # a window with no loop due
    assert metrics.value("flowplanner_ticks_total", deployment="d") == 1
    assert metrics.value("flowplanner_event_time_seconds", deployment="d") == 15.0
    metrics.observe(TickRecord(deployment="d", time=5.0, ran_load=True))  # out of order
    assert metrics.value("flowplanner_event_time_seconds", deployment="d") == 15.0
    assert metrics.value("flowplanner_ticks_total", deployment="d") == 2
