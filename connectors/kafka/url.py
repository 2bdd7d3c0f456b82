"""``kafka://`` addresses for the command line: ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC?OPTIONS``.

Options: ``until=end`` (bounded read: stop at the end seen at start), ``start=beginning|end``
(where a source without resume state begins), ``partitions=N`` (partitions of a topic the sink
creates), ``format=events|dynamo-trace`` (what an input topic holds: our event envelopes, or a
frontend's ``dynamo.request.trace.v1`` events, whose finished requests are counted for the
deployment named by ``deployment=NAME``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from connectors.address import address_options, has_host_port
from connectors.kafka.sink import KafkaDecisionSink
from connectors.kafka.source import KafkaEventSource, KafkaTraceSource
from connectors.recorded import Refusal

MAX_PARTITIONS = 2**31 - 1
"""Kafka counts a topic's partitions in a signed 32-bit integer: a larger count crashed inside
the client's topic creation with a traceback."""
_OPTIONS = {"until": ("end",), "start": ("beginning", "end"), "format": ("events", "dynamo-trace")}


@dataclass(frozen=True)
class KafkaUrl:
    """A parsed ``kafka://`` address; builds the source or sink it names.

    >>> url = KafkaUrl.parse("kafka://127.0.0.1:9092/fpm?until=end")
    >>> url.bootstrap, url.topic, url.until_end, url.start
    ('127.0.0.1:9092', 'fpm', True, 'beginning')
    >>> KafkaUrl.parse("kafka://b1:9092,b2:9092/decisions?partitions=3").partitions
    3
    >>> KafkaUrl.parse("kafka://127.0.0.1:9092/requests?format=dynamo-trace&deployment=qwen")
    KafkaUrl(bootstrap='127.0.0.1:9092', topic='requests', until_end=False, start='beginning', \
partitions=1, format='dynamo-trace', deployment='qwen')
    >>> KafkaUrl.parse("kafka://127.0.0.1:9092/")
    Traceback (most recent call last):
    ...
    ValueError: kafka://127.0.0.1:9092/: expected kafka://HOST:PORT/TOPIC
    >>> KafkaUrl.parse("kafka://h:notaport/t")
    Traceback (most recent call last):
    ...
    ValueError: kafka://h:notaport/t: broker 'h:notaport' needs HOST:PORT, a port 1-65535
    """

    bootstrap: str
    topic: str
    until_end: bool = False
    start: Literal["beginning", "end"] = "beginning"
    partitions: int = 1
    format: Literal["events", "dynamo-trace"] = "events"
    deployment: str | None = None

    @classmethod
    def parse(cls, url: str) -> KafkaUrl:
        """Parse ``url``; raises ``ValueError`` saying what is wrong."""
        parts = urlsplit(url)
        topic = parts.path.lstrip("/")
        if parts.scheme != "kafka" or not parts.netloc or not topic or "/" in topic:
            raise ValueError(f"{url}: expected kafka://HOST:PORT/TOPIC")
        for broker in parts.netloc.split(","):
            if not has_host_port(broker):
                raise ValueError(f"{url}: broker {broker!r} needs HOST:PORT, a port 1-65535")
        options = {}
        for name, value in address_options(url, parts.query).items():
            if name == "partitions":
                if not value.isdigit() or not 1 <= int(value) <= MAX_PARTITIONS:
                    raise ValueError(
                        f"{url}: partitions must be an integer from 1 to {MAX_PARTITIONS}"
                    )
            elif name == "deployment":
                if not value:
                    raise ValueError(f"{url}: deployment must not be empty")
            elif name not in _OPTIONS:
                raise ValueError(
                    f"{url}: unknown option {name!r} "
                    "(known: until, start, partitions, format, deployment)"
                )
            elif value not in _OPTIONS[name]:
                raise ValueError(f"{url}: {name} must be one of {', '.join(_OPTIONS[name])}")
            options[name] = value
        if "deployment" in options and options.get("format") != "dynamo-trace":
            raise ValueError(f"{url}: deployment= applies only with format=dynamo-trace")
        return cls(
            bootstrap=parts.netloc,
            topic=topic,
            until_end=options.get("until") == "end",
            start="end" if options.get("start") == "end" else "beginning",
            partitions=int(options.get("partitions", 1)),
            format="dynamo-trace" if options.get("format") == "dynamo-trace" else "events",
            deployment=options.get("deployment"),
        )

    def event_source(self, refusal: Refusal | None = None) -> KafkaEventSource | KafkaTraceSource:
        """The planner input source this address names (a trace topic needs ``deployment``);
        ``refusal``: the flow's admission, for merging an event topic's partitions."""
        if self.format == "events":
            return KafkaEventSource(
                self.bootstrap,
                self.topic,
                refusal=refusal,
                until_end=self.until_end,
                start=self.start,
            )
        if self.deployment is None:
            where = f"kafka://{self.bootstrap}/{self.topic}"
            raise ValueError(f"{where}: a dynamo-trace topic needs deployment=NAME")
        return KafkaTraceSource(
            self.bootstrap,
            self.topic,
            deployment=self.deployment,
            until_end=self.until_end,
            start=self.start,
        )

    def decision_sink(self) -> KafkaDecisionSink:
        """The decision sink this address names."""
        return KafkaDecisionSink(self.bootstrap, self.topic, partitions=self.partitions)
