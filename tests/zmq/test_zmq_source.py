"""ZmqFpmSource end to end: publisher process → ZMQ (tcp and ipc) → real bytewax run → items."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

import msgpack
import pytest
from prometheus_client import REGISTRY

from connectors.zmq_publisher import encode_fpm
from connectors.zmq_source import ZmqFpmSource
from schemas import DeadLetter, ForwardPassMetrics, FpmBatchEvent, FpmEvent
from tests.zmq.flow_run import run_source
from tests.zmq.publisher_process import PublisherProcess


def fpm_fields(worker_id: str, dp_rank: int = 0, step: int = 0) -> dict:
    """A distinct, fully populated FPM (as constructor fields)."""
    return {
        "worker_id": worker_id,
        "dp_rank": dp_rank,
        "wall_time": 0.01 + step / 1000,
        "scheduled_requests": {
            "num_prefill_requests": step % 3,
            "sum_prefill_tokens": 512 * step,
            "var_prefill_length": 1.5 * step,
            "sum_prefill_kv_tokens": 7 * step,
            "num_decode_requests": 8 + step,
            "sum_decode_kv_tokens": 9000 + step,
            "var_decode_kv_tokens": 2.25 * step,
        },
        "queued_requests": {
            "num_prefill_requests": step,
            "sum_prefill_tokens": 4096 * step,
            "var_prefill_length": 0.5,
            "num_decode_requests": 1,
            "sum_decode_kv_tokens": 100 + step,
            "var_decode_kv_tokens": 3.0,
        },
    }


def frames_with_seq(seq: int, step: int) -> tuple:
    """A publisher step sending an FPM (counter_id ``seq``) under sequence frame ``seq``, which
    leaves the publisher's own sequence where it was."""
    fpm = ForwardPassMetrics.model_validate({**fpm_fields("w1", step=step), "counter_id": seq})
    return ("frames", 0, [b"", seq.to_bytes(8, "big"), encode_fpm(fpm)])


def expected_fpm(fields: dict, seq: int) -> ForwardPassMetrics:
    """What a subscriber must reconstruct: the publisher stamps counter_id with the sequence."""
    return ForwardPassMetrics.model_validate({**fields, "counter_id": seq})


def fpms_by_engine(items: list) -> dict[tuple[str, int], list[ForwardPassMetrics]]:
    engines: dict[tuple[str, int], list[ForwardPassMetrics]] = {}
    for item in items:
        if isinstance(item, FpmBatchEvent):
            batch = item.payload
            engines.setdefault((batch.worker_id, batch.dp_rank), []).extend(
                batch.fpm(i) for i in range(len(batch.rows))
            )
    return engines


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_fpms_arrive_as_typed_batches_in_publish_order(
    new_url: Callable[[], str], workers: int
) -> None:
    plan = [("w1", 0), ("w1", 1), ("w1", 0), ("w2", 0), ("w1", 1), ("w1", 0)]
    steps = [("clock", 1234.5)] + [
        ("fpm", 0, fpm_fields(w, r, step)) for step, (w, r) in enumerate(plan)
    ]
    publisher = PublisherProcess([new_url()], steps).start()
    (url,) = publisher.urls  # bound by the publisher process
    source = ZmqFpmSource({url: ("llama", "decode")}, stop_after=len(plan), clock=publisher.now)
    events_before = metric("flowplanner_events_in_total", source="zmq")

    items = run_source(source, publisher, workers=workers)

    assert all(isinstance(item, FpmBatchEvent) for item in items)
    assert {(i.deployment, i.payload.role, i.time) for i in items} == {("llama", "decode", 1234.5)}
    expected: dict[tuple[str, int], list[ForwardPassMetrics]] = {}
    for seq, (step, (w, r)) in enumerate(enumerate(plan)):
        expected.setdefault((w, r), []).append(expected_fpm(fpm_fields(w, r, step), seq))
    assert fpms_by_engine(items) == expected
    assert metric("flowplanner_events_in_total", source="zmq") - events_before == len(plan)


