"""Warm start of the load predictors from a recorded trace (spec §7.6): the bucketing.

Reading the file is I/O and lives in :func:`connectors.traces.read_trace`; this module turns
request rows into one :class:`schemas.TrafficObservation` per throughput interval, which
``TrafficForecaster.warm_up`` then feeds to the num_req/ISL/OSL predictors (followed by
``reset_idle_skip()``).

Bucketing: ``origin`` is the earliest arrival unless the caller fixes it (the closed-loop
benchmark counts whole minutes of the replay clock from 0); a request arriving at ``t`` ms
belongs to bucket ``floor((t − origin) / (interval · 1000))``, computed on whole nanoseconds
(``t − origin`` and the interval each rounded to the nearest ns, then divided as integers): the
float error of a ms → s → ms round trip (``1.1 · 1000`` is ``1100.0000000000002``) cannot move an
arrival that is exactly on a boundary into the bucket before it. Every bucket from the first
(bucket 0 when the origin is given) to the last is emitted — gaps as zero-request windows — with
the request count and the mean ISL and OSL (0 for an empty bucket).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from schemas import TrafficObservation
from schemas.trace import TraceRequest

MAX_BUCKETS = 100_000
"""A warm-up trace may span at most this many intervals (69 days at 60 s). The predictors keep
far less history; a longer span is almost always mixed time units (one absolute Unix time in
milliseconds among relative ones would ask for tens of millions of windows)."""

MAX_INTERVAL_S = 1e12
"""The longest interval :func:`bucket_requests` takes (the planner's are at most a day); it keeps
every arrival's offset in nanoseconds a finite number."""


def bucket_requests(
    rows: Iterable[tuple[float, float, float]],
    interval_s: float,
    *,
    origin_ms: float | None = None,
) -> list[TrafficObservation]:
    """One observation per interval from ``(arrival_ms, isl, osl)`` rows (any order).

    Bucket 0 starts at ``origin_ms`` (default: the earliest arrival); with an explicit origin
    the list starts at bucket 0, and an arrival before the origin is an error.

    >>> obs = bucket_requests([(1000, 100, 10), (1500, 300, 30), (130_000, 50, 5)], 60)
    >>> [(o.num_req, o.isl, o.osl) for o in obs]
    [(2.0, 200.0, 20.0), (0.0, 0.0, 0.0), (1.0, 50.0, 5.0)]
    >>> [o.num_req for o in bucket_requests([(61_000, 1, 1), (130_000, 1, 1)], 60, origin_ms=0)]
    [0.0, 1.0, 1.0]
    >>> bucket_requests([], 60)
    []
    """
    if not (math.isfinite(interval_s) and interval_s > 0 and interval_s <= MAX_INTERVAL_S):
        raise ValueError(
            f"interval_s must be a positive number of seconds up to {MAX_INTERVAL_S:g}, "
            f"got {interval_s}"
        )
    table = []
    for index, row in enumerate(rows):
        arrival_ms, isl, osl = (float(v) for v in row)
        if not all(math.isfinite(v) for v in (arrival_ms, isl, osl)) or isl < 0 or osl < 0:
            raise ValueError(
                f"row {index}: need finite arrival_ms and non-negative isl/osl, got {row}"
            )
        table.append((arrival_ms, isl, osl))
    if not table:
        return []
    earliest = min(arrival for arrival, _, _ in table)
    if origin_ms is None:
        origin = earliest
    elif not math.isfinite(origin_ms) or earliest < origin_ms:
        raise ValueError(f"every arrival must be at or after origin_ms={origin_ms}, not {earliest}")
    else:
        origin = float(origin_ms)
    width_ns = max(1, round(interval_s * 1e9))
    spread_ms = max(arrival for arrival, _, _ in table) - origin
    span = (
        math.floor(spread_ms / (interval_s * 1000.0)) + 1 if math.isfinite(spread_ms) else math.inf
    )
    if span > MAX_BUCKETS:
        raise ValueError(
            f"the trace spans {span} intervals of {interval_s:g} s from its first to its last "
            f"arrival, more than {MAX_BUCKETS}: mixed time units?"
        )
    count: dict[int, int] = {}
    isl_sum: dict[int, float] = {}
    osl_sum: dict[int, float] = {}
    for arrival_ms, isl, osl in table:
        bucket = round((arrival_ms - origin) * 1e6) // width_ns
        count[bucket] = count.get(bucket, 0) + 1
        isl_sum[bucket] = isl_sum.get(bucket, 0.0) + isl
        osl_sum[bucket] = osl_sum.get(bucket, 0.0) + osl
    observations = []
    for bucket in range(min(count) if origin_ms is None else 0, max(count) + 1):
        n = count.get(bucket, 0)
        observations.append(
            TrafficObservation(
                duration_s=interval_s,
                num_req=float(n),
                isl=isl_sum[bucket] / n if n else 0.0,
                osl=osl_sum[bucket] / n if n else 0.0,
            )
        )
    return observations


def trace_observations(
    requests: Iterable[TraceRequest], interval_s: float, *, origin_s: float | None = None
) -> list[TrafficObservation]:
    """:func:`bucket_requests` over trace requests (``arrival_s`` and ``origin_s`` → ms).

    >>> reqs = [TraceRequest(arrival_s=0.0, isl=10, osl=1), TraceRequest(61.0, isl=30, osl=3)]
    >>> [o.num_req for o in trace_observations(reqs, 60)]
    [1.0, 1.0]
    """
    return bucket_requests(
        ((r.arrival_s * 1000.0, r.isl, r.osl) for r in requests),
        interval_s,
        origin_ms=None if origin_s is None else origin_s * 1000.0,
    )
