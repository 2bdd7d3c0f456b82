"""ZmqFpmSource configuration is checked up front, with messages naming the problem."""

from __future__ import annotations

import pytest

from connectors.zmq_source import EndpointSpec, EngineRegistry, ZmqFpmSource


@pytest.mark.parametrize(
    ("endpoints", "message"),
    [
        ({"inproc://fpm": ("d", "decode")}, "must start with tcp:// or ipc://"),
        ({"tcp://127.0.0.1:1": ("", "decode")}, "deployment must be a non-empty string"),
        ({"tcp://127.0.0.1:1": ("d", "agg")}, "role must be one of"),
        (
            [EndpointSpec("ipc:///tmp/a", "d", "decode"), ("ipc:///tmp/a", "e", "prefill")],
            "listed twice",
        ),
    ],
)
def test_bad_endpoints_are_refused(endpoints: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ZmqFpmSource(endpoints)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"engine_silence_seconds": 0}, "engine silence must be a positive number"),
        ({"engine_silence_seconds": float("inf")}, "engine silence must be a positive number"),
        ({"idle_poll_seconds": 0}, "idle_poll_seconds must be > 0"),
        ({"receive_buffer": -1}, "receive_buffer must be >= 0"),
        ({"stop_after": 0}, "stop_after must be >= 1"),
    ],
)
def test_bad_options_are_refused(option: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ZmqFpmSource({"tcp://127.0.0.1:1": ("d", "decode")}, **option)


def test_endpoints_are_shared_out_round_robin_between_workers() -> None:
    urls = [f"ipc:///tmp/flowplanner-test-{i}" for i in range(5)]
    source = ZmqFpmSource({url: ("d", "decode") for url in urls})
    partitions = [source.build("zmq", index, 2) for index in range(2)]
    try:
        assert [[spec.url for spec in p.specs] for p in partitions] == [urls[0::2], urls[1::2]]
    finally:
        for partition in partitions:
            partition.close()
    empty = source.build("zmq", 7, 8)  # more workers than endpoints: nothing to read
    with pytest.raises(StopIteration):
        empty.next_batch()


def test_an_engine_expires_only_after_more_than_the_silence() -> None:
    engines = EngineRegistry(silence_seconds=3.0)
    key = ("d", "decode", "w1", 0)
    assert engines.seen(key, 100.0) is True
    assert engines.expire(103.0) == []  # exactly the silence: still alive
    assert engines.seen(key, 103.0) is False
    assert engines.expire(106.5) == [key]
    assert engines.expire(200.0) == []  # forgotten once
    assert engines.seen(key, 201.0) is True  # and discovered again