def test_ungrouped_mode_yields_one_fpm_event_per_forward_pass(
    new_url: Callable[[], str], workers: int
) -> None:
    steps = [("clock", 50.0)] + [("fpm", 0, fpm_fields("p0", 0, step)) for step in range(3)]
    publisher = PublisherProcess([new_url()], steps).start()
    (url,) = publisher.urls  # bound by the publisher process
    source = ZmqFpmSource(
        [(url, "disagg", "prefill")], group=False, stop_after=3, clock=publisher.now
    )

    items = run_source(source, publisher, workers=workers)

    assert all(isinstance(item, FpmEvent) for item in items)
    assert [item.payload.role for item in items] == ["prefill"] * 3
    fpms = [item.payload.fpm for item in items]
    assert fpms == [expected_fpm(fpm_fields("p0", 0, step), step) for step in range(3)]


@pytest.mark.parametrize("transport", ["tcp"])
def test_two_workers_each_subscribe_their_own_endpoints(new_url: Callable[[], str]) -> None:
    steps = [("clock", 10.0)] + [
        ("fpm", index, fpm_fields(f"w{index}", 0, step)) for step in range(4) for index in range(3)
    ]
    publisher = PublisherProcess([new_url() for _ in range(3)], steps).start()
    urls = publisher.urls  # bound by the publisher process
    endpoints = {url: (f"dep{index}", "decode") for index, url in enumerate(urls)}
    source = ZmqFpmSource(endpoints, stop_after=4, clock=publisher.now)

    items = run_source(source, publisher, workers=2)

    rows: dict[str, int] = {}
    for item in items:
        rows[item.deployment] = rows.get(item.deployment, 0) + len(item.payload.rows)
    assert rows == {"dep0": 4, "dep1": 4, "dep2": 4}  # each endpoint read once, nothing lost


def test_malformed_messages_are_dead_lettered_and_the_rest_flows(
    new_url: Callable[[], str], workers: int
) -> None:
    good = encode_fpm(ForwardPassMetrics(worker_id="w1", wall_time=0.02))
    seq = (5).to_bytes(8, "big")
    # the live decoder used to skip an unknown field unchecked and admit this
    unknown_field_not_utf8 = b"\x82\xa9worker_id\xa2w1\xa5extra\xa2\xff\xfe"
    steps = [
        ("clock", 99.0),
        ("fpm", 0, fpm_fields("w1")),  # seq 0
        ("frames", 0, [b"lonely"]),
        ("frames", 0, [b"", seq]),
        ("frames", 0, [b"", seq, good, b"extra"]),
        ("frames", 0, [b"", b"\x00\x01", good]),
        ("payload", 0, b"\xc1 not msgpack"),  # seq 1
        ("payload", 0, msgpack.packb({"scheduled_requests": {"num_decode_requests": -3}})),  # 2
        ("payload", 0, msgpack.packb({"worker_id": "w1", "dp_rank": True})),  # seq 3
        ("payload", 0, msgpack.packb([1, 2, 3])),  # seq 4
        ("payload", 0, good + b"\x00"),  # seq 5: trailing bytes
        ("payload", 0, unknown_field_not_utf8),  # seq 6
        ("fpm", 0, fpm_fields("w1", step=1)),  # seq 7
    ]
    publisher = PublisherProcess([new_url()], steps).start()
    (url,) = publisher.urls  # bound by the publisher process
    source = ZmqFpmSource(
        {url: ("llama", "decode")}, stop_after=len(steps) - 1, clock=publisher.now
    )

    items = run_source(source, publisher, workers=workers)

    letters = [item for item in items if isinstance(item, DeadLetter)]
    reasons = [letter.reason for letter in letters]
    assert reasons[:4] == [
        "malformed ZMQ message: expected 3 frames [topic, seq, payload], got 1",
        "malformed ZMQ message: expected 3 frames [topic, seq, payload], got 2",
        "malformed ZMQ message: expected 3 frames [topic, seq, payload], got 4",
        "malformed ZMQ message: sequence frame must be 8 bytes (big-endian), got 2",
    ]
    assert reasons[4].startswith("undecodable FPM payload (not msgpack):")
    assert reasons[5] == (
        "invalid FPM: scheduled_requests.num_decode_requests: "
        "Input should be greater than or equal to 0"
    )
    assert reasons[6] == "invalid FPM: dp_rank: Input should be a valid integer"
    assert reasons[7].startswith("invalid FPM: Input should be a valid dictionary")
    assert reasons[8].startswith("undecodable FPM payload (not msgpack):")
    assert reasons[9].startswith("undecodable FPM payload (not msgpack): 'utf-8' codec can't")
    assert [letter.position for letter in letters] == [None, None, None, None, 1, 2, 3, 4, 5, 6]
    assert {(letter.source, letter.deployment) for letter in letters} == {(url, "llama")}
    assert "lonely" in letters[0].raw
    assert fpms_by_engine(items) == {
        ("w1", 0): [expected_fpm(fpm_fields("w1"), 0), expected_fpm(fpm_fields("w1", step=1), 7)]
    }
    assert metric("flowplanner_fpm_sequence_gaps_total", endpoint=url) == 0


