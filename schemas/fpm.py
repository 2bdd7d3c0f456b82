"""ForwardPassMetrics: one record per engine scheduler iteration (reference spec §2.1).

Field names and defaults are exactly those of the reference schema, so a payload published by a
real engine (msgpack map with string keys) or exported as JSON decodes unchanged. Counts and token
sums must be non-negative integers and every float must be finite: a record that breaks this is
rejected with a ``pydantic.ValidationError`` naming the field, never silently repaired.
Beyond the schema, :data:`FPM_CEILINGS` bounds what a real forward pass can report; inputs are
checked against them where they are admitted (:func:`implausibility`), so an absurd but
well-typed record is dead-lettered instead of steering the perf models.
Unknown fields and ``version`` values are accepted, as the reference's own decoder does: an
engine one schema version ahead must not blind the planner (the fields it reads are unchanged
between versions 0 and 1).
"""

from __future__ import annotations

from typing import Annotated, Any, NamedTuple

import msgpack
from pydantic import BaseModel, ConfigDict, Field

MAX_COUNT = 2**64 - 1
"""The largest count a producer can send: the reference's Rust engines write u64 (msgpack's
largest integer too). Anything larger is a broken producer, not a big engine."""

MAX_WORKER_ID = 512
"""*ours*: the longest ``worker_id`` an FPM may carry. Real ids are a pod name (at most 253
characters) with a rank or a lease id; a longer one is a broken producer, and it would be kept
as an engine's name and echoed in logs."""

MAX_FORWARD_PASS_SECONDS = 60.0
"""*ours*: the longest ``wall_time`` an admitted FPM may report. Engines schedule chunked
prefill (a few thousand tokens per iteration), so a forward pass takes milliseconds to a few
seconds; even an unchunked 128k-token prefill of a 70B model on one node is ~10-20 s. An
iteration of a minute or more is a stalled or broken engine, not a pass the perf models may
learn from (one ``wall_time=1e300`` made the decode model estimate an ITL of 1e303 ms)."""

MAX_FPM_REQUESTS = 2**24
"""*ours*: the most requests (scheduled or queued, per kind) one FPM may count: 16.8 M.
Engines batch at most 10^2-10^4 sequences (``max_num_seqs``); a queue of 16 M requests behind
one engine is a broken counter."""

MAX_FPM_TOKENS = 2**36
"""*ours*: the largest token or KV-token sum one FPM may report: 6.9e10. Scheduled KV must sit
in the engine's memory: even at 1 KiB per token (a 0.5B model in fp8 needs ~6 KiB) that is
64 TiB, about 5x the HBM of a whole 72-GPU rack. A queue that large is MAX_FPM_REQUESTS
requests of 4096 tokens each. (One ``sum_decode_kv_tokens=2**64-1`` blinded the load loop.)"""

MAX_FPM_TOKEN_VARIANCE = float(MAX_FPM_TOKENS) ** 2
"""*ours*: the largest variance of lengths one FPM may report (lengths of at most
MAX_FPM_TOKENS cannot spread wider than its square)."""


class Ceiling(NamedTuple):
    """The plausibility ceiling of one FPM field, and the name of the constant that sets it.

    >>> FPM_CEILINGS["wall_time"]
    Ceiling(limit=60.0, name='MAX_FORWARD_PASS_SECONDS')
    """

    limit: float
    name: str


_SECONDS = Ceiling(MAX_FORWARD_PASS_SECONDS, "MAX_FORWARD_PASS_SECONDS")
_REQUESTS = Ceiling(MAX_FPM_REQUESTS, "MAX_FPM_REQUESTS")
_TOKENS = Ceiling(MAX_FPM_TOKENS, "MAX_FPM_TOKENS")
_VARIANCE = Ceiling(MAX_FPM_TOKEN_VARIANCE, "MAX_FPM_TOKEN_VARIANCE")

FPM_CEILINGS: dict[str, Ceiling] = {
    "wall_time": _SECONDS,
    "scheduled_requests.num_prefill_requests": _REQUESTS,
    "scheduled_requests.sum_prefill_tokens": _TOKENS,
    "scheduled_requests.var_prefill_length": _VARIANCE,
    "scheduled_requests.sum_prefill_kv_tokens": _TOKENS,
    "scheduled_requests.num_decode_requests": _REQUESTS,
    "scheduled_requests.sum_decode_kv_tokens": _TOKENS,
    "scheduled_requests.var_decode_kv_tokens": _VARIANCE,
    "queued_requests.num_prefill_requests": _REQUESTS,
    "queued_requests.sum_prefill_tokens": _TOKENS,
    "queued_requests.var_prefill_length": _VARIANCE,
    "queued_requests.num_decode_requests": _REQUESTS,
    "queued_requests.sum_decode_kv_tokens": _TOKENS,
    "queued_requests.var_decode_kv_tokens": _VARIANCE,
}
"""*ours*: the ceiling of every bounded FPM field, by field path. An FPM above any of them is
schema-valid but no real engine's forward pass: every path that admits FPMs from outside (JSON
and Kafka events, FPM batch rows, ZMQ msgpack) dead-letters it (see :func:`implausibility`).
Synthetic FPMs built inside (profile bootstrap, simulator) are not held to them."""


def describe_implausible(field: str, value: float, ceiling: Ceiling) -> str:
    """The reason an FPM field is refused: it names the field, the value and the ceiling.

    >>> describe_implausible("wall_time", 1e300, FPM_CEILINGS["wall_time"])
    'wall_time = 1e+300 is implausible for one forward pass (above MAX_FORWARD_PASS_SECONDS = 60.0)'
    """
    return (
        f"{field} = {value!r} is implausible for one forward pass "
        f"(above {ceiling.name} = {ceiling.limit!r})"
    )


Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
WorkerId = Annotated[str, Field(max_length=MAX_WORKER_ID)]
"""A non-negative integer count or token sum (at most :data:`MAX_COUNT`)."""

