"""Where ``flowplanner run`` reads and writes: input and output addresses → bytewax connectors.

Inputs:
  ``PATH``                                  recorded JSONL (``.gz`` ok), replayed on event time
  ``kafka://HOST:PORT/TOPIC``               an event topic, followed forever (live)
  ``kafka://HOST:PORT/TOPIC?until=end``     an event topic up to its end at start (replay)
Decision outputs:
  ``-``                                     readable lines on stdout (the default)
  ``PATH``                                  JSON lines
  ``kafka://HOST:PORT/TOPIC``               one JSON message per decision, key = deployment
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from bytewax.inputs import Source
from bytewax.outputs import Sink

from connectors.console import JsonlFileSink, LineSink
from connectors.kafka import KafkaDecisionSink, KafkaEventSource
from connectors.recorded import RecordedSource
from flows.display import decision_line


class EndpointError(ValueError):
    """An input or output address that cannot be used."""


def _scheme(address: str) -> str:
    return urlsplit(address).scheme if "://" in address else "file"


def _kafka(address: str) -> tuple[str, str, dict[str, list[str]]]:
    url = urlsplit(address)
    topic = url.path.strip("/")
    if not url.netloc or not topic:
        raise EndpointError(f"expected kafka://HOST:PORT/TOPIC, got {address!r}")
    return url.netloc, topic, parse_qs(url.query)


def is_live(address: str) -> bool:
    """Whether an input is unbounded and timed by the system clock.

    >>> is_live("examples/stream.jsonl"), is_live("kafka://localhost:9092/fpm?until=end")
    (False, False)
    >>> is_live("kafka://localhost:9092/fpm")
    True
    """
    scheme = _scheme(address)
    if scheme == "kafka":
        return _kafka(address)[2].get("until") != ["end"]
    return scheme != "file"


def input_source(address: str) -> Source:
    """The bytewax source for one ``--input`` address."""
    scheme = _scheme(address)
    if scheme == "file":
        return RecordedSource([address.removeprefix("file://")])
    if scheme == "kafka":
        bootstrap, topic, query = _kafka(address)
        return KafkaEventSource(bootstrap, topic, until_end=query.get("until") == ["end"])
    raise EndpointError(f"unsupported input {address!r} (expected PATH or kafka://…)")


def decision_sink(address: str) -> Sink:
    """The bytewax sink for one ``--output`` address (decisions)."""
    scheme = _scheme(address)
    if address == "-":
        return LineSink(decision_line)
    if scheme == "file":
        return JsonlFileSink(address.removeprefix("file://"))
    if scheme == "kafka":
        bootstrap, topic, _ = _kafka(address)
        return KafkaDecisionSink(bootstrap, topic)
    raise EndpointError(f"unsupported output {address!r} (expected -, PATH or kafka://…)")