def test_sequence_gaps_are_counted_and_a_restart_is_not_a_gap(
    new_url: Callable[[], str], workers: int
) -> None:
    steps = [
        ("clock", 7.0),
        ("fpm", 0, fpm_fields("w1", step=0)),  # seq 0
        ("fpm", 0, fpm_fields("w1", step=1)),  # seq 1
        ("skip", 0, 3),
        ("fpm", 0, fpm_fields("w1", step=2)),  # seq 5: 3 lost
        ("skip", 0, 1),
        ("fpm", 0, fpm_fields("w1", step=3)),  # seq 7: 1 lost
        ("reset_seq", 0),
        ("fpm", 0, fpm_fields("w1", step=4)),  # seq 0: publisher restarted
        ("fpm", 0, fpm_fields("w1", step=5)),  # seq 1
    ]
    publisher = PublisherProcess([new_url()], steps).start()
    (url,) = publisher.urls  # bound by the publisher process
    source = ZmqFpmSource({url: ("llama", "decode")}, stop_after=6, clock=publisher.now)

    items = run_source(source, publisher, workers=workers)

    counters = [fpm.counter_id for fpm in fpms_by_engine(items)[("w1", 0)]]
    assert counters == [0, 1, 5, 7, 0, 1]
    assert metric("flowplanner_fpm_sequence_gaps_total", endpoint=url) == 4


