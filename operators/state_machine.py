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

The loops are collaborators: :class:`operators.throughput_loop.ThroughputLoop` (step 3, owns the
forecaster and the replica floors) and :class:`operators.load_loop.LoadLoop` (step 4, owns the
rate guard and reads those floors); both ask :class:`operators.engine_fleet.EngineFleet` (config,
capabilities, inventory, runtime metadata, perf models) about the engines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from operators.cadence import Cadence
from operators.engine_fleet import EngineFleet
from operators.inventory import Inventory
from operators.load_loop import LoadLoop
from operators.perf import AggPerfModel, DecodePerfModel, PrefillPerfModel
from operators.rate_guard import RateGuard
from operators.throughput_loop import ThroughputLoop
from operators.tick import FpmObservations, PlannerEffects, ScaleTarget, ScheduledTick, TickInput
from operators.traffic_intake import RuntimeMetadata, TrafficForecaster
from schemas import (
    ForwardPassMetrics,
    PlannerConfig,
    Role,
    TickDiagnostics,
    TrafficObservation,
    WorkerCapabilities,
)


class PlannerStateMachine:
    """Load- and throughput-based scaling of one deployment.

    >>> from operators.tick import FpmObservations, TickInput
    >>> from schemas import EngineCapabilities, ForwardPassMetrics, QueuedRequestMetrics
    >>> from schemas import WorkerCounts
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
        self.cadence = Cadence.starting_at(config, 0.0)
        forecaster = (
            TrafficForecaster.from_config(config) if config.enable_throughput_scaling else None
        )
        rate_guard = RateGuard(config)
        self.fleet = EngineFleet(config, capabilities)
        self.throughput = ThroughputLoop(self.fleet, forecaster)
        self.load = LoadLoop(self.fleet, rate_guard, floors=self.throughput.lower_bounds)

    # --- read-only views ---------------------------------------------------------------------
    @property
    def config(self) -> PlannerConfig:
        """The planner config."""
        return self.fleet.config

    @property
    def inventory(self) -> Inventory:
        """The worker inventory (last snapshot)."""
        return self.fleet.inventory

    @property
    def metadata(self) -> RuntimeMetadata:
        """The runtime metadata: KV hit rate and accept length observed."""
        return self.fleet.metadata

    @property
    def forecaster(self) -> TrafficForecaster | None:
        """The traffic forecaster (throughput scaling on), else ``None``."""
        return self.throughput.forecaster

    @property
    def rate_guard(self) -> RateGuard:
        """The load loop's rate guard (ours: recent request rate, stabilization window)."""
        return self.load.rate_guard

    @property
    def capabilities(self) -> WorkerCapabilities:
        """The engine capabilities in use."""
        return self.fleet.capabilities

    @property
    def prefill_model(self) -> PrefillPerfModel | None:
        """The prefill perf model (SLA target, prefill/disagg modes), else ``None``."""
        model = self.fleet.models.get("prefill")
        return model if isinstance(model, PrefillPerfModel) else None

    @property
    def decode_model(self) -> DecodePerfModel | None:
        """The decode perf model (SLA target, decode/disagg modes), else ``None``."""
        model = self.fleet.models.get("decode")
        return model if isinstance(model, DecodePerfModel) else None

    @property
    def agg_model(self) -> AggPerfModel | None:
        """The aggregated-engine perf model (SLA target, agg mode), else ``None``."""
        model = self.fleet.models.get("decode")
        return model if isinstance(model, AggPerfModel) else None

    @property
    def perf_samples_set_aside(self) -> dict[Role, int]:
        """Forward passes each perf model has set aside as unconfirmed suspects, so far."""
        return {role: model.set_aside for role, model in self.fleet.models.items()}

    @property
    def throughput_lower_bounds(self) -> Mapping[Role, int]:
        """Replica floors set by the last throughput tick (1 until then; agg uses ``decode``)."""
        return dict(self.throughput.lower_bounds)

    @property
    def kv_hit_rate(self) -> float | None:
        """Last observed KV hit rate (``None`` until one is observed: no discount)."""
        return self.fleet.metadata.kv_hit_rate

    @property
    def accept_length(self) -> float:
        """Effective speculative-decoding accept length (1.0 without speculation)."""
        return self.fleet.accept_length

    def gpus_per_replica(self, role: Role) -> int | None:
        """GPUs of one replica of ``role``: the workers' capabilities, else the config."""
        return self.fleet.gpus_per_replica(role)

    # --- set-up ------------------------------------------------------------------------------
    def set_config(self, config: PlannerConfig) -> None:
        """Plan with ``config`` from the next tick on (a :class:`schemas.Limits` change: the
        loops, the budget and the rate guard read their limits from it)."""
        self.fleet.config = config
        self.load.rate_guard.config = config
        self.throughput.refit_lower_bounds()

    def set_capabilities(self, capabilities: WorkerCapabilities) -> None:
        """Replace the engine capabilities (discovered from workers or configured)."""
        self.fleet.capabilities = capabilities
        self.fleet.retire_foreign_benchmarks()

    def load_benchmark_fpms(self, role: Role, fpms: Iterable[ForwardPassMetrics]) -> int:
        """Bootstrap a perf model from profiled forward passes (spec §6.3).

        Agg engines learn from both roles' profile points (a pure-prefill or pure-decode pass is
        a valid aggregated sample). Returns how many FPMs were loaded: 0 for the threshold
        targets (no perf models) and for a role this deployment does not have.
        """
        model = self.fleet.models.get("decode" if self.config.mode == "agg" else role)
        if model is None:
            return 0
        fpms = list(fpms)
        model.load_benchmark_fpms(fpms)
        self.fleet.retire_foreign_benchmarks()
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
        self.load.started_s = start_s
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
            throughput_target = self._throughput_tick(traffic, diag, tick_input.now_s)

        load_target = None
        if tick.run_load_scaling:
            self._train(tick_input)
            rate = None if tick_input.rate_traffic_unknown else tick_input.rate_traffic or traffic
            self.load.begin_tick(tick_input.now_s, rate)
            load_target = self._load_tick(tick_input.fpm_observations, diag)
            self.load.end_tick(load_target)

        both_loops = self.config.enable_load_scaling and self.config.enable_throughput_scaling
        if both_loops and (tick.run_load_scaling or tick.run_throughput_scaling):
            diag.throughput_lower_bound_prefill = self.throughput.bound_for("prefill")
            diag.throughput_lower_bound_decode = self.throughput.bound_for("decode")
        self.cadence.advance(self.config, tick, tick_input.now_s)
        scale_to = load_target if load_target is not None else throughput_target
        if scale_to is not None:
            scale_to = scale_to.within_replica_ceiling()
        self._report_power(scale_to, diag)
        return PlannerEffects(
            scale_to=scale_to,
            next_tick=self.cadence.next_tick(self.config),
            diagnostics=diag,
        )

    # The loops' steps, as methods of the machine so a profiler (bench/scale.py) can time each.
    def _throughput_tick(
        self, traffic: TrafficObservation | None, diag: TickDiagnostics, now_s: float
    ) -> ScaleTarget | None:
        return self.throughput.tick(traffic, diag, now_s)

    def _train(self, tick_input: TickInput) -> None:
        self.load.train(tick_input)

    def _load_tick(self, obs: FpmObservations | None, diag: TickDiagnostics) -> ScaleTarget | None:
        return self.load.tick(obs, diag)

    def _report_power(self, scale_to: ScaleTarget | None, diag: TickDiagnostics) -> None:
        """The power diagnostics: the limit, and what the planned counts draw (the decision's,
        else the counts in effect; none while a count or cap is unknown)."""
        power = self.fleet.power_budget()
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
