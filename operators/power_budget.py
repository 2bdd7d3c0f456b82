"""The GPU power budget (``enable_power_awareness``, spec §8.2's last bullet).

A deployment's projected power is ``Σ replicas × GPUs per replica × per-GPU cap`` over the
roles the planner scales; ``total_gpu_power_limit`` bounds it. As in the reference, only
scale-ups are clamped: a scale-down, or a role that keeps its count, always passes, and a
fleet already above the limit is never forced down (the limit stops it growing). A scale-up
to a role's minimum endpoint is always funded (the endpoints come first, as with the GPU
budget). Of a scale-up the budget keeps the largest part that fits — for a disagg pair the
pair closest to the proposal with each role between where it starts and its proposal
(:func:`operators.budget_band.fit_directional_budget_pair`, in watts), so headroom is shared
in proportion to the two moves.

It runs after the GPU budget, on that budget's result (:class:`operators.gpu_budget.GpuBudget`,
which holds a whole move when cutting its up leg would take the fleet below the GPU floor).
A move starts from the counts in effect, so a scale already in flight is never re-targeted.
A role whose GPUs per replica or per-GPU cap is unknown makes the projection unknown: the
power budget then does nothing (like the GPU budget with unknown GPUs), and the tick's
diagnostics carry no projection.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from operators.budget_band import fit_directional_budget_pair
from schemas import Role

PowerReason = Literal["power_budget_clamp"]
CLAMP: PowerReason = "power_budget_clamp"
"""The reason of a move the power budget cut or held."""


@dataclass(frozen=True)
class PowerBudget:
    """One tick's power budget: the limit in watts, each role's watts per replica (``None``:
    unknown) and minimum endpoint.

    >>> budget = PowerBudget(3000, {"prefill": 700, "decode": 700}, {"prefill": 1, "decode": 1})
    >>> budget.projected_w({"prefill": 2, "decode": 2})
    2800
    >>> budget.cap({"prefill": 1, "decode": 2}, {"prefill": 3, "decode": 2})  # one more fits
    {'prefill': 2, 'decode': 2}
    >>> budget.cap({"prefill": 3, "decode": 2}, {"prefill": 2, "decode": 2})  # down: never held
    {'prefill': 2, 'decode': 2}
    """

    limit_w: int
    watts_per_replica: Mapping[Role, int | None]
    min_endpoints: Mapping[Role, int]

    def projected_w(self, counts: Mapping[Role, int]) -> int | None:
        """The power ``counts`` replicas draw at their caps; ``None`` if a cap is unknown."""
        total = 0
        for role, count in counts.items():
            watts = self.watts_per_replica[role]
            if watts is None:
                return None
            total += count * watts
        return total

    def cap(self, current: Mapping[Role, int | None], proposed: dict[Role, int]) -> dict[Role, int]:
        """``proposed`` with its scale-ups cut to what the limit leaves (see the module).

        ``current`` holds each role's count before the move (``None``: unknown, the move then
        starts from the role's minimum endpoint).
        """
        projected = self.projected_w(proposed)
        if projected is None or projected <= self.limit_w:
            return proposed
        start = {role: min(n, self._start(role, current.get(role))) for role, n in proposed.items()}
        if len(proposed) == 1:
            ((role, n),) = proposed.items()
            watts = self.watts_per_replica[role]
            assert watts is not None
            return {role: max(start[role], min(n, self.limit_w // watts))}
        p_watts, d_watts = self.watts_per_replica["prefill"], self.watts_per_replica["decode"]
        p, d = fit_directional_budget_pair(
            start["prefill"],
            start["decode"],
            proposed["prefill"],
            proposed["decode"],
            p_watts,
            d_watts,
            -1,
            self.limit_w,
            self.min_endpoints["prefill"],
            self.min_endpoints["decode"],
        )
        return {"prefill": p, "decode": d}

    def _start(self, role: Role, current: int | None) -> int:
        floor = self.min_endpoints[role]
        return floor if current is None else max(current, floor)
