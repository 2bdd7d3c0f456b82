"""Bytewax sources over Kafka topics: one bytewax partition per topic, its partitions merged."""

from __future__ import annotations

import logging
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Literal, TypeVar

from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from pydantic import ValidationError

from connectors.backlog import BACKLOG
from connectors.kafka.client import (
    BATCH_SIZE,
    DEFAULT_TIMEOUT_S,
    Bounds,
    KafkaConnectorError,
    PartitionWatch,
    TopicNotFoundError,
    consumer_config,
    list_partitions,
    message_position,
    partition_bounds,
)
from connectors.merge_keys import MergeKeys
from connectors.pipeline_metrics import EVENTS_IN
from connectors.recorded import Refusal, line_time
from connectors.stopping import inputs_ended
from connectors.traces import DYNAMO_SCHEMA, TraceFormatError, dynamo_request_event
from schemas import DeadLetter, RawEvent, RequestEvent, describe_validation_error

X = TypeVar("X")

log = logging.getLogger(__name__)

IDLE_POLL = timedelta(milliseconds=20)
"""How long a source partition sleeps after a poll that returned nothing."""

TOPIC_POLL_S = 0.5
"""How often a following source asks again for a topic that does not exist yet."""

TOPIC_WAIT_WARNING_S = 30.0
"""How often a following source repeats that it is still waiting for its topic; also how long
a partition may hold the merge without the consumer answering for it (a message or the end of
the partition) before the reader warns, once, that the topic's events are held behind it."""

ADDED_PARTITION_WAIT_S = 5.0
"""How long (host seconds) a partition found empty while following holds the merge waiting
for the consumer's first answer for it. The hold exists because the consumer first fetches a
partition it did not know about some 1.1 s after it is assigned (measured on Kafka 0.9), and
what is written to it meanwhile must not come behind the other partitions; this bound is about
four times that. A consumer that never answers (the partition lost its leader between the
watch's offsets and the first fetch, or the broker does not have it) would otherwise stop the
whole topic and keep the worker behind for ever: after the bound the partition lets go (the
reader warns), and what is written to it meanwhile may come late. Only this bound reads the
host clock; event time never does. A partition found holding messages is never let go: they
would all be late."""

PARTITION_REFRESH_S = 1.0
"""How often (seconds) a following source lists its topic's partitions again, to read the
partitions added while it runs. A new one is read from its beginning, so nothing written to it
is lost, but what was written to it before the reader found it — up to this interval plus the
time to fetch its offsets (milliseconds on a healthy broker) — comes behind what the other
partitions handed on meanwhile: it is late unless ``allowed_lateness_seconds`` covers that.
2 s does (measured: those events came up to 0.9 s behind), and the worker then decides what a
replay of the grown topic decides (tests/kafka/test_added_partitions.py). Kafka's own consumers
look every 5 minutes (``metadata.max.age.ms``), which would need minutes of lateness; this
costs the broker a listing of all the cluster's topics every second per followed topic (the
watch lists them all, as :func:`connectors.kafka.client.list_partitions` does: naming the
topic could auto-create it), and one offsets request per partition found. The listing runs on
a thread of its own (:class:`connectors.kafka.client.PartitionWatch`), so it never slows the
read loop, however slow the broker answers."""

MERGE_QUEUE = 10_000
"""Messages of one partition a topic reader queues for the merge before pausing its fetches."""

RECENT_REQUEST_IDS = 100_000
"""How many request ids per partition a trace source remembers to spot a redelivered one."""


TopicState = dict[int, tuple[int, float]]
"""A topic reader's resume state: per partition, the offset after the last message it handed
on and that message's merge key."""


