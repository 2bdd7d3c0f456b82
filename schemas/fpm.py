"""ForwardPassMetrics: one record per engine scheduler iteration (reference spec §2.1).

Field names and defaults are exactly those of the reference schema, so a payload published by a
real engine (msgpack map with string keys) or exported as JSON decodes unchanged. Counts and token
sums must be non-negative integers and every float must be finite: a record that breaks this is
rejected with a ``pydantic.ValidationError`` naming the field, never silently repaired.
Unknown fields and ``version`` values are accepted, as the reference's own decoder does: an
engine one schema version ahead must not blind the planner (the fields it reads are unchanged
between versions 0 and 1).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgpack
from pydantic import BaseModel, ConfigDict, Field

MAX_COUNT = 2**64 - 1
"""The largest count a producer can send: the reference's Rust engines write u64 (msgpack's
largest integer too). Anything larger is a broken producer, not a big engine."""

Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
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
    worker_id: str = ""
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
