"""Load-scaling rules (reference spec §4.4–§4.8): flat vs consolidation-aware scale-down,
the agg combiner and the outcome reasons.
"""

from __future__ import annotations

import pytest

from operators.load_scaling import (
    LoadProposal,
    ScaleDownCheck,
    aggregate_reason,
    combine_agg,
    settle_reason,
    sla_decode_proposal,
    sla_prefill_proposal,
    sla_step,
)
from operators.perf import DecodePerfModel, PrefillPerfModel
from schemas import WorkerCounts
from tests.core.planner_inputs import (
    AGG_TRAINING,
    DECODE_TRAINING,
    PREFILL_TRAINING,
    core,
    default_caps,
    engines,
    fpm,
    run_tick,
)


def decode_model() -> DecodePerfModel:
    model = DecodePerfModel(50, 5, 16)
    model.load_benchmark_fpms(DECODE_TRAINING)
    return model


def decode_engines(n: int, kv: int):
    return engines(n, decode_kv=kv, decode_requests=max(1, kv // 1000), wall_time=1e-5 * kv + 0.001)


class TestFlatVersusConsolidation:
    """The 2 ↔ 1 oscillation of PR #9294: two engines at ≈71 % of the ITL SLA."""

    def decide(self, rule: str, n: int, kv: int):
        machine = core(
            default_caps(max_kv_tokens=100_000), mode="decode", itl_ms=100.0, scale_down_rule=rule
        )
        machine.load_benchmark_fpms("decode", DECODE_TRAINING)
        return run_tick(
            machine, decode=decode_engines(n, kv), counts=WorkerCounts(ready_num_decode=n)
        )

    def test_flat_rule_scales_down_then_the_survivor_breaks_the_sla(self):
        down = self.decide("flat", 2, 6_000)
        assert down.diagnostics.estimated_itl_ms == pytest.approx(71.0, abs=0.01)  # < 80
        assert down.scale_to.num_decode == 1 and down.scale_to.reason == "scale_down"
        # the survivor carries both engines' KV: 131 ms > 100 ms → straight back up
        back = self.decide("flat", 1, 12_000)
        assert back.diagnostics.estimated_itl_ms == pytest.approx(131.0, abs=0.01)
        assert back.scale_to.num_decode == 2 and back.scale_to.reason == "scale_up"

    def test_consolidation_rule_refuses_the_same_scale_down(self):
        held = self.decide("consolidation", 2, 6_000)
        assert held.scale_to is None
        assert held.diagnostics.load_decision_reason == "scale_down_refused_consolidation"

    def test_both_rules_agree_on_light_load(self):
        assert self.decide("flat", 2, 1_500).scale_to.num_decode == 1
        assert self.decide("consolidation", 2, 1_500).scale_to.num_decode == 1


class TestSlaRules:
    def test_scale_up_needs_every_engine_above_the_sla(self):
        assert sla_step([120.0, 90.0], 100.0, 2, 1, ScaleDownCheck(False, False)).desired is None
        assert sla_step([120.0, 101.0], 100.0, 2, 1, ScaleDownCheck(False, False)).desired == 3

    def test_scale_down_respects_the_min_endpoint(self):
        step = sla_step([10.0, 10.0], 100.0, 2, 2, ScaleDownCheck(True, False))
        assert (step.desired, step.reason) == (2, "scale_down")

    def test_no_estimates_is_insufficient_data(self):
        assert sla_step([], 100.0, 2, 1, ScaleDownCheck(True, False)).reason == "insufficient_data"

    @pytest.mark.parametrize("rule", ["flat", "consolidation"])
    def test_sensitivity_zero_never_scales_down(self, rule):
        model = decode_model()
        proposal = sla_decode_proposal(
            model,
            decode_engines(3, 100),
            3,
            itl_sla_ms=100.0,
            sensitivity=0.0,
            rule=rule,
            max_kv_tokens=None,
            accept_length=1.0,
            min_endpoint=1,
        )
        assert proposal.desired is None

    def test_accept_length_divides_the_itl(self):
        model = decode_model()
        kwargs = dict(
            itl_sla_ms=50.0,
            sensitivity=0.8,
            rule="consolidation",
            max_kv_tokens=None,
            min_endpoint=1,
        )
        plain = sla_decode_proposal(model, decode_engines(1, 6_000), 1, accept_length=1.0, **kwargs)
        spec = sla_decode_proposal(model, decode_engines(1, 6_000), 1, accept_length=2.0, **kwargs)
        assert plain.estimate_ms == pytest.approx(2 * spec.estimate_ms)
        assert (plain.desired, spec.desired) == (2, None)  # 71 ms > 50; 35.5 ms is not

    def test_consolidation_only_inflates_the_queue(self):
        model = PrefillPerfModel(50, 5, 16)
        model.load_benchmark_fpms(
            [
                fpm(prefill_tokens=t, prefill_requests=1, wall_time=1e-5 * t + 1e-3)
                for t in (1500, 1750, 2000, 2250, 2500)
            ]
        )
        queued = engines(2, queued_prefill=1_000)
        kwargs = dict(
            max_num_batched_tokens=2048,
            ttft_sla_ms=50.0,
            sensitivity=0.8,
            kv_hit_rate=None,
            min_endpoint=1,
        )
        # queue 1000 (both engines at 32 ms): the survivor's TTFT would be ≈ 42 ms — above 80 %
        # of the SLA, but its queue-induced part (21 ms) fits the budget (50 − 21) × 0.8 = 23.2
        flat = sla_prefill_proposal(model, queued, 2, rule="flat", **kwargs)
        aware = sla_prefill_proposal(model, queued, 2, rule="consolidation", **kwargs)
        assert (flat.desired, aware.desired) == (1, 1)
        # queue 1200 (34 ms now, flat allows): the survivor's queue part is 26 ms ≥ 23.2
        deeper = engines(2, queued_prefill=1_200)
        refused = sla_prefill_proposal(model, deeper, 2, rule="consolidation", **kwargs)
        assert (refused.desired, refused.reason) == (None, "scale_down_refused_consolidation")
        assert refused.estimate_ms == pytest.approx(34.0)
        assert sla_prefill_proposal(model, deeper, 2, rule="flat", **kwargs).desired == 1

    def test_kv_hit_rate_discounts_the_prefill_estimate(self):
        model = PrefillPerfModel(50, 5, 16)
        model.load_benchmark_fpms(PREFILL_TRAINING)
        kwargs = dict(
            max_num_batched_tokens=2048,
            ttft_sla_ms=5000.0,
            sensitivity=0.8,
            rule="consolidation",
            min_endpoint=1,
        )
        cold = sla_prefill_proposal(
            model, engines(1, queued_prefill=4_500), 1, kv_hit_rate=None, **kwargs
        )
        warm = sla_prefill_proposal(
            model, engines(1, queued_prefill=4_500), 1, kv_hit_rate=0.5, **kwargs
        )
        # 4500 + avg ISL 1500 = 6000 tokens → 2048+2048+1904 → 6.006 s; hit 0.5 → 3000 tokens
        # → 2048+952 → 3.004 s
        assert (cold.estimate_ms, warm.estimate_ms) == pytest.approx((6006.0, 3004.0))
        assert (cold.desired, warm.desired) == (2, None)


class TestAggCombine:
    up, down, hold = (
        LoadProposal(3, "scale_up"),
        LoadProposal(1, "scale_down"),
        LoadProposal(None, "no_change"),
    )
    veto = LoadProposal(2, "scale_down_refused_consolidation")
    big_up = LoadProposal(5, "scale_up")

    @pytest.mark.parametrize(
        ("prefill", "decode", "expected"),
        [
            (up, hold, 3),
            (hold, up, 3),
            (down, up, 3),
            (up, big_up, 5),  # both scale up (proportional steps): the larger step wins
            (big_up, up, 5),
            (big_up, down, 5),
            (down, down, 1),
            (down, hold, None),  # scale down only when BOTH agree
            (None, down, 1),  # no prefill signal: decode alone may scale down
            (veto, down, None),  # a veto is not a missing signal
        ],
    )
    def test_combiner(self, prefill, decode, expected):
        assert combine_agg(prefill, decode, 2).desired == expected

    def test_refusal_and_insufficient_data_are_reported(self):
        assert combine_agg(self.veto, self.hold, 2).reason == "scale_down_refused_consolidation"
        none = LoadProposal(None, "insufficient_data")
        assert combine_agg(none, none, 2).reason == "insufficient_data"
        assert combine_agg(self.hold, none, 2).reason == "no_change"

    @staticmethod
    def light_pair_tick(machine):
        """A load tick of two agg engines, trained on §16.2 case 12, each running one
        100-token prompt beside 10 decodes (1000 KV tokens) in 201 ms."""
        machine.load_benchmark_fpms("decode", AGG_TRAINING)
        pair = engines(
            2,
            prefill_tokens=100,
            prefill_requests=1,
            decode_kv=1000,
            decode_requests=10,
            wall_time=0.201,
        )
        return run_tick(machine, decode=pair, counts=WorkerCounts(ready_num_decode=2))

    def test_agg_without_batched_tokens_uses_the_decode_signal_alone(self):
        from schemas import EngineCapabilities, WorkerCapabilities

        caps = WorkerCapabilities(decode=EngineCapabilities(num_gpu=1))
        machine = core(caps, mode="agg", ttft_ms=500.0, itl_ms=1000.0)
        effects = self.light_pair_tick(machine)
        assert effects.diagnostics.estimated_ttft_ms is None
        assert effects.scale_to.num_decode == 1

    @pytest.mark.parametrize("rule", ["flat", "consolidation"])
    def test_agg_ttft_near_its_target_holds_a_decode_scale_down(self, rule):
        # The TTFT estimate sits between sens × SLA and the SLA: the prefill rule holds, and
        # decode alone (ITL far below its target) must not drop a replica (§4.7: BOTH agree).
        machine = core(
            mode="agg",
            ttft_ms=240.0,
            itl_ms=1000.0,
            scale_down_rule=rule,
            agg_scale_down_needs_both=True,
        )
        effects = self.light_pair_tick(machine)
        ttft, itl = effects.diagnostics.estimated_ttft_ms, effects.diagnostics.estimated_itl_ms
        assert 0.8 * 240.0 < ttft < 240.0 and itl < 0.8 * 1000.0
        assert effects.scale_to is None

    def test_the_reference_lets_decode_alone_scale_agg_down_past_a_ttft_hold(self):
        # the reference's agg TTFT rule returns "no signal" for a plain hold (only a refusal
        # proposes N), so its ITL rule scales down alone (agg_scale_down_needs_both off, as in
        # this fixture's reference behaviour)
        machine = core(mode="agg", ttft_ms=240.0, itl_ms=1000.0, scale_down_rule="flat")
        effects = self.light_pair_tick(machine)
        assert 0.8 * 240.0 < effects.diagnostics.estimated_ttft_ms < 240.0
        assert effects.scale_to.num_decode == 1


class TestReasons:
    def test_settle(self):
        up = LoadProposal(3, "scale_up")
        assert settle_reason(current=2, proposal=up, post_floor=3, final=3) == "scale_up"
        assert settle_reason(current=2, proposal=up, post_floor=3, final=2) == "no_change"
        down = LoadProposal(1, "scale_down")
        assert settle_reason(current=3, proposal=down, post_floor=2, final=2) == (
            "scale_down_capped_by_throughput"
        )
        assert settle_reason(current=2, proposal=down, post_floor=1, final=1) == "scale_down"
        veto = LoadProposal(None, "scale_down_refused_consolidation")
        assert settle_reason(current=2, proposal=veto, post_floor=2, final=2) == (
            "scale_down_refused_consolidation"
        )
        assert settle_reason(current=2, proposal=veto, post_floor=4, final=4) == "scale_up"

    def test_a_floor_lift_the_budget_refuses_is_no_change_when_no_scale_down_was_asked(self):
        # protects: 'scale_down_capped_by_throughput' needs a proposed scale-down; a rule with
        # no opinion (or holding at current) whose floor lift the budget undoes is no_change
        for proposal in (LoadProposal(None, "no_change"), LoadProposal(2, "no_change")):
            assert settle_reason(current=2, proposal=proposal, post_floor=3, final=2) == (
                "no_change"
            )

    def test_aggregate_priority(self):
        assert aggregate_reason(["scale_down", "scale_down_capped_by_throughput"], True) == (
            "scale_down_capped_by_throughput"
        )
        assert aggregate_reason(["no_change", "no_change"], False) == "no_change"
        assert aggregate_reason(["no_fpm_data", "no_change"], False) == "no_fpm_data"
