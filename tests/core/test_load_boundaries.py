"""Exact ties at the SLA rule's bounds (reference spec §4.5, §4.6).

Each tie is exact in floating point, and each test also checks the value one step past the
tie, so a comparison written the other way round (``>=`` for ``>``, ``>`` for ``>=``) fails.
"""

from __future__ import annotations

import math

from operators.load_scaling import (
    ScaleDownCheck,
    flat_scale_down,
    sla_agg_proposals,
    sla_decode_proposal,
    sla_step,
)
from operators.perf import AggPerfModel, DecodePerfModel
from schemas import ForwardPassMetrics, QueuedRequestMetrics, ScheduledRequestMetrics

KV = 4096
"""Decode KV tokens each of the two engines holds: one goes, so each survivor holds ``2 × KV``."""
SENS = 0.5  # a power of two: ``SLA × SENS`` and ``SLA = post / SENS`` are exact


def decode_model() -> DecodePerfModel:
    model = DecodePerfModel(min_observations=5)
    for n in (8, 32, 64, 128, 256):
        for ctx in (800, 1600):
            model.learn_one(
                {"num_decode_requests": n, "sum_decode_kv_tokens": n * ctx},
                0.010 + 2e-5 * n + 1e-8 * n * ctx,
            )
    return model


def agg_model() -> AggPerfModel:
    model = AggPerfModel(min_observations=5)
    for prefill, kv in ((100, 1000), (200, 3000), (300, 2000), (400, 5000), (500, 4000)):
        model.learn_one(
            {"sum_prefill_tokens": prefill, "sum_decode_kv_tokens": kv},
            0.001 * prefill + 1e-7 * kv + 0.001,
        )
    return model


def engines(running: int = 64, queued: int = 0) -> dict[tuple[str, int], ForwardPassMetrics]:
    fpm = ForwardPassMetrics(
        wall_time=0.02,
        scheduled_requests=ScheduledRequestMetrics(
            num_decode_requests=running, sum_decode_kv_tokens=KV
        ),
        queued_requests=QueuedRequestMetrics(num_decode_requests=queued),
    )
    return {("w0", 0): fpm, ("w1", 0): fpm}


def decode_consolidation(*, itl_sla_ms: float = 1000.0, max_kv_tokens: int = 1_000_000) -> str:
    """The reason of the reference's decode rule for the two engines (2 → 1: ``c = 2``)."""
    return sla_decode_proposal(
        decode_model(),
        engines(),
        2,
        itl_sla_ms=itl_sla_ms,
        sensitivity=SENS,
        rule="consolidation",
        max_kv_tokens=max_kv_tokens,
        accept_length=1.0,
        min_endpoint=1,
    ).reason


def agg_itl_reason(fpms: dict[tuple[str, int], ForwardPassMetrics], max_num_seqs: int) -> str:
    """The reason of the queue-aware agg ITL rule for ``fpms`` (one engine goes), each engine
    holding ``max_num_seqs`` batch slots."""
    ttft, itl = sla_agg_proposals(
        agg_model(),
        fpms,
        len(fpms),
        max_num_batched_tokens=None,
        ttft_sla_ms=1000.0,
        itl_sla_ms=1000.0,
        sensitivity=SENS,
        rule="consolidation",
        max_kv_tokens=1_000_000,
        kv_hit_rate=None,
        accept_length=1.0,
        min_endpoint=1,
        max_num_seqs=max_num_seqs,
        queue_aware=True,
    )
    assert ttft is None  # no max_num_batched_tokens: the ITL rule alone decides
    return itl.reason


def test_an_estimate_equal_to_the_sla_does_not_scale_up():
    # §4.5/§4.6: scale up only if ALL estimates are > SLA
    hold = ScaleDownCheck(False, False)
    assert sla_step([64.0, 64.0], 64.0, 2, 1, hold).reason == "no_change"
    above = math.nextafter(64.0, math.inf)
    assert sla_step([above, above], 64.0, 2, 1, hold).reason == "scale_up"


def test_a_survivor_kv_equal_to_the_cache_is_refused():
    # §4.6 (1): post_kv = int(KV × 2) = 8192 >= max_kv_tokens refuses
    assert decode_consolidation(max_kv_tokens=2 * KV) == "scale_down_refused_consolidation"
    assert decode_consolidation(max_kv_tokens=2 * KV + 1) == "scale_down"


def test_a_survivor_itl_equal_to_sla_times_sensitivity_is_refused():
    # §4.6 (2): refuse if post_itl_ms >= itl_sla × sens. The survivor's predicted ITL, in ms,
    # as the rule computes it (accept length 1); SLA = post / 0.5 makes SLA × 0.5 == post.
    post_s = decode_model().estimate_next_itl(2 * KV, 0)
    assert post_s is not None
    tie_sla_ms = post_s * 1000.0 / SENS
    assert tie_sla_ms * SENS == post_s * 1000.0
    assert decode_consolidation(itl_sla_ms=tie_sla_ms) == "scale_down_refused_consolidation"
    assert decode_consolidation(itl_sla_ms=math.nextafter(tie_sla_ms, math.inf)) == "scale_down"


def test_a_survivor_filling_exactly_its_batch_slots_may_scale_down():
    # Ours (queue-aware): the survivors' decode requests, running + queued, × c must fit
    # max_num_seqs; exactly filling the slots fits. 48 running + 16 queued → ceil(64 × 2) = 128.
    def itl_reason(max_num_seqs: int) -> str:
        return agg_itl_reason(engines(running=48, queued=16), max_num_seqs)

    assert itl_reason(128) == "scale_down"
    assert itl_reason(127) == "scale_down_refused_consolidation"


def test_a_survivor_needing_half_a_batch_slot_more_than_it_has_is_refused():
    # protects: a survivor's share of requests is rounded UP (a half request still takes a
    # slot): 3 → 2 engines, c = 1.5, 4 running + 1 queued each → ceil(5 × 1.5) = 8 slots
    fpm = ForwardPassMetrics(
        wall_time=0.02,
        scheduled_requests=ScheduledRequestMetrics(num_decode_requests=4, sum_decode_kv_tokens=KV),
        queued_requests=QueuedRequestMetrics(num_decode_requests=1),
    )

    def itl_reason(max_num_seqs: int) -> str:
        return agg_itl_reason({(f"w{i}", 0): fpm for i in range(3)}, max_num_seqs)

    assert itl_reason(7) == "scale_down_refused_consolidation"
    assert itl_reason(8) == "scale_down"


def test_an_estimate_equal_to_sla_times_sensitivity_does_not_scale_down():
    # protects: the flat rule (§4.5) scales down only when every estimate is strictly below
    # SLA × sensitivity; 64 × 0.5 = 32 exactly
    assert flat_scale_down([32.0, 32.0], 64.0, SENS) == ScaleDownCheck(False, False)
    below = math.nextafter(32.0, 0.0)
    assert flat_scale_down([below, below], 64.0, SENS) == ScaleDownCheck(True, False)
