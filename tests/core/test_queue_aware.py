"""Ours: queue-aware decode load scaling (``queue_aware_estimates``, on by default).

A decode engine whose batch is full queues new requests; the reference's estimate is the next
iteration's time and cannot see that wait, and its consolidation check assumes the batch size
stays put when one engine goes. These cases differ between the two on purpose.
"""

from __future__ import annotations

import pytest

from operators.load_scaling import (
    ScaleDownCheck,
    queue_wait_factor,
    sla_decode_proposal,
    steady_state_itl_after_consolidation,
)
from operators.perf import DecodePerfModel
from schemas import ForwardPassMetrics, QueuedRequestMetrics, ScheduledRequestMetrics

INTERCEPT, PER_REQUEST, PER_KV = 0.010, 2e-5, 1e-8
"""A decode engine: ``wall = 10 ms + 20 µs per request + 0.01 µs per KV token``."""


def wall(n: int, kv: int) -> float:
    return INTERCEPT + PER_REQUEST * n + PER_KV * kv


def trained_model() -> DecodePerfModel:
    model = DecodePerfModel(max_num_fpm_samples=64, min_observations=5)
    for n in (8, 32, 64, 128, 192, 256):
        for ctx in (800, 1600):
            model.learn_one(
                {"num_decode_requests": n, "sum_decode_kv_tokens": n * ctx}, wall(n, n * ctx)
            )
    return model


def engine(n: int, kv: int, queued: int = 0, queued_kv: int = 0) -> ForwardPassMetrics:
    return ForwardPassMetrics(
        wall_time=wall(n, kv),
        scheduled_requests=ScheduledRequestMetrics(num_decode_requests=n, sum_decode_kv_tokens=kv),
        queued_requests=QueuedRequestMetrics(
            num_decode_requests=queued, sum_decode_kv_tokens=queued_kv
        ),
    )


def decide(engines, *, queue_aware: bool, itl_ms: float = 25.0, max_num_seqs: int = 256):
    return sla_decode_proposal(
        trained_model(),
        {(f"w{i}", 0): f for i, f in enumerate(engines)},
        len(engines),
        itl_sla_ms=itl_ms,
        sensitivity=0.8,
        rule="consolidation",
        max_kv_tokens=1_000_000,
        accept_length=1.0,
        min_endpoint=1,
        max_num_seqs=max_num_seqs,
        queue_aware=queue_aware,
    )


def test_the_fit_recovers_the_engine():
    coefficients = trained_model().coefficients
    assert coefficients["intercept"] == pytest.approx(INTERCEPT)
    assert coefficients["num_decode_requests"] == pytest.approx(PER_REQUEST)


def test_a_full_batch_with_a_queue_scales_up_only_when_the_wait_is_seen():
    # 256 running (the slot limit), 200 more waiting: iterations take ~17 ms < 25 ms SLA,
    # but a new request waits ~0.8 of a lifetime for a slot: ITL ≈ 17 × 1.78 ≈ 30 ms.
    saturated = [engine(256, 256 * 1200, queued=200, queued_kv=200 * 1000) for _ in range(2)]
    reference = decide(saturated, queue_aware=False)
    ours = decide(saturated, queue_aware=True)
    assert reference.desired is None and reference.estimate_ms < 25.0
    assert ours.reason == "scale_up" and ours.desired == 3
    # the reference's next-iteration estimate (no FPM moving averages were fed: +1 request,
    # scheduled + queued KV; the fit recovers the engine exactly) stretched by the slot wait
    # 1 + (Q + 1) / B: a tolerance well below the 0.2 % a wait of Q / B would be off by
    expected = 1000 * wall(1, 256 * 1200 + 200 * 1000) * (1 + 201 / 256)
    assert ours.estimate_ms == pytest.approx(expected, rel=1e-9)


def test_consolidation_keeps_survivors_within_their_batch_slots():
    # Three engines at 150 requests each look light (13 ms vs 25 ms × 0.8), and the
    # reference lets one go; at equilibrium each survivor would hold ~235 requests × growth
    # of the iteration time — ours predicts the survivors' steady state and refuses.
    busy = [engine(150, 150 * 1000) for _ in range(3)]
    assert decide(busy, queue_aware=False).reason == "scale_down"
    held = decide(busy, queue_aware=True, max_num_seqs=200)
    assert held.reason == "scale_down_refused_consolidation"
    # with enough slots the same load may consolidate
    assert decide(busy, queue_aware=True, max_num_seqs=512).reason == "scale_down"


def test_steady_state_matches_littles_law_fixed_point():
    # itl = a + s·B with B = λ·osl·itl: solve numerically for λ and for 1.5·λ
    a, s, osl = 0.010, 5e-5, 200
    lam = 10.0
    itl = a / (1 - s * lam * osl)
    itl_post = a / (1 - s * 1.5 * lam * osl)
    assert steady_state_itl_after_consolidation(itl, a, 1.5) == pytest.approx(itl_post)
    # past the knee the survivors can never keep up
    assert steady_state_itl_after_consolidation(3 * a, a, 2.0) == float("inf")


def test_no_queue_no_factor():
    assert queue_wait_factor(engine(100, 100_000)) == 1.0
    assert ScaleDownCheck(True, False).allowed


def test_survivors_with_no_headroom_at_all_refuse_instead_of_failing():
    # protects: at exactly the knee (c·a == (c − 1)·itl: 2 × 5 ms == 1 × 10 ms) the survivors
    # could not keep up at any batch size — the consolidation check refuses (inf) rather than
    # dividing by zero and failing the tick
    assert 2.0 * 0.005 - (2.0 - 1.0) * 0.010 == 0.0  # the tie is exact in floating point
    assert steady_state_itl_after_consolidation(0.010, 0.005, 2.0) == float("inf")
