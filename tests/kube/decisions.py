"""The scaling decisions the DGD tests send."""

from __future__ import annotations

from schemas import ScalingDecision


def decision(
    decision_id: int = 1,
    *,
    prefill: int | None = None,
    decode: int | None = None,
    deployment: str = "llama",
    time: float | None = None,
) -> ScalingDecision:
    """A load decision numbered ``decision_id`` (its event time is ``time``, else the id, in
    seconds)."""
    return ScalingDecision(
        deployment=deployment,
        decision_id=decision_id,
        time=float(decision_id) if time is None else time,
        num_prefill=prefill,
        num_decode=decode,
        source="load",
        reason="scale_up",
    )
