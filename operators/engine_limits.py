"""Whether a forward pass fits the engine that reports it (its :class:`EngineCapabilities`).

Admission holds every FPM to fixed ceilings (``schemas.fpm.FPM_CEILINGS``) that no engine can
exceed. An engine whose capabilities are known is bounded much tighter: one iteration schedules
at most ``max_num_seqs`` requests and at most ``max_num_batched_tokens`` fresh prefill tokens —
scheduler limits no reported pass can exceed. The KV its scheduled requests hold must fit
``max_kv_tokens`` too, but only for passes computed from a profile: a live engine counts each
request's context, and with prefix caching a prefix shared by many requests is held once but
counted once per request, so a valid pass can report more KV than the engine has (``kv=False``
leaves that rule out). Queued requests are not bounded: they wait precisely because the KV
cache is full. An unknown capability (``None``) bounds nothing. The planner refuses a live pass
beyond the scheduler limits (:mod:`operators.deployment`); the bootstrap drops profile points
beyond all three (:mod:`operators.bootstrap`).
"""

from __future__ import annotations

from schemas import FPM_COLUMN, EngineCapabilities, FpmRow

_PREFILL_REQUESTS = FPM_COLUMN["scheduled.num_prefill_requests"]
_DECODE_REQUESTS = FPM_COLUMN["scheduled.num_decode_requests"]
_PREFILL_TOKENS = FPM_COLUMN["scheduled.sum_prefill_tokens"]
_PREFILL_KV = FPM_COLUMN["scheduled.sum_prefill_kv_tokens"]
_DECODE_KV = FPM_COLUMN["scheduled.sum_decode_kv_tokens"]


def engine_limit_breach(row: FpmRow, caps: EngineCapabilities, *, kv: bool = True) -> str | None:
    """Why the forward pass ``row`` cannot come from an engine with ``caps`` (naming the
    fields, their values and the capability), or ``None`` when it fits; ``kv=False`` skips the
    KV rule (live passes, see the module docs).

    Scheduled KV is ``sum_decode_kv_tokens + sum_prefill_kv_tokens + sum_prefill_tokens`` (the
    context of decoding requests, the cached and the fresh tokens of prefilling ones).

    >>> from schemas import ForwardPassMetrics, ScheduledRequestMetrics, fpm_to_row
    >>> def decode(n: int, kv: int) -> FpmRow:
    ...     return fpm_to_row(1.0, ForwardPassMetrics(wall_time=0.03,
    ...         scheduled_requests=ScheduledRequestMetrics(num_decode_requests=n,
    ...                                                    sum_decode_kv_tokens=kv)))
    >>> caps = EngineCapabilities(max_kv_tokens=2_000_000, max_num_seqs=256)
    >>> engine_limit_breach(decode(100, 200_000), caps) is None
    True
    >>> print(engine_limit_breach(decode(100, 4_000_000), caps))  # doctest: +NORMALIZE_WHITESPACE
    scheduled KV tokens = 4000000 (scheduled.sum_decode_kv_tokens 4000000
    + scheduled.sum_prefill_kv_tokens 0 + scheduled.sum_prefill_tokens 0) is above the
    engine's max_kv_tokens = 2000000
    >>> print(engine_limit_breach(decode(300, 200_000), caps))  # doctest: +NORMALIZE_WHITESPACE
    scheduled requests = 300 (scheduled.num_prefill_requests 0
    + scheduled.num_decode_requests 300) is above the engine's max_num_seqs = 256
    >>> engine_limit_breach(decode(100, 4_000_000), caps, kv=False) is None
    True
    >>> engine_limit_breach(decode(300, 4_000_000), EngineCapabilities()) is None
    True
    """
    if caps.max_num_seqs:
        prefill, decode = row[_PREFILL_REQUESTS], row[_DECODE_REQUESTS]
        if prefill + decode > caps.max_num_seqs:
            return (
                f"scheduled requests = {prefill + decode} (scheduled.num_prefill_requests "
                f"{prefill} + scheduled.num_decode_requests {decode}) is above the engine's "
                f"max_num_seqs = {caps.max_num_seqs}"
            )
    tokens = row[_PREFILL_TOKENS]
    if caps.max_num_batched_tokens and tokens > caps.max_num_batched_tokens:
        return (
            f"scheduled.sum_prefill_tokens = {tokens} is above the engine's "
            f"max_num_batched_tokens = {caps.max_num_batched_tokens}"
        )
    if kv and caps.max_kv_tokens:
        decode_kv, prefill_kv = row[_DECODE_KV], row[_PREFILL_KV]
        if decode_kv + prefill_kv + tokens > caps.max_kv_tokens:
            return (
                f"scheduled KV tokens = {decode_kv + prefill_kv + tokens} "
                f"(scheduled.sum_decode_kv_tokens {decode_kv} + scheduled.sum_prefill_kv_tokens "
                f"{prefill_kv} + scheduled.sum_prefill_tokens {tokens}) is above the engine's "
                f"max_kv_tokens = {caps.max_kv_tokens}"
            )
    return None


def within_scheduler_limits(rows: list[FpmRow], caps: EngineCapabilities) -> bool:
    """Whether every pass of ``rows`` fits ``caps``' scheduler limits (the fast check of a
    window's passes; :func:`engine_limit_breach` with ``kv=False`` says why one does not).

    >>> from schemas import ForwardPassMetrics, ScheduledRequestMetrics, fpm_to_row
    >>> rows = [fpm_to_row(1.0, ForwardPassMetrics(scheduled_requests=ScheduledRequestMetrics(
    ...     num_decode_requests=n))) for n in (10, 300)]
    >>> caps = EngineCapabilities(max_num_seqs=256)
    >>> within_scheduler_limits(rows[:1], caps), within_scheduler_limits(rows, caps)
    (True, False)
    """
    seqs, tokens = caps.max_num_seqs, caps.max_num_batched_tokens
    if not rows:
        return True
    if seqs and max(row[_PREFILL_REQUESTS] + row[_DECODE_REQUESTS] for row in rows) > seqs:
        return False
    return not (tokens and max(row[_PREFILL_TOKENS] for row in rows) > tokens)
