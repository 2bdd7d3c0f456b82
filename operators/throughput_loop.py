"""The throughput loop of one deployment's planner (reference spec §5).

Each throughput tick feeds the traffic forecaster the tick's observation, forecasts the next
interval and sizes every role for it with the perf models (:meth:`EngineFleet.capacity`). With
load scaling on, the sizes only become the replica floors the load loop applies
(:attr:`ThroughputLoop.lower_bounds`); otherwise they are a throughput decision, whose
scale-downs (ours, ``scale_down_stabilization_seconds``, as Kubernetes' HPA) go no lower than
the highest sizing of the ticks within that window: on a steady load whose need sits at a
replica boundary, a throughput-only deployment went 3↔4 on every tick.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

from operators.engine_fleet import EngineFleet
from operators.throughput_scaling import Capacity, idle_capacity, sizing_lengths
from operators.tick import ScaleTarget
from operators.traffic_intake import TrafficForecaster
from schemas import Role, ThroughputReason, TickDiagnostics, TrafficObservation
from schemas.events import MAX_REPLICAS


class ThroughputLoop:
    """Forecast-based sizing of one deployment's roles; owns the forecaster and the replica
    floors (1 per role until the first sizing; agg uses ``decode``).

    >>> from schemas import PlannerConfig
    >>> config = PlannerConfig(mode="decode", optimization_target="sla")
    >>> loop = ThroughputLoop(EngineFleet(config), TrafficForecaster.from_config(config))
    >>> diag = TickDiagnostics()
    >>> loop.tick(None, diag, now_s=60.0), diag.throughput_decision_reason
    (None, 'no_traffic_data')
    >>> loop.lower_bounds, loop.bound_for("decode"), loop.bound_for("prefill")
    ({'prefill': 1, 'decode': 1}, 1, None)
    """

    def __init__(self, fleet: EngineFleet, forecaster: TrafficForecaster | None) -> None:
        self.fleet = fleet
        self.forecaster = forecaster
        self.lower_bounds: dict[Role, int] = {"prefill": 1, "decode": 1}
        self._sized: dict[Role, int] = {}  # the step-capped sizing behind the lower bounds
        self._recent: deque[tuple[float, dict[Role, int]]] = deque()  # (time, sizing)

    def bound_for(self, role: Role) -> int | None:
        """The replica floor of ``role``, or ``None`` for a role the deployment lacks."""
        return self.lower_bounds[role] if role in self.fleet.config.roles else None

    def _set_reason(self, diag: TickDiagnostics, reason: ThroughputReason) -> None:
        diag.throughput_decision_reason = reason
        for role in self.fleet.config.roles:
            self._set_role_reason(diag, role, reason)

    @staticmethod
    def _set_role_reason(diag: TickDiagnostics, role: Role, reason: ThroughputReason) -> None:
        if role == "prefill":
            diag.throughput_decision_reason_prefill = reason
        else:
            diag.throughput_decision_reason_decode = reason

    def tick(
        self, traffic: TrafficObservation | None, diag: TickDiagnostics, now_s: float
    ) -> ScaleTarget | None:
        """One throughput tick at ``now_s`` on ``traffic``: a decision (throughput-only
        deployments) or ``None``; the floors and ``diag`` are updated."""
        config = self.fleet.config
        if not config.enable_throughput_scaling or self.forecaster is None:
            self._set_reason(diag, "disabled")
            return None
        if traffic is None or not traffic.duration_s > 0:
            self._set_reason(diag, "no_traffic_data")
            return None
        demand = self._forecast_demand(self.forecaster, traffic, diag)
        if demand is None:
            self._set_reason(diag, "predict_failed")
            return None
        demand_rps, isl, osl = demand
        idle = config.zero_demand_to_min_endpoint and not demand_rps > 0
        sized = self._size(demand_rps, isl, osl, idle, diag)
        if any(c.replicas is None for c in sized.values()):
            for role, c in sized.items():
                self._set_role_reason(
                    diag, role, "model_not_ready" if c.replicas is None else "partner_not_ready"
                )
            diag.throughput_decision_reason = "model_not_ready"
            return self._hold_at_min_endpoints(diag)
        capped = {
            role: self._change_capped(role, 0 if idle else c.replicas)  # idle: the floor alone
            for role, c in sized.items()
            if c.replicas is not None
        }
        if config.enable_load_scaling:
            self._sized = capped
            bounds, budget_reason = self.fleet.budget().fit_throughput(
                self._floored(capped), lower_bounds=True
            )
            self.lower_bounds.update(bounds)
            self._set_reason(diag, budget_reason or "set_lower_bound")
            return None
        return self._decide(self._floored(capped), now_s, diag)

    def _forecast_demand(
        self, forecaster: TrafficForecaster, traffic: TrafficObservation, diag: TickDiagnostics
    ) -> tuple[float, float, float] | None:
        """Observe ``traffic`` and forecast the next interval: ``(requests/s, ISL, OSL)`` to
        size for (recorded in ``diag``), or ``None`` when the forecast failed or is not finite
        (which only skips this tick, spec §5.3)."""
        forecaster.observe(traffic)
        try:
            forecast = forecaster.forecast()
        except Exception:  # any predictor failure only skips this tick (spec §5.3)
            return None
        if not all(math.isfinite(v) for v in (forecast.num_req, forecast.isl, forecast.osl)):
            return None
        diag.predicted_num_req = forecast.num_req
        diag.predicted_isl = forecast.isl
        diag.predicted_osl = forecast.osl
        diag.predicted_kv_hit_rate = self.fleet.metadata.kv_hit_rate
        demand_rps = forecast.num_req / traffic.duration_s
        if not math.isfinite(demand_rps):  # a count over a window too short to divide by
            return None
        config = self.fleet.config
        isl, osl = sizing_lengths(
            forecast.isl,
            forecast.osl,
            forecaster.last_shape,
            isl_quantile=config.capacity_isl_quantile,
            osl_quantile=config.capacity_osl_quantile,
        )
        return demand_rps, isl, osl

    def _size(
        self, demand_rps: float, isl: float, osl: float, idle: bool, diag: TickDiagnostics
    ) -> dict[Role, Capacity]:
        """Every role's capacity for the demand, without the endpoint floor, which comes after
        the step cap (:meth:`_floored`): a limits change then refits the lower bounds to the
        new floor (:meth:`refit_lower_bounds`). ``idle``: no demand, which needs the endpoint
        floor alone. The engine rates go to ``diag``."""
        fleet, config = self.fleet, self.fleet.config
        sized = {
            role: fleet.capacity(role, demand_rps, isl, osl, floor=False) for role in config.roles
        }
        if idle:
            # ours: no requests need the endpoint floor, whatever the models can answer (the
            # zero lengths forecast before any traffic make every capacity query answer 0)
            sized = {role: idle_capacity(c, fleet.min_endpoint(role)) for role, c in sized.items()}
        if "prefill" in sized:
            diag.engine_rps_prefill = sized["prefill"].engine_rps
        if "decode" in sized:
            diag.engine_rps_decode = sized["decode"].engine_rps
            if config.mode == "agg":
                diag.engine_rps_prefill = sized["decode"].engine_rps
        return sized

    def _decide(
        self, targets: dict[Role, int], now_s: float, diag: TickDiagnostics
    ) -> ScaleTarget | None:
        """A throughput-only deployment's decision for the floored sizing ``targets``: held by
        the scale-down stabilization window, then fitted to the budgets."""
        inventory = self.fleet.inventory
        targets, held = self._stabilized(targets, now_s)
        targets, budget_reason = self.fleet.budget().fit_throughput(targets, lower_bounds=False)
        in_effect = all(inventory.current_target(role) == n for role, n in targets.items())
        if budget_reason is not None and (
            budget_reason == "gpu_budget_guard_hold"  # nothing moves (not even back to ready)
            or (budget_reason == "power_budget_clamp" and in_effect)  # the power budget held
        ):
            self._set_reason(diag, budget_reason)
            return None
        if held and in_effect:
            self._set_reason(diag, "no_change")
            for role in held:
                self._set_role_reason(diag, role, "scale_down_stabilizing")
            diag.throughput_decision_reason = "scale_down_stabilizing"
            return None
        return self._target(targets, budget_reason or "scale", diag, held=held)

    def _stabilized(
        self, targets: dict[Role, int], now_s: float
    ) -> tuple[dict[Role, int], set[Role]]:
        """``targets`` with each scale-down lifted to the highest sizing of the ticks within
        the stabilization window before ``now_s`` (never above the count in effect), and the
        roles so held."""
        window_s = self.fleet.config.scale_down_stabilization_seconds
        while self._recent and self._recent[0][0] < now_s - window_s:
            self._recent.popleft()
        window = [sized for _, sized in self._recent]
        if window_s > 0:
            self._recent.append((now_s, dict(targets)))
        stabilized, held = dict(targets), set()
        for role, n in targets.items():
            current = self.fleet.inventory.current_target(role)
            if current is None or n >= current:
                continue
            highest = max([n, *(sized.get(role, n) for sized in window)])
            stabilized[role] = min(current, highest)
            if stabilized[role] > n:
                held.add(role)
        return stabilized, held

    def refit_lower_bounds(self) -> None:
        """The limits changed (:class:`schemas.Limits`): fit the last sizing's lower bounds to
        them again now, so a lowered floor or ceiling holds from the next tick, not from the
        next throughput tick that sizes."""
        if self._sized:
            targets = self._floored(self._sized)
            bounds, _ = self.fleet.budget().fit_throughput(targets, lower_bounds=True)
            self.lower_bounds.update(bounds)

    def _change_capped(self, role: Role, desired: int) -> int:
        """Spec §5.4: one observation moves a role at most ``max_throughput_scaling_replicas``
        from its ready count (then comes the endpoint floor, which may exceed the cap:
        :meth:`_floored`). The cap is taken from the ready count each time, so re-evaluating an
        observation never ratchets; with no count known there is nothing to cap against but
        :data:`schemas.events.MAX_REPLICAS`, the most any role can have (a lower bound too)."""
        current = self.fleet.inventory.ready(role)
        if current is not None:
            cap = self.fleet.config.max_throughput_scaling_replicas
            desired = min(max(desired, max(0, current - cap)), current + cap)
        return min(desired, MAX_REPLICAS)

    def _floored(self, replicas: Mapping[Role, int]) -> dict[Role, int]:
        return {role: max(n, self.fleet.min_endpoint(role)) for role, n in replicas.items()}

    def _hold_at_min_endpoints(self, diag: TickDiagnostics) -> ScaleTarget | None:
        """Model not ready: hold the current counts, but never below the min endpoints
        (throughput-only deployments; with load scaling on, its own floors apply)."""
        if self.fleet.config.enable_load_scaling:
            return None
        targets: dict[Role, int] = {}
        for role in self.fleet.config.roles:
            current = self.fleet.inventory.current_target(role)
            if current is not None:
                targets[role] = max(current, self.fleet.min_endpoint(role))
        return self._target(targets, "model_not_ready", diag, keep_reasons=True)

    def _target(
        self,
        targets: Mapping[Role, int],
        reason: ThroughputReason,
        diag: TickDiagnostics,
        *,
        keep_reasons: bool = False,
        held: set[Role] | None = None,
    ) -> ScaleTarget | None:
        """A throughput decision, or ``None`` (``no_change``) when every target equals the
        count already in effect (expected, else ready); the ``held`` roles' reason is
        ``scale_down_stabilizing``."""
        inventory = self.fleet.inventory
        unchanged = all(inventory.current_target(r) == n for r, n in targets.items())
        if not targets or unchanged:
            if not keep_reasons:
                self._set_reason(diag, "no_change")
            return None
        if not keep_reasons:
            self._set_reason(diag, reason)
        for role in held or ():
            self._set_role_reason(diag, role, "scale_down_stabilizing")
        return ScaleTarget(
            num_prefill=targets.get("prefill"),
            num_decode=targets.get("decode"),
            source="throughput",
            reason=reason,
            prefill_reason=diag.throughput_decision_reason_prefill,
            decode_reason=diag.throughput_decision_reason_decode,
        )