@dataclass
class _Lane:
    """One partition inside a topic reader: what was read of it and not yet handed on."""

    partition: int
    next_offset: int
    """Offset after the last message handed on (the resume position)."""
    handed_time: float
    """Merge key of the last message handed on (the keys of the next ones follow from it)."""
    backlog_end: int
    """End offset when the reader started (or found the partition): until it is read, the
    partition holds the merge (one found while the reader runs, also until the consumer first
    answers for it: see :meth:`_TopicReader._open_lanes`)."""
    end: int | None
    """Bounded reads stop here."""
    keys: MergeKeys[tuple[int, Any]] = field(init=False)
    """The merge keys of the messages read (with their offsets): while the backlog is read,
    one that jumps ahead waits for confirmation (:class:`connectors.merge_keys.MergeKeys`)."""
    caught_up: bool = False
    paused: bool = False
    queue: deque[tuple[float, int, Any]] = field(default_factory=deque)
    found_empty: bool = False
    """Found while following with nothing to read: it holds the merge only until the consumer
    first answers for it, or :data:`ADDED_PARTITION_WAIT_S` at most."""
    opened_at: float = 0.0
    """When the lane was opened (host monotonic clock; for the hold's bound only)."""
    answered: bool = False
    """The consumer answered for it (a message or the end of the partition) at least once."""
    heard_at: float = 0.0
    """When the consumer last answered for it (host monotonic clock), else ``opened_at``."""
    warned: bool = False
    """The reader warned that it holds the merge (once per silence)."""

    def __post_init__(self) -> None:
        self.caught_up = self.next_offset >= self.backlog_end
        # the backlog is merged as a replay is; after it, the next message may be minutes away
        # and messages go on as they arrive: each is keyed at its own time
        self.keys = MergeKeys(self.handed_time, confirm=not self.caught_up)

    def read(self, time: float | None, offset: int, item: Any) -> None:
        """Queue the message at ``offset`` (``time``: its event time) with its merge key, and
        those whose key it settles."""
        self._queue(self.keys.add(time, (offset, item)))

    def read_backlog(self) -> None:
        """Everything the partition held when it was opened is read; a bounded read ends here,
        and a message still waiting for its key is keyed at its own time."""
        self.caught_up = True
        self._queue(self.keys.end())
        self.keys.confirm = False

    def _queue(self, keyed: list[tuple[float, tuple[int, Any]]]) -> None:
        self.queue.extend((key, offset, item) for key, (offset, item) in keyed)

    @property
    def holds_merge(self) -> bool:
        """Nothing of this partition is queued, but its backlog is not read yet."""
        return not self.queue and not self.caught_up


