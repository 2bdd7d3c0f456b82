"""ZMQ path: a well-typed but impossible FPM (absurd wall time, token sum or request count) is a
dead letter naming the field, decided alike by the fast decoder and the schema; values at the
ceilings are still real forward passes and flow on (publisher process → ZMQ → real bytewax)."""

from __future__ import annotations

import math
from collections.abc import Callable

import msgpack

from connectors.pipeline_metrics import dead_letter_kind
from connectors.zmq_source import FpmDecodeError, FpmWireDecoder, ZmqFpmSource
from schemas import DeadLetter, FpmBatchEvent
from schemas.fpm import MAX_FORWARD_PASS_SECONDS, MAX_FPM_REQUESTS, MAX_FPM_TOKENS
from tests.zmq.flow_run import run_source
from tests.zmq.publisher_process import PublisherProcess

GOOD = {
    "worker_id": "w1",
    "wall_time": 0.03,
    "scheduled_requests": {"num_decode_requests": 100, "sum_decode_kv_tokens": 200_000},
}
AT_THE_CEILINGS = {
    "worker_id": "w1",
    "wall_time": MAX_FORWARD_PASS_SECONDS,
    "scheduled_requests": {
        "num_decode_requests": MAX_FPM_REQUESTS,
        "sum_decode_kv_tokens": MAX_FPM_TOKENS,
    },
    "queued_requests": {"sum_prefill_tokens": MAX_FPM_TOKENS},
}
IMPLAUSIBLE = [  # (payload fields, the start of the dead letter's reason)
    ({**GOOD, "wall_time": 1e300}, "invalid FPM: wall_time = 1e+300 is implausible"),
    (
        {**GOOD, "scheduled_requests": {"sum_decode_kv_tokens": 2**64 - 1}},
        "invalid FPM: scheduled_requests.sum_decode_kv_tokens = 18446744073709551615 is impl",
    ),
    (
        {**GOOD, "queued_requests": {"num_prefill_requests": MAX_FPM_REQUESTS + 1}},
        f"invalid FPM: queued_requests.num_prefill_requests = {MAX_FPM_REQUESTS + 1} is impl",
    ),
    (
        {**GOOD, "wall_time": math.nextafter(MAX_FORWARD_PASS_SECONDS, math.inf)},
        "invalid FPM: wall_time = 60.00000000000001 is implausible",
    ),
]


def test_implausible_fpms_are_dead_letters_and_the_rest_flows(
    new_url: Callable[[], str], workers: int
) -> None:
    steps = [("clock", 50.0), ("fpm", 0, GOOD)]  # seq 0
    steps += [("payload", 0, msgpack.packb(fields)) for fields, _ in IMPLAUSIBLE]  # seq 1-4
    steps += [("fpm", 0, AT_THE_CEILINGS), ("fpm", 0, GOOD)]  # seq 5, 6
    publisher = PublisherProcess([new_url()], steps).start()
    (url,) = publisher.urls  # bound by the publisher process
    source = ZmqFpmSource(
        {url: ("llama", "decode")}, stop_after=len(steps) - 1, clock=publisher.now
    )

    items = run_source(source, publisher, workers=workers)

    letters = [item for item in items if isinstance(item, DeadLetter)]
    assert [letter.position for letter in letters] == [1, 2, 3, 4]
    for letter, (_, reason) in zip(letters, IMPLAUSIBLE, strict=True):
        assert letter.reason.startswith(reason), letter.reason
        assert dead_letter_kind(letter.reason) == "invalid"  # counted like every invalid FPM
        assert letter.deployment == "llama"
    batches = [item for item in items if isinstance(item, FpmBatchEvent)]
    fpms = [batch.payload.fpm(i) for batch in batches for i in range(len(batch.payload.rows))]
    assert [fpm.counter_id for fpm in fpms] == [0, 5, 6]
    assert fpms[1].wall_time == MAX_FORWARD_PASS_SECONDS
    assert fpms[1].scheduled_requests.sum_decode_kv_tokens == MAX_FPM_TOKENS


def test_fast_decoder_and_schema_agree_on_the_ceilings() -> None:
    decoder = FpmWireDecoder()
    for fields, reason in IMPLAUSIBLE:
        payload = msgpack.packb(fields)
        for judge in (lambda p: decoder.decode(p, 1.0), FpmWireDecoder.verdict):
            try:
                judge(payload)
            except FpmDecodeError as exc:
                assert str(exc).startswith(reason)
            else:
                raise AssertionError(f"accepted {fields}")
    worker, _, row = decoder.decode(msgpack.packb(AT_THE_CEILINGS), 1.0)
    assert (worker, row[2]) == ("w1", MAX_FORWARD_PASS_SECONDS)
    assert FpmWireDecoder.verdict(msgpack.packb(AT_THE_CEILINGS)).wall_time == row[2]
