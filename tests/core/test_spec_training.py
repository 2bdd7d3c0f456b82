"""What trains the perf models each load tick (reference spec §2 consumer, §1.4 step 3).

The reference keeps the latest FPM of every engine and, on each load tick, adds exactly that
one to the regression — whatever it is: a forward pass, or an idle heartbeat (which only moves
the moving averages). Ours (``fpm_samples_per_engine_per_tick > 1``) trains on several evenly
spaced passes of the tick window, and an aggregated engine on the window's mean pass.
"""

from __future__ import annotations

from operators.deployment import DeploymentPlanner
from operators.window import TickWindow
from schemas import (
    ForwardPassMetrics,
    PlannerConfig,
    ScheduledRequestMetrics,
    WorkerCounts,
    fpm_to_row,
)


def pass_row(time: float, wall: float, prefill: int = 0, decode_kv: int = 0, decode_n: int = 0):
    fpm = ForwardPassMetrics(
        worker_id="w0",
        wall_time=wall,
        scheduled_requests=ScheduledRequestMetrics(
            num_prefill_requests=1 if prefill else 0,
            sum_prefill_tokens=prefill,
            num_decode_requests=decode_n,
            sum_decode_kv_tokens=decode_kv,
        ),
    )
    return fpm_to_row(time, fpm)


def planner(mode: str, reference: bool) -> DeploymentPlanner:
    config = PlannerConfig(
        mode=mode,
        optimization_target="sla",
        enable_load_scaling=True,
        enable_throughput_scaling=False,
        max_gpu_budget=-1,
    )
    return DeploymentPlanner("d", config.reference_variant() if reference else config, 5.0)


def one_load_tick(deployment: DeploymentPlanner, rows: list) -> None:
    window = TickWindow(
        rows={("decode", "w0", 0): rows}, inventory=WorkerCounts(ready_num_decode=1)
    )
    record = deployment.on_window(5.0, window)
    assert record.ran_load


AGG_PASSES = [
    pass_row(1.0, 0.02, prefill=100, decode_kv=1000, decode_n=4),
    pass_row(2.0, 0.04, prefill=300, decode_kv=3000, decode_n=4),
]


def test_reference_agg_trains_on_the_latest_pass_not_the_window_mean():
    deployment = planner("agg", reference=True)
    one_load_tick(deployment, AGG_PASSES)
    assert deployment.machine.agg_model.samples.samples() == [((300.0, 3000.0), 0.04)]


def test_ours_agg_trains_on_the_window_mean():
    deployment = planner("agg", reference=False)
    one_load_tick(deployment, AGG_PASSES)
    assert deployment.machine.agg_model.samples.samples() == [((200.0, 2000.0), 0.03)]


def test_reference_latest_heartbeat_only_moves_the_moving_averages():
    deployment = planner("decode", reference=True)
    rows = [
        pass_row(1.0, 0.03, decode_kv=8000, decode_n=8),
        pass_row(2.0, 0.0),  # the engine went idle: its latest FPM is a heartbeat
    ]
    one_load_tick(deployment, rows)
    model = deployment.machine.decode_model
    assert model.num_observations == 0
    assert model.avg_num_decode == 0.0  # a leading zero: skipped


def test_ours_trains_on_the_passes_before_the_heartbeat():
    deployment = planner("decode", reference=False)
    rows = [
        pass_row(1.0, 0.03, decode_kv=8000, decode_n=8),
        pass_row(2.0, 0.0),
    ]
    one_load_tick(deployment, rows)
    assert deployment.machine.decode_model.samples.samples() == [((8.0, 8000.0), 0.03)]


def test_reference_trains_once_per_load_tick_however_many_windows_it_spans():
    # tick windows of 1 s (another deployment ticks every second), load ticks every 5 s: the
    # reference adds the latest FPM of the engine at the tick, once — not one per window
    config = PlannerConfig(
        mode="decode",
        optimization_target="sla",
        enable_load_scaling=True,
        enable_throughput_scaling=False,
        max_gpu_budget=-1,
    ).reference_variant()
    deployment = DeploymentPlanner("d", config, 1.0)
    for second in range(1, 6):
        window = TickWindow(
            rows={
                ("decode", "w0", 0): [
                    pass_row(second - 0.5, 0.01 * second, decode_kv=1000, decode_n=1)
                ]
            },
            inventory=WorkerCounts(ready_num_decode=1),
        )
        record = deployment.on_window(float(second), window)
    assert record.ran_load
    assert deployment.machine.decode_model.samples.samples() == [((1.0, 1000.0), 0.05)]
