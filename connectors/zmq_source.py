"""The live FPM input: a bytewax source that SUBscribes to engine publishers over ZMQ.

Every engine (one per ``(worker_id, dp_rank)``) publishes a ZMQ message per forward pass, plus an
idle heartbeat once a second, as frames ``[topic, seq, payload]`` (spec §2.2–§2.3; see
:mod:`connectors.zmq_publisher`). :class:`ZmqFpmSource` subscribes to a set of such endpoints,
each configured with the deployment and role of the engines behind it, and yields:

* :class:`schemas.FpmBatchEvent` — every FPM of one engine drained in one poll, as compact rows
  (or one :class:`schemas.FpmEvent` per FPM with ``group=False``). Event time is the system time
  of the poll that received them (this source is live): each is a :class:`ReceivedFpmBatch` (or
  :class:`ReceivedFpm`), the subclass that tells the live event horizon so
  (:func:`flows.horizon.is_stamped_on_receipt`); everywhere else it is the event it subclasses.
* :class:`schemas.DeadLetter` — a message that is not exactly three frames, whose sequence frame
  is not 8 bytes, or whose payload is not a valid FPM (schema-valid but implausible included:
  a field above ``schemas.fpm.FPM_CEILINGS``); the reason names the problem and the field (the
  flow counts dead letters). Nothing valid is dropped.

Sequence numbers are tracked per endpoint (one PUB socket, one counter, as engines do): a jump
forward counts the missing messages in ``flowplanner_fpm_sequence_gaps_total{endpoint}``. A jump
forward by more than :data:`MAX_SEQUENCE_JUMP` (2**32) is not a gap: no publisher sends that many
messages between two a subscriber receives (2**32 forward passes at 10 000 a second are five
days), so it is a corrupt sequence frame or a broken publisher. It is logged, counted in
``flowplanner_fpm_sequence_resets_total{endpoint,reason="implausible_jump"}``, and the sequence
carries on from the last plausible number — unless the next message continues from the
implausible one, which then is the publisher's new sequence (its gap from there is counted).
A jump backwards is a publisher restart (not a gap) or, the mirror image of an implausible jump,
one corrupt frame; the next message decides, and until then the sequence carries on from the
number before the jump. If the next message continues from the lower number, the publisher
restarted: counted then, under ``reason="restart"``, with the gap from the lower number if any.
Otherwise the backward frame was a stray: logged, counted under ``reason="backward_stray"``, and
the next message is judged against the sequence before it (one stray ``0`` in a sequence at
10 000 000 used to count as a restart and 10 000 000 lost messages). A next message above the
number before the jump continues both: the old sequence wins, as a stray needs no lost messages.
A backward jump no message has followed yet is not counted (engines send a heartbeat a second,
so a restart is counted within about a second). The message whose sequence number
jumped (either way) is decoded and judged on its own, as any other: a broken sequence frame says
nothing about its payload.

Engines are discovered from the FPMs themselves; one not heard from for its deployment's
``engine_silence_seconds`` is logged as gone and leaves the
``flowplanner_fpm_engines{deployment,role}`` gauge. The planner applies the same rule in event
time (``PlannerConfig.engine_silence_seconds``): an engine whose latest FPM is older than that no
longer counts, so no extra event is needed to drop it.

Why a :class:`bytewax.inputs.DynamicSource`: a PUB/SUB stream cannot be replayed, so there is no
resume position worth snapshotting (the advantage of fixed partitions); instead each worker takes
every ``worker_count``-th endpoint and watches all of its sockets with one ``zmq.Poller``, so an
idle fleet of many engines costs one poll per wake-up rather than one per endpoint.

Decoding is strict — exactly :class:`schemas.ForwardPassMetrics` (non-negative integer counts,
finite non-negative floats, no bools for ints, string worker ids) — and fast: a ``msgspec``
mirror of the schema decodes and validates straight from msgpack; only when it rejects a payload
does the pydantic model give the verdict (and the error message). A conformance test checks that
both accept exactly the same payloads with the same values. The mirror knows only the schema's
fields and refuses any other (``forbid_unknown_fields``), so a payload with an unknown field
always gets the schema's verdict: msgspec would skip an unknown field unchecked, while the schema
path reads the whole payload (every text UTF-8, every map key a string) and dead-letters junk
anywhere in it. Unknown fields that are well-formed msgpack are still ignored (see
:mod:`schemas.fpm`), at the slow path's cost (~6 µs instead of ~0.5 µs a payload); an engine's
payload, which has only the schema's fields, costs what it did.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, NamedTuple

import msgspec
import zmq
from bytewax.inputs import DynamicSource, StatelessSourcePartition
from pydantic import ValidationError

from connectors.pipeline_metrics import (
    EVENTS_IN,
    FPM_ENGINES,
    FPM_ENGINES_EXPIRED,
    FPM_GAPS,
    FPM_SEQUENCE_RESETS,
)
from connectors.stopping import inputs_ended
from schemas import (
    MAX_RAW_CHARS,
    DeadLetter,
    EngineFpm,
    ForwardPassMetrics,
    FpmBatch,
    FpmBatchEvent,
    FpmEvent,
    FpmRow,
    Role,
    describe_validation_error,
    fpm_from_row,
    fpm_to_row,
)
from schemas.fpm import (
    MAX_FORWARD_PASS_SECONDS,
    MAX_FPM_REQUESTS,
    MAX_FPM_TOKEN_VARIANCE,
    MAX_FPM_TOKENS,
    MAX_WORKER_ID,
    implausibility,
)

log = logging.getLogger(__name__)

ZmqItem = FpmBatchEvent | FpmEvent | DeadLetter
"""What :class:`ZmqFpmSource` yields."""


class ReceivedFpmBatch(FpmBatchEvent):
    """Forward passes of one engine drained in one poll, stamped with the poll's host time.

    Their time is this host's clock when they were received, not the data's, so the live event
    horizon holds them while the inputs read back a history (:mod:`flows.horizon`): stamped at
    the present, they would make that history late. Only this source makes them — parsing never
    does (the wire type is still ``fpm_batch``) — and everywhere else one is the
    :class:`schemas.FpmBatchEvent` it subclasses (same JSON, same window). Defined at module
    level, so bytewax can pickle it (snapshots, and the exchange to the deployment's worker).

    >>> import pickle
    >>> from schemas import FpmBatch
    >>> row = (5.0, 7, 0.02) + (0, 0, 0.0, 0, 4, 4000, 0.0) + (0, 0, 0.0, 0, 0, 0.0)
    >>> batch = ReceivedFpmBatch(deployment="d", time=5.0, payload=FpmBatch(role="decode",
    ...                                                                       rows=[row]))
    >>> copy = pickle.loads(pickle.dumps(batch))
    >>> type(copy).__name__, isinstance(copy, FpmBatchEvent), copy.type
    ('ReceivedFpmBatch', True, 'fpm_batch')
    >>> batch.model_dump_json() == FpmBatchEvent(**dict(batch)).model_dump_json()
    True
    """


class ReceivedFpm(FpmEvent):
    """One forward pass stamped with the host time of the poll that received it (``group=False``):
    the single-pass twin of :class:`ReceivedFpmBatch`; the wire type is still ``fpm``.

    >>> from schemas import EngineFpm, ForwardPassMetrics
    >>> fpm = ReceivedFpm(deployment="d", time=5.0,
    ...                   payload=EngineFpm(role="decode", fpm=ForwardPassMetrics(wall_time=0.02)))
    >>> same_json = fpm.model_dump_json() == FpmEvent(**dict(fpm)).model_dump_json()
    >>> isinstance(fpm, FpmEvent), fpm.type, same_json
    (True, 'fpm', True)
    """


MAX_SEQUENCE_JUMP = 2**32
"""Largest forward jump of a publisher's sequence read as lost messages; a larger one is a
corrupt sequence frame or a broken publisher (see the module docstring)."""

_ROLES = ("prefill", "decode")
RCVMORE = zmq.RCVMORE


class EndpointSpec(NamedTuple):
    """One engine publisher to subscribe to, and what its engines are.

    >>> EndpointSpec("tcp://10.0.0.5:20380", "llama", "decode").role
    'decode'
    """

    url: str
    deployment: str
    role: Role


def endpoint_specs(
    endpoints: Mapping[str, tuple[str, Role]] | Iterable[EndpointSpec | tuple[str, str, str]],
) -> list[EndpointSpec]:
    """Normalise and check endpoint configuration; raises ``ValueError`` naming the problem.

    >>> endpoint_specs({"ipc:///tmp/e0": ("llama", "prefill")})
    [EndpointSpec(url='ipc:///tmp/e0', deployment='llama', role='prefill')]
    """
    if isinstance(endpoints, Mapping):
        items = [EndpointSpec(url, *value) for url, value in endpoints.items()]
    else:
        items = [EndpointSpec(*item) for item in endpoints]
    seen: set[str] = set()
    for spec in items:
        if not isinstance(spec.url, str) or not spec.url.startswith(("tcp://", "ipc://")):
            raise ValueError(f"endpoint {spec.url!r}: URL must start with tcp:// or ipc://")
        if spec.url in seen:
            raise ValueError(f"endpoint {spec.url!r} is listed twice")
        if not isinstance(spec.deployment, str) or not spec.deployment:
            raise ValueError(f"endpoint {spec.url!r}: deployment must be a non-empty string")
        if spec.role not in _ROLES:
            raise ValueError(
                f"endpoint {spec.url!r}: role must be one of {_ROLES}, not {spec.role!r}"
            )
        seen.add(spec.url)
    return items


# --- the wire decoder ---------------------------------------------------------------------------
# The mirror structs forbid unknown fields: a payload carrying one is decided by the schema path
# (FpmWireDecoder.verdict), the only one that checks what an unknown field holds (module docstring).

_Count = Annotated[int, msgspec.Meta(ge=0)]  # msgpack itself stops at MAX_COUNT (u64)
# The plausibility ceilings of schemas.fpm.FPM_CEILINGS (a bounded float also rejects NaN, inf)
_Seconds = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_FORWARD_PASS_SECONDS)]
_Requests = Annotated[int, msgspec.Meta(ge=0, le=MAX_FPM_REQUESTS)]
_Tokens = Annotated[int, msgspec.Meta(ge=0, le=MAX_FPM_TOKENS)]
_Variance = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_FPM_TOKEN_VARIANCE)]


class _WireScheduled(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    num_prefill_requests: _Requests = 0
    sum_prefill_tokens: _Tokens = 0
    var_prefill_length: _Variance = 0.0
    sum_prefill_kv_tokens: _Tokens = 0
    num_decode_requests: _Requests = 0
    sum_decode_kv_tokens: _Tokens = 0
    var_decode_kv_tokens: _Variance = 0.0


class _WireQueued(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    num_prefill_requests: _Requests = 0
    sum_prefill_tokens: _Tokens = 0
    var_prefill_length: _Variance = 0.0
    num_decode_requests: _Requests = 0
    sum_decode_kv_tokens: _Tokens = 0
    var_decode_kv_tokens: _Variance = 0.0


class _WireFpm(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    version: _Count = 0
    worker_id: Annotated[str, msgspec.Meta(max_length=MAX_WORKER_ID)] = ""
    dp_rank: _Count = 0
    counter_id: _Count = 0
    wall_time: _Seconds = 0.0
    scheduled_requests: _WireScheduled = _WireScheduled()
    queued_requests: _WireQueued = _WireQueued()


class FpmDecodeError(ValueError):
    """A payload that is not a valid ForwardPassMetrics; the message says why.

    >>> try:
    ...     FpmWireDecoder().decode(b"not msgpack", 5.0)
    ... except FpmDecodeError as error:
    ...     print(str(error).split(" (")[0])
    undecodable FPM payload
    """


class FpmWireDecoder:
    """Strict msgpack → FPM row decoding (msgspec fast path, pydantic verdict on rejection).

    :meth:`decode` returns ``(worker_id, dp_rank, row)`` with the row laid out as
    ``schemas.FPM_BATCH_COLUMNS`` (event time first), or raises :class:`FpmDecodeError` whose
    message is the pydantic model's own (field path and reason). A payload with a field the
    schema does not know takes the slow path, which accepts it only when the whole payload is
    well-formed (text UTF-8, map keys strings).

    >>> from connectors.zmq_publisher import encode_fpm
    >>> decoder = FpmWireDecoder()
    >>> worker, rank, row = decoder.decode(encode_fpm(ForwardPassMetrics(worker_id="w1",
    ...                                               wall_time=0.02)), 5.0)
    >>> worker, rank, row[:3]
    ('w1', 0, (5.0, 0, 0.02))
    >>> import msgpack
    >>> try:
    ...     decoder.decode(msgpack.packb({"wall_time": -1.0}), 5.0)
    ... except FpmDecodeError as exc:
    ...     print(exc)
    invalid FPM: wall_time: Input should be greater than or equal to 0
    >>> decoder.decode(msgpack.packb({"worker_id": "w1", "new_field": [1]}), 5.0)[:2]
    ('w1', 0)
    >>> try:
    ...     decoder.decode(msgpack.packb({"worker_id": "w1", "new_field": {1: 2}}), 5.0)
    ... except FpmDecodeError as exc:
    ...     print(exc)
    undecodable FPM payload (not msgpack): int is not allowed for map key when strict_map_key=True
    >>> try:
    ...     decoder.decode(msgpack.packb({"wall_time": 1e300}), 5.0)
    ... except FpmDecodeError as exc:
    ...     print(exc)  # doctest: +NORMALIZE_WHITESPACE
    invalid FPM: wall_time = 1e+300 is implausible for one forward pass
    (above MAX_FORWARD_PASS_SECONDS = 60.0)
    """

    def __init__(self) -> None:
        self._decoder = msgspec.msgpack.Decoder(_WireFpm)

    def decode(self, payload: bytes | memoryview, time: float) -> tuple[str, int, FpmRow]:
        """Decode one payload received at ``time``."""
        try:
            m = self._decoder.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
            # msgspec raises UnicodeDecodeError itself for a str (or map key) that is not UTF-8
            fpm = self.verdict(bytes(payload))
            return fpm.worker_id, fpm.dp_rank, fpm_to_row(time, fpm)
        # the wire struct has the schema's attribute names, so the schema's row layout applies
        return m.worker_id, m.dp_rank, fpm_to_row(time, m)  # type: ignore[arg-type]

    @staticmethod
    def verdict(payload: bytes) -> ForwardPassMetrics:
        """The schema's own decision on a payload (slow path), plausibility included (see
        ``schemas.fpm.FPM_CEILINGS``); raises :class:`FpmDecodeError`."""
        try:
            fpm = ForwardPassMetrics.from_msgpack(payload)
        except ValidationError as exc:
            raise FpmDecodeError(f"invalid FPM: {describe_validation_error(exc)}") from None
        except Exception as exc:  # msgpack raises several types (ExtraData, FormatError, ...)
            detail = str(exc) or type(exc).__name__  # msgpack's StackError has no message
            raise FpmDecodeError(f"undecodable FPM payload (not msgpack): {detail}") from None
        problem = implausibility(fpm)
        if problem is not None:
            raise FpmDecodeError(f"invalid FPM: {problem}")
        return fpm


# --- engine discovery and expiry ----------------------------------------------------------------

EngineKey = tuple[str, Role, str, int]
"""``(deployment, role, worker_id, dp_rank)``."""


class EngineRegistry:
    """Engines heard from recently: discovery on first FPM, expiry after a silence — one for
    every engine, or each deployment's (an engine of a deployment the mapping lacks gets the
    shortest of them).

    Times are whatever clock the caller uses (seconds); nothing here reads a clock.

    >>> engines = EngineRegistry(silence_seconds=3.0)
    >>> engines.seen(("llama", "decode", "w1", 0), 10.0)
    True
    >>> engines.seen(("llama", "decode", "w1", 0), 11.0)
    False
    >>> engines.expire(13.5), engines.expire(14.5)
    ([], [('llama', 'decode', 'w1', 0)])
    >>> engines = EngineRegistry({"a": 3.0, "b": 30.0})
    >>> engines.seen(("a", "decode", "w1", 0), 0.0), engines.seen(("b", "decode", "w1", 0), 0.0)
    (True, True)
    >>> engines.expire(4.0), engines.silence_for("b"), engines.shortest
    ([('a', 'decode', 'w1', 0)], 30.0, 3.0)
    """

    def __init__(self, silence_seconds: float | Mapping[str, float]) -> None:
        given = silence_seconds if isinstance(silence_seconds, Mapping) else {"": silence_seconds}
        if not given:
            raise ValueError("engine silence: no deployment's silence given")
        for silence in given.values():
            if not (silence > 0 and math.isfinite(silence)):
                raise ValueError(f"engine silence must be a positive number, got {silence}")
        self.shortest = min(given.values())
        self._by_deployment = dict(given)
        self.last_seen: dict[EngineKey, float] = {}

    def silence_for(self, deployment: str) -> float:
        """Seconds after which an engine of ``deployment`` is gone."""
        return self._by_deployment.get(deployment, self.shortest)

    def seen(self, key: EngineKey, now: float) -> bool:
        """Record an FPM of ``key`` at ``now``; True when the engine is new (discovered)."""
        new = key not in self.last_seen
        self.last_seen[key] = now
        return new

    def expire(self, now: float) -> list[EngineKey]:
        """Forget and return the engines silent at ``now`` for more than their deployment's
        silence."""
        gone = [
            key for key, last in self.last_seen.items() if last < now - self.silence_for(key[0])
        ]
        for key in gone:
            del self.last_seen[key]
        return gone


# --- the bytewax source -------------------------------------------------------------------------


@dataclass
class _Subscription:
    spec: EndpointSpec
    socket: zmq.Socket
    last_seq: int | None = None
    received: int = 0
    gaps: int = 0
    implausible_seq: int | None = None
    """The last sequence number that jumped implausibly far ahead (not taken as last_seq)."""
    implausible_jumps: int = 0
    backward_seq: int | None = None
    """A sequence number behind ``last_seq`` (not taken as last_seq) that the next message tells
    to be a restart or a stray (module docstring); None when there is none to tell."""
    backward_strays: int = 0


@dataclass(frozen=True)
class _Options:
    batch_size: int
    engine_silence_seconds: float | Mapping[str, float]
    group: bool
    idle_poll_seconds: float
    receive_buffer: int
    stop_after: int | None
    clock: Callable[[], float]


def _sequence_anomaly(url: str, reason: str, count: int, message: str, *args: object) -> None:
    """Count the ``count``-th sequence anomaly of ``url`` under ``reason``; log the 1st, 10th,
    100th, ... of them (a broken publisher must not flood the log)."""
    FPM_SEQUENCE_RESETS.labels(endpoint=url, reason=reason).inc()
    if math.log10(count).is_integer():
        log.warning(message, url, *args, count)


def _preview(frames: Sequence[bytes]) -> str:
    """The frames as text for a dead letter (which clips it); each frame is cut first so a
    huge frame is never rendered whole."""
    return repr([frame[:MAX_RAW_CHARS] for frame in frames])


@dataclass
class _ZmqPartition(StatelessSourcePartition[ZmqItem]):
    specs: list[EndpointSpec]
    options: _Options
    _subscriptions: dict[zmq.Socket, _Subscription] = field(default_factory=dict)
    _poller: zmq.Poller = field(default_factory=zmq.Poller)
    _engines: EngineRegistry | None = None
    _decoder: FpmWireDecoder = field(default_factory=FpmWireDecoder)
    _next_awake: datetime | None = None
    _next_expiry_check: float = 0.0
    _last_now: float = 0.0  # the newest stamp: a clock stepped back stamps no earlier
    _publisher_of: dict[EngineKey, str] = field(default_factory=dict)  # the first endpoint
    _claims_warned: set[tuple[EngineKey, str]] = field(default_factory=set)

    def __post_init__(self) -> None:
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._engines = EngineRegistry(self.options.engine_silence_seconds)
        for spec in self.specs:
            socket = context.socket(zmq.SUB)
            socket.setsockopt(zmq.LINGER, 0)
            socket.setsockopt(zmq.RCVHWM, self.options.receive_buffer)
            socket.setsockopt(zmq.SUBSCRIBE, b"")
            socket.connect(spec.url)
            self._subscriptions[socket] = _Subscription(spec, socket)
            self._poller.register(socket, zmq.POLLIN)
            log.info("subscribed to FPM publisher %s (%s/%s)", spec.url, *spec[1:])

    def next_batch(self) -> list[ZmqItem]:
        if not self._subscriptions or inputs_ended():
            raise StopIteration
        options = self.options
        ready = self._poller.poll(0)
        now = options.clock()  # after the poll: what it found had arrived by now
        if not (now >= 0 and math.isfinite(now)):
            raise ValueError(f"clock gave {now!r}; event time must be finite and >= 0")
        # the host clock stepped back (NTP): stamp no earlier than before, or every pass until
        # it caught up would be behind the watermark, late (472 of 8 s at 200 a second)
        now = self._last_now = max(now, self._last_now)
        items: list[ZmqItem] = []
        for socket, _event in ready:
            self._drain(self._subscriptions[socket], now, items)
        if now >= self._next_expiry_check:
            self._expire(now)
        self._next_awake = (
            None if items else datetime.now(UTC) + timedelta(seconds=options.idle_poll_seconds)
        )
        return items

    def next_awake(self) -> datetime | None:
        return self._next_awake

    def _drain(self, sub: _Subscription, now: float, items: list[ZmqItem]) -> None:
        options = self.options
        limit = options.batch_size
        if options.stop_after is not None:
            limit = min(limit, options.stop_after - sub.received)
        # Plain recv + RCVMORE checks: the cheapest exact framing check pyzmq offers (measured
        # faster than zero-copy Frames and than recv_multipart).
        recv = sub.socket.recv
        more = sub.socket.get
        decode = self._decoder.decode
        groups: dict[tuple[str, int], list[FpmRow]] = {}
        last_seq = sub.last_seq
        backward = sub.backward_seq is not None  # the next message decides: not in order
        gaps = 0
        count = 0
        while count < limit:
            try:
                topic = recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            count += 1
            if more(RCVMORE):
                seq_frame = recv()
                if more(RCVMORE):
                    payload = recv()
                    if not more(RCVMORE) and len(seq_frame) == 8:
                        seq = int.from_bytes(seq_frame, "big")
                        if last_seq is None or (seq == last_seq + 1 and not backward):
                            last_seq = seq
                        else:
                            lost, last_seq = self._sequence_jump(sub, last_seq, seq)
                            backward = sub.backward_seq is not None
                            gaps += lost
                        try:
                            worker_id, dp_rank, row = decode(payload, now)
                        except FpmDecodeError as exc:
                            frames = [topic, seq_frame, payload]
                            items.append(self._dead(sub, seq, str(exc), frames))
                            continue
                        rows = groups.get((worker_id, dp_rank))
                        if rows is None:
                            groups[(worker_id, dp_rank)] = [row]
                        else:
                            rows.append(row)
                        continue
                    frames = [topic, seq_frame, payload]
                else:
                    frames = [topic, seq_frame]
            else:
                frames = [topic]
            items.append(self._malformed(sub, frames))
        sub.last_seq = last_seq
        sub.received += count
        if count:
            EVENTS_IN.labels(source="zmq").inc(count)
        if gaps:
            sub.gaps += gaps
            FPM_GAPS.labels(endpoint=sub.spec.url).inc(gaps)
            log.warning("FPM publisher %s: %d messages lost", sub.spec.url, gaps)
        self._emit(sub.spec, now, groups, items)
        if options.stop_after is not None and sub.received >= options.stop_after:
            self._unsubscribe(sub)

    @staticmethod
    def _sequence_jump(sub: _Subscription, last_seq: int, seq: int) -> tuple[int, int]:
        """Messages lost between two sequence numbers (0 when the publisher restarted or the
        jump is implausible), and the sequence number to carry on from (module docstring)."""
        url = sub.spec.url
        jump = seq - last_seq
        held = sub.backward_seq
        if held is not None:  # the message after a backward jump: a restart, or was it a stray?
            sub.backward_seq = None
            if not 0 < jump <= MAX_SEQUENCE_JUMP and 0 < seq - held <= MAX_SEQUENCE_JUMP:
                sub.implausible_seq = None
                FPM_SEQUENCE_RESETS.labels(endpoint=url, reason="restart").inc()
                log.info("FPM publisher %s restarted (seq %d after %d)", url, held, last_seq)
                return seq - held - 1, seq
            sub.backward_strays += 1
            _sequence_anomaly(
                url,
                "backward_stray",
                sub.backward_strays,
                "FPM publisher %s: a message's sequence read %d after %d, the next one %d: "
                "a corrupt sequence frame or a broken publisher, not a restart "
                "(%d such backward jumps so far)",
                held,
                last_seq,
                seq,
            )
            # ... and this message is judged against the sequence before the stray
        suspect = sub.implausible_seq
        if 0 < jump <= MAX_SEQUENCE_JUMP:
            return jump - 1, seq
        if suspect is not None and 0 < seq - suspect <= MAX_SEQUENCE_JUMP:
            # the message after an implausible jump continues from it: the publisher's sequence
            # really moved there (the jump itself was counted when it came)
            sub.implausible_seq = None
            log.info("FPM publisher %s: sequence carries on from %d", url, suspect)
            return seq - suspect - 1, seq
        if jump > MAX_SEQUENCE_JUMP:
            sub.implausible_seq = seq
            sub.implausible_jumps += 1
            _sequence_anomaly(
                url,
                "implausible_jump",
                sub.implausible_jumps,
                "FPM publisher %s: sequence jumped from %d to %d, more than %d ahead: a "
                "corrupt sequence frame or a broken publisher, not lost messages "
                "(%d such jumps so far)",
                last_seq,
                seq,
                MAX_SEQUENCE_JUMP,
            )
            return 0, last_seq
        sub.backward_seq = seq  # a restart or a stray: the next message tells
        return 0, last_seq

    def _malformed(self, sub: _Subscription, frames: list[bytes]) -> DeadLetter:
        """Dead letter for a message with the wrong framing (reads its remaining frames)."""
        socket = sub.socket
        while socket.get(RCVMORE):
            frames.append(socket.recv())
        if len(frames) != 3:
            reason = f"expected 3 frames [topic, seq, payload], got {len(frames)}"
        else:
            reason = f"sequence frame must be 8 bytes (big-endian), got {len(frames[1])}"
        return self._dead(sub, None, f"malformed ZMQ message: {reason}", frames)

    def _emit(
        self,
        spec: EndpointSpec,
        now: float,
        groups: dict[tuple[str, int], list[FpmRow]],
        items: list[ZmqItem],
    ) -> None:
        engines = self._engines
        assert engines is not None
        deployment, role = spec.deployment, spec.role
        for (worker_id, dp_rank), rows in groups.items():
            key = (deployment, role, worker_id, dp_rank)
            first = self._publisher_of.setdefault(key, spec.url)
            if first != spec.url:
                self._claimed_twice(key, first, spec.url)
            if engines.seen(key, now):
                FPM_ENGINES.labels(deployment=deployment, role=role).inc()
                log.info(
                    "discovered engine %s/%s worker %r dp_rank %d at %s",
                    deployment,
                    role,
                    worker_id,
                    dp_rank,
                    spec.url,
                )
            if self.options.group:
                batch = FpmBatch.model_construct(
                    role=role, worker_id=worker_id, dp_rank=dp_rank, rows=rows
                )
                # Rows come from the strict decoder and ``now`` was checked: no re-validation
                # (FpmBatch's row check would cost more than receiving and decoding them).
                items.append(
                    ReceivedFpmBatch.model_construct(deployment=deployment, time=now, payload=batch)
                )
            else:
                items.extend(
                    ReceivedFpm(
                        deployment=deployment,
                        time=now,
                        payload=EngineFpm(role=role, fpm=fpm_from_row(worker_id, dp_rank, row)),
                    )
                    for row in rows
                )

    def _dead(
        self, sub: _Subscription, seq: int | None, reason: str, frames: Sequence[bytes]
    ) -> DeadLetter:
        return DeadLetter(
            source=sub.spec.url,
            position=seq,
            reason=reason,
            raw=_preview(frames),
            deployment=sub.spec.deployment,
        )

    def _claimed_twice(self, key: EngineKey, first: str, second: str) -> None:
        """Two publishers send one engine's passes (the same worker id and rank, a copied
        config): they are read as one engine, whose load is whichever sent last, so warn once
        per pair — the load loop would otherwise report a worker count mismatch for ever."""
        if (key, second) in self._claims_warned:
            return
        self._claims_warned.add((key, second))
        log.warning(
            "engine %s/%s worker %r dp_rank %d is published by %s and by %s: one engine to the "
            "planner (give each engine its own worker id)",
            *key,
            first,
            second,
        )

    def _expire(self, now: float) -> None:
        engines = self._engines
        assert engines is not None
        for deployment, role, worker_id, dp_rank in engines.expire(now):
            self._publisher_of.pop((deployment, role, worker_id, dp_rank), None)
            FPM_ENGINES.labels(deployment=deployment, role=role).dec()
            FPM_ENGINES_EXPIRED.labels(deployment=deployment, role=role).inc()
            log.warning(
                "engine %s/%s worker %r dp_rank %d silent for more than %ss: gone",
                deployment,
                role,
                worker_id,
                dp_rank,
                engines.silence_for(deployment),
            )
        self._next_expiry_check = now + min(engines.shortest / 4, 1.0)

    def _unsubscribe(self, sub: _Subscription) -> None:
        self._poller.unregister(sub.socket)
        sub.socket.close(linger=0)
        del self._subscriptions[sub.socket]

    def close(self) -> None:
        for sub in list(self._subscriptions.values()):
            self._unsubscribe(sub)
        engines = self._engines
        if engines is not None:
            for deployment, role, _worker, _rank in engines.last_seen:
                FPM_ENGINES.labels(deployment=deployment, role=role).dec()
            engines.last_seen.clear()


class ZmqFpmSource(DynamicSource[ZmqItem]):
    """Bytewax source of live FPMs from ZMQ engine publishers (see the module docstring).

    ``endpoints`` maps ``url → (deployment, role)`` or lists :class:`EndpointSpec`. With N
    workers, worker ``i`` subscribes to endpoints ``i, i+N, …``.

    * ``batch_size`` — at most this many messages per endpoint per poll (bytewax throughput
      collapses with tiny batches; all FPMs of one engine in a poll become one FpmBatchEvent).
    * ``engine_silence_seconds`` — an engine not heard from this long is gone (heartbeats come
      once a second); a mapping gives each deployment's (``PlannerConfig``'s), and must name
      every endpoint's deployment.
    * ``group`` — False yields one FpmEvent per FPM instead of FpmBatchEvents.
    * ``idle_poll_seconds`` — how long to sleep after a poll that found nothing.
    * ``receive_buffer`` — SUB socket RCVHWM in messages (0 = unlimited); past it ZMQ drops,
      which shows up as sequence gaps.
    * ``stop_after`` — end after this many messages per endpoint (tests and benchmarks; live
      runs leave it None and never end).
    * ``clock`` — seconds since the epoch; the event time of received FPMs.

    >>> source = ZmqFpmSource({"tcp://127.0.0.1:20380": ("llama", "decode")}, batch_size=512)
    >>> [spec.deployment for spec in source.endpoints]
    ['llama']
    """

    def __init__(
        self,
        endpoints: Mapping[str, tuple[str, Role]] | Iterable[EndpointSpec],
        *,
        batch_size: int = 1000,
        engine_silence_seconds: float | Mapping[str, float] = 3.0,
        group: bool = True,
        idle_poll_seconds: float = 0.01,
        receive_buffer: int = 10_000,
        stop_after: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.endpoints = endpoint_specs(endpoints)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not idle_poll_seconds > 0:
            raise ValueError(f"idle_poll_seconds must be > 0, got {idle_poll_seconds}")
        if receive_buffer < 0:
            raise ValueError(f"receive_buffer must be >= 0, got {receive_buffer}")
        if stop_after is not None and stop_after < 1:
            raise ValueError(f"stop_after must be >= 1 or None, got {stop_after}")
        EngineRegistry(engine_silence_seconds)  # validates
        if isinstance(engine_silence_seconds, Mapping):
            engine_silence_seconds = dict(engine_silence_seconds)
            missing = sorted({s.deployment for s in self.endpoints} - set(engine_silence_seconds))
            if missing:
                raise ValueError(f"engine silence: none given for deployment {missing[0]!r}")
        self.options = _Options(
            batch_size=batch_size,
            engine_silence_seconds=engine_silence_seconds,
            group=group,
            idle_poll_seconds=idle_poll_seconds,
            receive_buffer=receive_buffer,
            stop_after=stop_after,
            clock=clock,
        )

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _ZmqPartition:
        mine = self.endpoints[worker_index::worker_count]
        return _ZmqPartition(mine, self.options)