NonNegativeFinite = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
"""A finite float >= 0 (seconds, variances)."""

_MODEL_CONFIG = ConfigDict(frozen=True, strict=True, extra="ignore")


class ScheduledRequestMetrics(BaseModel):
    """Work executed in one forward pass.

    >>> ScheduledRequestMetrics(num_prefill_requests=1, sum_prefill_tokens=512).sum_prefill_tokens
    512
    """

    model_config = _MODEL_CONFIG

    num_prefill_requests: Count = 0
    sum_prefill_tokens: Count = 0
    var_prefill_length: NonNegativeFinite = 0.0
    sum_prefill_kv_tokens: Count = 0
    num_decode_requests: Count = 0
    sum_decode_kv_tokens: Count = 0
    var_decode_kv_tokens: NonNegativeFinite = 0.0


class QueuedRequestMetrics(BaseModel):
    """Work waiting (not scheduled) after one forward pass. No ``sum_prefill_kv_tokens`` here.

    >>> QueuedRequestMetrics(sum_prefill_tokens=4096).num_decode_requests
    0
    """

    model_config = _MODEL_CONFIG

    num_prefill_requests: Count = 0
    sum_prefill_tokens: Count = 0
    var_prefill_length: NonNegativeFinite = 0.0
    num_decode_requests: Count = 0
    sum_decode_kv_tokens: Count = 0
    var_decode_kv_tokens: NonNegativeFinite = 0.0


class ForwardPassMetrics(BaseModel):
    """One scheduler iteration of one engine (``wall_time == 0.0`` is an idle heartbeat).

    >>> fpm = ForwardPassMetrics(worker_id="w1", wall_time=0.02,
    ...     scheduled_requests=ScheduledRequestMetrics(num_decode_requests=8,
    ...                                                sum_decode_kv_tokens=9000))
    >>> ForwardPassMetrics.from_msgpack(fpm.to_msgpack()) == fpm
    True
    >>> ForwardPassMetrics().is_heartbeat
    True
    """

    model_config = _MODEL_CONFIG

    version: Count = 0
    worker_id: WorkerId = ""
    dp_rank: Count = 0
    counter_id: Count = 0
    wall_time: NonNegativeFinite = 0.0
    scheduled_requests: ScheduledRequestMetrics = ScheduledRequestMetrics()
    queued_requests: QueuedRequestMetrics = QueuedRequestMetrics()

    @property
    def is_heartbeat(self) -> bool:
        """An idle heartbeat carries no forward pass (``wall_time == 0``)."""
        return self.wall_time == 0.0

    @classmethod
    def from_msgpack(cls, payload: bytes) -> ForwardPassMetrics:
        """Decode a msgpack map (string keys) as published by engines (spec §2.2)."""
        data: Any = msgpack.unpackb(payload, raw=False, strict_map_key=True)
        return cls.model_validate(data)

    def to_msgpack(self) -> bytes:
        """Encode as a msgpack map with string keys, nested structs as maps."""
        return msgpack.packb(self.model_dump(), use_bin_type=True)


def implausibility(fpm: ForwardPassMetrics) -> str | None:
    """Why ``fpm`` cannot be a real engine's forward pass (the first field above its
    :data:`FPM_CEILINGS` entry), or ``None`` when it is plausible.

    >>> implausibility(ForwardPassMetrics(wall_time=0.03)) is None
    True
    >>> print(implausibility(ForwardPassMetrics(scheduled_requests=ScheduledRequestMetrics(
    ...     sum_decode_kv_tokens=2**64 - 1))))  # doctest: +NORMALIZE_WHITESPACE
    scheduled_requests.sum_decode_kv_tokens = 18446744073709551615 is implausible for one
    forward pass (above MAX_FPM_TOKENS = 68719476736)
    """
    s, q = fpm.scheduled_requests, fpm.queued_requests
    # The common case first, in one expression: this runs for every admitted FPM, and plain
    # comparisons cost half of what the same test through max() did (1.1 -> 0.55 us a pass).
    if (
        fpm.wall_time <= MAX_FORWARD_PASS_SECONDS
        and s.num_prefill_requests <= MAX_FPM_REQUESTS
        and s.num_decode_requests <= MAX_FPM_REQUESTS
        and q.num_prefill_requests <= MAX_FPM_REQUESTS
        and q.num_decode_requests <= MAX_FPM_REQUESTS
        and s.sum_prefill_tokens <= MAX_FPM_TOKENS
        and s.sum_prefill_kv_tokens <= MAX_FPM_TOKENS
        and s.sum_decode_kv_tokens <= MAX_FPM_TOKENS
        and q.sum_prefill_tokens <= MAX_FPM_TOKENS
        and q.sum_decode_kv_tokens <= MAX_FPM_TOKENS
        and s.var_prefill_length <= MAX_FPM_TOKEN_VARIANCE
        and s.var_decode_kv_tokens <= MAX_FPM_TOKEN_VARIANCE
        and q.var_prefill_length <= MAX_FPM_TOKEN_VARIANCE
        and q.var_decode_kv_tokens <= MAX_FPM_TOKEN_VARIANCE
    ):
        return None
    for path, ceiling in FPM_CEILINGS.items():
        value: Any = fpm
        for part in path.split("."):
            value = getattr(value, part)
        if value > ceiling.limit:
            return describe_implausible(path, value, ceiling)
    return None  # pragma: no cover - the expression above and the table agree
