"""ZMQ msgpack FPM payloads whose strings are not UTF-8 (msgspec raises ``UnicodeDecodeError``,
not its ``DecodeError``, for them) or whose worker id is megabytes long: each must be a dead
letter, not the end of the source nor a new engine."""

from __future__ import annotations

from collections import Counter

import msgpack

from connectors.zmq_publisher import encode_fpm
from connectors.zmq_source import ZmqFpmSource
from schemas import DeadLetter, ForwardPassMetrics, FpmBatchEvent
from schemas.fpm import MAX_WORKER_ID
from tests.zmq.flow_run import run_source
from tests.zmq.publisher_process import PublisherProcess


def test_a_payload_with_invalid_utf8_is_a_dead_letter(workers: int) -> None:
    good = encode_fpm(ForwardPassMetrics(worker_id="w1", wall_time=0.02))
    bad_value = b"\x81\xa9worker_id\xa2\xff\xfe"  # {"worker_id": <2 bytes, not UTF-8>}
    # {"wall_time": 0.02, "worker_id": <not UTF-8>}: the bad string after a valid field
    bad_later = b"\x82" + msgpack.packb("wall_time") + msgpack.packb(0.02) + bad_value[1:]
    steps = [
        ("clock", 50.0),
        ("payload", 0, good),  # seq 0
        ("payload", 0, bad_value),  # seq 1
        ("payload", 0, bad_later),  # seq 2
        ("payload", 0, msgpack.packb({"worker_id": "w\u00e9\U0001f999", "wall_time": 0.03})),
        ("payload", 0, good),  # seq 4
        ("payload", 0, msgpack.packb({"worker_id": "w" * 3_000_000, "wall_time": 0.02})),
        ("payload", 0, msgpack.packb({"worker_id": "w" * MAX_WORKER_ID, "wall_time": 0.02})),
    ]
    publisher = PublisherProcess(["tcp://127.0.0.1:*"], steps).start()
    (url,) = publisher.urls
    source = ZmqFpmSource({url: ("llama", "decode")}, stop_after=7, clock=publisher.now)

    items = run_source(source, publisher, workers=workers)

    letters = [item for item in items if isinstance(item, DeadLetter)]
    assert [letter.position for letter in letters] == [1, 2, 5]
    assert all(letter.reason.startswith("undecodable FPM payload") for letter in letters[:2])
    assert all("utf-8" in letter.reason.lower() for letter in letters[:2])
    assert (
        letters[2].reason
        == f"invalid FPM: worker_id: String should have at most {MAX_WORKER_ID} characters"
    )
    # Rows per worker, summed over batches: how the messages split into polls (one batch per
    # engine per poll) is up to timing — the two "w1" passes (seq 0 and 4) come as one batch of
    # two when one poll finds both, or as two batches of one when a poll runs between them.
    rows: Counter[str] = Counter()
    for item in items:
        if isinstance(item, FpmBatchEvent):
            rows[item.payload.worker_id] += len(item.payload.rows)
    assert rows == {
        "w1": 2,
        "w\u00e9\U0001f999": 1,  # unicode worker ids are valid
        "w" * MAX_WORKER_ID: 1,  # as long as one may be
    }
