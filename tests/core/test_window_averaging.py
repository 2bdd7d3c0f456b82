"""The per-engine time average of a tick window (``operators.window.time_average``, agg mode).

Engines send idle heartbeats (``wall_time == 0``) between forward passes; they are not forward
passes, so the average a perf model trains on is over the busy passes only.
"""

from __future__ import annotations

import pytest

from operators.window import evenly_spaced, time_average
from schemas import ForwardPassMetrics, ScheduledRequestMetrics, fpm_to_row, mean_fpm


def busy(time: float, wall: float, requests: int, kv: int):
    return fpm_to_row(
        time,
        ForwardPassMetrics(
            worker_id="w",
            wall_time=wall,
            scheduled_requests=ScheduledRequestMetrics(
                num_decode_requests=requests, sum_decode_kv_tokens=kv
            ),
        ),
    )


def heartbeat(time: float):
    return fpm_to_row(time, ForwardPassMetrics(worker_id="w", wall_time=0.0))


def test_idle_heartbeats_are_left_out_of_the_average() -> None:
    # protects: heartbeats (wall 0) must not halve the wall time and loads the agg model learns
    rows = [busy(1.0, 0.040, 10, 20_000), heartbeat(1.5), busy(2.0, 0.020, 20, 40_000)]
    rows.append(heartbeat(2.5))
    avg = time_average(rows)
    assert avg is not None
    mean = mean_fpm("w", 0, avg)
    # the mean of the two busy passes: (40 + 20) / 2 ms, (10 + 20) / 2, (20k + 40k) / 2
    assert mean.wall_time == pytest.approx(0.030)
    assert mean.scheduled_requests.num_decode_requests == 15
    assert mean.scheduled_requests.sum_decode_kv_tokens == 30_000


def test_a_window_of_heartbeats_only_has_no_average() -> None:
    # protects: an idle engine yields no training sample (not an all-zero forward pass)
    assert time_average([heartbeat(1.0), heartbeat(2.0)]) is None


def test_idle_heartbeats_never_become_training_samples() -> None:
    # protects: the evenly spaced training passes of a tick skip heartbeats (wall 0), which
    # would otherwise train the perf models on zero-time "forward passes"
    rows = [heartbeat(1.0), busy(1.5, 0.020, 10, 20_000), heartbeat(2.0)]
    assert evenly_spaced(rows, 2) == [rows[1]]
    assert evenly_spaced(rows, 1) == [rows[1]]
    avg = time_average(rows)
    assert avg is not None and mean_fpm("w", 0, avg).wall_time == 0.020
