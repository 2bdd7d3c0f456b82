"""Bootstrap the perf models from a pre-deployment profile (reference spec §6.3).

Each profiled point becomes one synthetic ForwardPassMetrics, so a profile and live engines feed
the models through the same intake (``load_benchmark_fpms``):

* prefill point → one request of ``int(isl)`` prompt tokens, ``wall_time = ttft_ms / 1000``;
* decode point → ``sum_decode_kv_tokens = round(kv_usage * max_kv_tokens)``,
  ``num_decode_requests = max(1, round(kv / context_length))`` (1 when the context length is 0),
  ``wall_time = itl_ms / 1000``. A decode point is one forward pass, so it is held to the
  plausibility ceilings every admitted FPM is (a context of 1 token at a huge KV would count
  billions of requests in one batch); a prefill point is a whole prompt's TTFT, which chunked
  prefill spreads over many passes, so its wall time is not.

``round`` is Python's (half to even), as in the reference. Pure: takes the parsed profile
(``connectors.profiles.load_profile`` reads it from disk).

Self-benchmark FPMs (spec §6.3 priority 1, a worker's ``get_perf_metrics`` answer or a file of
it): :func:`benchmark_fpms` takes the parsed ``{"results": [{"point": {"point_type": ...},
"fpms": [...]}]}`` document and keeps the FPMs with ``wall_time > 0`` per role. They come from
outside, so each is held to the plausibility ceilings every admitted FPM is
(:func:`schemas.fpm.implausibility`); a pass above them is refused, as a malformed one is.

Ours (``PlannerConfig.bootstrap_within_engine_limits``): a profile sweeps far past what the
deployed engine can run in one forward pass (decode batches of ~1 600 requests on an engine
with ``max_num_seqs = 256``; 16 k-token prompts on an engine that prefills 8 k tokens per pass).
Those points stay in the bucketed sample store for good (live samples never reach their
buckets) and bend the linear fit where the engine actually runs: on the shipped H200 profile
the decode model under-predicts a full 256-request batch by ~19 % and the prefill model small
chunks by ~20 %. :func:`within_engine_limits` says which bootstrap FPMs an engine could have
produced; the planner drops the others once the capabilities are known, but never so many that
a perf model is left fewer than ``load_min_observations`` samples (then no model before live
data at all, spec §6): it keeps the dropped points nearest the limits by
:func:`limit_overshoot` (e.g. with ``max_num_batched_tokens = 2048`` only 2 of the shipped 17
prefill points fit, and the prompts of 2 134 to 4 168 tokens stay with them).

A self-benchmark pass is a real forward pass, so it is judged as a live one is: by the
scheduler limits only. The KV rule is for profile points alone (a real pass may count more KV
than the engine holds under prefix caching, see :mod:`operators.engine_limits`); a bootstrap FPM
is a profile point when its ``worker_id`` is :data:`BOOTSTRAP_WORKER_ID`.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from operators.engine_limits import engine_limit_breach
from schemas import (
    EngineCapabilities,
    ForwardPassMetrics,
    Role,
    ScheduledRequestMetrics,
    describe_validation_error,
    fpm_to_row,
)
from schemas.fpm import implausibility
from schemas.profile import DecodeProfile, PerformanceProfile, PrefillProfile

BOOTSTRAP_WORKER_ID = "profile"
"""``worker_id`` of the synthetic FPMs (``counter_id`` is the point's index); it marks them as
profile points (:func:`from_profile`)."""


def from_profile(fpm: ForwardPassMetrics) -> bool:
    """Whether ``fpm`` was computed from a profile (not a pass an engine measured).

    >>> from_profile(ForwardPassMetrics(worker_id=BOOTSTRAP_WORKER_ID)), from_profile(
    ...     ForwardPassMetrics(worker_id="decode-0"))
    (True, False)
    """
    return fpm.worker_id == BOOTSTRAP_WORKER_ID


def profile_to_fpms(
    profile: PerformanceProfile, source: str | None = None
) -> dict[Role, list[ForwardPassMetrics]]:
    """Synthetic FPMs of both roles (an absent sweep gives an empty list); a point that makes
    no FPM is a ``ValueError`` naming it (after ``source``, the profile's place, if given).

    >>> from schemas.profile import DecodeProfile
    >>> decode = DecodeProfile(x_kv_usage=[0.5], y_context_length=[1000], z_itl=[20.0],
    ...                        z_thpt_per_gpu=[1.0], max_kv_tokens=100_000)
    >>> fpm = profile_to_fpms(PerformanceProfile(decode=decode))["decode"][0]
    >>> fpm.wall_time, fpm.scheduled_requests.num_decode_requests
    (0.02, 50)
    """
    try:
        return {
            "prefill": prefill_fpms(profile.prefill) if profile.prefill is not None else [],
            "decode": decode_fpms(profile.decode) if profile.decode is not None else [],
        }
    except ValueError as exc:
        if source is None:
            raise
        raise ValueError(f"{source}: {exc}") from None


def prefill_fpms(prefill: PrefillProfile) -> list[ForwardPassMetrics]:
    """One single-request prefill FPM per profiled ISL."""
    out = []
    for i, (isl, ttft_ms) in enumerate(zip(prefill.prefill_isl, prefill.prefill_ttft, strict=True)):
        _check_latency("prefill_ttft", i, ttft_ms)
        out.append(
            ForwardPassMetrics(
                worker_id=BOOTSTRAP_WORKER_ID,
                counter_id=i,
                wall_time=ttft_ms / 1000.0,
                scheduled_requests=ScheduledRequestMetrics(
                    num_prefill_requests=1, sum_prefill_tokens=int(isl)
                ),
            )
        )
    return out


def decode_fpms(decode: DecodeProfile) -> list[ForwardPassMetrics]:
    """One decode FPM per profiled (KV usage, context length) point."""
    out = []
    points = zip(decode.x_kv_usage, decode.y_context_length, decode.z_itl, strict=True)
    for i, (kv_usage, context_length, itl_ms) in enumerate(points):
        _check_latency("z_itl", i, itl_ms)
        kv_tokens = round(kv_usage * decode.max_kv_tokens)
        batch = max(1, round(kv_tokens / context_length)) if context_length > 0 else 1
        fpm = ForwardPassMetrics(
            worker_id=BOOTSTRAP_WORKER_ID,
            counter_id=i,
            wall_time=itl_ms / 1000.0,
            scheduled_requests=ScheduledRequestMetrics(
                num_decode_requests=batch, sum_decode_kv_tokens=kv_tokens
            ),
        )
        implausible = implausibility(fpm)
        if implausible is not None:
            raise ValueError(
                f"profile decode point {i} (x_kv_usage {kv_usage:g}, y_context_length "
                f"{context_length:g}, z_itl {itl_ms:g} ms) is no engine's forward pass: "
                f"{implausible}"
            )
        out.append(fpm)
    return out


def benchmark_fpms(
    document: Any, source: str = "self-benchmark"
) -> dict[Role, list[ForwardPassMetrics]]:
    """FPMs of a self-benchmark, per role; idle heartbeats (``wall_time == 0``) are dropped.

    Raises ``ValueError`` naming ``source`` and the place of the first malformed part, or of
    the first pass above the plausibility ceilings (:func:`schemas.fpm.implausibility`).

    >>> doc = {"results": [{"point": {"point_type": "decode"}, "fpms": [
    ...     {"wall_time": 0.02, "scheduled_requests": {"num_decode_requests": 8}},
    ...     {"wall_time": 0.0}]}]}
    >>> {role: len(fpms) for role, fpms in benchmark_fpms(doc).items()}
    {'prefill': 0, 'decode': 1}
    """
    results = document.get("results") if isinstance(document, dict) else None
    if not isinstance(results, list):
        raise ValueError(f"{source}: must be an object with a 'results' list")
    out: dict[Role, list[ForwardPassMetrics]] = {"prefill": [], "decode": []}
    for i, result in enumerate(results):
        point = result.get("point") if isinstance(result, dict) else None
        role = point.get("point_type") if isinstance(point, dict) else None
        if role not in ("prefill", "decode"):
            raise ValueError(
                f"{source}: results[{i}].point_type is {role!r}, not 'prefill' or 'decode'"
            )
        fpms = result.get("fpms")
        if not isinstance(fpms, list):
            raise ValueError(f"{source}: results[{i}].fpms is not a list")
        for j, raw in enumerate(fpms):
            try:
                fpm = ForwardPassMetrics.model_validate(raw)
            except ValidationError as exc:
                reason = describe_validation_error(exc)
                raise ValueError(f"{source}: results[{i}].fpms[{j}]: {reason}") from None
            implausible = implausibility(fpm)
            if implausible is not None:
                raise ValueError(f"{source}: results[{i}].fpms[{j}]: {implausible}")
            if fpm.wall_time > 0:
                out[role].append(fpm)
    return out


def within_engine_limits(fpm: ForwardPassMetrics, caps: EngineCapabilities) -> bool:
    """Whether one forward pass of an engine with these capabilities could look like ``fpm``.

    Scheduled requests at most ``max_num_seqs``, fresh prefill tokens at most
    ``max_num_batched_tokens`` and, for a profile point (:func:`from_profile`), KV tokens held
    at most ``max_kv_tokens``; an unknown limit (``None``) accepts anything.

    >>> caps = EngineCapabilities(max_num_seqs=256, max_num_batched_tokens=8192)
    >>> decode = lambda n: ForwardPassMetrics(scheduled_requests=ScheduledRequestMetrics(
    ...     num_decode_requests=n, sum_decode_kv_tokens=350 * n))
    >>> within_engine_limits(decode(256), caps), within_engine_limits(decode(1049), caps)
    (True, False)
    >>> within_engine_limits(decode(1049), EngineCapabilities())
    True
    """
    return engine_limit_breach(fpm_to_row(0.0, fpm), caps, kv=from_profile(fpm)) is None


def limit_overshoot(fpm: ForwardPassMetrics, caps: EngineCapabilities) -> float:
    """How many times the engine's tightest limit ``fpm`` asks for: the largest of scheduled
    requests / ``max_num_seqs``, fresh prefill tokens / ``max_num_batched_tokens`` and, for a
    profile point, scheduled KV / ``max_kv_tokens`` (0 when no limit is known). Above 1 exactly
    when :func:`within_engine_limits` says no; it ranks the points beyond the limits, nearest
    first, when some must stay.

    >>> caps = EngineCapabilities(max_num_batched_tokens=2048)
    >>> prefill = lambda isl: ForwardPassMetrics(scheduled_requests=ScheduledRequestMetrics(
    ...     num_prefill_requests=1, sum_prefill_tokens=isl))
    >>> limit_overshoot(prefill(1024), caps), limit_overshoot(prefill(5120), caps)
    (0.5, 2.5)
    """
    s = fpm.scheduled_requests
    ratios = [0.0]
    if caps.max_num_seqs:
        ratios.append((s.num_prefill_requests + s.num_decode_requests) / caps.max_num_seqs)
    if caps.max_num_batched_tokens:
        ratios.append(s.sum_prefill_tokens / caps.max_num_batched_tokens)
    if caps.max_kv_tokens and from_profile(fpm):
        kv = s.sum_decode_kv_tokens + s.sum_prefill_kv_tokens + s.sum_prefill_tokens
        ratios.append(kv / caps.max_kv_tokens)
    return max(ratios)


def _check_latency(key: str, index: int, value_ms: float) -> None:
    # A zero latency would turn into an idle heartbeat and be dropped without a word.
    if not value_ms > 0:
        raise ValueError(f"profile {key}[{index}] = {value_ms!r} ms: latencies must be > 0")
