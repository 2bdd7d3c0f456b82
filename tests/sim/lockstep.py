"""Lock-step driving of a FleetSim in tests (what the planner loop does, with a stub policy)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from schemas import Event, FpmBatch, FpmBatchEvent, ScalingDecision
from sim.fleet import FleetSim


def run(
    sim: FleetSim,
    tick_s: float = 5.0,
    until_s: float | None = None,
    decide: Callable[[float, Sequence[Event]], ScalingDecision | None] | None = None,
    limit_s: float = 100_000.0,
) -> list[Event]:
    """Drive ``sim`` in ticks until done (or ``until_s``); ``decide`` may return a decision."""
    events: list[Event] = []
    while sim.now_s < limit_s:
        if until_s is None and sim.done:
            break
        if until_s is not None and sim.now_s >= until_s:
            break
        batch = sim.advance(sim.now_s + tick_s)
        events.extend(batch)
        if decide is not None:
            decision = decide(sim.now_s, batch)
            if decision is not None:
                sim.apply(decision)
    return events


def fpm_batches(events: Sequence[Event]) -> dict[str, list[FpmBatch]]:
    """FPM batches per worker, in order."""
    out: dict[str, list[FpmBatch]] = {}
    for e in events:
        if isinstance(e, FpmBatchEvent):
            out.setdefault(e.payload.worker_id, []).append(e.payload)
    return out
