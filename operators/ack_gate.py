"""The virtual connector's hold: one decision in flight per deployment until it is acknowledged.

The reference planner (spec §11.2) writes a decision, then skips new ones while the environment
has not acknowledged it (``scaled_decision_id < decision_id``), and proceeds anyway once
``SCALING_MAX_WAIT_TIME`` (1800 s) has passed since the first skip. :class:`AckGate` is that rule
as a pure state machine over event time, with three choices made explicit:

* **Hold the newest, not skip.** A decision that arrives while the previous one is unacknowledged
  is held; a newer one replaces it (only the newest intent is ever sent). The held decision is
  released the moment the acknowledgement arrives, not at the next tick.
* **Nothing new, nothing sent.** A decision whose targets equal those of the decision in flight
  cancels the hold: the environment is already working on exactly that. Once that decision is
  acknowledged, the same targets are sent again if the planner asks for them (the reference
  skips any unchanged decision): the planner only decides when the replicas it sees differ
  from its target, so a repeat means the fleet drifted after applying it (a worker died).
* **A tick that keeps the count withdraws the hold.** A tick whose loops judged the replicas
  they see right and decided nothing (:meth:`AckGate.withdraw`: ``no_change``, a scale-down
  refused or still stabilizing) is the planner's newest intent too: the held decision is
  dropped, as the reference, skipping decisions while it waits, would never send it. A tick
  that could not judge (no data, a scale still in progress) keeps it. Without this, a
  scale-up held while load eased went out on the acknowledgement anyway, and a held
  scale-down went out after load had risen again.
* **The gate owns the decision ids.** Released decisions are renumbered
  ``max(last emitted, acknowledged) + 1``, so the ids a consumer sees are consecutive even when
  held decisions were replaced, and never reuse an id the environment acknowledged in this run.
  Across a restart the ids issued come from the outputs (the next item), not from the
  acknowledgements: if the outputs lost their decisions (a decisions topic deleted, or expired
  by time-based retention — which is why the planner creates it compacted) while the
  acknowledgement topic still holds acks, those acks are refused as never issued and numbering
  starts after what the outputs hold, so a consumer that deduplicates by id would have to
  forget the old ones too.
* **An acknowledgement of a decision never issued is refused.** One above the highest id the
  gate sent or knows the outputs hold (``max(last_emitted_id, numbered_after)``) cannot come
  from an orchestrator that applied it: taken, it would release the held decision and push
  every later id past it (an ack of 2**62 did). It changes nothing and is reported
  (:meth:`AckGate.take_refused`; the planner dead-letters it). A restarted planner learns the
  ids already issued from its outputs (``last_emitted_id``/``numbered_after``), not from the
  acknowledgements.

Waiting is measured in event time from the first decision held since the last release, as the
reference measures from its first skip; a hold cancelled by a decision equal to the one in
flight does not restart it, so a planner that keeps changing its mind cannot postpone the
timeout forever. A decision released by the timeout carries a ``note`` saying it
proceeded without acknowledgement; one released by an acknowledgement notes how long it waited.
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas import ScalingDecision

Targets = tuple[int | None, int | None]


def _targets(decision: ScalingDecision) -> Targets:
    return (decision.num_prefill, decision.num_decode)


KEPT_COUNT_REASONS = frozenset(
    {
        "no_change",
        "scale_down_stabilizing",
        "scale_down_capped_by_throughput",
        "scale_down_refused_consolidation",
        "scale_down_refused_rate",
    }
)
"""The reasons of a loop that judged the replicas it sees and keeps them (a held decision is
then withdrawn); ``set_lower_bound`` (the throughput loop beside the load loop) judges nothing."""


def keeps_the_count(reasons: Sequence[str | None]) -> bool:
    """Whether the loops that ran in a tick without a decision (their ``reasons``) judged the
    count right: one did, and none of the others could not judge.

    >>> keeps_the_count(["no_change", "set_lower_bound"]), keeps_the_count(["scaling_in_progress"])
    (True, False)
    """
    judged = [reason for reason in reasons if reason != "set_lower_bound"]
    return bool(judged) and all(reason in KEPT_COUNT_REASONS for reason in judged)


class AckGate:
    """Per-deployment hold of scaling decisions until the previous one is acknowledged.

    Feed it the planner's decisions (:meth:`offer`), the environment's acknowledgements
    (:meth:`acknowledge`) and the passing of event time (:meth:`advance`); each returns the
    decision to send now, if any. State is plain attributes (pickles; snapshot-able). A
    restarted planner passes the last decision sent before (``last_emitted_id`` and its
    targets, ``in_flight``), so it waits for that one's acknowledgement as before the restart,
    and the highest id any output holds (``numbered_after``), so ids stay unique.

    >>> def decision(t, n):
    ...     return ScalingDecision(deployment="llama", decision_id=1, time=t, num_decode=n,
    ...                            reason="scale_up", source="load")
    >>> gate = AckGate(max_wait_seconds=1800)
    >>> gate.offer(decision(0, 3)).decision_id          # nothing in flight: sent at once
    1
    >>> gate.offer(decision(60, 4)) is None             # decision 1 not acknowledged: held
    True
    >>> sent = gate.acknowledge(1, now=90)              # acknowledged: the held one goes out
    >>> sent.decision_id, sent.num_decode, sent.note
    (2, 4, 'held 30 s until decision 1 was acknowledged')
    >>> gate.offer(decision(120, 5)) is None
    True
    >>> print(gate.advance(now=1920).note)              # 1800 s of event time later
    proceeded without acknowledgement of decision 2 after waiting 1800 s
    >>> gate.acknowledge(2**62, now=1930) is None, gate.acked_decision_id  # never issued
    (True, 1)
    >>> print(*gate.take_refused())
    invalid acknowledgement: acked_decision_id 4611686018427387904 was never issued (the last is 3)
    """

    def __init__(
        self,
        max_wait_seconds: float = 1800.0,
        *,
        last_emitted_id: int = 0,
        acked_decision_id: int = 0,
        in_flight: Targets | None = None,
        numbered_after: int = 0,
    ) -> None:
        if not max_wait_seconds > 0:
            raise ValueError(f"max_wait_seconds must be > 0, got {max_wait_seconds}")
        self.max_wait_seconds = float(max_wait_seconds)
        self.last_emitted_id = last_emitted_id
        self.acked_decision_id = acked_decision_id
        self.in_flight = in_flight
        self.numbered_after = numbered_after
        self.held: ScalingDecision | None = None
        self.hold_since: float | None = None
        self.replaced = 0
        self.refused: list[str] = []

    @property
    def waiting(self) -> bool:
        """Whether the last decision sent is still unacknowledged."""
        return self.acked_decision_id < self.last_emitted_id

    def offer(self, decision: ScalingDecision) -> ScalingDecision | None:
        """A new decision from the planner at event time ``decision.time``."""
        if not self.waiting:
            return self._release(decision, None)
        if _targets(decision) == self.in_flight:
            self.held = None  # the wait keeps running from the first hold
            return None
        if self.hold_since is None:
            self.hold_since = decision.time
        if self.held is not None and _targets(self.held) != _targets(decision):
            self.replaced += 1
        self.held = decision
        return self.advance(decision.time)

    def withdraw(self) -> None:
        """The planner, judging the replicas it sees right, wants no change now: the held
        decision is dropped (the wait keeps running from the first hold, as when a decision
        equal to the one in flight cancels it).

        >>> def decision(t, n):
        ...     return ScalingDecision(deployment="llama", decision_id=1, time=t, num_decode=n,
        ...                            reason="scale_up", source="load")
        >>> gate = AckGate()
        >>> _ = gate.offer(decision(0, 3)); gate.offer(decision(5, 4)) is None  # 4 held
        True
        >>> gate.withdraw(); gate.acknowledge(1, now=20) is None  # load eased: 4 not sent
        True
        """
        self.held = None

    def acknowledge(self, acked_decision_id: int, now: float) -> ScalingDecision | None:
        """The environment applied decisions up to ``acked_decision_id`` (seen at ``now``)."""
        if acked_decision_id <= self.acked_decision_id:
            return None  # stale or repeated acknowledgement
        issued = max(self.last_emitted_id, self.numbered_after)
        if acked_decision_id > issued:
            self.refused.append(
                f"invalid acknowledgement: acked_decision_id {acked_decision_id} was never "
                f"issued (the last is {issued})"
            )
            return None
        previous = self.last_emitted_id
        self.acked_decision_id = acked_decision_id
        if self.held is None or self.waiting:
            return None
        waited = self._waited(now)
        return self._release(
            self.held, f"held {waited:g} s until decision {previous} was acknowledged"
        )

    def take_refused(self) -> list[str]:
        """Why each acknowledgement refused since the last call was refused (then forgets them)."""
        refused, self.refused = self.refused, []
        return refused

    def advance(self, now: float) -> ScalingDecision | None:
        """Event time reached ``now``: release the held decision if it waited long enough."""
        if self.held is None:
            return None
        waited = self._waited(now)
        if waited < self.max_wait_seconds:
            return None
        return self._release(
            self.held,
            f"proceeded without acknowledgement of decision {self.last_emitted_id} "
            f"after waiting {waited:g} s",
        )

    def _waited(self, now: float) -> float:
        assert self.hold_since is not None
        return max(0.0, now - self.hold_since)

    def _clear_hold(self) -> None:
        self.held = None
        self.hold_since = None
        self.replaced = 0

    def _release(self, decision: ScalingDecision, note: str | None) -> ScalingDecision:
        if note is not None and self.replaced:
            note += f" (replaced {self.replaced} older held decision(s))"
        if decision.note and note:
            note = f"{decision.note}; {note}"
        decision_id = max(self.last_emitted_id, self.acked_decision_id, self.numbered_after) + 1
        released = decision.model_copy(
            update={"decision_id": decision_id, "note": note or decision.note}
        )
        self.last_emitted_id = decision_id
        self.in_flight = _targets(decision)
        self._clear_hold()
        return released
