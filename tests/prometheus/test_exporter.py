"""The planner's exporter, scraped by a real Prometheus: reference names, labels, enum states."""

from __future__ import annotations

import uuid

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSource

from connectors.metrics import MetricsSink, PlannerMetrics
from connectors.pipeline_metrics import FPM_GAPS
from schemas import (
    EngineLoad,
    PlannerConfig,
    ScalingDecision,
    TickDiagnostics,
    TickRecord,
    TrafficObservation,
)
from tests.flow.cluster import run_flow
from tests.services.prometheus import PrometheusServer, StartPrometheus


def engine(role: str, worker_id: str, queued: int, inflight: int) -> EngineLoad:
    return EngineLoad(
        role=role,
        worker_id=worker_id,
        queued_prefill_tokens=queued if role == "prefill" else 0,
        queued_decode_kv_tokens=queued if role == "decode" else 0,
        inflight_decode_kv_tokens=inflight,
    )


def ticks(deployment: str) -> list[TickRecord]:
    """A load tick, a throughput tick 180 s later, then a window without a tick."""
    return [
        TickRecord(
            deployment=deployment,
            time=1000.0,
            ready_prefill=1,
            ready_decode=2,
            ran_load=True,
            decision=ScalingDecision(
                deployment=deployment,
                decision_id=1,
                time=1000.0,
                num_prefill=2,
                num_decode=None,
                source="load",
                reason="scale_up",
            ),
            diagnostics=TickDiagnostics(
                estimated_ttft_ms=612.5,
                estimated_itl_ms=31.25,
                load_decision_reason="scale_up",
            ),
            engines=[
                engine("prefill", "p0", 8192, 0),
                engine("decode", "d0", 100, 90_000),
                engine("decode", "d1", 0, 45_000),
            ],
        ),
        TickRecord(
            deployment=deployment,
            time=1180.0,
            ready_prefill=2,
            ready_decode=2,
            ran_throughput=True,
            ran_load=True,
            diagnostics=TickDiagnostics(
                predicted_num_req=540.0,
                predicted_isl=3100.0,
                predicted_osl=160.0,
                engine_rps_prefill=1.5,
                engine_rps_decode=4.25,
                throughput_decision_reason="set_lower_bound",
                load_decision_reason="no_change",
                power_budget_total_watts=5600,
                power_projected_watts=4200,
            ),
            engines=[engine("prefill", "p0", 0, 0), engine("decode", "d0", 0, 80_000)],
            observed_traffic=TrafficObservation(duration_s=180, num_req=360, isl=3000, osl=150),
        ),
        TickRecord(deployment=deployment, time=1360.0),
    ]


def prefill_gone(deployment: str) -> list[TickRecord]:
    """4 prefill + 2 decode replicas; from t=60 the inventory knows no prefill role (its service
    was removed): every tick after carries only the decode count, up to t=3600."""
    return [
        TickRecord(
            deployment=deployment,
            time=float(t),
            ready_prefill=4 if t < 60 else None,
            ready_decode=2,
            ran_load=True,
        )
        for t in range(0, 3601, 10)
    ]


def feed_through_bytewax(metrics: PlannerMetrics, records: list[TickRecord], workers: int) -> None:
    flow = Dataflow("metrics_sink_test")
    op.output("metrics", op.input("records", flow, TestingSource(records)), MetricsSink(metrics))
    run_flow(flow, workers)


def value(prometheus: PrometheusServer, promql: str) -> float | None:
    return prometheus.scalar(promql)