def test_an_implausible_sequence_jump_is_not_counted_as_lost_messages(
    new_url: Callable[[], str], caplog: pytest.LogCaptureFixture, workers: int
) -> None:
    """A corrupt sequence frame (2**64-1) used to add 1.8e19 to the gap counter, log that many
    messages lost, then a false restart at the next message. Now: one warning, one
    ``implausible_jump``, and the sequence carries on from the last plausible number; a
    publisher whose sequence really moved far ahead is followed from the next message on."""
    corrupt, moved = 2**64 - 1, 2**40
    steps = [
        ("clock", 7.0),
        ("fpm", 0, fpm_fields("w1", step=0)),  # seq 0
        ("fpm", 0, fpm_fields("w1", step=1)),  # seq 1
        frames_with_seq(corrupt, step=2),  # a corrupt sequence frame
        ("fpm", 0, fpm_fields("w1", step=3)),  # seq 2: in order, no restart
        ("skip", 0, 2),
        ("fpm", 0, fpm_fields("w1", step=4)),  # seq 5: 2 lost, still counted
        frames_with_seq(moved, step=5),  # far ahead ...
        frames_with_seq(moved + 2, step=6),  # ... and carried on from there: 1 lost
        ("reset_seq", 0),
        ("fpm", 0, fpm_fields("w1", step=7)),  # seq 0: a real restart ...
        ("fpm", 0, fpm_fields("w1", step=8)),  # seq 1: ... which this one confirms
    ]
    publisher = PublisherProcess([new_url()], steps).start()
    (url,) = publisher.urls
    source = ZmqFpmSource({url: ("llama", "decode")}, stop_after=9, clock=publisher.now)

    with caplog.at_level(logging.INFO, logger="connectors.zmq_source"):
        items = run_source(source, publisher, workers=workers)

    counters = [fpm.counter_id for fpm in fpms_by_engine(items)[("w1", 0)]]
    assert counters == [0, 1, corrupt, 2, 5, moved, moved + 2, 0, 1]  # every payload admitted
    assert metric("flowplanner_fpm_sequence_gaps_total", endpoint=url) == 3
    resets = "flowplanner_fpm_sequence_resets_total"
    assert metric(resets, endpoint=url, reason="implausible_jump") == 2
    assert metric(resets, endpoint=url, reason="restart") == 1
    messages = [r.getMessage() for r in caplog.records if url in r.getMessage()]
    jumps = [m for m in messages if "sequence jumped" in m]
    assert len(jumps) == 1  # logged at the 1st, 10th, 100th ... such jump
    assert f"from 1 to {corrupt}" in jumps[0] and "not lost messages" in jumps[0]
    assert [m for m in messages if "restarted" in m] == [
        f"FPM publisher {url} restarted (seq 0 after {moved + 2})"
    ]
    lost = [m for m in messages if "messages lost" in m]
    assert all(str(corrupt - 2) not in m for m in lost)


def test_a_stray_backward_sequence_frame_is_neither_a_restart_nor_lost_messages(
    new_url: Callable[[], str], caplog: pytest.LogCaptureFixture, workers: int
) -> None:
    """One message whose sequence frame read 0 in a sequence at 10 000 000 counted as a publisher
    restart, and the publisher's next message, 10 000 001, as 10 000 000 lost. Now the message
    after a backward jump decides: continuing the old sequence, the jump was a stray
    (``backward_stray``, no gap); continuing the new one, the publisher restarted (one
    ``restart``, no gap)."""
    start = 10_000_000
    steps = [
        ("clock", 7.0),
        ("skip", 0, start),  # a publisher that has been up for a while
        ("fpm", 0, fpm_fields("w1", step=0)),  # seq start
        frames_with_seq(0, step=1),  # a stray sequence frame reading 0 ...
        ("await_seen", 2),  # (received in one poll, the next message in another)
        ("fpm", 0, fpm_fields("w1", step=2)),  # seq start + 1: ... the publisher never restarted
        frames_with_seq(5, step=3),  # another stray ...
        ("skip", 0, 2),
        ("fpm", 0, fpm_fields("w1", step=4)),  # seq start + 4: ... then 2 lost
        ("reset_seq", 0),
        ("fpm", 0, fpm_fields("w1", step=5)),  # seq 0: a real restart ...
        ("fpm", 0, fpm_fields("w1", step=6)),  # seq 1: ... which this one confirms
    ]
    publisher = PublisherProcess([new_url()], steps).start()
    (url,) = publisher.urls
    source = ZmqFpmSource({url: ("llama", "decode")}, stop_after=7, clock=publisher.now)

    with caplog.at_level(logging.INFO, logger="connectors.zmq_source"):
        items = run_source(source, publisher, workers=workers)

    counters = [fpm.counter_id for fpm in fpms_by_engine(items)[("w1", 0)]]
    assert counters == [start, 0, start + 1, 5, start + 4, 0, 1]  # every payload admitted
    assert metric("flowplanner_fpm_sequence_gaps_total", endpoint=url) == 2
    resets = "flowplanner_fpm_sequence_resets_total"
    assert metric(resets, endpoint=url, reason="backward_stray") == 2
    assert metric(resets, endpoint=url, reason="restart") == 1
    assert metric(resets, endpoint=url, reason="implausible_jump") == 0
    messages = [r.getMessage() for r in caplog.records if url in r.getMessage()]
    strays = [m for m in messages if "not a restart" in m]
    assert strays == [  # logged at the 1st, 10th, 100th ... such jump
        f"FPM publisher {url}: a message's sequence read 0 after {start}, the next one "
        f"{start + 1}: a corrupt sequence frame or a broken publisher, not a restart "
        "(1 such backward jumps so far)"
    ]
    assert [m for m in messages if "restarted" in m] == [
        f"FPM publisher {url} restarted (seq 0 after {start + 4})"
    ]
    assert [m for m in messages if "messages lost" in m] == [
        f"FPM publisher {url}: 2 messages lost"
    ]


