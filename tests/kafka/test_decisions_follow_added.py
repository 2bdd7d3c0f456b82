"""``flowplanner decisions --follow`` reads a partition added to the topic while it follows.

Tansu cannot add partitions: this runs on Apache Kafka 0.9 (:mod:`tests.services.old_kafka`),
as tests/kafka/test_added_partitions.py does. The command has no option for the client settings
a 0.9 broker needs, so the process runs it with its reader given them (:data:`ON_KAFKA_09`).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from connectors.kafka import source as source_module
from tests.kafka.samples import sample_decision
from tests.kafka.test_added_partitions import old_kafka
from tests.kafka.test_decisions_cli import LineReader
from tests.services.kafka import unique_topic
from tests.services.old_kafka import OLD_BROKER, OldKafka

__all__ = ["old_kafka"]

ON_KAFKA_09 = f"""
import functools, sys
from connectors.kafka import read_decision_messages
from connectors.virtual import held_instead
from flows import cli
from flows.commands import decisions
decisions.read_decision_messages = functools.partial(read_decision_messages, config={OLD_BROKER!r})
decisions.held_instead = functools.partial(held_instead, config={OLD_BROKER!r})
sys.exit(cli.main(sys.argv[1:]))
"""
"""``flowplanner`` with the decisions command's readers set up for a Kafka 0.9 broker."""

FOUND_WITHIN_S = 10 + 4 * source_module.PARTITION_REFRESH_S
"""A decision written to an added partition is printed within this (the follower lists the
topic's partitions every PARTITION_REFRESH_S)."""


def decision_json(decision_id: int, time: float) -> bytes:
    return sample_decision(decision_id=decision_id, time=time).model_dump_json().encode()


@pytest.mark.services
def test_follow_prints_the_decisions_of_a_partition_added_while_it_follows(
    old_kafka: OldKafka, request: pytest.FixtureRequest
) -> None:
    topic = unique_topic(request.node.name)
    old_kafka.create_topic(topic)
    old_kafka.write(topic, [decision_json(1, 60.0)], partition=0)
    command = ["decisions", "--bootstrap", old_kafka.bootstrap, "--topic", topic, "--follow"]
    process = subprocess.Popen(
        [sys.executable, "-c", ON_KAFKA_09, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = LineReader(process)
    try:
        assert lines.next().startswith("TIME")
        assert lines.next().split()[:3] == ["60.0", "llama", "1"]  # it follows the one partition
        old_kafka.add_partitions(topic, 2)
        # written before the follower finds the partition: read from its beginning
        old_kafka.write(topic, [decision_json(2, 120.0)], partition=1)
        assert lines.next(FOUND_WITHIN_S).split()[:3] == ["120.0", "llama", "2"]
        # and then as they arrive, on both partitions
        old_kafka.write(topic, [decision_json(3, 180.0)], partition=1)
        assert lines.next().split()[:3] == ["180.0", "llama", "3"]
        old_kafka.write(topic, [decision_json(4, 240.0)], partition=0)
        assert lines.next().split()[:3] == ["240.0", "llama", "4"]
        assert process.poll() is None, "still following"
    finally:
        process.terminate()
        process.wait(10)
