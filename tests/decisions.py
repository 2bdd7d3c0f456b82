"""The one factory of ``schemas.ScalingDecision`` for tests."""

from __future__ import annotations

from typing import Literal

from schemas import ScalingDecision


def decision(
    *,
    deployment: str = "llama",
    decision_id: int = 1,
    time: float | None = None,
    num_prefill: int | None = None,
    num_decode: int | None = None,
    current_prefill: int | None = None,
    current_decode: int | None = None,
    expected_prefill: int | None = None,
    expected_decode: int | None = None,
    source: Literal["load", "throughput"] = "load",
    reason: str = "scale_up",
    note: str | None = None,
) -> ScalingDecision:
    """A decision with these fields; its event ``time`` is ``decision_id`` seconds unless given,
    and every target, ready and expected count not given is ``None`` (no opinion / not seen).

    >>> d = decision(decision_id=3, num_decode=2)
    >>> (d.deployment, d.time, d.num_prefill, d.num_decode, d.source, d.reason)
    ('llama', 3.0, None, 2, 'load', 'scale_up')
    """
    return ScalingDecision(
        deployment=deployment,
        decision_id=decision_id,
        time=float(decision_id) if time is None else time,
        num_prefill=num_prefill,
        num_decode=num_decode,
        current_prefill=current_prefill,
        current_decode=current_decode,
        expected_prefill=expected_prefill,
        expected_decode=expected_decode,
        source=source,
        reason=reason,
        note=note,
    )
