"""librdkafka's log lines during a broker outage: each message once per interval, not a flood."""

from __future__ import annotations

import logging
import re
from collections import Counter

import pytest
from confluent_kafka import Consumer, TopicPartition

from connectors.kafka import consumer_config, ensure_topic
from connectors.kafka.client import LIBRDKAFKA_REPEATS, REPEAT_INTERVAL_S
from tests.services.kafka import tansu_process
from tests.services.process import wait_until

HELD_BACK = re.compile(r"\((\d+) more like it in the last \d+ s not logged\)$")


def test_a_refusing_broker_is_logged_once_per_interval_with_the_count_held_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # librdkafka logs every failed reconnection (here about ten a second per connection once a
    # broker's port is closed); the log must show each message once, then the count it held
    # back.
    now = [0.0]
    monkeypatch.setattr(LIBRDKAFKA_REPEATS, "clock", lambda: now[0])  # time is data here
    caplog.set_level(logging.DEBUG, logger="connectors.kafka.librdkafka")
    with tansu_process() as (bootstrap, broker):
        ensure_topic(bootstrap, "outage")
        # retry every 100 ms (librdkafka backs off to 10 s by default: then 20 retries of its
        # two connections took about a minute, and a loaded machine missed the wait)
        fast = {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 100}
        consumer = Consumer(consumer_config(bootstrap, fast))
        consumer.assign([TopicPartition("outage", 0, 0)])
        consumer.poll(0.5)
        broker.terminate()
        broker.wait()
    try:

        def refused() -> list[str]:
            lines = (r.getMessage() for r in caplog.records)
            return [line for line in lines if "Connection refused" in line and bootstrap in line]

        def held_back(at_least: int) -> bool:
            consumer.poll(0.1)  # serves the client's log callbacks
            return LIBRDKAFKA_REPEATS.held - held_before >= at_least

        held_before = LIBRDKAFKA_REPEATS.held
        # librdkafka throttles identical errors itself at times: ask for a few repeats, not many
        wait_until(lambda: held_back(5), "librdkafka to retry the connection 5 times", 180)
        first = refused()
        assert first, "the first refusal is logged"
        # one line per distinct message (one per broker connection of the client), however
        # many retries
        per_message = Counter(re.sub(r"\d+ms", "#", line) for line in first)
        assert set(per_message.values()) == {1}, first

        now[0] += REPEAT_INTERVAL_S
        wait_until(lambda: held_back(0) and len(refused()) > len(first), "the next interval", 180)
        later = refused()[len(first)]
        counted = HELD_BACK.search(later)
        assert counted and int(counted.group(1)) >= 1, later
    finally:
        consumer.close()