def test_engines_are_discovered_and_expire_after_silence(
    new_url: Callable[[], str], caplog: pytest.LogCaptureFixture, workers: int
) -> None:
    deployment = f"dep-{uuid.uuid4().hex[:8]}"
    steps = [
        ("clock", 1000.0),
        ("fpm", 0, fpm_fields("w1")),
        ("fpm", 0, fpm_fields("w2")),
        ("await_seen", 2),
        ("clock", 1002.0),
        ("fpm", 0, {"worker_id": "w1"}),  # heartbeat keeps w1 alive
        ("await_seen", 3),
        ("clock", 1004.5),  # w2 silent for 4.5 s > 3 s; w1 for 2.5 s
        ("fpm", 0, {"worker_id": "w1"}),
        ("await_seen", 4),
        ("clock", 1005.0),
        ("fpm", 0, fpm_fields("w2")),  # w2 is back: discovered again
    ]
    publisher = PublisherProcess([new_url()], steps).start()
    (url,) = publisher.urls  # bound by the publisher process
    source = ZmqFpmSource(
        {url: (deployment, "decode")},
        engine_silence_seconds=3.0,
        stop_after=5,
        clock=publisher.now,
    )

    with caplog.at_level(logging.INFO, logger="connectors.zmq_source"):
        items = run_source(source, publisher, workers=workers)

    assert sum(len(item.payload.rows) for item in items) == 5
    ours = [r for r in caplog.records if r.args and r.args[0] == deployment]
    discovered = [r.args[2] for r in ours if r.msg.startswith("discovered engine")]
    gone = [r.args[2] for r in ours if r.msg.endswith(": gone")]
    assert discovered == ["w1", "w2", "w2"]
    assert gone == ["w2"]
    assert (
        metric("flowplanner_fpm_engines_expired_total", deployment=deployment, role="decode") == 1
    )
    # the run ended: its engines no longer count as live
    assert metric("flowplanner_fpm_engines", deployment=deployment, role="decode") == 0


