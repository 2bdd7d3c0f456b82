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


def test_engines_reporting_at_the_same_time_train_the_same_model_in_any_arrival_order():
    # Three decode engines report at the same event time every window; with 8 samples kept the
    # perf model drops samples, and the order they were appended decides which: the window's
    # engines must be taken in one order (their key), not in the order their events arrived.
    config = PlannerConfig(
        mode="decode",
        optimization_target="sla",
        enable_load_scaling=True,
        enable_throughput_scaling=False,
        max_gpu_budget=-1,
        max_num_fpm_samples=8,
        load_min_observations=2,
    )
    assert config.fpm_samples_per_engine_per_tick > 1
    windows = []
    for k in range(40):
        rows = {}
        for e, engine in enumerate(("w1", "w2", "w3")):
            n = 1 + (7 * k + 13 * e) % 60
            kv = 1000 + (5417 * k + 7919 * e) % 59000
            wall = 0.001 + 0.0005 * n + 5e-8 * kv + ((31 * k + 17 * e) % 40) / 10000
            rows[engine] = [pass_row(5.0 * k + 1.0, wall, decode_kv=kv, decode_n=n)]
        windows.append(rows)

    def run(order: tuple[str, ...]):
        deployment = DeploymentPlanner("d", config, 5.0)
        records = [
            deployment.on_window(
                5.0 * (k + 1),
                TickWindow(
                    rows={("decode", engine, 0): rows[engine] for engine in order},
                    inventory=WorkerCounts(ready_num_decode=3),
                ),
            )
            for k, rows in enumerate(windows)
        ]
        model = deployment.machine.decode_model
        return model.coefficients, model.samples.samples(), records

    first, reversed_ = run(("w1", "w2", "w3")), run(("w3", "w2", "w1"))
    assert first[0] is not None and len(first[1]) == 8  # fitted, and samples were dropped
    assert first == reversed_


def test_ours_trains_on_passes_spread_over_the_tick_not_over_each_window():
    """A 5 s load tick over 1 s windows (a 12 s throughput interval makes the window 1 s):
    ``fpm_samples_per_engine_per_tick`` (8) passes spread over the tick's 20, not 8 of each
    window's 4 (all 20); the window was another deployment's choice as well (its gcd)."""
    config = PlannerConfig(
        mode="decode",
        optimization_target="sla",
        enable_load_scaling=True,
        enable_throughput_scaling=True,
        throughput_adjustment_interval_seconds=12,
        load_adjustment_interval_seconds=5,
        max_gpu_budget=-1,
    )
    deployment = DeploymentPlanner("d", config, 1.0)
    times = [t / 4 for t in range(20)]  # 4 passes a second
    for second in range(1, 6):
        rows = [
            pass_row(t, 0.01 + t / 1000, decode_kv=1000, decode_n=4)
            for t in times[: 4 * second]
            if t >= second - 1
        ]
        window = TickWindow(
            rows={("decode", "w0", 0): rows}, inventory=WorkerCounts(ready_num_decode=1)
        )
        record = deployment.on_window(float(second), window)
    assert record.ran_load
    walls = [wall for _, wall in deployment.machine.decode_model.samples.samples()]
    assert len(walls) == 8
    assert max(walls) - min(walls) > 0.004  # from the tick's first second to its last
