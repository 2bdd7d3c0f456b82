"""FPM rows: one forward pass as a flat tuple, the columnar form of :class:`schemas.FpmBatch`.

A row is the event time, then every numeric ForwardPassMetrics field in the order of
:data:`FPM_BATCH_COLUMNS`. High-rate producers send rows (compact, cheap to build); each one is
checked like a single FPM (:func:`row_problem`) before it becomes a ForwardPassMetrics.

>>> fpm = ForwardPassMetrics(wall_time=0.02)
>>> row = fpm_to_row(5.0, fpm)
>>> row[FPM_COLUMN["wall_time"]], row_problem(row), fpm_from_row("", 0, row) == fpm
(0.02, None, True)
"""

from __future__ import annotations

import math
from typing import Any

from schemas.fpm import (
    FPM_CEILINGS,
    MAX_COUNT,
    Ceiling,
    ForwardPassMetrics,
    QueuedRequestMetrics,
    ScheduledRequestMetrics,
    describe_implausible,
)

FPM_BATCH_COLUMNS: tuple[str, ...] = (
    "time",
    "counter_id",
    "wall_time",
    "scheduled.num_prefill_requests",
    "scheduled.sum_prefill_tokens",
    "scheduled.var_prefill_length",
    "scheduled.sum_prefill_kv_tokens",
    "scheduled.num_decode_requests",
    "scheduled.sum_decode_kv_tokens",
    "scheduled.var_decode_kv_tokens",
    "queued.num_prefill_requests",
    "queued.sum_prefill_tokens",
    "queued.var_prefill_length",
    "queued.num_decode_requests",
    "queued.sum_decode_kv_tokens",
    "queued.var_decode_kv_tokens",
)
"""Row layout of :class:`FpmBatch`: event time, then every numeric ForwardPassMetrics field."""

FPM_COLUMN: dict[str, int] = {name: i for i, name in enumerate(FPM_BATCH_COLUMNS)}
"""Position of each column in an FPM row, by name.

>>> FPM_COLUMN["wall_time"], FPM_COLUMN["queued.sum_decode_kv_tokens"]
(2, 14)
"""

FpmRow = tuple[
    float, int, float, int, int, float, int, int, int, float, int, int, float, int, int, float
]


def value_ok(value: float) -> bool:
    """A row value is finite and >= 0, and an integer is a count that fits (checked before any
    float conversion: ``math.isfinite(10**400)`` raises)."""
    if isinstance(value, int):
        return 0 <= value <= MAX_COUNT
    return value >= 0 and math.isfinite(value)


def _fpm_field(column: str) -> str:
    """The ForwardPassMetrics field path of a row column (``scheduled.x`` →
    ``scheduled_requests.x``)."""
    group, _, name = column.rpartition(".")
    return f"{group}_requests.{name}" if group else name


_ROW_CEILINGS: tuple[Ceiling | None, ...] = tuple(
    FPM_CEILINGS.get(_fpm_field(column)) for column in FPM_BATCH_COLUMNS
)


def row_problem(row: FpmRow) -> str | None:
    """Why an :class:`FpmBatch` row is refused (naming the column), or ``None``: every value
    must be finite, >= 0, a count must fit :data:`MAX_COUNT`, and the forward pass must be
    plausible (within ``schemas.fpm.FPM_CEILINGS``, as for a single FPM).

    >>> row = (1.0, 7, 0.02) + (0, 0, 0.0, 0, 4, 4000, 0.0) + (0, 0, 0.0, 0, 0, 0.0)
    >>> row_problem(row) is None
    True
    >>> print(row_problem(row[:2] + (1e300,) + row[3:]))  # doctest: +NORMALIZE_WHITESPACE
    wall_time = 1e+300 is implausible for one forward pass (above MAX_FORWARD_PASS_SECONDS =
    60.0)
    """
    for column, value, ceiling in zip(FPM_BATCH_COLUMNS, row, _ROW_CEILINGS, strict=True):
        if not value_ok(value):  # the value is not shown: an int may have 10^5 digits
            return f"{column}: values must be finite, >= 0 and counts <= {MAX_COUNT}"
        if ceiling is not None and value > ceiling.limit:
            return describe_implausible(column, value, ceiling)
    return None


