"""The fast FPM wire decoder accepts exactly what the pydantic schema accepts, with equal values.

Payloads are generated from valid FPMs by seeded random mutations (wrong types, bools for ints,
NaN/inf, negatives, huge integers, missing and extra keys, non-map payloads, duplicate keys,
truncated and trailing bytes); each one is judged by both paths.
"""

from __future__ import annotations

import math
import random
import struct

import msgpack
import pytest

from connectors.zmq_publisher import encode_fpm, encode_row
from connectors.zmq_source import FpmDecodeError, FpmWireDecoder
from schemas import ForwardPassMetrics, fpm_to_row

NESTED = ("scheduled_requests", "queued_requests")
ODD_VALUES = [
    -1,
    0,
    7,
    2**63,
    2**64 - 1,
    -(2**63),
    True,
    False,
    0.0,
    -0.0,
    3.0,
    2.5,
    -2.5,
    1e308,
    float("nan"),
    float("inf"),
    float("-inf"),
    "12",
    "",
    b"w1",
    None,
    [],
    [1],
    {},
    {"num_prefill_requests": 1},
]


def valid_fields(rng: random.Random) -> dict:
    fpm = ForwardPassMetrics.model_validate(
        {
            "version": rng.randint(0, 2),
            "worker_id": rng.choice(["", "w1", "décode-7"]),
            "dp_rank": rng.randint(0, 8),
            "counter_id": rng.randint(0, 2**40),
            "wall_time": rng.choice([0.0, rng.random()]),
            "scheduled_requests": {
                "num_decode_requests": rng.randint(0, 512),
                "sum_decode_kv_tokens": rng.randint(0, 10**7),
                "var_decode_kv_tokens": rng.random() * 1e6,
            },
            "queued_requests": {"sum_prefill_tokens": rng.randint(0, 10**6)},
        }
    )
    return fpm.model_dump()


def mutate(rng: random.Random, fields: dict) -> bytes:
    choice = rng.randrange(10)
    if choice == 0:
        return msgpack.packb(rng.choice(ODD_VALUES))
    if choice == 1:  # drop keys
        for key in rng.sample(sorted(fields), rng.randint(1, 3)):
            del fields[key]
    elif choice == 2:  # extra keys, including non-string ones
        fields[rng.choice(["extra", "Version", "wall time"])] = rng.choice(ODD_VALUES)
        if rng.random() < 0.3:
            return msgpack.packb({**fields, rng.choice([1, b"x", 2.5]): 1})
    elif choice == 3:  # bytes keys
        return msgpack.packb({k.encode(): v for k, v in fields.items()}, use_bin_type=True)
    elif choice in (4, 5, 6):  # one odd value somewhere
        target = fields
        if rng.random() < 0.6:
            target = fields[rng.choice(NESTED)]
        target[rng.choice(sorted(target))] = rng.choice(ODD_VALUES)
    elif choice == 7:
        payload = msgpack.packb(fields)
        return payload[: rng.randrange(len(payload))] if rng.random() < 0.5 else payload + b"\x01"
    elif choice == 8:  # duplicate key in the map: which one wins must agree
        key, value = rng.choice([("dp_rank", 3), ("worker_id", "dup"), ("dp_rank", -1)])
        body = b"".join(msgpack.packb(k) + msgpack.packb(v) for k, v in fields.items())
        body += msgpack.packb(key) + msgpack.packb(value)
        return bytes([0xDE]) + struct.pack(">H", len(fields) + 1) + body
    return msgpack.packb(fields, use_bin_type=True)


def judge_fast(payload: bytes) -> tuple:
    try:
        return ("ok", FpmWireDecoder().decode(payload, 1.0))
    except FpmDecodeError as exc:
        return ("error", str(exc))


def judge_schema(payload: bytes) -> tuple:
    try:
        fpm = FpmWireDecoder.verdict(payload)
    except FpmDecodeError as exc:
        return ("error", str(exc))
    return ("ok", (fpm.worker_id, fpm.dp_rank, fpm_to_row(1.0, fpm)))


def same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and type(a) is type(b))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b and type(a) is type(b)


@pytest.mark.parametrize("seed", range(4))
def test_fast_decoder_agrees_with_the_schema(seed: int) -> None:
    rng = random.Random(seed)
    verdicts = {"ok": 0, "error": 0}
    for _ in range(1500):
        payload = mutate(rng, valid_fields(rng))
        fast, schema = judge_fast(payload), judge_schema(payload)
        assert same(fast, schema), (payload, fast, schema)
        verdicts[fast[0]] += 1
    assert min(verdicts.values()) > 200  # both outcomes well exercised


def test_valid_payloads_round_trip_exactly_on_the_fast_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def slow_path(payload: bytes) -> ForwardPassMetrics:
        raise AssertionError("a valid engine payload fell back to the slow path")

    monkeypatch.setattr(FpmWireDecoder, "verdict", staticmethod(slow_path))
    rng = random.Random(42)
    for _ in range(200):
        fpm = ForwardPassMetrics.model_validate(valid_fields(rng))
        worker, rank, row = FpmWireDecoder().decode(encode_fpm(fpm), 3.5)
        assert (worker, rank, row) == (fpm.worker_id, fpm.dp_rank, fpm_to_row(3.5, fpm))
        from_row = encode_row(fpm.worker_id, fpm.dp_rank, fpm_to_row(0.0, fpm))
        assert FpmWireDecoder().decode(from_row, 3.5) == (worker, rank, row)


@pytest.mark.parametrize("depth", [5000, 50000])
def test_deeply_nested_payload_is_an_fpm_error_not_a_crash(depth: int) -> None:
    # a 5 KB payload nests deeper than msgspec recurses: it raised RecursionError, which
    # escaped the source and stopped the flow
    payload = b"\x81\xa1x" + b"\x91" * depth + b"\xc0"  # {"x": [[[...[nil]...]]]}
    with pytest.raises(FpmDecodeError, match="FPM"):
        FpmWireDecoder().decode(payload, 1.0)
