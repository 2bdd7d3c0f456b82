"""The load loop of one deployment's planner (reference spec §4).

Each load tick trains the perf models on the tick's forward passes, then runs load scaling on
them: per role, the load rule's proposal (threshold targets, §4.3; SLA target, §4.4-4.6, then
the rate guard, ours), the throughput loop's replica floors, and the GPU budget — for a single
role (§4.7), for a disagg pair, or (ours, ``in_progress_guard="role"``) for the one role of a
pair that is not scaling.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from operators.engine_fleet import EngineFleet
from operators.load_scaling import (
    Fpms,
    LoadProposal,
    aggregate_reason,
    combine_agg,
    decode_kv_proposal,
    fpm_covers_workers,
    prefill_queue_proposal,
    settle_reason,
    sla_agg_proposals,
    sla_decode_proposal,
    sla_prefill_proposal,
    threshold_rules,
)
from operators.perf import DecodePerfModel, PrefillPerfModel
from operators.rate_guard import RateGuard, RateNeeds
from operators.tick import FpmObservations, ScaleTarget, TickInput
from schemas import ForwardPassMetrics, LoadReason, Role, TickDiagnostics, TrafficObservation


class LoadLoop:
    """Load-based scaling of one deployment's roles on the tick's forward passes. It owns the
    rate guard and reads the throughput loop's replica floors (``floors``, live).

    >>> from schemas import ForwardPassMetrics, PlannerConfig, QueuedRequestMetrics
    >>> from schemas import EngineCapabilities, WorkerCapabilities, WorkerCounts
    >>> config = PlannerConfig(mode="prefill")
    >>> caps = WorkerCapabilities(prefill=EngineCapabilities(context_length=4096))
    >>> fleet = EngineFleet(config, caps)
    >>> loop = LoadLoop(fleet, RateGuard(config), floors={"prefill": 1, "decode": 1})
    >>> fleet.inventory.update(WorkerCounts(ready_num_prefill=1))
    >>> hot = ForwardPassMetrics(worker_id="w1",
    ...     queued_requests=QueuedRequestMetrics(sum_prefill_tokens=8192))
    >>> diag = TickDiagnostics()
    >>> target = loop.tick(FpmObservations(prefill={("w1", 0): hot}), diag)
    >>> target.num_prefill, diag.load_decision_reason_prefill
    (2, 'scale_up')
    """

    def __init__(self, fleet: EngineFleet, rate_guard: RateGuard, floors: Mapping[Role, int]):
        self.fleet = fleet
        self.rate_guard = rate_guard
        self.floors = floors
        self.started_s = 0.0
        self.now_s = 0.0

    def begin_tick(self, now_s: float, rate_traffic: TrafficObservation | None) -> None:
        """Start the load tick at ``now_s``: the rate guard learns what the recent request
        rate (``rate_traffic``) needs."""
        self.now_s = now_s
        self.rate_guard.begin_tick(self.now_s, self._size_for_recent_rate(rate_traffic))

    def end_tick(self, decided: ScaleTarget | None) -> None:
        """Close the load tick that decided ``decided`` (the rate guard's stabilization)."""
        inventory = self.fleet.inventory
        targets = {role: inventory.current_target(role) for role in self.fleet.config.roles}
        self.rate_guard.end_tick(decided, targets)

    def train(self, tick_input: TickInput) -> None:
        """Feed the perf models the tick's training passes (else its observed passes)."""
        if not self.fleet.models:
            return
        if tick_input.training_fpms is not None:
            by_role: Mapping[Role, Iterable[ForwardPassMetrics]] = tick_input.training_fpms
        else:
            obs = tick_input.fpm_observations or FpmObservations()
            by_role = {role: (obs.for_role(role) or {}).values() for role in self.fleet.models}
        for role, fpms in by_role.items():
            model = self.fleet.models.get(role)
            if model is not None:
                for fpm in fpms:
                    model.add_observation(fpm)

    def tick(self, obs: FpmObservations | None, diag: TickDiagnostics) -> ScaleTarget | None:
        """Load scaling on the tick's forward passes ``obs``: a decision or ``None``; the
        reasons and estimates go to ``diag``."""
        if not self.fleet.config.enable_load_scaling:
            diag.load_decision_reason = "disabled"
            return None
        obs = obs or FpmObservations()
        if self.fleet.config.mode == "disagg":
            return self._disagg(obs, diag)
        role: Role = "prefill" if self.fleet.config.mode == "prefill" else "decode"
        return self._single(role, obs.for_role(role), diag)

    def _set_reason(self, diag: TickDiagnostics, reason: LoadReason) -> None:
        diag.load_decision_reason = reason
        for role in self.fleet.config.roles:
            self._set_role_reason(diag, role, reason)

    @staticmethod
    def _set_role_reason(diag: TickDiagnostics, role: Role, reason: LoadReason) -> None:
        if role == "prefill":
            diag.load_decision_reason_prefill = reason
        else:
            diag.load_decision_reason_decode = reason

    def _single(self, role: Role, fpms: Fpms | None, diag: TickDiagnostics) -> ScaleTarget | None:
        """Prefill-only, decode-only or agg mode (spec §4.7). Ours
        (``load_hold_applies_floors``): in prefill-only and decode-only modes a rule without an
        opinion keeps the current count and the floors still apply to it — as §4.7 has it for
        disagg and agg; the reference returns ``None`` here, so in single mode its throughput
        floor acts only on ticks where the load rule happens to have an opinion."""
        n = self.fleet.inventory.ready(role)
        if self.fleet.inventory.scaling_in_progress(role):
            self._set_reason(diag, "scaling_in_progress")
            return None
        if not fpms and not self._floors_empty_role(role):
            self._set_reason(diag, "no_fpm_data")
            return None
        if n is None or not fpm_covers_workers(fpms or {}, n):
            self._set_reason(diag, "worker_count_mismatch")
            return None
        proposal = self._propose(role, fpms, n, diag) if fpms else LoadProposal(None, "no_fpm_data")
        cfg = self.fleet.config
        # agg's SLA combine holds at N and floors it (§4.7), as we do; a model not ready yet
        # (§4.2 guard 4) and the threshold targets (§4.3) have no opinion in agg mode too
        agg_holds = cfg.mode == "agg" and cfg.sla_mode and proposal.reason != "insufficient_data"
        if (
            proposal.desired is None and not agg_holds and not cfg.load_hold_applies_floors
        ):  # the reference: no opinion, no decision
            self._set_reason(
                diag, settle_reason(current=n, proposal=proposal, post_floor=n, final=n)
            )
            return None
        original = n if proposal.desired is None else proposal.desired
        post_floor = self._apply_floor(role, original)
        final, budget_reason = self.fleet.budget().guard_single(role, n, post_floor)
        reason = budget_reason or settle_reason(
            current=n, proposal=proposal, post_floor=post_floor, final=final
        )
        self._set_reason(diag, reason)
        if final == n:
            return None
        return ScaleTarget(
            num_prefill=final if role == "prefill" else None,
            num_decode=final if role == "decode" else None,
            source="load",
            reason=reason,
            prefill_reason=reason if role == "prefill" else None,
            decode_reason=reason if role == "decode" else None,
        )

    def _disagg(self, obs: FpmObservations, diag: TickDiagnostics) -> ScaleTarget | None:
        inv = self.fleet.inventory
        both: tuple[Role, Role] = ("prefill", "decode")
        held = {role for role in both if inv.scaling_in_progress(role)}
        if held and (self.fleet.config.in_progress_guard == "deployment" or len(held) == 2):
            self._set_reason(diag, "scaling_in_progress")
            return None
        if held:
            return self._disagg_one_role(obs, held.pop(), diag)
        p_fpms, d_fpms = obs.prefill, obs.decode
        if not (p_fpms or d_fpms or any(self._floors_empty_role(r) for r in both)):
            self._set_reason(diag, "no_fpm_data")
            return None
        n_p, n_d = inv.ready("prefill"), inv.ready("decode")
        if (
            n_p is None
            or n_d is None
            or (p_fpms and not fpm_covers_workers(p_fpms, n_p))
            or (d_fpms and not fpm_covers_workers(d_fpms, n_d))
        ):
            self._set_reason(diag, "worker_count_mismatch")
            return None
        missing = LoadProposal(None, "no_fpm_data")
        p_prop = self._propose("prefill", p_fpms, n_p, diag) if p_fpms else missing
        d_prop = self._propose("decode", d_fpms, n_d, diag) if d_fpms else missing
        p_floor = self._apply_floor("prefill", n_p if p_prop.desired is None else p_prop.desired)
        d_floor = self._apply_floor("decode", n_d if d_prop.desired is None else d_prop.desired)
        final_p, final_d, budget_reason = self.fleet.budget().guard_pair(
            (n_p, n_d), (p_floor, d_floor)
        )
        p_reason = settle_reason(current=n_p, proposal=p_prop, post_floor=p_floor, final=final_p)
        d_reason = settle_reason(current=n_d, proposal=d_prop, post_floor=d_floor, final=final_d)
        changed = (final_p, final_d) != (n_p, n_d)
        reason = aggregate_reason((p_reason, d_reason), changed)
        if budget_reason is not None:  # the budget overrode what the roles asked for
            p_min, d_min = self.fleet.min_endpoint("prefill"), self.fleet.min_endpoint("decode")
            if final_p != max(p_floor, p_min):
                p_reason = budget_reason
            if final_d != max(d_floor, d_min):
                d_reason = budget_reason
            reason = budget_reason
        diag.load_decision_reason = reason
        diag.load_decision_reason_prefill = p_reason
        diag.load_decision_reason_decode = d_reason
        if not changed:
            return None
        return ScaleTarget(final_p, final_d, "load", reason, p_reason, d_reason)

    def _disagg_one_role(
        self, obs: FpmObservations, held: Role, diag: TickDiagnostics
    ) -> ScaleTarget | None:
        """Ours (``in_progress_guard="role"``): ``held`` has a scale in flight and takes no new
        step (no stacking, spec §17 items 6/10, per role); the other role decides alone. The
        held role's in-flight target is left as it is (``None`` in the decision), and the GPU
        budget is checked with the held role at that target: if the pair clamp would have to
        change the held role, nothing moves this tick."""
        moving: Role = "decode" if held == "prefill" else "prefill"
        self._set_role_reason(diag, held, "scaling_in_progress")
        fpms = obs.for_role(moving)
        n = self.fleet.inventory.ready(moving)
        held_target = self.fleet.inventory.current_target(held)
        reason: LoadReason
        if not fpms and not self._floors_empty_role(moving):
            reason = "no_fpm_data"
        elif n is None or held_target is None or not fpm_covers_workers(fpms or {}, n):
            reason = "worker_count_mismatch"
        else:
            missing = LoadProposal(None, "no_fpm_data")
            proposal = self._propose(moving, fpms, n, diag) if fpms else missing
            post_floor = self._apply_floor(
                moving, n if proposal.desired is None else proposal.desired
            )
            pair = {moving: post_floor, held: held_target}
            current = {moving: n, held: held_target}
            final_p, final_d, budget_reason = self.fleet.budget().guard_pair(
                (current["prefill"], current["decode"]), (pair["prefill"], pair["decode"])
            )
            final = final_p if moving == "prefill" else final_d
            if (final_d if moving == "prefill" else final_p) != held_target:
                final = n  # the budget cannot fund this step without touching the held role
                if budget_reason is not None:
                    budget_reason = "gpu_budget_guard_hold"
            reason = settle_reason(current=n, proposal=proposal, post_floor=post_floor, final=final)
            lowest = max(post_floor, self.fleet.min_endpoint(moving))
            if budget_reason is not None and final != lowest:
                reason = budget_reason
            self._set_role_reason(diag, moving, reason)
            if final != n:
                diag.load_decision_reason = aggregate_reason([reason], changed=True)
                return ScaleTarget(
                    num_prefill=final if moving == "prefill" else None,
                    num_decode=final if moving == "decode" else None,
                    source="load",
                    reason=diag.load_decision_reason,
                    prefill_reason=reason if moving == "prefill" else "scaling_in_progress",
                    decode_reason=reason if moving == "decode" else "scaling_in_progress",
                )
        self._set_role_reason(diag, moving, reason)
        diag.load_decision_reason = "scaling_in_progress"
        return None

    def _floors_empty_role(self, role: Role) -> bool:
        """Ours (``load_hold_applies_floors``): a role with no replicas ready or starting has
        no forward passes to show, and that is no reason to leave it there: its load tick holds
        it at zero and the floors (min endpoints, throughput lower bound) lift it. The reference
        makes no decision without forward passes, so a role scaled to zero stays there — unless
        it is a disagg role whose other role has forward passes (§4.7 keeps its count, then
        the floors lift it, as here)."""
        return (
            self.fleet.config.load_hold_applies_floors
            and self.fleet.inventory.ready(role) == 0
            and self.fleet.inventory.current_target(role) == 0
        )

    def _apply_floor(self, role: Role, desired: int) -> int:
        if self.fleet.config.enable_throughput_scaling:
            return max(desired, self.floors[role])
        return desired

    def _size_for_recent_rate(self, traffic: TrafficObservation | None) -> RateNeeds:
        """Ours (``load_rate_window_seconds``): per role, the replicas the recent request rate
        needs at full capacity, and the fewest that keep every engine within
        ``load_rate_utilization`` of it. Empty when off, without traffic, before a full window
        has passed, or while a model is not ready."""
        cfg = self.fleet.config
        if cfg.load_rate_window_seconds <= 0 or not cfg.sla_mode:
            return {}
        if traffic is None or not traffic.duration_s > 0:
            return {}
        demand = traffic.num_req / traffic.duration_s
        if self.now_s - self.started_s < cfg.load_rate_window_seconds:
            return {}  # the window reaches back before the planner started: a partial count
        utilization = cfg.load_rate_utilization
        needs: RateNeeds = {}
        for role in cfg.roles:
            capacity = self.fleet.capacity(role, demand, traffic.isl, traffic.osl)
            rps = capacity.engine_rps
            if capacity.replicas is None or rps is None or not rps > 0:
                continue
            min_ep = self.fleet.min_endpoint(role)
            full = max(math.ceil(demand / rps), min_ep)
            within = max(math.ceil(demand / (rps * utilization)), min_ep)
            needs[role] = (full, within)
        return needs

    def _propose(self, role: Role, fpms: Fpms, n: int, diag: TickDiagnostics) -> LoadProposal:
        """The role's load rule, then (ours, SLA target) the rate guard."""
        proposal = self._rule_proposal(role, fpms, n, diag)
        if not self.fleet.config.sla_mode:  # the threshold targets stay the reference's (§4.3)
            return proposal
        return self.rate_guard.adjust(role, n, proposal)

    def _rule_proposal(self, role: Role, fpms: Fpms, n: int, diag: TickDiagnostics) -> LoadProposal:
        cfg = self.fleet.config
        caps = self.fleet.caps(role)
        min_ep = self.fleet.min_endpoint(role)
        if not cfg.sla_mode:  # threshold targets: throughput, latency, load (§4.3)
            rules = threshold_rules(cfg)
            if role == "prefill":
                unit = rules.prefill_unit or caps.context_length
                return prefill_queue_proposal(fpms, n, rules.prefill, unit, min_ep)
            return decode_kv_proposal(
                fpms, n, rules.decode, caps.max_kv_tokens, min_ep, agg=cfg.mode == "agg"
            )
        sensitivity = cfg.load_scaling_down_sensitivity / 100.0
        model = self.fleet.models[role]
        if isinstance(model, PrefillPerfModel):
            proposal = sla_prefill_proposal(
                model,
                fpms,
                n,
                max_num_batched_tokens=caps.max_num_batched_tokens,
                ttft_sla_ms=cfg.ttft_ms,
                sensitivity=sensitivity,
                rule=cfg.scale_down_rule,
                kv_hit_rate=self.fleet.metadata.kv_hit_rate,
                min_endpoint=min_ep,
                max_step=cfg.max_load_step,
            )
            diag.estimated_ttft_ms = proposal.estimate_ms
            return proposal
        if isinstance(model, DecodePerfModel):
            proposal = sla_decode_proposal(
                model,
                fpms,
                n,
                itl_sla_ms=cfg.itl_ms,
                sensitivity=sensitivity,
                rule=cfg.scale_down_rule,
                max_kv_tokens=caps.max_kv_tokens,
                accept_length=self.fleet.accept_length,
                min_endpoint=min_ep,
                max_num_seqs=caps.max_num_seqs,
                queue_aware=cfg.queue_aware_estimates,
                max_step=cfg.max_load_step,
            )
            diag.estimated_itl_ms = proposal.estimate_ms
            return proposal
        prefill, decode = sla_agg_proposals(
            model,
            fpms,
            n,
            max_num_batched_tokens=caps.max_num_batched_tokens,
            ttft_sla_ms=cfg.ttft_ms,
            itl_sla_ms=cfg.itl_ms,
            sensitivity=sensitivity,
            rule=cfg.scale_down_rule,
            max_kv_tokens=caps.max_kv_tokens,
            kv_hit_rate=self.fleet.metadata.kv_hit_rate,
            accept_length=self.fleet.accept_length,
            min_endpoint=min_ep,
            max_num_seqs=caps.max_num_seqs,
            queue_aware=cfg.queue_aware_estimates,
            max_step=cfg.max_load_step,
            needs_both=cfg.agg_scale_down_needs_both,
        )
        diag.estimated_ttft_ms = prefill.estimate_ms if prefill is not None else None
        diag.estimated_itl_ms = decode.estimate_ms
        return combine_agg(prefill, decode, n)
