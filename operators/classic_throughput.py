"""Classic (G0 "SLA planner") throughput scaling: profile interpolators + correction factors.

Reference spec §5.2, one call per adjustment interval ``I`` (seconds):

1. skip if any observed metric (``ttft``, ``itl``, ``isl``, ``osl``, ``num_req``,
   ``request_duration``) is missing or NaN — reason ``no_traffic_data``. (This is the
   reference's "never scales down at zero traffic" behaviour: an idle interval has no TTFT.)
2. correction factors (unless ``no_correction``): ``p_corr = ttft / interp_ttft(isl)``;
   ``concurrency = num_req / decode_workers * request_duration / I``;
   ``d_corr = itl / interp_itl(concurrency, isl + osl/2)``.
3. prefill: ``ceil(next_num_req * next_isl / I * min(1, p_corr) / thpt_per_gpu(next_isl) /
   prefill_gpus)`` — the correction can only REDUCE prefill demand.
4. decode: ITL target ``itl_sla / d_corr`` (raw ``itl_sla`` if ``d_corr <= 0``);
   ``ceil(next_num_req * next_osl / I / best_thpt_per_gpu(target, next_isl + next_osl/2) /
   decode_gpus)``.
5. each at least its minimum endpoint.
6. GPU budget: the G0 rule (:func:`g0_budget_clamp`, rounding) or, with
   ``budget_rule="floor"``, the later §8.1 rule (``operators.budget.apply_global_budget``).

Where the reference would divide by zero, this module decides (documented per function):
a non-positive throughput per GPU gives the minimum endpoint; a non-positive or non-finite
interpolated latency, or no decode worker, gives a correction factor of 1.0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from operators.budget import apply_global_budget, check_count
from schemas import ThroughputReason

BudgetRule = Literal["g0", "floor"]


@runtime_checkable
class PrefillCurve(Protocol):
    """What the classic path asks of a prefill profile (``PrefillInterpolator`` is one).

    >>> class FlatPrefill:
    ...     def interpolate_ttft(self, isl): return 80.0
    ...     def interpolate_thpt_per_gpu(self, isl): return 40_000.0
    >>> isinstance(FlatPrefill(), PrefillCurve)
    True
    """

    def interpolate_ttft(self, isl: float) -> float: ...

    def interpolate_thpt_per_gpu(self, isl: float) -> float: ...


@runtime_checkable
class DecodeSurface(Protocol):
    """What the classic path asks of a decode profile (``DecodeInterpolator`` is one).

    >>> class FlatDecode:
    ...     def interpolate_itl(self, concurrency, context_length): return 10.0
    ...     def find_best_throughput_per_gpu(self, itl, context_length): return 1000.0, 10.0, 0.5
    >>> isinstance(FlatDecode(), DecodeSurface)
    True
    """

    def interpolate_itl(self, concurrency: float, context_length: float) -> float: ...

    def find_best_throughput_per_gpu(
        self, itl: float, context_length: float
    ) -> tuple[float, float, float]: ...


class DemandForecast(Protocol):
    """Next interval's predicted request count and mean lengths (a ``TrafficObservation`` and
    the forecaster's ``LoadForecast`` both fit).

    >>> from operators.traffic_intake import LoadForecast
    >>> next_interval: DemandForecast = LoadForecast(num_req=500, isl=3000, osl=150)
    >>> next_interval.num_req * next_interval.isl / 60  # prefill tokens/s over a 60 s interval
    25000.0
    """

    @property
    def num_req(self) -> float: ...

    @property
    def isl(self) -> float: ...

    @property
    def osl(self) -> float: ...


@dataclass(frozen=True)
class IntervalMetrics:
    """What the last interval showed (§5.1): request count, mean ISL/OSL (tokens), mean TTFT
    and ITL (ms) and mean request duration (s). ``None`` = not observed.

    >>> IntervalMetrics(num_req=10, isl=3000, osl=150, ttft_ms=80, itl_ms=10,
    ...                 request_duration_s=2).complete
    True
    >>> IntervalMetrics(num_req=0, isl=0, osl=0, ttft_ms=float("nan"), itl_ms=None,
    ...                 request_duration_s=None).complete
    False
    """

    num_req: float | None
    isl: float | None
    osl: float | None
    ttft_ms: float | None
    itl_ms: float | None
    request_duration_s: float | None

    @property
    def complete(self) -> bool:
        """Every metric present and finite (the reference only checks None/NaN)."""
        values = (
            self.num_req,
            self.isl,
            self.osl,
            self.ttft_ms,
            self.itl_ms,
            self.request_duration_s,
        )
        return all(v is not None and math.isfinite(v) for v in values)

    def _values(self) -> tuple[float, float, float, float, float, float]:
        """``(num_req, isl, osl, ttft_ms, itl_ms, request_duration_s)``; must be complete."""
        if not self.complete:
            raise ValueError(f"the interval's metrics are incomplete: {self}")
        return (
            float(self.num_req),  # type: ignore[arg-type]
            float(self.isl),  # type: ignore[arg-type]
            float(self.osl),  # type: ignore[arg-type]
            float(self.ttft_ms),  # type: ignore[arg-type]
            float(self.itl_ms),  # type: ignore[arg-type]
            float(self.request_duration_s),  # type: ignore[arg-type]
        )


@dataclass(frozen=True)
class CorrectionFactors:
    """Observed over interpolated latency: ``prefill`` (TTFT) and ``decode`` (ITL).

    >>> NO_CORRECTION
    CorrectionFactors(prefill=1.0, decode=1.0)
    """

    prefill: float
    decode: float


NO_CORRECTION = CorrectionFactors(1.0, 1.0)
"""Factors of a deployment running exactly like its profile (and of ``no_correction``)."""


def _ratio_or_one(observed: float, expected: float) -> float:
    if not (math.isfinite(expected) and expected > 0):
        return 1.0
    return observed / expected


def correction_factors(
    observed: IntervalMetrics,
    prefill: PrefillCurve,
    decode: DecodeSurface,
    *,
    num_decode_workers: int,
    interval_s: float,
) -> CorrectionFactors:
    """Step 2: how far the live fleet is from the profile.

    ``p_corr = ttft / prefill.interpolate_ttft(isl)``; ``d_corr = itl /
    decode.interpolate_itl(num_req / num_decode_workers * request_duration / interval_s,
    isl + osl / 2)``. A factor is 1.0 where it cannot be formed (no decode worker, or the
    profile's latency is not a positive number). ``observed`` must be :attr:`complete`.

    >>> from operators.interpolation import PrefillInterpolator
    >>> from schemas.profile import PrefillProfile
    >>> prefill = PrefillInterpolator(PrefillProfile(prefill_isl=[1000, 2000, 3000, 4000],
    ...     prefill_ttft=[20, 40, 60, 80], prefill_thpt_per_gpu=[9000, 9000, 9000, 9000]))
    >>> class FlatDecode:  # ITL 10 ms at any load
    ...     def interpolate_itl(self, concurrency, context_length): return 10.0
    ...     def find_best_throughput_per_gpu(self, itl, context_length): return 900.0, 10.0, 0.5
    >>> observed = IntervalMetrics(num_req=600, isl=3000, osl=150, ttft_ms=90.0, itl_ms=12.5,
    ...                            request_duration_s=4.0)
    >>> f = correction_factors(observed, prefill, FlatDecode(), num_decode_workers=2,
    ...                        interval_s=60)
    >>> round(f.prefill, 9), f.decode
    (1.5, 1.25)
    """
    num_req, isl, osl, ttft, itl, duration = observed._values()
    if not (math.isfinite(interval_s) and interval_s > 0):
        raise ValueError(f"interval_s must be finite and > 0, got {interval_s!r}")
    p_corr = _ratio_or_one(ttft, prefill.interpolate_ttft(isl))
    if num_decode_workers <= 0:
        return CorrectionFactors(p_corr, 1.0)
    concurrency = num_req / num_decode_workers * duration / interval_s
    d_corr = _ratio_or_one(itl, decode.interpolate_itl(concurrency, isl + osl / 2))
    return CorrectionFactors(p_corr, d_corr)


@dataclass(frozen=True)
class RoleSizing:
    """One role's step-3/4 numbers: ``replicas`` (already at least the minimum endpoint), the
    token demand (tokens/s, after correction), the profile's throughput per GPU behind it and,
    for decode, the ITL target the throughput was looked up at (ms).

    >>> prefill = RoleSizing(replicas=2, demand_tokens_per_s=1250.0, thpt_per_gpu=1000.0)
    >>> prefill.replicas, prefill.itl_target_ms is None
    (2, True)
    """

    replicas: int
    demand_tokens_per_s: float
    thpt_per_gpu: float
    itl_target_ms: float | None = None


def _replicas(
    demand_tokens_per_s: float, thpt_per_gpu: float, gpus_per_replica: int, min_endpoint: int
) -> int:
    if not thpt_per_gpu > 0:  # the reference: prefill → min_endpoint; decode would crash at 0
        return min_endpoint
    return max(math.ceil(demand_tokens_per_s / thpt_per_gpu / gpus_per_replica), min_endpoint)


def size_prefill(
    forecast: DemandForecast,
    prefill: PrefillCurve,
    *,
    interval_s: float,
    correction: float = 1.0,
    gpus_per_replica: int = 1,
    min_endpoint: int = 1,
) -> RoleSizing:
    """Steps 3 and 5 for prefill: ``max(ceil(num_req * isl / I * min(1, correction) /
    thpt_per_gpu(isl) / gpus), min_endpoint)``; ``thpt_per_gpu <= 0`` → ``min_endpoint``.

    >>> from schemas import TrafficObservation
    >>> class FlatPrefill:
    ...     def interpolate_ttft(self, isl): return 80.0
    ...     def interpolate_thpt_per_gpu(self, isl): return 10_000.0
    >>> next_interval = TrafficObservation(duration_s=60, num_req=500, isl=3000, osl=150)
    >>> size_prefill(next_interval, FlatPrefill(), interval_s=60).replicas  # 25 000 tok/s
    3
    >>> size_prefill(next_interval, FlatPrefill(), interval_s=60, correction=0.5).replicas
    2
    """
    demand = forecast.num_req * forecast.isl / interval_s * min(1.0, correction)
    thpt = prefill.interpolate_thpt_per_gpu(forecast.isl)
    return RoleSizing(_replicas(demand, thpt, gpus_per_replica, min_endpoint), demand, thpt)


def size_decode(
    forecast: DemandForecast,
    decode: DecodeSurface,
    *,
    interval_s: float,
    itl_sla_ms: float,
    correction: float = 1.0,
    gpus_per_replica: int = 1,
    min_endpoint: int = 1,
) -> RoleSizing:
    """Steps 4 and 5 for decode: ITL target ``itl_sla / correction`` (``itl_sla`` when the
    correction is <= 0), best throughput per GPU at that target and context ``isl + osl / 2``,
    ``max(ceil(num_req * osl / I / thpt / gpus), min_endpoint)``; ``thpt <= 0`` →
    ``min_endpoint``.

    >>> from schemas import TrafficObservation
    >>> class FlatDecode:
    ...     def interpolate_itl(self, concurrency, context_length): return 10.0
    ...     def find_best_throughput_per_gpu(self, itl, context_length): return 1000.0, itl, 0.5
    >>> next_interval = TrafficObservation(duration_s=60, num_req=500, isl=3000, osl=150)
    >>> sizing = size_decode(next_interval, FlatDecode(), interval_s=60, itl_sla_ms=10)
    >>> sizing.replicas, sizing.demand_tokens_per_s  # 1250 tok/s over 1000 per GPU
    (2, 1250.0)
    """
    target = itl_sla_ms / correction if correction > 0 else itl_sla_ms
    thpt, _, _ = decode.find_best_throughput_per_gpu(target, forecast.isl + forecast.osl / 2)
    demand = forecast.num_req * forecast.osl / interval_s
    return RoleSizing(_replicas(demand, thpt, gpus_per_replica, min_endpoint), demand, thpt, target)


def g0_budget_clamp(
    num_prefill: int,
    num_decode: int,
    prefill_gpus: int,
    decode_gpus: int,
    max_gpu_budget: int,
    prefill_min_endpoint: int,
    decode_min_endpoint: int,
) -> tuple[int, int]:
    """Step 6, the G0 rule: if ``total = p*pg + d*dg`` exceeds the budget,
    ``p' = max(p_min, round(p * budget / total))`` and
    ``d' = max(d_min, round((budget - p' * pg) / dg))`` (Python ``round``: half to even).

    Differs from the later §8.1 rule (``operators.budget.apply_global_budget``, floors): the
    rounding can land ABOVE the budget (``(3, 3)`` at 2 GPUs each under 5 → ``(1, 2)``, 6 GPUs;
    §8.1 gives ``(1, 1)``); prefill is not capped to leave room for decode's minimum; and when
    the minimum endpoints alone exceed the budget G0 returns them (§8.1 returns ``(0, 0)``).
    A negative budget disables the clamp (as in §8.1; G0 itself had no "off" value).

    >>> g0_budget_clamp(1, 5, 1, 1, 3, 1, 1)  # scale 0.5: round(0.5) = 0 → 1, decode the rest
    (1, 2)
    >>> g0_budget_clamp(3, 3, 2, 2, 5, 1, 1)  # over budget after rounding
    (1, 2)
    >>> g0_budget_clamp(4, 4, 1, 1, -1, 1, 1)
    (4, 4)
    """
    for name, value, minimum in (
        ("num_prefill", num_prefill, 0),
        ("num_decode", num_decode, 0),
        ("prefill_gpus", prefill_gpus, 1),
        ("decode_gpus", decode_gpus, 1),
        ("prefill_min_endpoint", prefill_min_endpoint, 0),
        ("decode_min_endpoint", decode_min_endpoint, 0),
    ):
        check_count(name, value, minimum)
    check_count("max_gpu_budget", max_gpu_budget, None)
    p, d, p_gpus, d_gpus = int(num_prefill), int(num_decode), int(prefill_gpus), int(decode_gpus)
    p_min, d_min, budget = int(prefill_min_endpoint), int(decode_min_endpoint), int(max_gpu_budget)
    total = p * p_gpus + d * d_gpus
    if budget < 0 or total <= budget:
        return p, d
    scale = budget / total
    prefill = max(p_min, round(p * scale))
    decode = max(d_min, round((budget - prefill * p_gpus) / d_gpus))
    return prefill, decode


@dataclass(frozen=True)
class ClassicSettings:
    """Parameters of the classic path (G0 defaults: interval 180 s, ITL SLA 50 ms, 1 GPU per
    replica, minimum endpoint 1, budget 8 GPUs; ``budget_rule="floor"`` = the §8.1 clamp).

    >>> ClassicSettings(interval_s=60, itl_sla_ms=10, max_gpu_budget=10).budget_rule
    'g0'
    """

    interval_s: float = 180.0
    itl_sla_ms: float = 50.0
    prefill_gpus: int = 1
    decode_gpus: int = 1
    prefill_min_endpoint: int = 1
    decode_min_endpoint: int = 1
    max_gpu_budget: int = 8
    no_correction: bool = False
    budget_rule: BudgetRule = "g0"

    def __post_init__(self) -> None:
        for name, value in (("interval_s", self.interval_s), ("itl_sla_ms", self.itl_sla_ms)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be finite and > 0, got {value!r}")
        check_count("prefill_gpus", self.prefill_gpus, 1)
        check_count("decode_gpus", self.decode_gpus, 1)
        check_count("prefill_min_endpoint", self.prefill_min_endpoint, 0)
        check_count("decode_min_endpoint", self.decode_min_endpoint, 0)
        check_count("max_gpu_budget", self.max_gpu_budget, None)
        if self.budget_rule not in ("g0", "floor"):
            raise ValueError(f"budget_rule must be 'g0' or 'floor', got {self.budget_rule!r}")


@dataclass(frozen=True)
class ClassicPlan:
    """One interval's outcome: targets (``None`` when skipped), the reason
    (``scale``, ``no_traffic_data`` or ``predict_failed``) and the numbers behind it.

    >>> ClassicPlan(None, None, "no_traffic_data").correction is None
    True
    """

    num_prefill: int | None
    num_decode: int | None
    reason: ThroughputReason
    correction: CorrectionFactors | None = None
    prefill: RoleSizing | None = None
    decode: RoleSizing | None = None


def plan_interval(
    observed: IntervalMetrics,
    forecast: DemandForecast,
    prefill: PrefillCurve,
    decode: DecodeSurface,
    *,
    num_decode_workers: int,
    settings: ClassicSettings,
) -> ClassicPlan:
    """Steps 1–6 for a disaggregated deployment: (prefill, decode) replicas for the next
    interval. ``num_decode_workers`` is the decode count the observation was made with.
    A forecast that is negative or not finite gives ``predict_failed`` and no targets.

    >>> from schemas import TrafficObservation
    >>> class FlatPrefill:
    ...     def interpolate_ttft(self, isl): return 80.0
    ...     def interpolate_thpt_per_gpu(self, isl): return 40_000.0
    >>> class FlatDecode:
    ...     def interpolate_itl(self, concurrency, context_length): return 10.0
    ...     def find_best_throughput_per_gpu(self, itl, context_length): return 1000.0, itl, 0.5
    >>> observed = IntervalMetrics(num_req=500, isl=3000, osl=150, ttft_ms=80, itl_ms=10,
    ...                            request_duration_s=3)
    >>> forecast = TrafficObservation(duration_s=60, num_req=500, isl=3000, osl=150)
    >>> plan = plan_interval(observed, forecast, FlatPrefill(), FlatDecode(),
    ...     num_decode_workers=1, settings=ClassicSettings(interval_s=60, itl_sla_ms=10,
    ...                                                    max_gpu_budget=10))
    >>> plan.num_prefill, plan.num_decode, plan.reason
    (1, 2, 'scale')
    """
    if not observed.complete:
        return ClassicPlan(None, None, "no_traffic_data")
    if not all(math.isfinite(v) and v >= 0 for v in (forecast.num_req, forecast.isl, forecast.osl)):
        return ClassicPlan(None, None, "predict_failed")
    s = settings
    factors = (
        NO_CORRECTION
        if s.no_correction
        else correction_factors(
            observed,
            prefill,
            decode,
            num_decode_workers=num_decode_workers,
            interval_s=s.interval_s,
        )
    )
    p = size_prefill(
        forecast,
        prefill,
        interval_s=s.interval_s,
        correction=factors.prefill,
        gpus_per_replica=s.prefill_gpus,
        min_endpoint=s.prefill_min_endpoint,
    )
    d = size_decode(
        forecast,
        decode,
        interval_s=s.interval_s,
        itl_sla_ms=s.itl_sla_ms,
        correction=factors.decode,
        gpus_per_replica=s.decode_gpus,
        min_endpoint=s.decode_min_endpoint,
    )
    clamp = g0_budget_clamp if s.budget_rule == "g0" else apply_global_budget
    num_p, num_d = clamp(
        p.replicas,
        d.replicas,
        s.prefill_gpus,
        s.decode_gpus,
        s.max_gpu_budget,
        s.prefill_min_endpoint,
        s.decode_min_endpoint,
    )
    return ClassicPlan(num_p, num_d, "scale", factors, p, d)


def safe_throughput(
    num_prefill: int,
    num_decode: int,
    forecast: DemandForecast,
    prefill: PrefillCurve,
    decode: DecodeSurface,
    *,
    ttft_sla_ms: float,
    itl_sla_ms: float,
) -> tuple[float, float]:
    """§6.4 (G0 dry run): tokens/s the planned fleet serves within the SLAs —
    ``num_p * thpt_per_gpu(isl)`` if ``interp_ttft(isl) <= ttft_sla`` else 0, and
    ``num_d * best_thpt`` if the found ITL <= ``itl_sla`` else 0. As in the reference, the
    per-GPU throughput is multiplied by replicas, not GPUs (exact for 1 GPU per replica).

    >>> class FlatPrefill:
    ...     def interpolate_ttft(self, isl): return 80.0
    ...     def interpolate_thpt_per_gpu(self, isl): return 40_000.0
    >>> class FlatDecode:
    ...     def interpolate_itl(self, concurrency, context_length): return 10.0
    ...     def find_best_throughput_per_gpu(self, itl, context_length): return 1000.0, 10.0, 0.5
    >>> from schemas import TrafficObservation
    >>> forecast = TrafficObservation(duration_s=60, num_req=500, isl=3000, osl=150)
    >>> safe_throughput(1, 2, forecast, FlatPrefill(), FlatDecode(), ttft_sla_ms=80,
    ...                 itl_sla_ms=5)
    (40000.0, 0.0)
    """
    p_ok = prefill.interpolate_ttft(forecast.isl) <= ttft_sla_ms
    safe_p = num_prefill * prefill.interpolate_thpt_per_gpu(forecast.isl) if p_ok else 0.0
    d_thpt, d_itl, _ = decode.find_best_throughput_per_gpu(
        itl_sla_ms, forecast.isl + forecast.osl / 2
    )
    safe_d = num_decode * d_thpt if d_itl <= itl_sla_ms else 0.0
    return float(safe_p), float(safe_d)
