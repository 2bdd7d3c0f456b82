"""How the planner fits one tick's replica counts into the deployment's GPU budget.

``gpu_budget_rule`` picks the rule: ``band`` (spec §8.2, ours by default) guards load actions
so that a budget may shrink a move but never reverse it, and fits throughput targets to the
funded part of their move from the ready counts; ``pair_clamp`` (§8.1, the reference variant)
clamps every count proportionally. Minimum endpoints come first in both (§4.7). When the
engines report more GPUs per replica than the config assumed, the budget may no longer fund the
minimum endpoints: §8.1/§8.2 then scale the deployment to 0, which ``pair_clamp`` keeps; *ours*,
``band`` raises its ceiling to what the minimum endpoints need (:attr:`GpuBudget.max_gpus`), so
no role is scaled below its minimum endpoint for it and the fleet stays at those. With
``enable_power_awareness`` the power budget (:mod:`operators.power_budget`) then cuts what is
left of a scale-up (reason ``power_budget_clamp``); it never touches throughput lower bounds
(the load action a bound lifts is cut instead).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from operators.budget import apply_global_budget, apply_single_budget
from operators.budget_band import (
    BudgetReason,
    compute_tolerance,
    fit_throughput_pair,
    fit_throughput_single,
    guard_disagg_scaling_budget,
    guard_single_scaling_budget,
)
from operators.power_budget import CLAMP, PowerBudget, PowerReason
from schemas import PlannerConfig, Role

Reason = BudgetReason | PowerReason


@dataclass(frozen=True)
class GpuBudget:
    """One deployment's GPU budget at one tick: its config, each role's GPUs per replica
    (``None``: unknown, no budget for it) and ready replicas (``None``: unknown); with power
    awareness, the power budget and the counts in effect (expected, else ready) that
    throughput targets start from.

    >>> config = PlannerConfig(mode="decode", max_gpu_budget=4)
    >>> budget = GpuBudget(config, {"prefill": None, "decode": 1}, {"prefill": None, "decode": 4})
    >>> budget.guard_single("decode", 4, 5)  # a full budget holds a scale-up
    (4, 'gpu_budget_guard_hold')
    >>> budget.guard_single("decode", 4, 3)
    (3, None)
    >>> GpuBudget(config.model_copy(update={"gpu_budget_rule": "pair_clamp"}), budget.gpus,
    ...           budget.ready).guard_single("decode", 4, 5)  # §8.1: clamped to the ceiling
    (4, None)

    Engines that report 8 GPUs each: 4 GPUs cannot fund the one minimum replica.

    >>> big = GpuBudget(config, {"prefill": None, "decode": 8}, {"prefill": None, "decode": 2})
    >>> big.unfunded_minimum(), big.max_gpus, big.guard_single("decode", 2, 2)
    (8, 8, (1, 'gpu_budget_reconcile'))
    >>> GpuBudget(config.model_copy(update={"gpu_budget_rule": "pair_clamp"}), big.gpus,
    ...           big.ready).guard_single("decode", 2, 2)  # §8.1: infeasible, scaled to 0
    (0, None)
    """

    config: PlannerConfig
    gpus: Mapping[Role, int | None]
    ready: Mapping[Role, int | None]
    power: PowerBudget | None = None
    in_effect: Mapping[Role, int | None] | None = None

    def min_endpoint(self, role: Role) -> int:
        return self.config.min_endpoint_for(role)

    def unfunded_minimum(self) -> int | None:
        """The GPUs the minimum endpoints of the deployment's roles need when
        ``max_gpu_budget`` cannot fund them, else ``None`` (funded, no budget, or a role's
        GPUs per replica unknown)."""
        need = 0
        for role in self.config.roles:
            gpus = self.gpus[role]
            if gpus is None:
                return None
            need += self.min_endpoint(role) * gpus
        return need if 0 <= self.config.max_gpu_budget < need else None

    @property
    def max_gpus(self) -> int:
        """The ceiling the rule applies: ``max_gpu_budget``, except that ``band`` (ours) raises
        one that cannot fund the minimum endpoints to what they need, where §8.1/§8.2 (and
        ``pair_clamp``) scale the deployment to 0."""
        need = self.unfunded_minimum()
        if need is None or self.config.gpu_budget_rule != "band":
            return self.config.max_gpu_budget
        return need

    def clamp_single(self, role: Role, desired: int) -> int:
        """``max(desired, min_endpoint)`` then the §8.1 clamp (none when the budget is off or
        the role's GPUs per replica are unknown)."""
        return apply_single_budget(
            desired, self.gpus[role], self.config.max_gpu_budget, self.min_endpoint(role)
        )

    def clamp_pair(self, num_prefill: int, num_decode: int) -> tuple[int, int]:
        """Min endpoints then the §8.1 global pair clamp."""
        p_min, d_min = self.min_endpoint("prefill"), self.min_endpoint("decode")
        return apply_global_budget(
            max(num_prefill, p_min),
            max(num_decode, d_min),
            self.gpus["prefill"],
            self.gpus["decode"],
            self.config.max_gpu_budget,
            p_min,
            d_min,
        )

    def guard_single(self, role: Role, current: int, desired: int) -> tuple[int, Reason | None]:
        """A load action of one role: ``max(desired, min_endpoint)`` then the budget."""
        reason: Reason | None
        if self.config.gpu_budget_rule == "pair_clamp":
            n, reason = self.clamp_single(role, desired), None
        else:
            min_ep = self.min_endpoint(role)
            n, reason = guard_single_scaling_budget(
                current,
                max(desired, min_ep),
                self.gpus[role],
                self.config.min_gpu_budget,
                self.max_gpus,
                min_ep,
            )
        fitted, reason = self._within_power({role: current}, {role: n}, reason)
        return fitted[role], reason

    def guard_pair(
        self, current: tuple[int, int], desired: tuple[int, int]
    ) -> tuple[int, int, Reason | None]:
        """A disagg load action: min endpoints then the budget."""
        reason: Reason | None
        if self.config.gpu_budget_rule == "pair_clamp":
            p, d = self.clamp_pair(*desired)
            reason = None
        else:
            p_min, d_min = self.min_endpoint("prefill"), self.min_endpoint("decode")
            p, d, reason = guard_disagg_scaling_budget(
                *current,
                max(desired[0], p_min),
                max(desired[1], d_min),
                self.gpus["prefill"],
                self.gpus["decode"],
                self.config.min_gpu_budget,
                self.max_gpus,
                p_min,
                d_min,
            )
        fitted, reason = self._within_power(
            {"prefill": current[0], "decode": current[1]}, {"prefill": p, "decode": d}, reason
        )
        return fitted["prefill"], fitted["decode"], reason

    def fit_throughput(
        self, targets: dict[Role, int], *, lower_bounds: bool
    ) -> tuple[dict[Role, int], Reason | None]:
        """Throughput targets (step-capped, endpoint-floored) into the budget. ``band``: only
        the funded part of a move from the ready counts, recovery may pick a donor (§5.4,
        §8.2); lower bounds see only the ceiling (the floor never inflates a bound).
        ``pair_clamp``: the §8.1 clamps, and lower bounds are not clamped (§5.3). Then the
        power budget, from the counts in effect, on targets but not on lower bounds."""
        fitted, reason = self._fit_gpus(targets, lower_bounds=lower_bounds)
        if lower_bounds:
            return fitted, reason
        return self._within_power(self.in_effect or self.ready, fitted, reason)

    def _fit_gpus(
        self, targets: dict[Role, int], *, lower_bounds: bool
    ) -> tuple[dict[Role, int], BudgetReason | None]:
        cfg = self.config
        if cfg.gpu_budget_rule == "pair_clamp":
            if lower_bounds:
                return targets, None
            if cfg.mode == "disagg":
                p, d = self.clamp_pair(targets["prefill"], targets["decode"])
                return {"prefill": p, "decode": d}, None
            return {role: self.clamp_single(role, n) for role, n in targets.items()}, None
        min_gpus = -1 if lower_bounds else cfg.min_gpu_budget
        if cfg.mode == "disagg":
            ready_p, ready_d = self.ready["prefill"], self.ready["decode"]
            current = None if ready_p is None or ready_d is None else (ready_p, ready_d)
            p, d, reason = fit_throughput_pair(
                current,
                (targets["prefill"], targets["decode"]),
                self.gpus["prefill"],
                self.gpus["decode"],
                min_gpus,
                self.max_gpus,
                self.min_endpoint("prefill"),
                self.min_endpoint("decode"),
            )
            return {"prefill": p, "decode": d}, reason
        fitted: dict[Role, int] = {}
        reason = None
        for role, n in targets.items():
            fitted[role], reason = fit_throughput_single(
                self.ready[role],
                n,
                self.gpus[role],
                min_gpus,
                self.max_gpus,
                self.min_endpoint(role),
            )
        return fitted, reason

    def _within_power(
        self,
        current: Mapping[Role, int | None],
        counts: dict[Role, int],
        reason: Reason | None,
    ) -> tuple[dict[Role, int], Reason | None]:
        """``counts`` (the GPU budget's result, with its ``reason``) cut by the power budget;
        the reason becomes ``power_budget_clamp`` when the power budget changed them."""
        if self.power is None:
            return counts, reason
        capped = self.power.cap(current, counts)
        if capped == counts:
            return counts, reason
        now: dict[Role, int] = {}
        for role, n in capped.items():
            count = current.get(role)
            now[role] = n if count is None else count
        if self._below_floor(capped) and not self._below_floor(now):
            # the cut kept the down leg of a move the floor allows only as a whole (an
            # opposing rebalance) and would take the fleet out of the band: the move waits
            return now, CLAMP
        return capped, CLAMP

    def _below_floor(self, counts: Mapping[Role, int]) -> bool:
        """Are ``counts`` below the band's floor (``min_gpu_budget`` less its tolerance)?"""
        cfg = self.config
        gpus = [self.gpus[role] for role in counts]
        if cfg.gpu_budget_rule != "band" or cfg.min_gpu_budget < 0 or None in gpus:
            return False
        total = sum(n * (self.gpus[role] or 0) for role, n in counts.items())
        tolerance = compute_tolerance(g or 0 for g in gpus) if cfg.max_gpu_budget >= 0 else 0
        return total < cfg.min_gpu_budget - tolerance
