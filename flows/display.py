"""Human-readable renderings of decisions: the `-` output line and the cells of `decisions`."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas import ScalingDecision

UNIX_TIME_FROM = 1e9
"""Times from here on (2001-09-09) are Unix time; smaller ones count from a recording's start."""


def format_time(seconds: float) -> str:
    """A decision's time: UTC date and time for Unix times, plain seconds otherwise.

    >>> format_time(1_780_000_000.25), format_time(105.0)
    ('2026-05-28 20:26:40Z', '105.0')
    """
    if seconds >= UNIX_TIME_FROM:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return f"{seconds:.1f}"


def format_step(current: int | None, target: int | None) -> str:
    """One role's change: ``2->3``; ``2 (keep)`` without a target; ``-`` when nothing is known.

    >>> format_step(2, 3), format_step(2, None), format_step(None, 4), format_step(None, None)
    ('2->3', '2 (keep)', '?->4', '-')
    """
    if target is None:
        return "-" if current is None else f"{current} (keep)"
    return f"{'?' if current is None else current}->{target}"


def decision_line(decision: ScalingDecision) -> str:
    """One line per decision: when, which deployment, what changes and why.

    >>> d = ScalingDecision(deployment="llama", decision_id=3, time=105.0, num_prefill=2,
    ...     current_prefill=1, num_decode=None, source="load", reason="scale_up",
    ...     prefill_reason="scale_up")
    >>> decision_line(d)
    't=105.0s llama #3 prefill 1->2 decode - load:scale_up (prefill scale_up)'
    >>> decision_line(d.model_copy(update={"time": 1_780_000_000.0, "current_decode": 4}))
    '2026-05-28 20:26:40Z llama #3 prefill 1->2 decode 4 (keep) load:scale_up (prefill scale_up)'
    """
    roles = []
    if decision.prefill_reason:
        roles.append(f"prefill {decision.prefill_reason}")
    if decision.decode_reason:
        roles.append(f"decode {decision.decode_reason}")
    detail = f" ({', '.join(roles)})" if roles else ""
    note = f" [{decision.note}]" if decision.note else ""
    when = format_time(decision.time)
    when = f"t={when}s" if decision.time < UNIX_TIME_FROM else when
    return (
        f"{when} {decision.deployment} #{decision.decision_id} "
        f"prefill {format_step(decision.current_prefill, decision.num_prefill)} "
        f"decode {format_step(decision.current_decode, decision.num_decode)} "
        f"{decision.source}:{decision.reason}{detail}{note}"
    )
