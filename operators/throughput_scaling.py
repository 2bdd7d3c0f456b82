"""Throughput-based scaling: replicas needed for the forecast demand (reference spec §5.3–§5.5).

``demand_rps = predicted num_req / window seconds``; each role's capacity comes from its perf
model's best engine rate under the SLA, and ``replicas = max(ceil(demand / engine_rps),
min_endpoint)``. Current-tree semantics: no latency-ratio SLA floor (PR #11624) — an engine that
cannot meet the SLA even alone is reported (``latency_ms`` above the SLA) but does not multiply
replicas. Prefix-cache hits discount prefill compute only (ISL × (1 − hit), hit clamped to
[0, 0.95]); decode KV residency always uses the full ISL.

Optional distribution-aware sizing (ours, off by default): with ``capacity_isl_quantile`` /
``capacity_osl_quantile`` set, :func:`sizing_lengths` scales the forecast mean ISL/OSL by the
quantile-to-mean ratio of the latest observed window, so capacity is sized for long requests
rather than the average one. A window without that quantile (traffic read from Prometheus
carries none) sizes for the mean.

Zero forecast demand (ours, ``zero_demand_to_min_endpoint``): :func:`idle_capacity` sizes a
role at its minimum endpoint count even when the perf model cannot answer — as it cannot for
the zero ISL/OSL forecast of a deployment idle since it started.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from operators.perf import (
    AggPerfModel,
    DecodePerfModel,
    PrefillPerfModel,
    clamp_kv_hit_rate,
)
from schemas import TrafficObservation
from schemas.events import MAX_REQUEST_TOKENS, quantile_ceiling, quantile_key


@dataclass(frozen=True)
class Capacity:
    """Replicas one role needs (``None`` = the perf model cannot answer yet) and the engine
    rate and latency behind it (latency in ms: TTFT for prefill/agg, ITL for decode).

    >>> class Engine:  # a perf model whose engine serves 2 req/s at 180 ms TTFT
    ...     def find_best_engine_prefill_rps(self, sla_ms, isl, max_tokens=None, max_reqs=None):
    ...         return 2.0, 180.0
    >>> prefill_capacity(Engine(), 5.0, 3000, kv_hit_rate=None, ttft_sla_ms=500,
    ...                  max_num_batched_tokens=None, min_endpoint=1)  # 5 req/s demand
    Capacity(replicas=3, engine_rps=2.0, latency_ms=180.0)
    """

    replicas: int | None
    engine_rps: float | None = None
    latency_ms: float | None = None


NOT_READY = Capacity(None)


def replicas_for(demand_rps: float, engine_rps: float, min_endpoint: int) -> int:
    """``max(ceil(demand / engine_rps), min_endpoint)``.

    >>> replicas_for(100 / 60, 0.998, 1)
    2
    >>> replicas_for(0.0, 1.0, 3)
    3
    """
    return max(math.ceil(demand_rps / engine_rps), min_endpoint)


def idle_capacity(capacity: Capacity, min_endpoint: int) -> Capacity:
    """Zero demand needs ``min_endpoint`` replicas whatever the engine sustains: ``capacity``
    (already ``min_endpoint`` when the model answered) or, when it could not answer, the
    endpoint floor without an engine rate.

    >>> idle_capacity(NOT_READY, 2)
    Capacity(replicas=2, engine_rps=None, latency_ms=None)
    >>> idle_capacity(Capacity(1, 0.5, 40.0), 1)
    Capacity(replicas=1, engine_rps=0.5, latency_ms=40.0)
    """
    return capacity if capacity.replicas is not None else Capacity(min_endpoint)


def prefill_capacity(
    model: PrefillPerfModel,
    demand_rps: float,
    isl: float,
    *,
    kv_hit_rate: float | None,
    ttft_sla_ms: float,
    max_num_batched_tokens: int | None,
    min_endpoint: int,
    max_batch_requests: int | None = None,
) -> Capacity:
    """Prefill replicas: the engine's rate at the hit-discounted ISL (with
    ``max_batch_requests``, ours: prompts batched into one pass, see
    ``PrefillPerfModel.find_best_engine_prefill_rps``)."""
    effective_isl = isl * (1.0 - clamp_kv_hit_rate(kv_hit_rate))
    rps, ttft_ms = model.find_best_engine_prefill_rps(
        ttft_sla_ms, effective_isl, max_num_batched_tokens, max_batch_requests
    )
    if not rps > 0:
        return NOT_READY
    return Capacity(replicas_for(demand_rps, rps, min_endpoint), rps, ttft_ms)


def decode_capacity(
    model: DecodePerfModel,
    demand_rps: float,
    isl: float,
    osl: float,
    *,
    itl_sla_ms: float,
    max_kv_tokens: int | None,
    max_num_seqs: int | None,
    accept_length: float,
    min_endpoint: int,
) -> Capacity:
    """Decode replicas: average KV per request over its lifetime is ``isl + osl/2``."""
    rps, itl_ms = model.find_best_engine_decode_rps(
        itl_sla_ms,
        isl + osl / 2,
        osl,
        max_kv_tokens=max_kv_tokens,
        max_num_seqs=max_num_seqs,
        accept_length=accept_length,
    )
    if not rps > 0:
        return NOT_READY
    return Capacity(replicas_for(demand_rps, rps, min_endpoint), rps, itl_ms)


def agg_capacity(
    model: AggPerfModel,
    demand_rps: float,
    isl: float,
    osl: float,
    *,
    max_num_batched_tokens: int | None,
    ttft_sla_ms: float,
    itl_sla_ms: float,
    max_kv_tokens: int | None,
    max_num_seqs: int | None,
    kv_hit_rate: float | None,
    accept_length: float,
    min_endpoint: int,
) -> Capacity:
    """Aggregated replicas; needs ``max_num_batched_tokens`` (chunked prefill budget)."""
    if not max_num_batched_tokens:
        return NOT_READY
    rps, ttft_ms, _itl_ms = model.find_best_engine_agg_rps(
        isl,
        osl,
        max_num_batched_tokens,
        ttft_sla_ms,
        itl_sla_ms,
        max_kv_tokens=max_kv_tokens,
        max_num_seqs=max_num_seqs,
        kv_hit_rate=kv_hit_rate,
        accept_length=accept_length,
    )
    if not rps > 0:
        return NOT_READY
    return Capacity(replicas_for(demand_rps, rps, min_endpoint), rps, ttft_ms)


def _quantile_ratio(quantiles: dict[str, float] | None, mean: float, q: float | None) -> float:
    """The window's ``q``-quantile over its mean, at most ``1 / (1 - q)``: no quantile of
    non-negative lengths exceeds ``mean / (1 - q)`` (``schemas.events.quantile_ceiling``).
    Traffic events above it are refused; the cap also holds for observations built inside,
    so a mean of 1e-300 with a p99 of 2**27 cannot size an infinite request.

    >>> _quantile_ratio({"p99": 2.0**27}, 1e-300, 0.99) <= 100.0
    True
    """
    if q is None or not quantiles or not mean > 0:
        return 1.0
    value = quantiles.get(quantile_key(q))
    # a zero-length quantile (most requests cancelled before a token) sizes no request: the
    # perf models answer "not ready" for it, so it counts as missing (the mean)
    if value is None or not math.isfinite(value) or value <= 0:
        return 1.0
    return min(value, quantile_ceiling(mean, q)) / mean


def sizing_lengths(
    isl: float,
    osl: float,
    shape: TrafficObservation | None,
    *,
    isl_quantile: float | None,
    osl_quantile: float | None,
) -> tuple[float, float]:
    """ISL/OSL to size capacity for: the forecast means, or with a quantile configured, the
    means scaled by the latest window's quantile/mean ratio (unchanged — the mean — when the
    window carries no such quantile, as traffic read from Prometheus never does, or a zero one).
    Never above ``MAX_REQUEST_TOKENS``, the longest request an input may report: neither a
    forecast nor a ratio can ask for capacity no request needs.

    >>> shape = TrafficObservation(duration_s=60, num_req=10, isl=1000, osl=100,
    ...                            isl_quantiles={"p90": 3000}, osl_quantiles={"p90": 150})
    >>> sizing_lengths(1200, 120, shape, isl_quantile=0.9, osl_quantile=None)
    (3600.0, 120.0)
    >>> sizing_lengths(1200, 120, shape, isl_quantile=0.99, osl_quantile=0.9)
    (1200.0, 180.0)
    """
    isl_ratio = osl_ratio = 1.0
    if shape is not None:
        isl_ratio = _quantile_ratio(shape.isl_quantiles, shape.isl, isl_quantile)
        osl_ratio = _quantile_ratio(shape.osl_quantiles, shape.osl, osl_quantile)
    return min(isl * isl_ratio, MAX_REQUEST_TOKENS), min(osl * osl_ratio, MAX_REQUEST_TOKENS)