def test_real_prometheus_scrapes_the_planner_metrics(
    start_prometheus: StartPrometheus, workers: int
) -> None:
    deployment = f"llama-{uuid.uuid4().hex[:6]}"
    configs = {deployment: PlannerConfig(prefill_engine_num_gpu=2, decode_engine_num_gpu=1)}
    metrics = PlannerMetrics(configs)
    feed_through_bytewax(metrics, ticks(deployment), workers)
    feed_through_bytewax(
        metrics, [TickRecord(deployment="other", time=5.0, ready_decode=7)], workers
    )
    gone = f"gone-{uuid.uuid4().hex[:6]}"
    feed_through_bytewax(metrics, prefill_gone(gone), workers)
    endpoint = f"flowplanner-test-{uuid.uuid4().hex[:6]}"
    FPM_GAPS.labels(endpoint=endpoint).inc(3)  # a pipeline counter, same exporter

    with metrics.serve(port=0, host="127.0.0.1") as server:
        prometheus = start_prometheus({"planner": [f"127.0.0.1:{server.port}"]})
        prometheus.wait_for_scrapes("planner")

        sel = f'{{deployment="{deployment}"}}'
        expected = {
            # the last record (a window without a tick) had no counts: last known values
            "num_prefill_replicas": 2,
            "num_decode_replicas": 2,
            "observed_requests_per_second": 2.0,
            "observed_input_sequence_tokens": 3000,
            "observed_output_sequence_tokens": 150,
            "predicted_requests_per_second": 3.0,
            "predicted_input_sequence_tokens": 3100,
            "predicted_output_sequence_tokens": 160,
            "predicted_num_prefill_replicas": 2,
            "estimated_ttft_ms": 612.5,
            "estimated_itl_ms": 31.25,
            "engine_prefill_capacity_requests_per_second": 1.5,
            "engine_decode_capacity_requests_per_second": 4.25,
            # 180 s × (1×2 + 2×1) GPUs + 180 s × (2×2 + 2×1) GPUs = 1800 GPU-s = 0.5 GPU-h
            "gpu_hours": 0.5,
            "power_budget_total_watts": 5600,
            "power_projected_watts": 4200,
            "power_budget_utilization": 0.75,
        }
        for name, number in expected.items():
            assert value(prometheus, f"dynamo_planner_{name}{sel}") == number, name
        assert prometheus.query(f"dynamo_planner_predicted_num_decode_replicas{sel}") == []
        assert value(prometheus, 'dynamo_planner_num_decode_replicas{deployment="other"}') == 7

        load = prometheus.query(f"dynamo_planner_load_scaling_decision{sel} == 1")
        assert [s["metric"]["dynamo_planner_load_scaling_decision"] for s in load] == ["no_change"]
        states = prometheus.query(f"dynamo_planner_throughput_scaling_decision{sel}")
        assert {s["metric"]["dynamo_planner_throughput_scaling_decision"] for s in states} == {
            "unset", "disabled", "no_traffic_data", "predict_failed", "model_not_ready",
            "partner_not_ready", "set_lower_bound", "scale", "no_change",
            "gpu_budget_guard_hold", "gpu_budget_reconcile", "power_budget_clamp",
            "scale_down_stabilizing",
        }  # fmt: skip
        on = [s for s in states if s["value"][1] == "1"]
        assert [s["metric"]["dynamo_planner_throughput_scaling_decision"] for s in on] == [
            "set_lower_bound"
        ]

        inflight = prometheus.query(f"dynamo_planner_engine_inflight_decode_kv_tokens{sel}")
        by_engine = {
            (s["metric"]["role"], s["metric"]["worker_id"], s["metric"]["dp_rank"]): s["value"][1]
            for s in inflight
        }
        assert by_engine == {("prefill", "p0", "0"): "0", ("decode", "d0", "0"): "80000"}
        assert (
            prometheus.query('dynamo_planner_engine_queued_decode_kv_tokens{worker_id="d1"}') == []
        )

        # a role the inventory no longer knows: its count is gone, its GPUs stop counting
        # (60 s x (4 + 2) + 3540 s x 2 GPU-s); it kept 4 prefill and 5.99 GPU-h before
        assert prometheus.query(f'dynamo_planner_num_prefill_replicas{{deployment="{gone}"}}') == []
        assert value(prometheus, f'dynamo_planner_num_decode_replicas{{deployment="{gone}"}}') == 2
        gone_hours = value(prometheus, f'dynamo_planner_gpu_hours{{deployment="{gone}"}}')
        assert gone_hours == pytest.approx((60 * 6 + 3540 * 2) / 3600)

        gaps = f'flowplanner_fpm_sequence_gaps_total{{endpoint="{endpoint}"}}'
        assert value(prometheus, gaps) == 3