class _TopicReader(StatefulSourcePartition[X, TopicState]):
    """Every partition of one topic, read by one consumer and handed on merged by event time.

    A message is queued with its merge key: its event time (:meth:`KafkaTopicSource.merge_time`)
    — while the backlog is read, unless it lies more than a minute past its partition's last key and
    the partition's next timed message does not confirm the jump (a stray timestamp keeps the
    key before it: :class:`connectors.merge_keys.MergeKeys`). The reader hands on the queued
    message with the least ``(key, partition)`` (a partition's own order is kept) as long as
    every partition whose backlog — what it held when the reader started — is not read yet
    has one queued. Merged so, one partition's events cannot run ahead of
    another's and make them late in the flow, and a replay's order does not depend on which
    partition the broker serves first. Once the backlog is read, messages go on as they arrive.
    A partition with :data:`MERGE_QUEUE` messages queued stops fetching until it drains.
    Until the topic exists (following only), the reader asks for it every
    :data:`TOPIC_POLL_S`, without holding up the flow's other inputs.

    A following reader also reads the partitions added to its topic while it runs: a
    :class:`~connectors.kafka.client.PartitionWatch` lists them every
    :data:`PARTITION_REFRESH_S` on a thread of its own, and the reader adds each new one to its
    consumer's assignment (``incremental_assign``: the others keep their positions, their
    fetched messages and their pauses) from its first offset, so what was written to it before
    it was seen is read too. What it held when found is its backlog, as a partition's at the
    start is: it holds the merge and the reader counts as behind until that is handed on — and
    until the consumer first answers for it, even found empty (the consumer first fetches a
    partition it did not know about a second after it is assigned, measured on Kafka 0.9
    only), so what is written to it once found is merged in time. Found empty, it holds them
    :data:`ADDED_PARTITION_WAIT_S` at most, then lets go with a warning (what is written to it
    meanwhile may come late); a partition with unread messages is never let go, but one that
    holds the merge without an answer for :data:`TOPIC_WAIT_WARNING_S` is warned of, once.
    What was written to it before it was found comes after the other partitions' events of
    that interval (up to :data:`PARTITION_REFRESH_S` and the offsets' fetch) were handed on:
    it is late unless the allowed lateness covers the interval (2 s does).

    The Kafka partitions are the reader's, not bytewax's: the source is one bytewax partition
    per topic (fixed when the flow is built, as bytewax wants), placed on one worker of
    ``-w N``, whose one consumer reads every Kafka partition of the topic — the only design in
    which the merge by event time spans them all; so the worker that reads the topic is the one
    that finds its new partitions, and no other worker has to agree. Following, a partition
    missing from a resume state that has others was added after the snapshot and is read from
    its beginning too (``start`` applies to a topic first read); a bounded replay reads it from
    ``start``, as it always did.

    While its backlog is not all handed on, the reader counts as behind in
    :data:`connectors.backlog.BACKLOG` (a live run's clock then keeps to the data's time); it
    says it caught up in the first :meth:`next_batch` after it handed on the last of it, so
    the flow has had that batch by then. Every :meth:`next_batch` tells the registry the topic
    is being read (:meth:`~connectors.backlog.Backlog.polled`), so a worker that stalls is
    known to have stalled.
    """

    def __init__(
        self, source: KafkaTopicSource[X], state: TopicState | None, partitions: list[int] | None
    ) -> None:
        self._source = source
        self._state = state or {}
        self._where = f"{source.topic} at {source.bootstrap}"
        self._errors: list[KafkaError] = []
        self._warned: set[int] = set()
        self._lanes: dict[int, _Lane] = {}
        self._awake: datetime | None = None
        self._waiting_since: float | None = None
        self._waiting_then = ""
        self._consumer: Consumer | None = None
        self._watch: PartitionWatch | None = None
        if partitions is not None:
            self._start(self._bounds(partitions))

    def _start(self, bounds: dict[int, Bounds]) -> None:
        source = self._source
        # following, a snapshot holds every partition its reader knew: one it lacks was added
        # after it (a bounded replay keeps ``start`` for it, as it always did)
        self._open_lanes(
            bounds, at_end=source.start == "end" and (source.until_end or not self._state)
        )
        # end-of-partition events in both modes: a backlog that ends in a transaction marker
        # is read when the partition says so, not when a message beyond it arrives
        config = {"enable.partition.eof": True, **source.config}
        self._consumer = Consumer(
            {
                **consumer_config(source.bootstrap, config, partition_eof=source.until_end),
                "error_cb": self._errors.append,
            }
        )
        self._consumer.assign(
            [
                TopicPartition(source.topic, lane.partition, lane.next_offset)
                for lane in self._lanes.values()
            ]
        )
        if not source.until_end:
            self._watch = PartitionWatch(
                source.bootstrap,
                source.topic,
                known=sorted(bounds),
                interval_s=PARTITION_REFRESH_S,
                config=source.config,
                timeout_s=source.timeout_s,
            ).start()
            weakref.finalize(self, self._watch.close)  # a reader dropped unclosed stops it too

    def _add_partitions(self, found: dict[int, Bounds]) -> None:
        """Read the partitions added to the topic since the start, each from its first offset."""
        assert self._consumer is not None
        new = sorted(p for p in found if p not in self._lanes)
        if not new:
            return
        self._open_lanes({p: found[p] for p in new}, at_end=False, added=True)
        self._consumer.incremental_assign(
            [TopicPartition(self._source.topic, p, self._lanes[p].next_offset) for p in new]
        )
        held = sum(max(0, found[p].end - self._lanes[p].next_offset) for p in new)
        log.info(
            "Kafka topic %s has new partitions %s; reading them from their beginning "
            "(%d messages there)",
            self._where,
            new,
            held,
        )

    def _open_lanes(
        self, bounds: Mapping[int, Bounds], *, at_end: bool, added: bool = False
    ) -> None:
        """A lane for each partition of ``bounds``, from its resume position, else from its
        first offset (its end offset when ``at_end``); the reader is behind until what they
        hold is handed on. The lane of a partition ``added`` while the reader runs holds the
        merge until the consumer first answers for it (a message, or the end of the partition),
        even when it was empty: the consumer first fetches a partition it did not know about a
        second after it is assigned (measured on Kafka 0.9), and what was written to it
        meanwhile would come behind what the other partitions handed on then — but, found
        empty, only up to :data:`ADDED_PARTITION_WAIT_S` (:meth:`_mind_holds`)."""
        until_end = self._source.until_end
        now = time.monotonic()
        for partition, (first, end) in sorted(bounds.items()):
            offset, time_ = self._state.get(partition, (end if at_end else first, 0.0))
            lane = _Lane(partition, offset, time_, end, end if until_end else None)
            lane.found_empty = added and lane.caught_up
            lane.caught_up = lane.caught_up and not added
            lane.opened_at = lane.heard_at = now
            self._lanes[partition] = lane
        if not self._backlog_read():
            BACKLOG.behind(self, mid_run=added)

    def _find_topic(self) -> bool:
        """Following a topic that did not exist when the run started: start reading it once it
        does. The broker answered then, so a request that fails now (a broker restarting, a
        network blip) is asked again at the next poll, as a consumer retries, with a warning —
        not the end of the run and of its other inputs."""
        source = self._source
        try:
            bounds = self._bounds(
                list_partitions(source.bootstrap, source.topic, **source.requests())
            )
        except TopicNotFoundError as error:
            return self._wait_for_topic(error, "waiting for it to be created")
        except KafkaConnectorError as error:
            return self._wait_for_topic(error, "asking again")
        self._start(bounds)
        return True

    def _bounds(self, partitions: list[int]) -> dict[int, Bounds]:
        source = self._source
        return partition_bounds(source.bootstrap, source.topic, partitions, **source.requests())

    def _wait_for_topic(self, error: KafkaConnectorError, then: str) -> bool:
        """Ask again at the next poll; warn now if the reason changed, else every
        :data:`TOPIC_WAIT_WARNING_S`."""
        now = time.monotonic()
        since = self._waiting_since
        if since is None or then != self._waiting_then or now - since >= TOPIC_WAIT_WARNING_S:
            log.warning("%s; %s", error, then)
            self._waiting_since, self._waiting_then = now, then
        self._awake = datetime.now(UTC) + timedelta(seconds=TOPIC_POLL_S)
        return False

    def _check_errors(self) -> None:
        errors = list(self._errors)
        self._errors.clear()
        for error in errors:
            if error.fatal():
                raise KafkaConnectorError(f"fatal Kafka error on {self._where}: {error}")
            if error.code() not in self._warned:  # librdkafka retries; say so once per kind
                self._warned.add(error.code())
                log.warning("Kafka trouble on %s (retrying): %s", self._where, error)

    def next_batch(self) -> list[X]:
        if inputs_ended():
            raise StopIteration
        BACKLOG.polled(self)
        if self._consumer is None and not self._find_topic():
            return []
        assert self._consumer is not None
        if self._watch is not None:
            self._add_partitions(self._watch.added())
        if self._backlog_read():  # handed on in an earlier batch: the flow has it
            BACKLOG.caught_up(self)
            if self._source.until_end:
                BACKLOG.forget(self)  # read no more
                raise StopIteration
        messages = self._consumer.consume(self._source.batch_size, 0)
        self._check_errors()
        now = time.monotonic()
        for message in messages:
            self._queue(message, now)
        if not self._backlog_read():
            self._mind_holds(now)
        batch = self._hand_on()
        self._pace()
        if batch:
            EVENTS_IN.labels(source="kafka").inc(len(batch))
        self._awake = None if messages else datetime.now(UTC) + IDLE_POLL
        return batch

    def _backlog_read(self) -> bool:
        """Every partition's backlog is read and handed on."""
        return all(lane.caught_up and not lane.queue for lane in self._lanes.values())

    @property
    def reading_history(self) -> bool:
        """Some partition's backlog is not handed on yet (a merge with other inputs waits for
        it: :class:`connectors.merged.FollowedPartition`)."""
        return not self._backlog_read()

    def _mind_holds(self, now: float) -> None:
        """Let go of a partition found empty that the consumer has not answered for within
        :data:`ADDED_PARTITION_WAIT_S`; warn once of one holding the merge without an answer
        for :data:`TOPIC_WAIT_WARNING_S` (one with a backlog is not let go: it would all be
        late)."""
        for lane in self._lanes.values():
            if not lane.holds_merge:
                continue
            where = f"Kafka topic {self._where}, partition {lane.partition}"
            if (
                lane.found_empty
                and not lane.answered
                and now - lane.opened_at >= ADDED_PARTITION_WAIT_S
            ):
                lane.caught_up = True
                log.warning(
                    "%s, found empty while following, has had no answer from the consumer "
                    "in %g s; the topic's events go on without waiting for it: events written "
                    "to it meanwhile may come late",
                    where,
                    ADDED_PARTITION_WAIT_S,
                )
            elif not lane.warned and now - lane.heard_at >= TOPIC_WAIT_WARNING_S:
                lane.warned = True
                log.warning(
                    "%s has had no answer from the consumer in %g s and %d messages of it are "
                    "not read yet; the topic's events are held behind it until they are",
                    where,
                    now - lane.heard_at,
                    lane.backlog_end - lane.next_offset,
                )

    def _queue(self, message: Message, now: float) -> None:
        partition, offset = message_position(message)
        lane = self._lanes[partition]
        lane.answered, lane.heard_at, lane.warned = True, now, False
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                raise KafkaConnectorError(f"Kafka error reading {self._where}/{partition}: {error}")
            lane.read_backlog()  # all there is has been read
            return
        if lane.end is not None and offset >= lane.end:
            lane.read_backlog()
            return
        item = self._source.convert(message)
        # one partition is in order as it is
        time = self._source.merge_time(item) if len(self._lanes) > 1 else None
        lane.read(time, offset, item)
        if offset + 1 >= lane.backlog_end:
            lane.read_backlog()

    def _hand_on(self) -> list[X]:
        batch: list[X] = []
        lanes = list(self._lanes.values())
        while not any(lane.holds_merge for lane in lanes):
            queued = [lane for lane in lanes if lane.queue]
            if not queued:
                break
            lane = min(queued, key=lambda lane: (lane.queue[0][0], lane.partition))
            lane.handed_time, offset, item = lane.queue.popleft()
            lane.next_offset = offset + 1
            if item is not None:
                batch.append(item)
        return batch

    def _pace(self) -> None:
        """Pause the fetches of a partition with :data:`MERGE_QUEUE` messages queued; resume
        them once it has fewer."""
        assert self._consumer is not None
        for lane in self._lanes.values():
            full = len(lane.queue) >= MERGE_QUEUE
            if full != lane.paused:
                where = [TopicPartition(self._source.topic, lane.partition)]
                (self._consumer.pause if full else self._consumer.resume)(where)
                lane.paused = full

    def next_awake(self) -> datetime | None:
        return self._awake

    def snapshot(self) -> TopicState:
        if not self._lanes:
            return dict(self._state)
        return {p: (lane.next_offset, lane.handed_time) for p, lane in self._lanes.items()}

    def close(self) -> None:
        BACKLOG.forget(self)
        if self._watch is not None:
            self._watch.close()
        if self._consumer is not None:
            self._consumer.close()


