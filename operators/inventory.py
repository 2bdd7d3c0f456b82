"""The planner's view of the worker inventory (reference spec §1.4 step 1, §4.2 guard 1).

Each tick may carry a fresh :class:`schemas.WorkerCounts` snapshot; the inventory keeps the last
one so a tick without a snapshot still knows the fleet. ``None`` counts mean *unknown*.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas import Role, WorkerCounts


@dataclass
class Inventory:
    """Ready / expected replicas per role and the connector's in-progress flags.

    A role is *scaling in progress* when the connector says so, or when its expected (desired)
    count is known and differs from its ready count (spec §4.2).

    >>> inv = Inventory()
    >>> inv.update(WorkerCounts(ready_num_decode=2, expected_num_decode=3))
    >>> inv.ready("decode"), inv.scaling_in_progress("decode")
    (2, True)
    >>> inv.update(WorkerCounts(ready_num_decode=3, expected_num_decode=3))
    >>> inv.scaling_in_progress("decode"), inv.current_target("decode")
    (False, 3)
    """

    counts: WorkerCounts = field(default_factory=WorkerCounts)

    def update(self, counts: WorkerCounts | None) -> None:
        """Adopt a new snapshot (a tick without one keeps the previous snapshot)."""
        if counts is not None:
            self.counts = counts

    def ready(self, role: Role) -> int | None:
        """Replicas of ``role`` that are ready to serve (None = unknown)."""
        c = self.counts
        return c.ready_num_prefill if role == "prefill" else c.ready_num_decode

    def expected(self, role: Role) -> int | None:
        """Replicas of ``role`` the deployment is converging to (None = unknown)."""
        c = self.counts
        return c.expected_num_prefill if role == "prefill" else c.expected_num_decode

    def scaling_in_progress(self, role: Role) -> bool:
        """Whether a previous scaling action of ``role`` has not landed yet."""
        c = self.counts
        flag = c.prefill_scaling_in_progress if role == "prefill" else c.decode_scaling_in_progress
        expected = self.expected(role)
        return flag or (expected is not None and expected != self.ready(role))

    def current_target(self, role: Role) -> int | None:
        """The count a new decision is compared with: expected if known, else ready.

        Comparing with the expected count means a decision equal to the in-flight target is a
        no-op, while a decision equal to the ready count still overrides an in-flight target.
        """
        expected = self.expected(role)
        return expected if expected is not None else self.ready(role)
