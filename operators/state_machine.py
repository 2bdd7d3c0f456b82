"""The per-deployment planner core: one tick in, effects out (reference spec §1, §4, §5, §8).

:class:`PlannerStateMachine` is pure — no I/O, no clock reads — and its state pickles (bytewax
snapshots it). The adapter calls :meth:`~PlannerStateMachine.on_tick` at the scheduled tick
times with what the tick asked for; each call returns the optional scaling target, the next
tick and the tick's diagnostics. Per-tick order (§1.4):

1. adopt the worker inventory snapshot;
2. adopt the traffic observation's KV hit rate / accept length (last-value semantics);
3. throughput tick: feed the predictors and size each role — FIRST, so a fresh lower bound is
   visible to load scaling in the same tick;
4. load tick: train the perf models on the tick's forward passes, then run load scaling;
5. a load decision wins over a throughput decision (throughput only decides when load scaling
   is off; otherwise it only sets lower bounds).

Ours, each behind a ``PlannerConfig`` field whose reference value restores the reference
(``PlannerConfig.reference_variant``): bootstrap samples outside the engines' limits are dropped
once the capabilities are known; a disagg role in flight holds only itself; SLA scale-ups are
proportional (``max_load_step``); SLA load ticks also size each role for the recent request
rate; SLA scale-downs need a stabilization window of agreement; a throughput forecast of zero
requests sizes every role at its minimum endpoint count even when the perf models cannot answer
for the forecast's zero lengths (``zero_demand_to_min_endpoint``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from functools import partial

from operators.bootstrap import within_engine_limits
from operators.cadence import Cadence
from operators.gpu_budget import GpuBudget
from operators.inventory import Inventory
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
from operators.perf import AggPerfModel, DecodePerfModel, PrefillPerfModel
from operators.power_budget import PowerBudget
from operators.rate_guard import RateGuard, RateNeeds
from operators.throughput_scaling import (
    Capacity,
    agg_capacity,
    decode_capacity,
    idle_capacity,
    prefill_capacity,
    sizing_lengths,
)
from operators.tick import FpmObservations, PlannerEffects, ScaleTarget, ScheduledTick, TickInput
from operators.traffic_intake import RuntimeMetadata, TrafficForecaster
from schemas import (
    EngineCapabilities,
    ForwardPassMetrics,
    LoadReason,
    PlannerConfig,
    Role,
    ThroughputReason,
    TickDiagnostics,
    TrafficObservation,
    WorkerCapabilities,
)

PerfModel = PrefillPerfModel | DecodePerfModel | AggPerfModel

_NO_CAPS = EngineCapabilities()


class PlannerStateMachine:
    """Load- and throughput-based scaling of one deployment.

    >>> from operators.tick import FpmObservations, TickInput
    >>> from schemas import ForwardPassMetrics, QueuedRequestMetrics, WorkerCounts
    >>> caps = WorkerCapabilities(prefill=EngineCapabilities(context_length=4096))
    >>> core = PlannerStateMachine(PlannerConfig(mode="prefill"), caps)
    >>> tick = core.initial_tick(0.0)
    >>> tick.at_s, tick.run_load_scaling
    (5.0, True)
    >>> hot = ForwardPassMetrics(worker_id="w1",
    ...     queued_requests=QueuedRequestMetrics(sum_prefill_tokens=8192))
    >>> effects = core.on_tick(tick, TickInput(now_s=5.0,
    ...     worker_counts=WorkerCounts(ready_num_prefill=1),
    ...     fpm_observations=FpmObservations(prefill={("w1", 0): hot})))
    >>> effects.scale_to.num_prefill, effects.scale_to.reason, effects.next_tick.at_s
    (2, 'scale_up', 10.0)
    """

    def __init__(
        self, config: PlannerConfig, capabilities: WorkerCapabilities | None = None
    ) -> None:
        self.config = config
        self._capabilities = capabilities or WorkerCapabilities()
        self.inventory = Inventory()
        self.cadence = Cadence.starting_at(config, 0.0)
        self.metadata = RuntimeMetadata()
        self._lower_bounds: dict[Role, int] = {"prefill": 1, "decode": 1}
        self.forecaster = (
            TrafficForecaster.from_config(config) if config.enable_throughput_scaling else None
        )
        self._models: dict[Role, PerfModel] = {}
        self._now_s = 0.0
        self._started_s = 0.0
        self.rate_guard = RateGuard(config)
        if config.sla_mode:
            sizes = (
                config.max_num_fpm_samples,
                config.load_min_observations,
                config.fpm_sample_bucket_size,
            )
            suspect_factor = config.perf_model_suspect_factor
            if config.mode == "agg":
                self._models["decode"] = AggPerfModel(*sizes, suspect_factor=suspect_factor)
            else:
                for role in config.roles:
                    if role == "prefill":
                        self._models[role] = PrefillPerfModel(
                            *sizes, basis=config.perf_model_basis, suspect_factor=suspect_factor
                        )
                    else:
                        self._models[role] = DecodePerfModel(*sizes, suspect_factor=suspect_factor)

    # --- read-only views ---------------------------------------------------------------------
    @property
    def capabilities(self) -> WorkerCapabilities:
        """The engine capabilities in use."""
        return self._capabilities

    @property
    def prefill_model(self) -> PrefillPerfModel | None:
        """The prefill perf model (SLA target, prefill/disagg modes), else ``None``."""
        model = self._models.get("prefill")
        return model if isinstance(model, PrefillPerfModel) else None

    @property
    def decode_model(self) -> DecodePerfModel | None:
        """The decode perf model (SLA target, decode/disagg modes), else ``None``."""
        model = self._models.get("decode")
        return model if isinstance(model, DecodePerfModel) else None

    @property
    def agg_model(self) -> AggPerfModel | None:
        """The aggregated-engine perf model (SLA target, agg mode), else ``None``."""
        model = self._models.get("decode")
        return model if isinstance(model, AggPerfModel) else None

    @property
    def perf_samples_set_aside(self) -> dict[Role, int]:
        """Forward passes each perf model has set aside as unconfirmed suspects, so far."""
        return {role: model.set_aside for role, model in self._models.items()}

    @property
    def throughput_lower_bounds(self) -> Mapping[Role, int]:
        """Replica floors set by the last throughput tick (1 until then; agg uses ``decode``)."""
        return dict(self._lower_bounds)

    @property
    def kv_hit_rate(self) -> float | None:
        """Last observed KV hit rate (``None`` until one is observed: no discount)."""
        return self.metadata.kv_hit_rate

    @property
    def accept_length(self) -> float:
        """Effective speculative-decoding accept length (1.0 without speculation)."""
        return self.metadata.accept_length(self._speculative_nextn())

    # --- set-up ------------------------------------------------------------------------------
    def set_capabilities(self, capabilities: WorkerCapabilities) -> None:
        """Replace the engine capabilities (discovered from workers or configured)."""
        self._capabilities = capabilities
        self._retire_foreign_benchmarks()

    def _retire_foreign_benchmarks(self) -> None:
        """Ours (``bootstrap_within_engine_limits``): drop bootstrap samples no forward pass of
        these engines can have (see :func:`operators.bootstrap.within_engine_limits`)."""
        if not self.config.bootstrap_within_engine_limits:
            return
        for role, model in self._models.items():
            caps = self._caps(role)
            model.retire_benchmarks(partial(within_engine_limits, caps=caps))

    def load_benchmark_fpms(self, role: Role, fpms: Iterable[ForwardPassMetrics]) -> int:
        """Bootstrap a perf model from profiled forward passes (spec §6.3).

        Agg engines learn from both roles' profile points (a pure-prefill or pure-decode pass is
        a valid aggregated sample). Returns how many FPMs were loaded: 0 for the threshold
        targets (no perf models) and for a role this deployment does not have.
        """
        model = self._models.get("decode" if self.config.mode == "agg" else role)
        if model is None:
            return 0
        fpms = list(fpms)
        model.load_benchmark_fpms(fpms)
        self._retire_foreign_benchmarks()
        return len(fpms)

    def warm_up_predictors(self, observations: Iterable[TrafficObservation]) -> int:
        """Pre-train the load predictors from historical windows (spec §7.6); the KV hit rate
        and accept length are runtime metadata and never warmed. Returns windows fed."""
        if self.forecaster is None:
            return 0
        return self.forecaster.warm_up(observations)

    def initial_tick(self, start_s: float) -> ScheduledTick:
        """The first tick of a planner started at ``start_s``."""
        self.cadence = Cadence.starting_at(self.config, start_s)
        self._started_s = start_s
        return self.cadence.next_tick(self.config)

    # --- the tick ----------------------------------------------------------------------------
    def on_tick(self, tick: ScheduledTick, tick_input: TickInput) -> PlannerEffects:
        """Run the loops ``tick`` schedules on ``tick_input``; diagnostics start empty."""
        diag = TickDiagnostics()
        self.inventory.update(tick_input.worker_counts)
        traffic = tick_input.traffic
        if traffic is not None and traffic.duration_s > 0:
            self.metadata.observe(traffic)

        throughput_target = None
        if tick.run_throughput_scaling:
            throughput_target = self._throughput_tick(traffic, diag)

        load_target = None
        if tick.run_load_scaling:
            self._train(tick_input)
            self._now_s = tick_input.now_s
            rate_traffic = tick_input.rate_traffic or traffic
            self.rate_guard.begin_tick(self._now_s, self._size_for_recent_rate(rate_traffic))
            load_target = self._load_tick(tick_input.fpm_observations, diag)
            targets = {role: self.inventory.current_target(role) for role in self.config.roles}
            self.rate_guard.end_tick(load_target, targets)

        both_loops = self.config.enable_load_scaling and self.config.enable_throughput_scaling
        if both_loops and (tick.run_load_scaling or tick.run_throughput_scaling):
            diag.throughput_lower_bound_prefill = self._bound_for("prefill")
            diag.throughput_lower_bound_decode = self._bound_for("decode")
        self.cadence.advance(self.config, tick, tick_input.now_s)
        scale_to = load_target if load_target is not None else throughput_target
        self._report_power(scale_to, diag)
        return PlannerEffects(
            scale_to=scale_to,
            next_tick=self.cadence.next_tick(self.config),
            diagnostics=diag,
        )

    # --- helpers: capabilities, budget -------------------------------------------------------
    def _caps(self, role: Role) -> EngineCapabilities:
        caps = self._capabilities.prefill if role == "prefill" else self._capabilities.decode
        return caps or _NO_CAPS

    def gpus_per_replica(self, role: Role) -> int | None:
        """GPUs of one replica of ``role``: the workers' capabilities, else the config."""
        configured = (
            self.config.prefill_engine_num_gpu
            if role == "prefill"
            else self.config.decode_engine_num_gpu
        )
        return self._caps(role).num_gpu or configured

    def _speculative_nextn(self) -> int:
        discovered = self._caps("decode").speculative_nextn
        return discovered if discovered else self.config.speculative_nextn

    def _bound_for(self, role: Role) -> int | None:
        return self._lower_bounds[role] if role in self.config.roles else None

    def _min_endpoint(self, role: Role) -> int:
        return self.config.min_endpoint_for(role)

    def _budget(self) -> GpuBudget:
        """The GPU budget (and the power budget, when on) as this tick sees the fleet."""
        roles: tuple[Role, Role] = ("prefill", "decode")
        return GpuBudget(
            self.config,
            {role: self.gpus_per_replica(role) for role in roles},
            {role: self.inventory.ready(role) for role in roles},
            power=self._power_budget(),
            in_effect={role: self.inventory.current_target(role) for role in roles},
        )

    def _power_budget(self) -> PowerBudget | None:
        limit = self.config.total_gpu_power_limit
        if not self.config.enable_power_awareness or limit is None:
            return None
        roles: tuple[Role, Role] = ("prefill", "decode")
        watts: dict[Role, int | None] = {}
        for role in roles:
            gpus, cap = self.gpus_per_replica(role), self._caps(role).gpu_power_limit_w
            watts[role] = None if gpus is None or cap is None else gpus * cap
        return PowerBudget(limit, watts, {role: self._min_endpoint(role) for role in roles})

    def _report_power(self, scale_to: ScaleTarget | None, diag: TickDiagnostics) -> None:
        """The power diagnostics: the limit, and what the planned counts draw (the decision's,
        else the counts in effect; none while a count or cap is unknown)."""
        power = self._power_budget()
        if power is None:
            return
        diag.power_budget_total_watts = power.limit_w
        planned: dict[Role, int] = {}
        for role in self.config.roles:
            decided = None if scale_to is None else getattr(scale_to, f"num_{role}")
            count = decided if decided is not None else self.inventory.current_target(role)
            if count is None:
                return
            planned[role] = count
        diag.power_projected_watts = power.projected_w(planned)

    # --- load scaling (§4) -------------------------------------------------------------------
    def _train(self, tick_input: TickInput) -> None:
        if not self._models:
            return
        if tick_input.training_fpms is not None:
            by_role: Mapping[Role, Iterable[ForwardPassMetrics]] = tick_input.training_fpms
        else:
            obs = tick_input.fpm_observations or FpmObservations()
            by_role = {role: (obs.for_role(role) or {}).values() for role in self._models}
        for role, fpms in by_role.items():
            model = self._models.get(role)
            if model is not None:
                for fpm in fpms:
                    model.add_observation(fpm)

    def _load_tick(self, obs: FpmObservations | None, diag: TickDiagnostics) -> ScaleTarget | None:
        if not self.config.enable_load_scaling:
            diag.load_decision_reason = "disabled"
            return None
        obs = obs or FpmObservations()
        if self.config.mode == "disagg":
            return self._load_disagg(obs, diag)
        role: Role = "prefill" if self.config.mode == "prefill" else "decode"
        return self._load_single(role, obs.for_role(role), diag)

    def _set_load_reason(self, diag: TickDiagnostics, reason: LoadReason) -> None:
        diag.load_decision_reason = reason
        for role in self.config.roles:
            self._set_role_load_reason(diag, role, reason)

    @staticmethod
    def _set_role_load_reason(diag: TickDiagnostics, role: Role, reason: LoadReason) -> None:
        if role == "prefill":
            diag.load_decision_reason_prefill = reason
        else:
            diag.load_decision_reason_decode = reason

    def _load_single(
        self, role: Role, fpms: Fpms | None, diag: TickDiagnostics
    ) -> ScaleTarget | None:
        """Prefill-only, decode-only or agg mode (spec §4.7). Ours
        (``load_hold_applies_floors``): in prefill-only and decode-only modes a rule without an
        opinion keeps the current count and the floors still apply to it — as §4.7 has it for
        disagg and agg; the reference returns ``None`` here, so in single mode its throughput
        floor acts only on ticks where the load rule happens to have an opinion."""
        n = self.inventory.ready(role)
        if self.inventory.scaling_in_progress(role):
            self._set_load_reason(diag, "scaling_in_progress")
            return None
        if not fpms and not self._floors_empty_role(role):
            self._set_load_reason(diag, "no_fpm_data")
            return None
        if n is None or not fpm_covers_workers(fpms or {}, n):
            self._set_load_reason(diag, "worker_count_mismatch")
            return None
        proposal = self._propose(role, fpms, n, diag) if fpms else LoadProposal(None, "no_fpm_data")
        if (
            proposal.desired is None
            and self.config.mode != "agg"  # agg holds at N and floors it (§4.7), as we do
            and not self.config.load_hold_applies_floors
        ):  # the reference: no opinion, no decision
            self._set_load_reason(
                diag, settle_reason(current=n, proposal=proposal, post_floor=n, final=n)
            )
            return None
        original = n if proposal.desired is None else proposal.desired
        post_floor = self._apply_floor(role, original)
        final, budget_reason = self._budget().guard_single(role, n, post_floor)
        reason = budget_reason or settle_reason(
            current=n, proposal=proposal, post_floor=post_floor, final=final
        )
        self._set_load_reason(diag, reason)
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

    def _load_disagg(self, obs: FpmObservations, diag: TickDiagnostics) -> ScaleTarget | None:
        inv = self.inventory
        both: tuple[Role, Role] = ("prefill", "decode")
        held = {role for role in both if inv.scaling_in_progress(role)}
        if held and (self.config.in_progress_guard == "deployment" or len(held) == 2):
            self._set_load_reason(diag, "scaling_in_progress")
            return None
        if held:
            return self._load_disagg_one_role(obs, held.pop(), diag)
        p_fpms, d_fpms = obs.prefill, obs.decode
        if not (p_fpms or d_fpms or any(self._floors_empty_role(r) for r in both)):
            self._set_load_reason(diag, "no_fpm_data")
            return None
        n_p, n_d = inv.ready("prefill"), inv.ready("decode")
        if (
            n_p is None
            or n_d is None
            or (p_fpms and not fpm_covers_workers(p_fpms, n_p))
            or (d_fpms and not fpm_covers_workers(d_fpms, n_d))
        ):
            self._set_load_reason(diag, "worker_count_mismatch")
            return None
        missing = LoadProposal(None, "no_fpm_data")
        p_prop = self._propose("prefill", p_fpms, n_p, diag) if p_fpms else missing
        d_prop = self._propose("decode", d_fpms, n_d, diag) if d_fpms else missing
        p_floor = self._apply_floor("prefill", n_p if p_prop.desired is None else p_prop.desired)
        d_floor = self._apply_floor("decode", n_d if d_prop.desired is None else d_prop.desired)
        final_p, final_d, budget_reason = self._budget().guard_pair((n_p, n_d), (p_floor, d_floor))
        p_reason = settle_reason(current=n_p, proposal=p_prop, post_floor=p_floor, final=final_p)
        d_reason = settle_reason(current=n_d, proposal=d_prop, post_floor=d_floor, final=final_d)
        changed = (final_p, final_d) != (n_p, n_d)
        reason = aggregate_reason((p_reason, d_reason), changed)
        if budget_reason is not None:  # the budget overrode what the roles asked for
            p_min, d_min = self._min_endpoint("prefill"), self._min_endpoint("decode")
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

    def _load_disagg_one_role(
        self, obs: FpmObservations, held: Role, diag: TickDiagnostics
    ) -> ScaleTarget | None:
        """Ours (``in_progress_guard="role"``): ``held`` has a scale in flight and takes no new
        step (no stacking, spec §17 items 6/10, per role); the other role decides alone. The
        held role's in-flight target is left as it is (``None`` in the decision), and the GPU
        budget is checked with the held role at that target: if the pair clamp would have to
        change the held role, nothing moves this tick."""
        moving: Role = "decode" if held == "prefill" else "prefill"
        self._set_role_load_reason(diag, held, "scaling_in_progress")
        fpms = obs.for_role(moving)
        n = self.inventory.ready(moving)
        held_target = self.inventory.current_target(held)
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
            final_p, final_d, budget_reason = self._budget().guard_pair(
                (current["prefill"], current["decode"]), (pair["prefill"], pair["decode"])
            )
            final = final_p if moving == "prefill" else final_d
            if (final_d if moving == "prefill" else final_p) != held_target:
                final = n  # the budget cannot fund this step without touching the held role
                if budget_reason is not None:
                    budget_reason = "gpu_budget_guard_hold"
            reason = settle_reason(current=n, proposal=proposal, post_floor=post_floor, final=final)
            if budget_reason is not None and final != max(post_floor, self._min_endpoint(moving)):
                reason = budget_reason
            self._set_role_load_reason(diag, moving, reason)
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
        self._set_role_load_reason(diag, moving, reason)
        diag.load_decision_reason = "scaling_in_progress"
        return None

    def _floors_empty_role(self, role: Role) -> bool:
        """Ours (``load_hold_applies_floors``): a role with no replicas ready or starting has
        no forward passes to show, and that is no reason to leave it there: its load tick holds
        it at zero and the floors (min endpoints, throughput lower bound) lift it. The reference
        makes no decision without forward passes, so a role scaled to zero never comes back."""
        return (
            self.config.load_hold_applies_floors
            and self.inventory.ready(role) == 0
            and self.inventory.current_target(role) == 0
        )

    def _apply_floor(self, role: Role, desired: int) -> int:
        if self.config.enable_throughput_scaling:
            return max(desired, self._lower_bounds[role])
        return desired

    def _size_for_recent_rate(self, traffic: TrafficObservation | None) -> RateNeeds:
        """Ours (``load_rate_window_seconds``): per role, the replicas the recent request rate
        needs at full capacity, and the fewest that keep every engine within
        ``load_rate_utilization`` of it. Empty when off, without traffic, before a full window
        has passed, or while a model is not ready."""
        cfg = self.config
        if cfg.load_rate_window_seconds <= 0 or not cfg.sla_mode:
            return {}
        if traffic is None or not traffic.duration_s > 0:
            return {}
        demand = traffic.num_req / traffic.duration_s
        if self._now_s - self._started_s < cfg.load_rate_window_seconds:
            return {}  # the window reaches back before the planner started: a partial count
        utilization = cfg.load_rate_utilization
        needs: RateNeeds = {}
        for role in cfg.roles:
            capacity = self._capacity(role, demand, traffic.isl, traffic.osl)
            rps = capacity.engine_rps
            if capacity.replicas is None or rps is None or not rps > 0:
                continue
            min_ep = self._min_endpoint(role)
            full = max(math.ceil(demand / rps), min_ep)
            within = max(math.ceil(demand / (rps * utilization)), min_ep)
            needs[role] = (full, within)
        return needs

    def _propose(self, role: Role, fpms: Fpms, n: int, diag: TickDiagnostics) -> LoadProposal:
        """The role's load rule, then (ours, SLA target) the rate guard."""
        proposal = self._rule_proposal(role, fpms, n, diag)
        if not self.config.sla_mode:  # the threshold targets stay the reference's (§4.3)
            return proposal
        return self.rate_guard.adjust(role, n, proposal)

    def _rule_proposal(self, role: Role, fpms: Fpms, n: int, diag: TickDiagnostics) -> LoadProposal:
        cfg = self.config
        caps = self._caps(role)
        min_ep = self._min_endpoint(role)
        if not cfg.sla_mode:  # threshold targets: throughput, latency, load (§4.3)
            rules = threshold_rules(cfg)
            if role == "prefill":
                unit = rules.prefill_unit or caps.context_length
                return prefill_queue_proposal(fpms, n, rules.prefill, unit, min_ep)
            return decode_kv_proposal(
                fpms, n, rules.decode, caps.max_kv_tokens, min_ep, agg=cfg.mode == "agg"
            )
        sensitivity = cfg.load_scaling_down_sensitivity / 100.0
        model = self._models[role]
        if isinstance(model, PrefillPerfModel):
            proposal = sla_prefill_proposal(
                model,
                fpms,
                n,
                max_num_batched_tokens=caps.max_num_batched_tokens,
                ttft_sla_ms=cfg.ttft_ms,
                sensitivity=sensitivity,
                rule=cfg.scale_down_rule,
                kv_hit_rate=self.metadata.kv_hit_rate,
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
                accept_length=self.accept_length,
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
            kv_hit_rate=self.metadata.kv_hit_rate,
            accept_length=self.accept_length,
            min_endpoint=min_ep,
            max_num_seqs=caps.max_num_seqs,
            queue_aware=cfg.queue_aware_estimates,
            max_step=cfg.max_load_step,
        )
        diag.estimated_ttft_ms = prefill.estimate_ms if prefill is not None else None
        diag.estimated_itl_ms = decode.estimate_ms
        return combine_agg(prefill, decode, n)

    # --- throughput scaling (§5) -------------------------------------------------------------
    def _set_throughput_reason(self, diag: TickDiagnostics, reason: ThroughputReason) -> None:
        diag.throughput_decision_reason = reason
        for role in self.config.roles:
            self._set_role_throughput_reason(diag, role, reason)

    @staticmethod
    def _set_role_throughput_reason(
        diag: TickDiagnostics, role: Role, reason: ThroughputReason
    ) -> None:
        if role == "prefill":
            diag.throughput_decision_reason_prefill = reason
        else:
            diag.throughput_decision_reason_decode = reason

    def _throughput_tick(
        self, traffic: TrafficObservation | None, diag: TickDiagnostics
    ) -> ScaleTarget | None:
        if not self.config.enable_throughput_scaling or self.forecaster is None:
            self._set_throughput_reason(diag, "disabled")
            return None
        if traffic is None or not traffic.duration_s > 0:
            self._set_throughput_reason(diag, "no_traffic_data")
            return None
        self.forecaster.observe(traffic)
        try:
            forecast = self.forecaster.forecast()
        except Exception:  # any predictor failure only skips this tick (spec §5.3)
            self._set_throughput_reason(diag, "predict_failed")
            return None
        if not all(math.isfinite(v) for v in (forecast.num_req, forecast.isl, forecast.osl)):
            self._set_throughput_reason(diag, "predict_failed")
            return None
        diag.predicted_num_req = forecast.num_req
        diag.predicted_isl = forecast.isl
        diag.predicted_osl = forecast.osl
        diag.predicted_kv_hit_rate = self.metadata.kv_hit_rate
        demand_rps = forecast.num_req / traffic.duration_s
        isl, osl = sizing_lengths(
            forecast.isl,
            forecast.osl,
            self.forecaster.last_shape,
            isl_quantile=self.config.capacity_isl_quantile,
            osl_quantile=self.config.capacity_osl_quantile,
        )
        sized = {role: self._capacity(role, demand_rps, isl, osl) for role in self.config.roles}
        if self.config.zero_demand_to_min_endpoint and not demand_rps > 0:
            # ours: no requests need the endpoint floor, whatever the models can answer (the
            # zero lengths forecast before any traffic make every capacity query answer 0)
            sized = {role: idle_capacity(c, self._min_endpoint(role)) for role, c in sized.items()}
        if sized.get("prefill") is not None:
            diag.engine_rps_prefill = sized["prefill"].engine_rps
        if sized.get("decode") is not None:
            diag.engine_rps_decode = sized["decode"].engine_rps
            if self.config.mode == "agg":
                diag.engine_rps_prefill = sized["decode"].engine_rps

        if any(c.replicas is None for c in sized.values()):
            for role, c in sized.items():
                self._set_role_throughput_reason(
                    diag, role, "model_not_ready" if c.replicas is None else "partner_not_ready"
                )
            diag.throughput_decision_reason = "model_not_ready"
            return self._hold_at_min_endpoints(diag)

        targets = {
            role: self._change_capped(role, c.replicas)
            for role, c in sized.items()
            if c.replicas is not None
        }
        if self.config.enable_load_scaling:
            bounds, budget_reason = self._budget().fit_throughput(targets, lower_bounds=True)
            self._lower_bounds.update(bounds)
            self._set_throughput_reason(diag, budget_reason or "set_lower_bound")
            return None
        targets, budget_reason = self._budget().fit_throughput(targets, lower_bounds=False)
        in_effect = all(self.inventory.current_target(role) == n for role, n in targets.items())
        if budget_reason is not None and (
            budget_reason == "gpu_budget_guard_hold"  # nothing moves (not even back to ready)
            or (budget_reason == "power_budget_clamp" and in_effect)  # the power budget held
        ):
            self._set_throughput_reason(diag, budget_reason)
            return None
        return self._throughput_target(targets, budget_reason or "scale", diag)

    def _change_capped(self, role: Role, desired: int) -> int:
        """Spec §5.4: one observation moves a role at most ``max_throughput_scaling_replicas``
        from its ready count, then the endpoint floor (which may exceed the cap). The cap is
        taken from the ready count each time, so re-evaluating an observation never ratchets;
        with no count known there is nothing to cap against."""
        current = self.inventory.ready(role)
        if current is None:
            return desired
        cap = self.config.max_throughput_scaling_replicas
        bounded = min(max(desired, max(0, current - cap)), current + cap)
        return max(bounded, self._min_endpoint(role))

    def _capacity(self, role: Role, demand_rps: float, isl: float, osl: float) -> Capacity:
        cfg = self.config
        caps = self._caps(role)
        model = self._models.get(role)
        min_ep = self._min_endpoint(role)
        if isinstance(model, PrefillPerfModel):
            return prefill_capacity(
                model,
                demand_rps,
                isl,
                kv_hit_rate=self.metadata.kv_hit_rate,
                ttft_sla_ms=cfg.ttft_ms,
                max_num_batched_tokens=caps.max_num_batched_tokens,
                min_endpoint=min_ep,
                max_batch_requests=(
                    caps.max_num_seqs or caps.max_num_batched_tokens
                    if cfg.prefill_capacity_batching
                    else None
                ),
            )
        if isinstance(model, DecodePerfModel):
            return decode_capacity(
                model,
                demand_rps,
                isl,
                osl,
                itl_sla_ms=cfg.itl_ms,
                max_kv_tokens=caps.max_kv_tokens,
                max_num_seqs=caps.max_num_seqs,
                accept_length=self.accept_length,
                min_endpoint=min_ep,
            )
        if isinstance(model, AggPerfModel):
            return agg_capacity(
                model,
                demand_rps,
                isl,
                osl,
                max_num_batched_tokens=caps.max_num_batched_tokens,
                ttft_sla_ms=cfg.ttft_ms,
                itl_sla_ms=cfg.itl_ms,
                max_kv_tokens=caps.max_kv_tokens,
                max_num_seqs=caps.max_num_seqs,
                kv_hit_rate=self.metadata.kv_hit_rate,
                accept_length=self.accept_length,
                min_endpoint=min_ep,
            )
        return Capacity(None)

    def _hold_at_min_endpoints(self, diag: TickDiagnostics) -> ScaleTarget | None:
        """Model not ready: hold the current counts, but never below the min endpoints
        (throughput-only deployments; with load scaling on, its own floors apply)."""
        if self.config.enable_load_scaling:
            return None
        targets: dict[Role, int] = {}
        for role in self.config.roles:
            current = self.inventory.current_target(role)
            if current is not None:
                targets[role] = max(current, self._min_endpoint(role))
        return self._throughput_target(targets, "model_not_ready", diag, keep_reasons=True)

    def _throughput_target(
        self,
        targets: Mapping[Role, int],
        reason: ThroughputReason,
        diag: TickDiagnostics,
        *,
        keep_reasons: bool = False,
    ) -> ScaleTarget | None:
        """A throughput decision, or ``None`` (``no_change``) when every target equals the
        count already in effect (expected, else ready)."""
        unchanged = all(self.inventory.current_target(r) == n for r, n in targets.items())
        if not targets or unchanged:
            if not keep_reasons:
                self._set_throughput_reason(diag, "no_change")
            return None
        if not keep_reasons:
            self._set_throughput_reason(diag, reason)
        return ScaleTarget(
            num_prefill=targets.get("prefill"),
            num_decode=targets.get("decode"),
            source="throughput",
            reason=reason,
            prefill_reason=diag.throughput_decision_reason_prefill,
            decode_reason=diag.throughput_decision_reason_decode,
        )