def test_each_deployment_expires_its_engines_after_its_own_silence(
    new_url: Callable[[], str], caplog: pytest.LogCaptureFixture, workers: int
) -> None:
    # protects: the source used the shortest engine_silence_seconds of all deployments for
    # every engine, so b's engine (30 s) was "gone" after 4.5 s because a's silence is 3 s
    from flows.endpoints import wire
    from schemas import load_config

    a, b = (f"dep-{uuid.uuid4().hex[:8]}" for _ in range(2))
    steps = [
        ("clock", 1000.0),
        ("fpm", 0, fpm_fields("w1")),
        ("fpm", 1, fpm_fields("w1")),
        ("await_seen", 2),
        ("clock", 1004.5),  # both w1 silent for 4.5 s: over a's 3 s, under b's 30 s
        ("fpm", 0, fpm_fields("w2")),
        ("fpm", 1, fpm_fields("w2")),
    ]
    publisher = PublisherProcess([new_url(), new_url()], steps).start()
    configs = load_config(
        f'{{"deployments": {{"{a}": {{"mode": "decode", "engine_silence_seconds": 3}},'
        f' "{b}": {{"mode": "decode", "engine_silence_seconds": 30}}}}}}'
    )
    addresses = [
        f"zmq+{url}?deployment={name}&role=decode"
        for url, name in zip(publisher.urls, (a, b), strict=True)
    ]
    (wired,) = [s for s in wire(addresses, ["-"], configs).inputs if isinstance(s, ZmqFpmSource)]
    source = ZmqFpmSource(
        wired.endpoints,
        engine_silence_seconds=wired.options.engine_silence_seconds,
        stop_after=2,
        clock=publisher.now,
    )

    with caplog.at_level(logging.INFO, logger="connectors.zmq_source"):
        run_source(source, publisher, workers=workers)

    gone = [(r.args[0], r.args[2]) for r in caplog.records if r.msg.endswith(": gone")]
    assert sorted(d for d, _ in gone if d in (a, b)) == [a]
    assert metric("flowplanner_fpm_engines_expired_total", deployment=a, role="decode") == 1
    assert metric("flowplanner_fpm_engines_expired_total", deployment=b, role="decode") == 0


def test_a_silence_mapping_must_name_every_endpoints_deployment() -> None:
    with pytest.raises(ValueError, match="none given for deployment 'b'"):
        ZmqFpmSource(
            {"tcp://127.0.0.1:20380": ("a", "decode"), "tcp://127.0.0.1:20381": ("b", "decode")},
            engine_silence_seconds={"a": 3.0},
        )


def test_a_clock_stepped_back_stamps_no_earlier_than_before(new_url: Callable[[], str]) -> None:
    # protects: passes are stamped on receipt; when the host clock stepped back (NTP) they were
    # stamped behind the watermark and every one was late until the clock caught up
    steps = [
        ("clock", 1000.0),
        ("fpm", 0, fpm_fields("w1", step=0)),
        ("await_seen", 1),
        ("clock", 995.0),  # stepped back 5 s
        ("fpm", 0, fpm_fields("w1", step=1)),
        ("await_seen", 2),
        ("clock", 1001.0),
        ("fpm", 0, fpm_fields("w1", step=2)),
    ]
    publisher = PublisherProcess([new_url()], steps).start()
    (url,) = publisher.urls
    source = ZmqFpmSource({url: ("llama", "decode")}, stop_after=3, clock=publisher.now)
    items = run_source(source, publisher, workers=1)
    assert [item.time for item in items] == [1000.0, 1000.0, 1001.0]


def test_two_publishers_of_one_engine_are_warned_of(
    new_url: Callable[[], str], caplog: pytest.LogCaptureFixture
) -> None:
    # protects: two engines publishing one worker id (a copied config) were silently read as
    # one, and the load loop reported a worker count mismatch for ever
    # the first endpoint's first pass is taken in before the second publishes: which socket
    # a poll drains first is otherwise up to ZMQ's I/O thread
    steps: list = [("clock", 10.0), ("fpm", 0, fpm_fields("w0", 0, 0)), ("await_seen", 1)]
    steps += [("fpm", 1, fpm_fields("w0", 0, 0))]
    steps += [("fpm", index, fpm_fields("w0", 0, 1)) for index in range(2)]
    publisher = PublisherProcess([new_url(), new_url()], steps).start()
    first, second = publisher.urls
    endpoints = {first: ("llama", "decode"), second: ("llama", "decode")}
    source = ZmqFpmSource(endpoints, stop_after=2, clock=publisher.now)  # each endpoint's
    with caplog.at_level(logging.WARNING, logger="connectors.zmq_source"):
        run_source(source, publisher, workers=1)
    (warning,) = [r.getMessage() for r in caplog.records if "published by" in r.getMessage()]
    assert f"worker 'w0' dp_rank 0 is published by {first} and by {second}" in warning
