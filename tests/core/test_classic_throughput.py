"""Classic (G0) throughput path: correction factors, replica formulas, G0 vs §8.1 budget
(reference spec §5.2, §6.4) and the legacy acceptance cases of §16.7.

The §16.7 cases stub the interpolators with fixed throughputs; here the stand-ins are small
profile doubles that satisfy the same protocols as the real interpolators (``FlatPrefill``,
``FlatDecode``, and ``LinearDecode`` whose ITL rises with KV usage). Every expected number is
derived by hand in the comment beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from connectors.profiles import load_profile
from operators.budget import apply_global_budget
from operators.classic_throughput import (
    NO_CORRECTION,
    ClassicPlan,
    ClassicSettings,
    CorrectionFactors,
    DecodeSurface,
    IntervalMetrics,
    PrefillCurve,
    correction_factors,
    g0_budget_clamp,
    plan_interval,
    safe_throughput,
    size_decode,
)
from operators.interpolation import DecodeInterpolator, PrefillInterpolator
from operators.traffic_intake import LoadForecast
from schemas import TrafficObservation

SHIPPED = Path(__file__).resolve().parents[1] / "data/profiles/h200_llama3.1-8b-fp8_tp1"

# -- profile doubles ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FlatPrefill:
    """One TTFT and one throughput per GPU at every ISL."""

    ttft_ms: float = 80.0
    thpt_per_gpu: float = 40_000.0

    def interpolate_ttft(self, isl: float) -> float:
        return self.ttft_ms

    def interpolate_thpt_per_gpu(self, isl: float) -> float:
        return self.thpt_per_gpu


@dataclass(frozen=True)
class FlatDecode:
    """One ITL and one best throughput per GPU at every load and context."""

    itl_ms: float = 10.0
    thpt_per_gpu: float = 10_000.0

    def interpolate_itl(self, concurrency: float, context_length: float) -> float:
        return self.itl_ms

    def find_best_throughput_per_gpu(
        self, itl: float, context_length: float
    ) -> tuple[float, float, float]:
        return self.thpt_per_gpu, self.itl_ms, 0.5


@dataclass(frozen=True)
class LinearDecode:
    """ITL = 2 + 16·kv ms with kv = concurrency·ctx / 307 500 (clipped to [0, 1]); the best
    throughput at an ITL target is 8000·kv·3075/ctx tokens/s/GPU (less for longer contexts).
    At the legacy lengths (ctx 3000 + 150/2 = 3075): 10 ms → kv 0.5 → 4000; 5 ms → kv
    0.1875 → 1500."""

    def interpolate_itl(self, concurrency: float, context_length: float) -> float:
        kv = min(max(concurrency * context_length / 307_500, 0.0), 1.0)
        return 2.0 + 16.0 * kv

    def find_best_throughput_per_gpu(
        self, itl: float, context_length: float
    ) -> tuple[float, float, float]:
        kv = min(max((itl - 2.0) / 16.0, 0.0), 1.0)
        return 8000.0 * kv * 3075.0 / context_length, 2.0 + 16.0 * kv, kv


# -- the legacy setting (§16.7) ----------------------------------------------------------------

LEGACY = ClassicSettings(interval_s=60, itl_sla_ms=10, max_gpu_budget=10)
RULES = ("g0", "floor")


def observed(
    num_req: float = 10, *, ttft_ms: float = 80.0, itl_ms: float = 10.0
) -> IntervalMetrics:
    """The interval just seen; TTFT 80 / ITL 10 equal the flat doubles → corrections 1.0."""
    return IntervalMetrics(
        num_req=num_req, isl=3000, osl=150, ttft_ms=ttft_ms, itl_ms=itl_ms, request_duration_s=2
    )


def forecast(num_req: float, isl: float = 3000, osl: float = 150) -> TrafficObservation:
    return TrafficObservation(duration_s=60, num_req=num_req, isl=isl, osl=osl)


def legacy_plan(
    num_req: float,
    *,
    prefill_thpt: float = 40_000.0,
    decode_thpt: float = 10_000.0,
    rule: str = "g0",
    **settings: object,
) -> ClassicPlan:
    return plan_interval(
        observed(num_req),
        forecast(num_req),
        FlatPrefill(thpt_per_gpu=prefill_thpt),
        FlatDecode(thpt_per_gpu=decode_thpt),
        num_decode_workers=1,
        settings=replace(LEGACY, budget_rule=rule, **settings),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("rule", RULES)
def test_low_load_needs_one_of_each(rule: str) -> None:
    # prefill 10·3000/60 = 500 tok/s of 40 000; decode 10·150/60 = 25 tok/s of 10 000
    plan = legacy_plan(10, decode_thpt=10_000, rule=rule)
    assert (plan.num_prefill, plan.num_decode, plan.reason) == (1, 1, "scale")
    assert plan.correction == NO_CORRECTION
    assert plan.prefill is not None and plan.decode is not None
    assert plan.prefill.demand_tokens_per_s == 500.0
    assert plan.decode.demand_tokens_per_s == 25.0


@pytest.mark.parametrize("rule", RULES)
def test_high_load_needs_two_decode(rule: str) -> None:
    # prefill 25 000 / 40 000 → 1; decode 500·150/60 = 1250 tok/s / 1000 → ceil(1.25) = 2
    plan = legacy_plan(500, decode_thpt=1000, rule=rule)
    assert (plan.num_prefill, plan.num_decode) == (1, 2)


@pytest.mark.parametrize("rule", RULES)
def test_budget_three_caps_the_pair(rule: str) -> None:
    # 50 req: prefill 2500/40 000 → 1; decode 125 tok/s / 25 → 5; 6 GPUs > 3.
    # G0: scale 0.5, p = max(1, round(0.5) = 0) = 1, d = round((3 - 1)/1) = 2.
    # §8.1: p = max(1, min((3-1)//1, 1·3//6 = 0)) = 1, d = (3 - 1)//1 = 2.
    plan = legacy_plan(50, decode_thpt=25, rule=rule, max_gpu_budget=3)
    assert plan.decode is not None and plan.decode.replicas == 5
    assert (plan.num_prefill, plan.num_decode) == (1, 2)
    # and when the pair already fits, the budget does nothing
    fits = legacy_plan(50, rule=rule, max_gpu_budget=3)  # decode 125 / 10 000 → 1
    assert (fits.num_prefill, fits.num_decode) == (1, 1)


@pytest.mark.parametrize("rule", RULES)
def test_min_endpoint_two_raises_both(rule: str) -> None:
    plan = legacy_plan(10, rule=rule, prefill_min_endpoint=2, decode_min_endpoint=2)
    assert (plan.num_prefill, plan.num_decode) == (2, 2)


def test_prefill_correction_above_one_acts_like_one() -> None:
    # 500 req at 10 000 tok/s/GPU: 25 000 tok/s → ceil(2.5) = 3; p_corr 0.5 → ceil(1.25) = 2
    def prefill_for(ttft_ms: float) -> ClassicPlan:
        return plan_interval(
            observed(500, ttft_ms=ttft_ms),
            forecast(500),
            FlatPrefill(thpt_per_gpu=10_000),
            FlatDecode(),
            num_decode_workers=1,
            settings=LEGACY,
        )

    slow, exact, fast = prefill_for(200.0), prefill_for(80.0), prefill_for(40.0)
    assert slow.correction is not None and slow.correction.prefill == 2.5
    assert fast.correction is not None and fast.correction.prefill == 0.5
    assert (slow.num_prefill, exact.num_prefill, fast.num_prefill) == (3, 3, 2)
    assert slow.prefill == exact.prefill  # identical sizing, demand included


@pytest.mark.parametrize("d_corr", [0.0, -1.0])
def test_non_positive_decode_correction_uses_the_raw_itl_sla(d_corr: float) -> None:
    # 2000 req: 5000 tok/s. ITL 10 → 4000/GPU → ceil(1.25) = 2; d_corr 2 → ITL 5 → 1500 → 4
    sized = {
        c: size_decode(forecast(2000), LinearDecode(), interval_s=60, itl_sla_ms=10, correction=c)
        for c in (d_corr, 1.0, 2.0)
    }
    assert sized[d_corr] == sized[1.0]
    assert sized[d_corr].itl_target_ms == 10.0
    assert (sized[1.0].replicas, sized[2.0].replicas) == (2, 4)
    assert sized[2.0].itl_target_ms == 5.0
    low = size_decode(forecast(10), LinearDecode(), interval_s=60, itl_sla_ms=10, correction=d_corr)
    assert low.replicas == 1  # 25 tok/s, still at least one


def test_zero_observed_itl_gives_zero_decode_correction_and_the_raw_sla() -> None:
    plan = plan_interval(
        observed(2000, itl_ms=0.0),
        forecast(2000),
        FlatPrefill(),
        LinearDecode(),
        num_decode_workers=1,
        settings=LEGACY,
    )
    assert plan.correction is not None and plan.correction.decode == 0.0
    assert plan.decode is not None and plan.decode.itl_target_ms == 10.0
    assert plan.num_decode == 2


@pytest.mark.parametrize("rule", RULES)
def test_multi_gpu_engines(rule: str) -> None:
    # prefill 1000 tok/s / 40 000 / 2 → 1; decode 50 tok/s / 5000 / 4 → 1; 2 + 4 GPUs ≤ 10
    plan = legacy_plan(20, decode_thpt=5000, rule=rule, prefill_gpus=2, decode_gpus=4)
    assert (plan.num_prefill, plan.num_decode) == (1, 1)


@pytest.mark.parametrize("rule", RULES)
def test_budget_five_with_two_gpu_engines(rule: str) -> None:
    # prefill 100·3000/60 = 5000 / 10 000 / 2 = 0.25 → 1; decode 250 / 1000 / 2 → 1; 4 ≤ 5
    plan = legacy_plan(
        100,
        prefill_thpt=10_000,
        decode_thpt=1000,
        rule=rule,
        max_gpu_budget=5,
        prefill_gpus=2,
        decode_gpus=2,
    )
    assert (plan.num_prefill, plan.num_decode) == (1, 1)


@pytest.mark.parametrize("num_req", [0, 1, 7, 10, 59, 60, 61, 100, 333, 500, 1600, 3200, 4801])
def test_the_old_disagg_harness_formulas(num_req: int) -> None:
    """P = ceil(req·isl/I / thpt_p / gpus_p), D = ceil(req·osl/I / thpt_d(itl, isl + osl/2) /
    gpus_d), both ≥ min_endpoint — with thpt_p = 40 000 and thpt_d(10 ms, 3075) = 4000 by hand.
    (At 1600 and 3200 requests the decode count would differ had the context been isl + osl.)"""
    plan = plan_interval(
        observed(num_req),
        forecast(num_req),
        FlatPrefill(),
        LinearDecode(),
        num_decode_workers=1,
        settings=replace(LEGACY, prefill_gpus=2, max_gpu_budget=-1, no_correction=True),
    )
    expected_p = max(math.ceil(num_req * 3000 / 60 / 40_000 / 2), 1)
    expected_d = max(math.ceil(num_req * 150 / 60 / 4000 / 1), 1)
    assert (plan.num_prefill, plan.num_decode) == (expected_p, expected_d)


# -- correction factors ------------------------------------------------------------------------


def test_correction_factors_from_the_observed_interval() -> None:
    # p: 120 / 80 = 1.5. d: concurrency = 600 / 2 · 10 s / 60 s = 50 requests of 3075 tokens
    # → kv 0.5 → profile ITL 2 + 8 = 10 ms; observed 20 → 2.0
    seen = IntervalMetrics(
        num_req=600, isl=3000, osl=150, ttft_ms=120, itl_ms=20, request_duration_s=10
    )
    factors = correction_factors(
        seen, FlatPrefill(), LinearDecode(), num_decode_workers=2, interval_s=60
    )
    assert factors == CorrectionFactors(prefill=1.5, decode=2.0)
    # one worker carries twice the concurrency: kv 1.0 → 18 ms → 20/18
    one = correction_factors(
        seen, FlatPrefill(), LinearDecode(), num_decode_workers=1, interval_s=60
    )
    assert one.decode == 20 / 18
    # no decode worker: the observed ITL cannot be attributed → 1.0
    none = correction_factors(
        seen, FlatPrefill(), LinearDecode(), num_decode_workers=0, interval_s=60
    )
    assert none == CorrectionFactors(prefill=1.5, decode=1.0)


def test_a_profile_latency_that_is_not_positive_gives_no_correction() -> None:
    seen = observed(10, ttft_ms=120, itl_ms=20)
    for bad in (0.0, -3.0, float("nan")):
        factors = correction_factors(
            seen,
            FlatPrefill(ttft_ms=bad),
            FlatDecode(itl_ms=bad),
            num_decode_workers=1,
            interval_s=60,
        )
        assert factors == NO_CORRECTION


def test_corrections_drive_the_plan_and_the_two_budget_rules_part() -> None:
    # p_corr 1.5 → min(1, 1.5) = 1: 2000·3000/60 = 100 000 / 40 000 → ceil(2.5) = 3.
    # d_corr 2.0 → ITL target 5 ms → 1500 tok/s/GPU: 5000 / 1500 → ceil(3.33) = 4.
    seen = IntervalMetrics(
        num_req=600, isl=3000, osl=150, ttft_ms=120, itl_ms=20, request_duration_s=10
    )

    def plan(**changes: object) -> ClassicPlan:
        return plan_interval(
            seen,
            forecast(2000),
            FlatPrefill(),
            LinearDecode(),
            num_decode_workers=2,
            settings=replace(LEGACY, **changes),  # type: ignore[arg-type]
        )

    assert (plan().num_prefill, plan().num_decode) == (3, 4)  # 7 GPUs ≤ 10
    # budget 6: G0 scale 6/7, p = round(2.57) = 3, d = round(6 - 3) = 3;
    # §8.1: p = min(6 - 1, 3·6 // 7 = 2) = 2, d = 6 - 2 = 4
    assert (plan(max_gpu_budget=6).num_prefill, plan(max_gpu_budget=6).num_decode) == (3, 3)
    floor = plan(max_gpu_budget=6, budget_rule="floor")
    assert (floor.num_prefill, floor.num_decode) == (2, 4)
    # no_correction: ITL 10 → 4000 tok/s/GPU → 2 decode; prefill unchanged (p_corr was ≥ 1)
    uncorrected = plan(no_correction=True)
    assert uncorrected.correction == NO_CORRECTION
    assert (uncorrected.num_prefill, uncorrected.num_decode) == (3, 2)


# -- skipped intervals and bad inputs ----------------------------------------------------------


@pytest.mark.parametrize(
    "field", ["num_req", "isl", "osl", "ttft_ms", "itl_ms", "request_duration_s"]
)
@pytest.mark.parametrize("missing", [None, float("nan"), float("inf")])
def test_an_incomplete_interval_is_skipped(field: str, missing: float | None) -> None:
    seen = replace(observed(500), **{field: missing})
    assert not seen.complete
    plan = plan_interval(
        seen, forecast(500), FlatPrefill(), FlatDecode(), num_decode_workers=1, settings=LEGACY
    )
    assert plan == ClassicPlan(None, None, "no_traffic_data")
    with pytest.raises(ValueError, match="incomplete"):
        correction_factors(seen, FlatPrefill(), FlatDecode(), num_decode_workers=1, interval_s=60)


@pytest.mark.parametrize(
    "bad",
    [
        LoadForecast(num_req=float("nan"), isl=3000, osl=150),
        LoadForecast(num_req=-1.0, isl=3000, osl=150),
        LoadForecast(num_req=10, isl=float("inf"), osl=150),
    ],
)
def test_a_broken_forecast_is_a_failed_prediction(bad: LoadForecast) -> None:
    plan = plan_interval(
        observed(), bad, FlatPrefill(), FlatDecode(), num_decode_workers=1, settings=LEGACY
    )
    assert plan == ClassicPlan(None, None, "predict_failed")


@pytest.mark.parametrize("thpt", [0.0, -5.0, float("nan")])
def test_no_usable_profile_throughput_gives_the_minimum_endpoint(thpt: float) -> None:
    plan = legacy_plan(
        500, prefill_thpt=thpt, decode_thpt=thpt, prefill_min_endpoint=2, decode_min_endpoint=3
    )
    assert (plan.num_prefill, plan.num_decode) == (2, 3)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"interval_s": 0.0}, "interval_s"),
        ({"itl_sla_ms": float("nan")}, "itl_sla_ms"),
        ({"prefill_gpus": 0}, "prefill_gpus"),
        ({"decode_gpus": 1.5}, "decode_gpus"),
        ({"decode_min_endpoint": -1}, "decode_min_endpoint"),
        ({"max_gpu_budget": True}, "max_gpu_budget"),
        ({"budget_rule": "ceil"}, "budget_rule"),
    ],
)
def test_settings_reject_bad_values(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replace(LEGACY, **changes)  # type: ignore[arg-type]


# -- budget: G0 rule vs §8.1 -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "g0", "floor"),
    [
        ((2, 3, 1, 1, 5, 1, 1), (2, 3), (2, 3)),  # fits: untouched
        ((4, 4, 1, 1, -1, 1, 1), (4, 4), (4, 4)),  # disabled
        ((1, 5, 1, 1, 3, 1, 1), (1, 2), (1, 2)),  # round(0.5) = 0 → min 1; decode the rest
        ((5, 5, 1, 1, 5, 1, 1), (2, 3), (2, 3)),  # round(2.5) = 2 (half to even), 5 - 2 = 3
        ((10, 1, 8, 1, 20, 1, 1), (2, 4), (2, 4)),  # both grow decode (§16.1a)
        ((7, 5, 1, 1, 5, 1, 1), (3, 2), (2, 3)),  # round(35/12 = 2.92) = 3 vs floor 2
        ((3, 3, 2, 2, 5, 1, 1), (1, 2), (1, 1)),  # G0: round(1.5) = 2 → 6 GPUs > 5
        ((9, 1, 1, 1, 4, 1, 3), (4, 3), (1, 3)),  # G0 does not leave room for decode's min
        ((4, 4, 2, 2, 6, 2, 2), (2, 2), (0, 0)),  # minimums alone (8) exceed 6
    ],
)
def test_g0_budget_rule_against_the_floor_rule(
    args: tuple[int, int, int, int, int, int, int], g0: tuple[int, int], floor: tuple[int, int]
) -> None:
    assert g0_budget_clamp(*args) == g0
    assert apply_global_budget(*args) == floor


def test_only_the_floor_rule_always_fits_a_feasible_budget() -> None:
    over = []
    for p in range(0, 13):
        for d in range(0, 13):
            for budget in range(4, 21):
                floor_p, floor_d = apply_global_budget(p, d, 2, 2, budget, 1, 1)
                assert 2 * floor_p + 2 * floor_d <= budget
                g0_p, g0_d = g0_budget_clamp(p, d, 2, 2, budget, 1, 1)
                if 2 * g0_p + 2 * g0_d > budget:
                    over.append((p, d, budget))
    assert (3, 3, 5) in over  # the G0 rule's rounding overshoots


def test_numpy_integer_counts_are_accepted_by_both_budget_rules() -> None:
    # One count check (operators.budget.check_count) for both rules: a NumPy integer is an
    # integer to G0 as it is to the §8.1 clamp, and both hand back plain ints.
    args = tuple(np.int64(v) for v in (7, 5, 1, 1, 5, 1, 1))
    g0 = g0_budget_clamp(*args)  # type: ignore[arg-type]
    floor = apply_global_budget(*args)  # type: ignore[arg-type]
    assert (g0, floor) == ((3, 2), (2, 3))
    assert all(type(v) is int for v in (*g0, *floor))
    settings = ClassicSettings(prefill_gpus=np.int64(2))  # type: ignore[arg-type]
    assert settings.prefill_gpus == 2


@pytest.mark.parametrize(
    "args", [(-1, 1, 1, 1, 5, 1, 1), (1, 1, 0, 1, 5, 1, 1), (1, 1, 1, 1, 5.0, 1, 1)]
)
def test_g0_budget_rejects_bad_counts(args: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="must be"):
        g0_budget_clamp(*args)  # type: ignore[arg-type]


# -- safe throughput (§6.4) --------------------------------------------------------------------


def test_safe_throughput_counts_only_what_meets_the_slas() -> None:
    next_interval = forecast(500)
    flat = (FlatPrefill(), FlatDecode(thpt_per_gpu=1000))
    # TTFT 80 ≤ 80: 2 × 40 000; ITL 10 ≤ 10: 3 × 1000
    assert safe_throughput(2, 3, next_interval, *flat, ttft_sla_ms=80, itl_sla_ms=10) == (
        80_000.0,
        3000.0,
    )
    assert safe_throughput(2, 3, next_interval, *flat, ttft_sla_ms=79.9, itl_sla_ms=9.9) == (
        0.0,
        0.0,
    )


# -- the real interpolators --------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped() -> tuple[PrefillInterpolator, DecodeInterpolator]:
    profile = load_profile(SHIPPED)
    assert profile.prefill is not None and profile.decode is not None
    return PrefillInterpolator(profile.prefill), DecodeInterpolator(profile.decode)


def test_interpolators_and_doubles_satisfy_the_protocols(
    shipped: tuple[PrefillInterpolator, DecodeInterpolator],
) -> None:
    prefill, decode = shipped
    assert isinstance(prefill, PrefillCurve) and isinstance(FlatPrefill(), PrefillCurve)
    assert isinstance(decode, DecodeSurface) and isinstance(LinearDecode(), DecodeSurface)
    assert isinstance(FlatDecode(), DecodeSurface)


def test_shipped_profile_plan(shipped: tuple[PrefillInterpolator, DecodeInterpolator]) -> None:
    prefill, decode = shipped
    settings = ClassicSettings(interval_s=60, itl_sla_ms=20, max_gpu_budget=-1)
    # ISL 3151 is a profiled point: 49 845.96 tok/s/GPU. 2000 req → 2000·3151/60 = 105 033
    # tok/s → ceil(2.107) = 3 prefill.
    isl, osl, ctx = 3151.0, 150.0, 3226.0
    seen = IntervalMetrics(
        num_req=2000,
        isl=isl,
        osl=osl,
        ttft_ms=prefill.interpolate_ttft(isl),  # the fleet runs exactly like its profile
        itl_ms=decode.interpolate_itl(2000 / 4 * 5.0 / 60, ctx),
        request_duration_s=5.0,
    )
    plan = plan_interval(
        seen, forecast(2000, isl, osl), prefill, decode, num_decode_workers=4, settings=settings
    )
    assert plan.correction == NO_CORRECTION
    assert plan.prefill is not None and plan.decode is not None
    assert plan.prefill.thpt_per_gpu == pytest.approx(49845.95764074385, rel=1e-12)
    assert plan.num_prefill == 3
    # decode: 2000·150/60 = 5000 tok/s at the best cell meeting 20 ms on the ctx-3226 row,
    # between the profiled rows around it: ctx 5644 reaches 3926 tok/s within 20 ms (19.7 ms),
    # ctx 2997 stays under 6371 (its first sample above 20 ms, 22.1 ms)
    assert 3926 < plan.decode.thpt_per_gpu < 6371
    assert plan.num_decode == 1

    # a slower-than-profiled fleet (ITL ×2) needs more decode; a queue-free TTFT (×0.5) less
    # prefill
    slow = replace(seen, itl_ms=2 * seen.itl_ms, ttft_ms=0.5 * seen.ttft_ms)  # type: ignore[operator]
    corrected = plan_interval(
        slow, forecast(2000, isl, osl), prefill, decode, num_decode_workers=4, settings=settings
    )
    assert corrected.correction == CorrectionFactors(prefill=0.5, decode=2.0)
    assert corrected.num_prefill == 2  # ceil(52 516.5 / 49 845.96)
    assert corrected.decode is not None and corrected.decode.itl_target_ms == 10.0
    assert corrected.num_decode is not None and corrected.num_decode > plan.num_decode