class KafkaTopicSource(FixedPartitionedSource[X, TopicState], Generic[X]):
    """Base of our Kafka sources: one bytewax partition per topic, merging its partitions.

    Subclasses say how a message becomes an item (:meth:`convert`; ``None`` skips a message that
    is no input, its offset still counts as read) and, for a topic of several partitions, what
    event time it has (:meth:`merge_time`): the partitions are merged on it (see
    :class:`_TopicReader`). ``until_end=True`` stops each partition at its end offset when the
    reader starts (bounded replay); otherwise the source follows the topic forever, and the
    partitions added to it as it runs too (found within :data:`PARTITION_REFRESH_S`; what was
    written to one before it was found needs that much allowed lateness). ``start`` applies
    only to a topic read without resume state; a partition added later (while the reader runs,
    or after the snapshot a following reader resumes from) is read from its beginning — a
    bounded replay resumed from a snapshot reads one the snapshot lacks from ``start``, as it
    always did. Constructing one does no I/O; the broker is first asked in ``list_parts``. A
    following source whose topic does not exist yet waits for it (a warning says so, and lists
    the topics there are), as a Kafka consumer does, while the flow's other inputs go on; a
    bounded one stops with the error.

    >>> class Values(KafkaTopicSource[bytes]):
    ...     def convert(self, message):
    ...         return message.value()
    >>> Values("127.0.0.1:9092", "raw", start="end").start
    'end'
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        until_end: bool = False,
        start: Literal["beginning", "end"] = "beginning",
        batch_size: int = BATCH_SIZE,
        config: Mapping[str, Any] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if start not in ("beginning", "end"):
            raise ValueError(f"start must be 'beginning' or 'end', got {start!r}")
        self.bootstrap = bootstrap
        self.topic = topic
        self.until_end = until_end
        self.start = start
        self.batch_size = batch_size
        self.config = dict(config or {})
        self.timeout_s = timeout_s
        self._partitions: list[int] | None = None

    def convert(self, message: Message) -> X | None:
        """Turn one Kafka message into a dataflow item (``None``: not an input)."""
        raise NotImplementedError

    def merge_time(self, item: X | None) -> float | None:
        """The event time to merge ``item`` on; ``None`` when it has none (it keeps its
        partition's last key) — the default, which keeps the partitions' messages in the order
        they were read."""
        return None

    def list_parts(self) -> list[str]:
        try:
            self._partitions = list_partitions(self.bootstrap, self.topic, **self.requests())
        except TopicNotFoundError as error:
            if self.until_end:  # a replay of a topic that is not there: a wrong name
                raise
            log.warning("%s; waiting for it to be created", error)
            self._partitions = None
        return [self.topic]

    def requests(self) -> dict[str, Any]:
        """Keyword arguments of this source's admin requests (config and timeout)."""
        return {"config": self.config, "timeout_s": self.timeout_s}

    def build_part(
        self, step_id: str, for_part: str, resume_state: TopicState | None
    ) -> _TopicReader[X]:
        partitions = self._partitions
        if partitions is None and self.until_end:
            partitions = list_partitions(self.bootstrap, self.topic, **self.requests())
        return _TopicReader(self, resume_state, partitions)


class KafkaEventSource(KafkaTopicSource[RawEvent]):
    """Planner input events from a Kafka topic, undecoded (the flow validates them).

    Each message becomes ``RawEvent(f"kafka:{topic}/{partition}", offset, value)``.

    >>> source = KafkaEventSource("127.0.0.1:9092", "events", until_end=True)
    >>> source.topic, source.until_end, source.batch_size
    ('events', True, 1000)
    """

    def __init__(
        self, bootstrap: str, topic: str, *, refusal: Refusal | None = None, **options: Any
    ) -> None:
        super().__init__(bootstrap, topic, **options)
        self.refusal = refusal

    def convert(self, message: Message) -> RawEvent:
        partition, offset = message_position(message)
        value = message.value()
        return RawEvent(
            f"kafka:{message.topic()}/{partition}", offset, b"" if value is None else value
        )

    def merge_time(self, item: RawEvent | None) -> float | None:
        """The event's ``time`` when it is a valid event admission takes (``refusal``), as a
        recording's lines are merged (:func:`connectors.recorded.line_time`)."""
        return None if item is None else line_time(item.data, self.refusal)


class KafkaTraceSource(KafkaTopicSource[RequestEvent | DeadLetter]):
    """Finished requests of one deployment from a ``dynamo.request.trace.v1`` topic.

    Each ``request_end`` message becomes a :class:`schemas.RequestEvent` of ``deployment`` (see
    :func:`connectors.traces.dynamo_request_event`), which the flow aggregates into its traffic
    windows; the schema's other events (tool calls) are skipped; a malformed message becomes a
    dead letter naming the problem, the topic, partition and offset. A producer that retries
    can write one request twice: a ``request_end`` whose ``request_id`` is among the last
    :data:`RECENT_REQUEST_IDS` of its partition is a ``duplicate`` dead letter, not a second
    request, as a trace file's repeated ids are skipped. (The memory is the process's: after a
    restart, a copy of a request read before it counts again.)

    >>> source = KafkaTraceSource("127.0.0.1:9092", "requests", deployment="qwen")
    >>> source.topic, source.deployment, source.start
    ('requests', 'qwen', 'beginning')
    """

    def __init__(self, bootstrap: str, topic: str, *, deployment: str, **options: Any) -> None:
        super().__init__(bootstrap, topic, **options)
        self.deployment = deployment
        # per partition, the offset of each recent request id (one partition, one reader)
        self._recent: dict[int, OrderedDict[str, int]] = {}

    def convert(self, message: Message) -> RequestEvent | DeadLetter | None:
        partition, offset = message_position(message)
        where = f"kafka:{message.topic()}/{partition}"
        value = message.value() or b""
        try:
            event = dynamo_request_event(value, self.deployment, where, offset)
        except TraceFormatError as error:
            reason = f"invalid {DYNAMO_SCHEMA} event: {error.reason}"
        except ValidationError as error:
            reason = f"invalid {DYNAMO_SCHEMA} event: {describe_validation_error(error)}"
        except Exception as error:  # whatever a hostile message provokes: never the flow's end
            reason = f"unreadable {DYNAMO_SCHEMA} event: {type(error).__name__}: {error}"
        else:
            first = self._first_offset(partition, event, offset)
            if first is None:
                return event
            assert event is not None
            reason = (
                f"duplicate request_end of request {event.payload.request_id!r} "
                f"(first at offset {first})"
            )
        return DeadLetter(
            source=where,
            position=offset,
            reason=reason,
            raw=value.decode(errors="replace").strip(),
            deployment=self.deployment,
        )

    def merge_time(self, item: RequestEvent | DeadLetter | None) -> float | None:
        """A request's end time; a dead letter or a skipped message has none (it keeps its
        partition's last key)."""
        return item.time if isinstance(item, RequestEvent) else None

    def _first_offset(self, partition: int, event: RequestEvent | None, offset: int) -> int | None:
        """The offset of an earlier message of this event's request, remembering this one."""
        if event is None or event.payload.request_id is None:
            return None
        recent = self._recent.setdefault(partition, OrderedDict())
        request_id = event.payload.request_id
        first = recent.get(request_id)
        if first is not None:
            return first
        recent[request_id] = offset
        if len(recent) > RECENT_REQUEST_IDS:
            recent.popitem(last=False)
        return None