def test_unknown_values_keep_the_last_known_gauge() -> None:
    metrics = PlannerMetrics()
    metrics.observe(
        TickRecord(
            deployment="d",
            time=0.0,
            ready_prefill=3,
            ran_load=True,
            diagnostics=TickDiagnostics(load_decision_reason="scale_down", estimated_ttft_ms=80),
        )
    )
    metrics.observe(TickRecord(deployment="d", time=5.0))  # a window without a tick: no counts
    metrics.observe(TickRecord(deployment="d", time=10.0, ready_prefill=3, ran_load=True))
    assert metrics.value("num_prefill_replicas", deployment="d") == 3
    assert metrics.value("estimated_ttft_ms", deployment="d") == 80  # the tick estimated none
    assert (
        metrics.value(
            "load_scaling_decision",
            deployment="d",
            dynamo_planner_load_scaling_decision="scale_down",
        )
        == 1
    )
    assert metrics.value("gpu_hours", deployment="d") == pytest.approx(10 * 3 / 3600)


def test_records_out_of_order_never_reduce_gpu_hours() -> None:
    metrics = PlannerMetrics()
    for time, ready in ((0.0, 2), (3600.0, 2), (1800.0, 9), (7200.0, 2)):
        metrics.observe(TickRecord(deployment="d", time=time, ready_decode=ready))
    assert metrics.value("gpu_hours", deployment="d") == pytest.approx(2 + 9)


def test_the_sink_rejects_what_is_not_a_tick_record() -> None:
    partition = MetricsSink(PlannerMetrics()).build("metrics", 0, 1)
    with pytest.raises(TypeError, match="MetricsSink takes TickRecords, got dict"):
        partition.write_batch([{"deployment": "d"}])


def test_gpu_hours_count_the_gpus_each_replica_has() -> None:
    # workers report 4 GPUs per decode replica (capabilities); the config says nothing
    metrics = PlannerMetrics({"d": PlannerConfig(mode="decode", prefill_engine_num_gpu=2)})
    for time in (0.0, 1800.0, 3600.0):
        metrics.observe(TickRecord(deployment="d", time=time, ready_decode=3, gpus_per_decode=4))
    assert metrics.value("gpu_hours", deployment="d") == pytest.approx(3 * 4)


def test_a_record_without_a_tick_keeps_the_gpus_the_workers_reported() -> None:
    # only ticks carry GPUs per replica; windows without one must not fall back to 1 GPU
    metrics = PlannerMetrics({"d": PlannerConfig(mode="decode")})
    metrics.observe(TickRecord(deployment="d", time=0.0, ready_decode=3, gpus_per_decode=4))
    metrics.observe(TickRecord(deployment="d", time=1800.0, ready_decode=3))  # no tick ran
    metrics.observe(TickRecord(deployment="d", time=3600.0, ready_decode=3, gpus_per_decode=4))
    assert metrics.value("gpu_hours", deployment="d") == pytest.approx(3 * 4)


def test_a_role_gone_from_the_inventory_is_removed_a_window_without_a_tick_changes_nothing() -> (
    None
):
    metrics = PlannerMetrics()
    metrics.observe(TickRecord(deployment="d", time=0.0, ready_prefill=4, ready_decode=2))
    metrics.observe(TickRecord(deployment="d", time=60.0))  # no tick: counts as they were
    assert metrics.value("num_prefill_replicas", deployment="d") == 4
    metrics.observe(TickRecord(deployment="d", time=120.0, ready_decode=2, ran_throughput=True))
    assert metrics.value("num_prefill_replicas", deployment="d") is None
    assert metrics.value("num_decode_replicas", deployment="d") == 2
    metrics.observe(TickRecord(deployment="d", time=3720.0, ready_decode=2, ran_load=True))
    # 120 s with 6 GPUs, then 3600 s with the 2 decode GPUs only
    assert metrics.value("gpu_hours", deployment="d") == pytest.approx((120 * 6 + 3600 * 2) / 3600)