def fpm_from_row(worker_id: str, dp_rank: int, row: FpmRow) -> ForwardPassMetrics:
    """Build the ForwardPassMetrics of one :class:`FpmBatch` row (validated)."""
    scheduled, queued = row_request_fields(row)
    return ForwardPassMetrics(
        worker_id=worker_id,
        dp_rank=dp_rank,
        counter_id=row[1],
        wall_time=row[2],
        scheduled_requests=ScheduledRequestMetrics(**scheduled),
        queued_requests=QueuedRequestMetrics(**queued),
    )


def mean_fpm(worker_id: str, dp_rank: int, row: FpmRow) -> ForwardPassMetrics:
    """The mean forward pass of validated passes (their column means, ``row``): its counts are
    means too, fractional, so they are not validated as counts — rounded, a prompt chunk in one
    pass of four was 0.25 requests, 0, and the per-request ratios of a perf model's moving
    averages (tokens per prefill request) were lost.

    >>> row = (1.0, 7, 0.02) + (0.25, 512, 0.0, 0, 4.5, 4000, 0.0) + (0, 2048, 0.0, 0, 0, 0.0)
    >>> s = mean_fpm("w", 0, row).scheduled_requests
    >>> s.num_prefill_requests, s.sum_prefill_tokens / s.num_prefill_requests
    (0.25, 2048.0)
    """
    scheduled, queued = row_request_fields(row)
    return ForwardPassMetrics.model_construct(
        worker_id=worker_id,
        dp_rank=dp_rank,
        counter_id=int(row[1]),
        wall_time=row[2],
        scheduled_requests=ScheduledRequestMetrics.model_construct(**scheduled),
        queued_requests=QueuedRequestMetrics.model_construct(**queued),
    )


def row_request_fields(row: FpmRow) -> tuple[dict[str, Any], dict[str, Any]]:
    """The scheduled and queued request fields of an FPM row, by name.

    >>> row = (1.0, 7, 0.02) + (0, 0, 0.0, 0, 4, 4000, 0.0) + (0, 0, 0.0, 0, 0, 0.0)
    >>> row_request_fields(row)[0]["sum_decode_kv_tokens"]
    4000
    """
    r = row
    scheduled = {
        "num_prefill_requests": r[3],
        "sum_prefill_tokens": r[4],
        "var_prefill_length": r[5],
        "sum_prefill_kv_tokens": r[6],
        "num_decode_requests": r[7],
        "sum_decode_kv_tokens": r[8],
        "var_decode_kv_tokens": r[9],
    }
    queued = {
        "num_prefill_requests": r[10],
        "sum_prefill_tokens": r[11],
        "var_prefill_length": r[12],
        "num_decode_requests": r[13],
        "sum_decode_kv_tokens": r[14],
        "var_decode_kv_tokens": r[15],
    }
    return scheduled, queued


def fpm_to_row(time: float, fpm: ForwardPassMetrics) -> FpmRow:
    """One :class:`FpmBatch` row from an FPM observed at event time ``time``.

    >>> fpm_to_row(2.0, fpm_from_row("w", 0, fpm_to_row(2.0, ForwardPassMetrics())))[:3]
    (2.0, 0, 0.0)
    """
    s, q = fpm.scheduled_requests, fpm.queued_requests
    return (
        time,
        fpm.counter_id,
        fpm.wall_time,
        s.num_prefill_requests,
        s.sum_prefill_tokens,
        s.var_prefill_length,
        s.sum_prefill_kv_tokens,
        s.num_decode_requests,
        s.sum_decode_kv_tokens,
        s.var_decode_kv_tokens,
        q.num_prefill_requests,
        q.sum_prefill_tokens,
        q.var_prefill_length,
        q.num_decode_requests,
        q.sum_decode_kv_tokens,
        q.var_decode_kv_tokens,
    )
