"""Publish ForwardPassMetrics the way engines do: ZMQ PUB, frames ``[topic, seq, payload]``.

The wire format is the reference's (spec §2.2–§2.3): ``topic`` (empty by default), ``seq`` as an
8-byte big-endian counter that starts at 0 and increases by one per message on this socket, and
``payload`` a msgpack map with string keys (nested structs as maps). Like the reference publisher,
``counter_id`` of a published FPM is set to its sequence number.

The socket is an XPUB, which sends exactly like a PUB but also hears subscriptions, so
:meth:`FpmPublisher.wait_for_subscribers` can wait until a subscriber is really connected before
publishing (a plain PUB silently drops everything sent before that — ZMQ's "slow joiner").
Tests, benchmarks and the simulated fleet use this class; real engines publish the same frames.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType

import msgspec
import zmq

from schemas import ForwardPassMetrics, FpmRow
from schemas.fpm_rows import row_request_fields

_ENCODER = msgspec.msgpack.Encoder()


def encode_fpm(fpm: ForwardPassMetrics, counter_id: int | None = None) -> bytes:
    """The msgpack payload of one FPM (string-keyed maps), optionally with another counter_id.

    >>> from schemas import ForwardPassMetrics, FpmRow
    >>> fpm = ForwardPassMetrics(worker_id="w1", wall_time=0.02)
    >>> ForwardPassMetrics.from_msgpack(encode_fpm(fpm, counter_id=7)).counter_id
    7
    """
    s, q = fpm.scheduled_requests, fpm.queued_requests
    return _ENCODER.encode(
        {
            "version": fpm.version,
            "worker_id": fpm.worker_id,
            "dp_rank": fpm.dp_rank,
            "counter_id": fpm.counter_id if counter_id is None else counter_id,
            "wall_time": fpm.wall_time,
            "scheduled_requests": {
                "num_prefill_requests": s.num_prefill_requests,
                "sum_prefill_tokens": s.sum_prefill_tokens,
                "var_prefill_length": s.var_prefill_length,
                "sum_prefill_kv_tokens": s.sum_prefill_kv_tokens,
                "num_decode_requests": s.num_decode_requests,
                "sum_decode_kv_tokens": s.sum_decode_kv_tokens,
                "var_decode_kv_tokens": s.var_decode_kv_tokens,
            },
            "queued_requests": {
                "num_prefill_requests": q.num_prefill_requests,
                "sum_prefill_tokens": q.sum_prefill_tokens,
                "var_prefill_length": q.var_prefill_length,
                "num_decode_requests": q.num_decode_requests,
                "sum_decode_kv_tokens": q.sum_decode_kv_tokens,
                "var_decode_kv_tokens": q.var_decode_kv_tokens,
            },
        }
    )


def encode_row(worker_id: str, dp_rank: int, row: FpmRow, counter_id: int | None = None) -> bytes:
    """The payload of one :class:`schemas.FpmBatch` row (no pydantic model on the way).

    >>> from schemas import ForwardPassMetrics, fpm_to_row
    >>> row = fpm_to_row(9.0, ForwardPassMetrics(worker_id="w1", wall_time=0.5))
    >>> encode_row("w1", 0, row) == encode_fpm(ForwardPassMetrics(worker_id="w1", wall_time=0.5))
    True
    """
    r = row
    scheduled, queued = row_request_fields(r)
    return _ENCODER.encode(
        {
            "version": 0,
            "worker_id": worker_id,
            "dp_rank": dp_rank,
            "counter_id": r[1] if counter_id is None else counter_id,
            "wall_time": r[2],
            "scheduled_requests": scheduled,
            "queued_requests": queued,
        }
    )


class FpmPublisher:
    """A bound ZMQ publisher of FPMs (one sequence counter per socket, like an engine's).

    ``url`` is ``tcp://host:port`` (port ``*`` or ``0`` picks a free one; :attr:`url` then holds
    the real address) or ``ipc:///path``. ``send_buffer`` is the socket's SNDHWM in messages
    (0 = unlimited); beyond it ZMQ drops messages, which subscribers see as sequence gaps.

    >>> with FpmPublisher("tcp://127.0.0.1:*") as publisher:
    ...     publisher.publish(ForwardPassMetrics(worker_id="w1")), publisher.publish_payload(b"x")
    (0, 1)
    """

    def __init__(
        self,
        url: str,
        *,
        topic: bytes = b"",
        send_buffer: int = 10_000,
        context: zmq.Context | None = None,
    ) -> None:
        if not url.startswith(("tcp://", "ipc://")):
            raise ValueError(f"FPM publisher URL must be tcp:// or ipc://, got {url!r}")
        self.topic = topic
        self.seq = 0
        self._subscriptions = 0
        self._socket = (context or zmq.Context.instance()).socket(zmq.XPUB)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.SNDHWM, send_buffer)
        self._socket.setsockopt(zmq.XPUB_VERBOSE, 1)
        if url.startswith("tcp://") and url.endswith(":0"):
            url = url[:-2] + ":*"
        self._socket.bind(url)
        self.url: str = self._socket.getsockopt_string(zmq.LAST_ENDPOINT)

    def wait_for_subscribers(self, count: int = 1, timeout: float = 10.0) -> bool:
        """Block until ``count`` subscriptions are live (or ``timeout`` seconds); True if so."""
        deadline = time.monotonic() + timeout
        while self._subscriptions < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._socket.poll(int(remaining * 1000), zmq.POLLIN):
                return self._subscriptions >= count
            self._read_subscriptions()
        return True

    def _read_subscriptions(self) -> None:
        while True:
            try:
                message = self._socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            if message[:1] == b"\x01":
                self._subscriptions += 1
            elif message[:1] == b"\x00":
                self._subscriptions -= 1

    def publish(self, fpm: ForwardPassMetrics) -> int:
        """Publish one FPM (its ``counter_id`` becomes the sequence number); returns that."""
        return self.publish_payload(encode_fpm(fpm, counter_id=self.seq))

    def publish_row(self, worker_id: str, dp_rank: int, row: FpmRow) -> int:
        """Publish one FpmBatch row of an engine (fast path for simulated fleets)."""
        return self.publish_payload(encode_row(worker_id, dp_rank, row, counter_id=self.seq))

    def heartbeat(self, worker_id: str, dp_rank: int = 0) -> int:
        """Publish an idle heartbeat (a zeroed FPM, ``wall_time == 0``) of one engine."""
        return self.publish(ForwardPassMetrics(worker_id=worker_id, dp_rank=dp_rank))

    def publish_payload(self, payload: bytes) -> int:
        """Publish an already encoded payload with the next sequence number; returns it."""
        seq = self.seq
        self._socket.send_multipart((self.topic, seq.to_bytes(8, "big"), payload))
        self.seq = seq + 1
        return seq

    def publish_frames(self, frames: Sequence[bytes]) -> None:
        """Send arbitrary frames as one message (tests: malformed input). No sequence is used."""
        self._socket.send_multipart(list(frames))

    def skip(self, count: int = 1) -> None:
        """Advance the sequence without sending (what a subscriber sees as ``count`` lost)."""
        self.seq += count

    def close(self) -> None:
        """Close the socket (unsent messages are dropped)."""
        self._socket.close(linger=0)

    def __enter__(self) -> FpmPublisher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
