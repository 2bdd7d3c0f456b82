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
    expected: tuple[int | None, int | None] = (None, None),
) -> ScalingDecision:
    """A load decision numbered ``decision_id`` (its event time is ``time``, else the id, in
    seconds), made seeing ``expected`` (prefill, decode) replicas asked for."""
    return ScalingDecision(
        deployment=deployment,
        decision_id=decision_id,
        time=float(decision_id) if time is None else time,
        num_prefill=prefill,
        num_decode=decode,
        expected_prefill=expected[0],
        expected_decode=expected[1],
        source="load",
        reason="scale_up",
    )
