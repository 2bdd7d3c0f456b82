"""Ours: the recent request rate and a stabilization window on top of the SLA load rule.

The reference's load rule sees only latency estimates. Two guards refine its proposals (each
off at its reference value: ``load_rate_window_seconds = 0``, ``scale_down_stabilization_seconds
= 0``):

* **Rate needs.** Each load tick also sizes every role for the request rate of the last
  ``load_rate_window_seconds`` with the throughput loop's capacity model: ``full`` replicas
  carry it at 100 %, ``within`` keep every engine within ``load_rate_utilization``. A role
  below ``full`` scales up to it now (at most ``max_load_step`` more), before queues show it; a
  latency spike the rate already fits buys at most one replica (or what ``within`` asks) — a
  burst's queue drains before a new replica could start; a scale-down must keep ``within``.
* **Stabilization** (as Kubernetes' HPA): a scale-down needs ``scale_down_stabilization_seconds``
  in which every load tick wanted one and nothing changed the role, and it must respect the
  highest ``within`` of that window. Unlike an HPA after a restart, the window also holds at
  the start: the first load tick begins it, so a planner started without its saved state does
  not scale down on what it has seen for one tick.
"""

from __future__ import annotations

from collections import deque

from operators.load_scaling import LoadProposal
from operators.tick import ScaleTarget
from schemas import PlannerConfig, Role

RateNeeds = dict[Role, tuple[int, int]]
"""Per role: (replicas at full capacity, replicas within the utilisation bound)."""


class RateGuard:
    """Refines one deployment's SLA load proposals with the recent rate and a stabilization
    window. Plain state (pickles); time comes in as the load ticks' event time.

    >>> guard = RateGuard(PlannerConfig(optimization_target="sla", load_rate_window_seconds=30,
    ...                                 scale_down_stabilization_seconds=10))
    >>> guard.begin_tick(100.0, {"decode": (4, 5)})
    >>> guard.adjust("decode", 2, LoadProposal(None, "no_change")).desired  # 2 cannot carry it
    4
    >>> guard.end_tick(None, {"decode": 2})  # decode did not want to go down: window restarts
    >>> guard.begin_tick(105.0, {"decode": (4, 5)})
    >>> guard.adjust("decode", 7, LoadProposal(6, "scale_down")).reason  # not 10 s of agreement
    'scale_down_stabilizing'
    """

    def __init__(self, config: PlannerConfig) -> None:
        self.config = config
        self.now_s = 0.0
        self.needs: RateNeeds = {}
        self._floors: deque[tuple[float, Role, int]] = deque()  # (time, role, within)
        self._wants_down: set[Role] = set()
        # the window starts with the first load tick: a planner that has just started (without
        # its saved state) knows nothing of the past, so it scales down no sooner than later on
        self._down_eligible_since: dict[Role, float] = {}

    def begin_tick(self, now_s: float, needs: RateNeeds) -> None:
        """A load tick at ``now_s`` with this tick's rate needs."""
        self.now_s = now_s
        self.needs = needs
        self._wants_down = set()
        for role in self.config.roles:
            self._down_eligible_since.setdefault(role, now_s)
        horizon = now_s - self.config.scale_down_stabilization_seconds
        for role, (_, within) in needs.items():
            self._floors.append((now_s, role, within))
        while self._floors and self._floors[0][0] < horizon:
            self._floors.popleft()

    def adjust(self, role: Role, n: int, proposal: LoadProposal) -> LoadProposal:
        """The rule's proposal for a role at ``n`` replicas, refined by rate and stabilization."""
        if proposal.desired is not None and proposal.desired < n:
            self._wants_down.add(role)  # the latency rule's vote, before the rate's veto
        if proposal.reason != "insufficient_data":
            proposal = self._apply_rate(role, n, proposal)
        if proposal.desired is None or proposal.desired >= n:
            return proposal
        window = self.config.scale_down_stabilization_seconds
        if self.now_s - self._down_eligible_since[role] < window:
            return LoadProposal(None, "scale_down_stabilizing", proposal.estimate_ms)
        return proposal

    def end_tick(self, decided: ScaleTarget | None, targets: dict[Role, int | None]) -> None:
        """After the tick: a role that did not want to go down, or was changed, starts its
        stabilization window again (``targets``: each role's current target)."""
        for role in self.config.roles:
            new = None
            if decided is not None:
                new = decided.num_prefill if role == "prefill" else decided.num_decode
            if role not in self._wants_down or new not in (None, targets[role]):
                self._down_eligible_since[role] = self.now_s

    def _apply_rate(self, role: Role, n: int, proposal: LoadProposal) -> LoadProposal:
        need = self.needs.get(role)
        if need is None:
            return proposal
        full, now_within = need
        within = max(floor for _, r, floor in self._floors if r == role)
        step = self.config.max_load_step
        if full > n:
            stepped = min(full, n + step)
            if proposal.desired is None or proposal.desired < stepped:
                return LoadProposal(stepped, "scale_up", proposal.estimate_ms)
            return proposal
        if proposal.desired is not None and proposal.desired > n:
            cap = max(n + 1, min(now_within, n + step))
            if proposal.desired > cap:
                return LoadProposal(cap, "scale_up", proposal.estimate_ms)
            return proposal
        if proposal.desired is not None and proposal.desired < n and proposal.desired < within:
            return LoadProposal(None, "scale_down_refused_rate", proposal.estimate_ms)
        return proposal
