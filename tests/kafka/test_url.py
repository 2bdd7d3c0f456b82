"""kafka:// addresses of the command line."""

from __future__ import annotations

import pytest

from connectors.kafka import KafkaDecisionSink, KafkaEventSource, KafkaUrl


def test_source_address_builds_a_bounded_source() -> None:
    source = KafkaUrl.parse("kafka://127.0.0.1:9092/fpm?until=end&start=end").event_source()
    assert isinstance(source, KafkaEventSource)
    assert (source.bootstrap, source.topic, source.until_end, source.start) == (
        "127.0.0.1:9092",
        "fpm",
        True,
        "end",
    )


def test_sink_address_builds_a_decision_sink() -> None:
    sink = KafkaUrl.parse("kafka://b1:9092,b2:9093/decisions?partitions=6").decision_sink()
    assert isinstance(sink, KafkaDecisionSink)
    assert (sink.bootstrap, sink.topic, sink.partitions) == ("b1:9092,b2:9093", "decisions", 6)


def test_defaults_follow_from_the_beginning() -> None:
    url = KafkaUrl.parse("kafka://127.0.0.1:9092/fpm")
    assert (url.until_end, url.start, url.partitions) == (False, "beginning", 1)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1:9092/fpm", "expected kafka://HOST:PORT/TOPIC"),
        ("kafka:///fpm", "expected kafka://HOST:PORT/TOPIC"),
        ("kafka://h:1/a/b", "expected kafka://HOST:PORT/TOPIC"),
        ("kafka://h:1/fpm?until=later", "until must be one of end"),
        ("kafka://h:1/fpm?start=middle", "start must be one of beginning, end"),
        ("kafka://h:1/fpm?partitions=0", "partitions must be an integer from 1 to 2147483647"),
        # Kafka's int32: 3e9 passed and crashed creating the topic, with a traceback
        ("kafka://h:1/fpm?partitions=3000000000", "partitions must be an integer from 1 to"),
        ("kafka://h:1/fpm?follow=yes", "unknown option 'follow'"),
        ("kafka://h:1/fpm?until=end&until=end", "option 'until' given 2 times"),
        ("kafka://h:1/fpm?until", "bad options"),
        # zmq addresses had their port checked, Kafka's were accepted and failed at connect
        ("kafka://h:notaport/t", "broker 'h:notaport' needs HOST:PORT, a port 1-65535"),
        ("kafka://h/t", "broker 'h' needs HOST:PORT"),
        ("kafka://h:1,b2/t", "broker 'b2' needs HOST:PORT"),
        ("kafka://h:70000/t", "broker 'h:70000' needs HOST:PORT"),
        ("kafka://:9092/t", "broker ':9092' needs HOST:PORT"),
        ("kafka://h:0/t", "broker 'h:0' needs HOST:PORT"),
        ("kafka://*:9092/t", "broker '\\*:9092' needs HOST:PORT"),
    ],
)
def test_bad_addresses_say_what_is_wrong(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KafkaUrl.parse(url)
