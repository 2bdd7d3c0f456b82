"""``kafka://`` addresses for the command line: ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC?OPTIONS``.

Options: ``until=end`` (bounded read: stop at the end seen at start), ``start=beginning|end``
(where a source without resume state begins), ``partitions=N`` (partitions of a topic the sink
creates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qs, urlsplit

from connectors.kafka.sink import KafkaDecisionSink
from connectors.kafka.source import KafkaEventSource

_OPTIONS = {"until": ("end",), "start": ("beginning", "end")}


@dataclass(frozen=True)
class KafkaUrl:
    """A parsed ``kafka://`` address; builds the source or sink it names.

    >>> url = KafkaUrl.parse("kafka://127.0.0.1:9092/fpm?until=end")
    >>> url.bootstrap, url.topic, url.until_end, url.start
    ('127.0.0.1:9092', 'fpm', True, 'beginning')
    >>> KafkaUrl.parse("kafka://b1:9092,b2:9092/decisions?partitions=3").partitions
    3
    >>> KafkaUrl.parse("kafka://127.0.0.1:9092/")
    Traceback (most recent call last):
    ...
    ValueError: kafka://127.0.0.1:9092/: expected kafka://HOST:PORT/TOPIC
    """

    bootstrap: str
    topic: str
    until_end: bool = False
    start: Literal["beginning", "end"] = "beginning"
    partitions: int = 1

    @classmethod
    def parse(cls, url: str) -> KafkaUrl:
        """Parse ``url``; raises ``ValueError`` saying what is wrong."""
        parts = urlsplit(url)
        topic = parts.path.lstrip("/")
        if parts.scheme != "kafka" or not parts.netloc or not topic or "/" in topic:
            raise ValueError(f"{url}: expected kafka://HOST:PORT/TOPIC")
        try:
            query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
        except ValueError as error:
            raise ValueError(f"{url}: bad options ({error})") from None
        options = {}
        for name, values in query.items():
            if len(values) != 1:
                raise ValueError(f"{url}: option {name!r} given {len(values)} times")
            value = values[0]
            if name == "partitions":
                if not value.isdigit() or int(value) < 1:
                    raise ValueError(f"{url}: partitions must be a positive integer")
            elif name not in _OPTIONS:
                raise ValueError(
                    f"{url}: unknown option {name!r} (known: until, start, partitions)"
                )
            elif value not in _OPTIONS[name]:
                raise ValueError(f"{url}: {name} must be one of {', '.join(_OPTIONS[name])}")
            options[name] = value
        return cls(
            bootstrap=parts.netloc,
            topic=topic,
            until_end=options.get("until") == "end",
            start="end" if options.get("start") == "end" else "beginning",
            partitions=int(options.get("partitions", 1)),
        )

    def event_source(self) -> KafkaEventSource:
        """The planner input source this address names."""
        return KafkaEventSource(
            self.bootstrap, self.topic, until_end=self.until_end, start=self.start
        )

    def decision_sink(self) -> KafkaDecisionSink:
        """The decision sink this address names."""
        return KafkaDecisionSink(self.bootstrap, self.topic, partitions=self.partitions)
