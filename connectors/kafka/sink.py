"""The decision sink: ScalingDecisions to a Kafka topic, keyed by deployment."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from time import monotonic
from typing import Any

from bytewax.outputs import DynamicSink, StatelessSinkPartition
from confluent_kafka import KafkaError, Message, Producer
from pydantic import ValidationError

from connectors.kafka.client import (
    KafkaConnectorError,
    TopicNotFoundError,
    ensure_topic,
    flush,
    produce,
    producer_config,
    topic_settings,
)
from connectors.kafka.decisions import read_decision_messages
from connectors.pipeline_metrics import DECISION_DELIVERY_WAITS
from connectors.stopping import forget, watch
from schemas import DeliveredDecision, ScalingDecision, describe_validation_error

NO_DELIVERY_LIMIT = {"message.timeout.ms": 0}
"""librdkafka retries a message for ``message.timeout.ms`` (0 = for ever) before failing it."""


DECISIONS_TOPIC_CONFIG = {"cleanup.policy": "compact"}
"""Settings of a decisions topic the sink creates: compacted by key (the deployment), so the
newest decision of every deployment is kept however long ago it was made — a restarted planner
numbers its decisions on from it (time-based retention, the broker default, empties the topic
of a deployment quiet for longer than the retention, and ids would start again at 1)."""


def retention_warning(topic: str, settings: Mapping[str, str]) -> str | None:
    """Why a decisions topic with these settings may lose a deployment's newest decision, if
    it may (settings the broker did not report are taken at Kafka's defaults: ``delete`` after
    7 days).

    >>> retention_warning("decisions", {"cleanup.policy": "compact"}) is None
    True
    >>> retention_warning("decisions", {"cleanup.policy": "delete", "retention.ms": "-1"}) is None
    True
    >>> retention_warning("decisions", {}).split(":")[0]
    'Kafka topic decisions deletes decisions after 604800000 ms (cleanup.policy=delete)'
    """
    policy = settings.get("cleanup.policy", "delete")
    if "delete" not in policy.replace(" ", "").split(","):
        return None
    retention_ms = settings.get("retention.ms", "604800000")
    retention_bytes = settings.get("retention.bytes", "-1")
    if retention_ms == "-1" and retention_bytes == "-1":
        return None
    limit = f"{retention_ms} ms" if retention_ms != "-1" else f"{retention_bytes} bytes"
    return (
        f"Kafka topic {topic} deletes decisions after {limit} (cleanup.policy={policy}): a "
        "deployment without a decision for that long loses its newest one, and a restarted "
        "planner numbers its decisions from 1 again; make the topic cleanup.policy=compact"
    )


WAIT_SLICE_S = 0.25
"""A sink waiting for its broker flushes this long at a time, then checks for a stop request."""

log = logging.getLogger(__name__)


class _DecisionSinkPartition(StatelessSinkPartition[ScalingDecision]):
    def __init__(
        self, producer: Producer, topic: str, where: str, timeout_s: float, warn_every_s: float
    ) -> None:
        self._producer = producer
        self._topic = topic
        self._where = where
        self._timeout_s = timeout_s
        self._warn_every_s = warn_every_s
        self.stop_requested = False  # set by stop_waiting() or a KeyboardInterrupt in a wait
        watch(self)

    def _deliver(self, failures: list[str]) -> None:
        """Wait until every queued decision is acknowledged, however long the broker is away.

        Nothing is dropped and nothing is reordered (the producer retries until delivery); a
        decision the broker refuses (``failures``, filled by the delivery callback) raises.
        The wait is made of short flushes so that a stop request ends it: on the main thread
        SIGTERM/SIGINT interrupt a flush (KeyboardInterrupt), on a worker thread
        :func:`connectors.stopping.stop_waiting` does. The decisions still queued then are
        reported by ``close``.
        """
        started = monotonic()
        warned = 0
        announced = False
        try:
            while remaining := self._producer.flush(min(WAIT_SLICE_S, self._warn_every_s)):
                if failures:
                    break
                if self.stop_requested:
                    return
                if not announced:
                    announced = True
                    log.info(
                        "%d decisions not acknowledged yet by %s: waiting for it",
                        remaining,
                        self._where,
                    )
                waits = int((monotonic() - started) / self._warn_every_s)
                if waits > warned:
                    warned = waits
                    DECISION_DELIVERY_WAITS.labels(sink=self._where).inc()
                    log.warning(
                        "%d decisions wait for %s (%.1f s so far): retrying until it answers",
                        remaining,
                        self._where,
                        monotonic() - started,
                    )
        except KeyboardInterrupt:
            self.stop_requested = True  # close() does not wait again
            raise
        flush(self._producer, self._where, self._timeout_s, failures, "decisions")

    def write_batch(self, items: list[ScalingDecision]) -> None:
        failures: list[str] = []

        def on_delivery(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                key = (message.key() or b"").decode(errors="replace")
                failures.append(f"deployment {key!r}: {error}")

        for item in items:
            if not isinstance(item, ScalingDecision):
                raise TypeError(
                    f"KafkaDecisionSink takes ScalingDecision items, got {type(item).__name__}"
                )
            produce(
                self._producer,
                self._topic,
                item.deployment.encode(),
                item.model_dump_json().encode(),
                on_delivery,
            )
        self._deliver(failures)

    def close(self) -> None:
        """Deliver what is still queued within ``timeout_s`` (without waiting after a stop),
        then report and drop the rest. Never raises: bytewax closes sinks as it unwinds a stop."""
        forget(self)
        stopping = self.stop_requested
        try:
            remaining = self._producer.flush(0 if stopping else self._timeout_s)
        except KeyboardInterrupt:  # a second stop request while closing
            remaining = len(self._producer)
        except Exception as error:  # closing must not fail the shutdown
            log.error("closing the producer of %s failed: %s", self._where, error)
            remaining = len(self._producer)
        if not remaining:
            return
        log.error(
            "%d decisions not delivered to %s: dropped at shutdown (%s)",
            remaining,
            self._where,
            "stopped while waiting for the broker"
            if stopping
            else f"not acknowledged within {self._timeout_s:g} s",
        )
        try:
            self._producer.purge()
            self._producer.flush(0)  # serve the delivery reports of the purged messages
        except (Exception, KeyboardInterrupt) as error:
            log.error("purging the producer of %s failed: %s", self._where, error)


class KafkaDecisionSink(DynamicSink[ScalingDecision]):
    """Scaling decisions to a Kafka topic: key = deployment, value = the decision's JSON.

    The producer is idempotent (``enable.idempotence=true``, ``acks=all``), so retries never
    duplicate or reorder a deployment's decisions. The topic is created with ``partitions``
    partitions if it does not exist. Each batch is delivered before ``write_batch`` returns:
    while the broker is unreachable the sink waits (a warning every ``warn_every_s``, by default
    ``timeout_s``, the time allowed for one broker request; and
    ``flowplanner_decision_delivery_waits_total``) and the planner with it, keeping its state,
    rather than failing the run — a restarted worker would replay its inputs and send their
    decisions again. A decision the broker refuses raises :class:`KafkaConnectorError`, and so
    does one that outlives a ``message.timeout.ms`` given in ``config`` (by default there is
    no limit). A stop request (SIGTERM/SIGINT, :func:`connectors.stopping.stop_waiting`) ends a
    wait. Closing waits at most ``timeout_s`` (not at all after a stop), then logs an error
    naming how many decisions were not delivered and drops them; it never raises.
    :meth:`delivered` reads back, per deployment, the newest decision the topic holds, so a
    restarted planner resumes after it. A topic the sink creates gets ``topic_config`` (by default
    :data:`DECISIONS_TOPIC_CONFIG`: compacted, so that newest decision is never deleted); one
    that exists already is left as it is, with a warning from :meth:`delivered` if its
    retention may delete it.

    >>> sink = KafkaDecisionSink("127.0.0.1:9092", "decisions", partitions=3)
    >>> sink.topic, sink.partitions
    ('decisions', 3)
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, Any] | None = None,
        topic_config: Mapping[str, str] = DECISIONS_TOPIC_CONFIG,
        timeout_s: float = 30.0,
        warn_every_s: float | None = None,
    ) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        if timeout_s <= 0 or (warn_every_s is not None and warn_every_s <= 0):
            raise ValueError("timeout_s and warn_every_s must be > 0 seconds")
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.config = dict(config or {})
        self.topic_config = dict(topic_config)
        self.timeout_s = timeout_s
        self.warn_every_s = timeout_s if warn_every_s is None else warn_every_s

    def delivered(self) -> list[DeliveredDecision]:
        """The newest decision of each deployment in the topic (none if it does not exist).

        Messages that are not decisions of ours — not a ScalingDecision, or one no planner
        could have sent (no deployment, a negative or infinite time) — are passed over
        (counted in a warning naming the first). A topic whose retention may delete a
        deployment's newest decision is named in a warning (see :func:`retention_warning`).
        """
        try:
            messages = read_decision_messages(
                self.bootstrap, self.topic, config=self.config, timeout_s=self.timeout_s
            )
        except TopicNotFoundError:
            return []
        held = []
        foreign: list[str] = []
        for message in messages:
            if message.decision is None:
                foreign.append(f"{message.partition}/{message.offset}: {message.error}")
                continue
            try:
                held.append(DeliveredDecision.of(message.decision))
            except ValidationError as error:
                reason = describe_validation_error(error)
                foreign.append(f"{message.partition}/{message.offset}: {reason}")
        if foreign:
            log.warning(
                "%d messages of Kafka topic %s are not decisions of a planner, passed over "
                "(the first at partition/offset %s)",
                len(foreign),
                self.topic,
                foreign[0],
            )
        self._check_retention()
        return list(DeliveredDecision.newest(held).values())

    def _check_retention(self) -> None:
        try:
            settings = topic_settings(
                self.bootstrap, self.topic, config=self.config, timeout_s=self.timeout_s
            )
        except KafkaConnectorError as error:  # a broker that does not say: nothing to warn of
            log.info("%s", error)
            return
        warning = retention_warning(self.topic, settings)
        if warning is not None:
            log.warning("%s", warning)

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _DecisionSinkPartition:
        ensure_topic(
            self.bootstrap,
            self.topic,
            partitions=self.partitions,
            replication_factor=self.replication_factor,
            config=self.config,
            topic_config=self.topic_config,
            timeout_s=self.timeout_s,
        )
        producer = Producer(producer_config(self.bootstrap, {**NO_DELIVERY_LIMIT, **self.config}))
        where = f"Kafka topic {self.topic} at {self.bootstrap}"
        log.info("worker %d of %d writes decisions to %s", worker_index + 1, worker_count, where)
        return _DecisionSinkPartition(
            producer, self.topic, where, self.timeout_s, self.warn_every_s
        )
