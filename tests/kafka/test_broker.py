"""The broker fixture: a real Tansu process that answers Kafka requests and is stopped after."""

from __future__ import annotations

import socket

from confluent_kafka.admin import AdminClient

from tests.services.kafka import tansu_broker


def test_session_broker_answers_metadata(kafka_bootstrap: str) -> None:
    metadata = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=5)
    assert metadata.brokers, "the broker lists itself"
    (broker,) = metadata.brokers.values()
    assert f"{broker.host}:{broker.port}" == kafka_bootstrap


def test_context_manager_stops_the_broker() -> None:
    with tansu_broker() as bootstrap:
        host, port = bootstrap.split(":")
        socket.create_connection((host, int(port)), timeout=2).close()
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        pass
    else:
        raise AssertionError("the broker still accepts connections after the block")


def test_broker_is_stopped_when_the_block_fails() -> None:
    try:
        with tansu_broker() as bootstrap:
            raise KeyError("boom")
    except KeyError:
        pass
    host, port = bootstrap.split(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        return
    raise AssertionError("the broker survived a failing block")
