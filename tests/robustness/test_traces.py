"""Trace lines that used to escape the reader as something other than a
:class:`TraceFormatError` (a ``ValueError`` from an integer of more than 4300 digits or a
fraction of a second with thousands of digits, a ``RecursionError`` from deep nesting) or were
read as real requests (a prompt of 4.6e18 tokens, which a replay then crashed on), and a
Dynamo ``event_type`` that is not a string (was skipped silently as a tool event). Each is now
a ``TraceFormatError`` naming the file and line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from connectors.traces import TraceFormatError, detect_format, read_trace

MOONCAKE = '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10,2\n"


def dynamo_end(kind: object = "request_end", isl: int = 10) -> str:
    event = {
        "schema": "dynamo.request.trace.v1",
        "event_type": kind,
        "event_time_unix_ms": 2000,
        "request": {"input_tokens": isl, "output_tokens": 2, "request_received_ms": 1000},
    }
    return json.dumps(event) + "\n"


CASES = {
    "4301-digit length": (
        "m.jsonl",
        MOONCAKE + MOONCAKE.replace('"output_length": 1', '"output_length": ' + "9" * 4301),
        "4300 digits",
    ),
    "deep nesting": ("m.jsonl", MOONCAKE + "[" * 50_000 + "]" * 50_000 + "\n", "nested too deeply"),
    "mooncake 2**62 tokens": (
        "m.jsonl",
        MOONCAKE + MOONCAKE.replace('"input_length": 5', f'"input_length": {2**62}'),
        "input_length = 4611686018427387904 is implausible (above MAX_REQUEST_TOKENS",
    ),
    "azure 2**62 tokens": (
        "a.csv",
        AZURE + f"2023-11-16 18:15:47.1,10,{2**62}\n",
        "GeneratedTokens = 4611686018427387904 is implausible",
    ),
    "azure 5000-digit fraction": (
        "a.csv",
        AZURE + "2023-11-16 18:15:47." + "1" * 5000 + ",10,2\n",
        "bad TIMESTAMP",
    ),
    "azure superscript digit": (
        "a.csv",
        AZURE + "2023-11-16 18:15:47.\u00b2,10,2\n",
        "bad TIMESTAMP",
    ),
    "dynamo 2**62 tokens": (
        "d.jsonl",
        dynamo_end() + dynamo_end(isl=2**62),
        "request.input_tokens = 4611686018427387904 is implausible",
    ),
    "dynamo event_type list": (
        "d.jsonl",
        dynamo_end() + dynamo_end(kind=["request_end"]),
        "event_type must be a string, got ['request_end']",
    ),
    "dynamo 1 MB request_id": (
        "d.jsonl",
        dynamo_end()
        + dynamo_end().replace('"input_tokens"', f'"request_id": "{"x" * 2**20}", "input_tokens"'),
        "request.request_id is longer than MAX_REQUEST_ID = 512",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_line_is_a_trace_format_error_naming_its_line(tmp_path: Path, case: str) -> None:
    name, text, reason = CASES[case]
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    assert info.value.line == text.count("\n")  # the last line is the bad one
    assert reason in str(info.value)
    assert len(str(info.value)) < 300  # a huge value is not echoed whole


def test_a_corrupt_gzip_trace_is_a_trace_format_error(tmp_path: Path) -> None:
    """A deflate block of the reserved type 3 makes zlib raise ``zlib.error`` (neither an
    ``OSError`` nor a ``ValueError``): it escaped forecast-bench, replay and run's warm-up."""
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + b"\x07" + bytes(64))
    with pytest.raises(TraceFormatError, match=r"t\.jsonl\.gz:1: unreadable: .*invalid block"):
        read_trace(path)
    with pytest.raises(TraceFormatError, match="unreadable"):
        read_trace(path, "azure")  # the CSV reader reads the same stream


def test_an_azure_csv_with_a_byte_order_mark_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("\ufeff" + AZURE, encoding="utf-8")
    assert detect_format(path) == "azure"
    assert [(r.isl, r.osl) for r in read_trace(path)] == [(10, 2)]


@pytest.mark.parametrize("end", ["\r", "\r\n"])
def test_lines_may_end_as_in_text_mode(tmp_path: Path, end: str) -> None:
    # protects: reading bytes split at "\n" only, a CR-only file was one line and refused
    azure = tmp_path / "a.csv"
    azure.write_bytes(f"{AZURE}2023-11-16 18:15:47.1,20,3\n".replace("\n", end).encode())
    assert [(r.isl, r.osl) for r in read_trace(azure)] == [(10, 2), (20, 3)]
    mooncake = tmp_path / "m.jsonl"
    line = '{"timestamp": 0, "input_length": 5, "output_length": 1}'
    mooncake.write_bytes(f"{line}{end}{line}{end}".encode())
    assert [r.isl for r in read_trace(mooncake)] == [5, 5]


def test_a_first_line_beyond_the_csv_field_limit_is_a_trace_format_error(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("x" * 200_000 + "\n")
    with pytest.raises(TraceFormatError, match=r"a\.csv:1: not a JSONL trace and not an Azure"):
        detect_format(path)


def test_unix_millisecond_arrivals_are_relative_to_the_first_exactly(tmp_path: Path) -> None:
    """Seconds since 1970 in a float are good to 0.2 µs only: 1.1 s after the first request
    came out as 1.0999999 s."""
    path = tmp_path / "m.jsonl"
    path.write_text(
        "".join(
            f'{{"timestamp": {1_708_031_021_982 + k * 1100}, "input_length": 5, '
            '"output_length": 1}\n'
            for k in range(4)
        )
    )
    assert [r.arrival_s for r in read_trace(path)] == [0.0, 1.1, 2.2, 3.3]
    dynamo = tmp_path / "d.jsonl"
    dynamo.write_text(dynamo_end().replace("1000}", "1708031023082}") + dynamo_end())
    assert [r.arrival_s for r in read_trace(dynamo)] == [0.0, 1708031022.082]


@pytest.mark.parametrize("name", ["t.csv", "t.jsonl", "t.jsonl.gz"])
def test_bad_utf8_is_named_at_its_own_line(tmp_path: Path, name: str) -> None:
    # protects: the text wrapper decoded 8 KB ahead, and the error named line 2 825 of 3 002
    if name.endswith(".csv"):
        good = ["TIMESTAMP,ContextTokens,GeneratedTokens\n"]
        good += ["2023-11-16 18:17:03.9799600,4808,10\n"] * 3000
        bad = b"2023-11-16 18:17:04.0,48\xff8,10\n"
    else:
        good = ['{"timestamp": 0, "input_length": 4808, "output_length": 10}\n'] * 3001
        bad = b'{"timestamp": 1, "input_length": 48\xff8, "output_length": 10}\n'
    data = "".join(good).encode() + bad
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    with pytest.raises(TraceFormatError, match=r":3002: unreadable: 'utf-8' codec"):
        read_trace(path)
