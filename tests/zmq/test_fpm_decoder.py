"""The fast FPM wire decoder accepts exactly what the pydantic schema accepts, with equal values.

Payloads are generated from valid FPMs by seeded random mutations (wrong types, bools for ints,
NaN/inf, negatives, huge integers, missing and extra keys, non-map payloads, duplicate keys,
truncated and trailing bytes, unknown fields holding junk); each one is judged by both paths.
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

EXTRA = msgpack.packb("extra")
UNKNOWN_JUNK = {  # (key, value) of a field the schema does not know, as raw msgpack: refused
    "key not UTF-8": (b"\xa3x\xff\xfe", msgpack.packb(1)),
    "text not UTF-8": (EXTRA, b"\xa2\xff\xfe"),
    "text not UTF-8 in a list": (EXTRA, b"\x92\xa1a\xa1\xff"),
    "integer map key": (EXTRA, msgpack.packb({1: 2})),
    "float map key deeper": (EXTRA, msgpack.packb([{2.5: None}])),
    "timestamp of the wrong size": (EXTRA, b"\xd4\xff\x00"),
    "byte msgpack never uses": (EXTRA, b"\xc1"),
}
UNKNOWN_WELL_FORMED = {  # ... and well-formed ones: ignored
    "nested map and list": (EXTRA, msgpack.packb({"a": ["b", 1.5, None, True]})),
    "bytes map key": (EXTRA, msgpack.packb({b"k": 1}, use_bin_type=True)),
    "bytes, not text": (EXTRA, msgpack.packb(b"\xff", use_bin_type=True)),
    "extension type": (EXTRA, msgpack.packb(msgpack.ExtType(5, b"xy"))),
    "timestamp": (EXTRA, msgpack.packb(msgpack.Timestamp(1, 5))),
}
UNKNOWN_FIELDS = [*UNKNOWN_JUNK.values(), *UNKNOWN_WELL_FORMED.values()]


def pack_map(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A msgpack map of already packed keys and values (which need not be valid msgpack)."""
    return bytes([0xDE]) + struct.pack(">H", len(entries)) + b"".join(k + v for k, v in entries)


def packed_entries(fields: dict) -> list[tuple[bytes, bytes]]:
    return [(msgpack.packb(k), msgpack.packb(v)) for k, v in fields.items()]


def with_unknown_field(rng: random.Random, fields: dict) -> bytes:
    """The FPM with one unknown field (of :data:`UNKNOWN_FIELDS`) at the top or in a nested map."""
    entries = packed_entries(fields)
    junk = rng.choice(UNKNOWN_FIELDS)
    if rng.random() < 0.5:
        entries.insert(rng.randrange(len(entries) + 1), junk)
    else:
        nested = packed_entries(fields[NESTED[0]])
        nested.insert(rng.randrange(len(nested) + 1), junk)
        position = list(fields).index(NESTED[0])
        entries[position] = (msgpack.packb(NESTED[0]), pack_map(nested))
    return pack_map(entries)


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
    choice = rng.randrange(11)
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
    elif choice == 9:  # an unknown field holding junk (or not): the schema path reads it too
        return with_unknown_field(rng, fields)
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


@pytest.mark.parametrize(
    ("key", "value", "verdict"),
    [pytest.param(*field, "error", id=name) for name, field in UNKNOWN_JUNK.items()]
    + [pytest.param(*field, "ok", id=name) for name, field in UNKNOWN_WELL_FORMED.items()],
)
def test_an_unknown_field_is_judged_alike_by_both_paths(
    key: bytes, value: bytes, verdict: str
) -> None:
    # the live decoder skipped unknown fields unchecked: text that is not UTF-8 or an integer
    # map key in one was admitted, while the schema path dead-letters it
    for payload in (
        pack_map([(msgpack.packb("worker_id"), msgpack.packb("w1")), (key, value)]),
        pack_map([(msgpack.packb("queued_requests"), pack_map([(key, value)]))]),
    ):
        fast, schema = judge_fast(payload), judge_schema(payload)
        assert same(fast, schema), (payload, fast, schema)
        assert fast[0] == verdict, fast


@pytest.mark.parametrize("depth", [5000, 50000])
def test_deeply_nested_payload_is_an_fpm_error_not_a_crash(depth: int) -> None:
    # a 5 KB payload nests deeper than msgspec recurses: it raised RecursionError, which
    # escaped the source and stopped the flow
    payload = b"\x81\xa1x" + b"\x91" * depth + b"\xc0"  # {"x": [[[...[nil]...]]]}
    with pytest.raises(FpmDecodeError, match="FPM"):
        FpmWireDecoder().decode(payload, 1.0)
