"""Human-readable renderings of planner outputs (terminal lines and tables)."""

from __future__ import annotations

from collections.abc import Iterable

from schemas import ScalingDecision


def _step(current: int | None, target: int | None) -> str:
    if target is None:
        return "-"
    return f"{'?' if current is None else current}->{target}"


def decision_line(decision: ScalingDecision) -> str:
    """One line per decision: when, which deployment, what changes and why.

    >>> d = ScalingDecision(deployment="llama", decision_id=3, time=105.0, num_prefill=2,
    ...     current_prefill=1, num_decode=None, source="load", reason="scale_up",
    ...     prefill_reason="scale_up")
    >>> decision_line(d)
    't=105.0s llama #3 prefill 1->2 decode - load:scale_up (prefill scale_up)'
    """
    roles = []
    if decision.prefill_reason:
        roles.append(f"prefill {decision.prefill_reason}")
    if decision.decode_reason:
        roles.append(f"decode {decision.decode_reason}")
    detail = f" ({', '.join(roles)})" if roles else ""
    note = f" [{decision.note}]" if decision.note else ""
    return (
        f"t={decision.time:.1f}s {decision.deployment} #{decision.decision_id} "
        f"prefill {_step(decision.current_prefill, decision.num_prefill)} "
        f"decode {_step(decision.current_decode, decision.num_decode)} "
        f"{decision.source}:{decision.reason}{detail}{note}"
    )


def decisions_table(decisions: Iterable[ScalingDecision]) -> str:
    """A fixed-width table of decisions, with the estimates that justified them.

    >>> print(decisions_table([]))
    time_s  deployment  id  prefill  decode  source  reason  est_ttft_ms  est_itl_ms  note
    """
    header = (
        "time_s",
        "deployment",
        "id",
        "prefill",
        "decode",
        "source",
        "reason",
        "est_ttft_ms",
        "est_itl_ms",
        "note",
    )
    rows = [header]
    for d in decisions:
        diag = d.diagnostics
        rows.append(
            (
                f"{d.time:.1f}",
                d.deployment,
                str(d.decision_id),
                _step(d.current_prefill, d.num_prefill),
                _step(d.current_decode, d.num_decode),
                d.source,
                d.reason,
                "-" if diag.estimated_ttft_ms is None else f"{diag.estimated_ttft_ms:.1f}",
                "-" if diag.estimated_itl_ms is None else f"{diag.estimated_itl_ms:.1f}",
                d.note or "",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
