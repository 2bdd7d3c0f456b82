"""A request of a recorded trace, whatever the trace format (Mooncake, Azure, Dynamo v1)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request: arrival time (s from the trace origin), prompt and output lengths.

    ``hash_ids`` are the prompt's prefix-block hashes when the trace has them (Mooncake,
    ``dynamo.request.trace.v1``), for prefix-cache simulation; ``block_size`` is the number of
    prompt tokens each hash covers (Mooncake 512, Dynamo ``replay.trace_block_size``).

    >>> TraceRequest(arrival_s=0.5, isl=3000, osl=150).hash_ids
    ()
    """

    arrival_s: float
    isl: int
    osl: int
    hash_ids: tuple[int, ...] = ()
    request_id: str | None = None
    block_size: int | None = None
