"""Trace readers on the shipped samples and on malformed files."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest

from connectors.traces import TraceFormatError, detect_format, read_trace, read_warmup_trace

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(p, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        p.write_text(text, encoding="utf-8")
    return p


def _dynamo_end(request_id: str, received: int | None, **extra: object) -> str:
    request: dict[str, object] = {
        "request_id": request_id,
        "input_tokens": 100,
        "output_tokens": 7,
        "replay": {"trace_block_size": 16, "input_length": 120, "input_sequence_hashes": [5, 9]},
    }
    if received is not None:
        request["request_received_ms"] = received
    request.update(extra)
    event = {
        "schema": "dynamo.request.trace.v1",
        "event_type": "request_end",
        "event_time_unix_ms": 10_000,
        "request": request,
    }
    return json.dumps({"timestamp": 1, "event": event})


def test_azure_conv_sample() -> None:
    rows = read_trace(TRACES / "azure_2023_conv.csv")
    lines = (TRACES / "azure_2023_conv.csv").read_text().splitlines()
    assert len(rows) == len(lines) - 1
    assert rows[0].arrival_s == 0.0
    assert all(a.arrival_s <= b.arrival_s for a, b in itertools.pairwise(rows))
    # first data rows: 18:15:46.6805900 (374, 44), then 18:15:50.9951690 (396, 109)
    assert (rows[0].isl, rows[0].osl) == (374, 44)
    assert rows[1].arrival_s == pytest.approx(4.314579, abs=1e-9)
    assert (rows[1].isl, rows[1].osl) == (396, 109)
    assert 3400 < rows[-1].arrival_s < 3600  # one hour of traffic
    assert sum(r.isl for r in rows) == sum(int(x.split(",")[1]) for x in lines[1:])


def test_mooncake_sample_has_hashes() -> None:
    rows = read_trace(TRACES / "mooncake_arxiv_first1000.jsonl")
    assert len(rows) == 1000
    first = rows[0]
    assert (first.isl, first.osl, first.block_size) == (6755, 500, 512)
    assert first.hash_ids[:3] == (0, 1, 2)
    # every prompt is covered by its hash blocks
    assert all(len(r.hash_ids) == -(-r.isl // 512) for r in rows)
    assert rows[-1].arrival_s == pytest.approx(177.098)


def test_dynamo_sample_keeps_only_request_end() -> None:
    path = TRACES / "dynamo_request_trace_v1_sample.jsonl.gz"
    assert detect_format(path) == "dynamo"
    rows = read_trace(path)
    assert len(rows) == 17  # 61 lines, of which 17 request_end rows
    assert rows[0].request_id == "71491777-4c0d-4d7f-a8a5-54f11a28dde2"
    assert (rows[0].isl, rows[0].osl, rows[0].block_size) == (15, 3, 16)
    assert len({r.request_id for r in rows}) == 17
    assert all(a.arrival_s <= b.arrival_s for a, b in itertools.pairwise(rows))


def test_dynamo_arrival_fallback_and_duplicates(tmp_path: Path) -> None:
    text = "\n".join(
        [
            _dynamo_end("a", 5_000),
            _dynamo_end("b", None, total_time_ms=2_500.0),  # arrival 10000 - 2500
            _dynamo_end("a", 9_000),  # duplicate id: the first row wins
            _dynamo_end("", 6_000),  # an empty id is none: both rows are requests
            _dynamo_end("", 7_000),
            json.dumps({"schema": "dynamo.request.trace.v1", "event_type": "tool_end"}),
            "",
        ]
    )
    for name in ("d.jsonl", "d.jsonl.gz"):
        rows = read_trace(_write(tmp_path, name, text))
        assert [(r.request_id, r.arrival_s, r.isl, r.osl) for r in rows] == [
            ("a", 0.0, 120, 7),
            (None, 1.0, 120, 7),
            (None, 2.0, 120, 7),
            ("b", 2.5, 120, 7),
        ]
        assert rows[0].hash_ids == (5, 9)


def test_sort_is_stable(tmp_path: Path) -> None:
    text = "".join(
        json.dumps({"timestamp": ts, "input_length": isl, "output_length": 1}) + "\n"
        for ts, isl in [(2000, 1), (1000, 2), (2000, 3), (1000, 4)]
    )
    rows = read_trace(_write(tmp_path, "m.jsonl", text))
    assert [r.isl for r in rows] == [2, 4, 1, 3]
    assert [r.arrival_s for r in rows] == [0.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize(
    ("name", "text", "line", "reason"),
    [
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{oops\n',
            2,
            "invalid JSON",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
            '{"timestamp": 1, "input_length": -3, "output_length": 1}\n',
            2,
            "input_length",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
            '{"timestamp": 1, "input_length": 5}\n',
            2,
            "output_length",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n\n'
            '{"timestamp": "x", "input_length": 5, "output_length": 1}\n',
            3,
            "timestamp",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}\n',
            1,
            "hash_ids",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10,2\n"
            "2023-11-16 18:15:47.1,ten,2\n",
            3,
            "ContextTokens",
        ),
        ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nnot-a-time,10,2\n", 2, "TIMESTAMP"),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10\n",
            2,
            "fields",
        ),
        ("a.csv", "TIMESTAMP,Tokens\n", 1, "columns"),
        ("d.jsonl.gz", _dynamo_end("a", 1) + "\n[1, 2]\n", 2, "JSON object"),
        ("d.jsonl", _dynamo_end("a", 1) + "\n" + _dynamo_end("b", None) + "\n", 2, "arrival"),
        (
            "d.jsonl",
            _dynamo_end("a", 1)
            + "\n"
            + '{"timestamp": 0, "input_length": 5, "output_length": 1}\n',
            2,
            "not a dynamo.request.trace.v1",
        ),
    ],
)
def test_malformed_lines_fail_with_line_number(
    tmp_path: Path, name: str, text: str, line: int, reason: str
) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    assert info.value.line == line
    assert reason in str(info.value)
    assert str(info.value).startswith(f"{path}:{line}:")


def test_unrecognised_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="empty"):
        read_trace(_write(tmp_path, "e.jsonl", "\n\n"))
    with pytest.raises(TraceFormatError, match="unrecognised"):
        read_trace(_write(tmp_path, "u.jsonl", '{"foo": 1}\n'))
    with pytest.raises(TraceFormatError, match="cannot open"):
        read_trace(tmp_path / "missing.jsonl")
    truncated = tmp_path / "t.jsonl.gz"
    truncated.write_bytes(
        gzip.compress(b'{"timestamp": 0, "input_length": 5, "output_length": 1}\n' * 50)[:40]
    )
    with pytest.raises(TraceFormatError):
        read_trace(truncated)


def test_warmup_trace_from_a_directory_or_a_glob_is_one_trace(tmp_path: Path) -> None:
    # spec §7.6: a file, a glob or a directory (recursive *.jsonl / *.jsonl.gz); arrivals are
    # relative to the earliest request of all files
    def mooncake(*stamps: int) -> str:
        rows = (
            {"timestamp": t, "input_length": 10 + t // 1000, "output_length": 1} for t in stamps
        )
        return "".join(json.dumps(r) + "\n" for r in rows)

    (tmp_path / "day2").mkdir()
    _write(tmp_path, "day1.jsonl", mooncake(5000, 9000))
    _write(tmp_path, "day2/part.jsonl.gz", mooncake(2000, 7000))
    _write(tmp_path, "notes.txt", "not a trace")

    whole = read_warmup_trace(tmp_path)
    assert [(r.arrival_s, r.isl) for r in whole] == [(0.0, 12), (3.0, 15), (5.0, 17), (7.0, 19)]
    assert read_warmup_trace(tmp_path / "day1.jsonl") == read_trace(tmp_path / "day1.jsonl")
    assert [r.isl for r in read_warmup_trace(f"{tmp_path}/**/*.jsonl*")] == [12, 15, 17, 19]
    assert [r.isl for r in read_warmup_trace(f"{tmp_path}/*.jsonl")] == [15, 19]


def test_a_glob_of_azure_files_keeps_each_file_at_its_own_time(tmp_path: Path) -> None:
    # each Azure file counted from its own first second and the files were laid one over the
    # other: two hours of day-split files read as one hour of twice the traffic
    header = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    _write(tmp_path, "a.csv", header + "2023-11-16 18:00:00.25,10,1\n2023-11-16 18:00:06,11,1\n")
    _write(tmp_path, "b.csv", header + "2023-11-16 19:00:03.5,20,1\n2023-11-16 17:59:59,9,1\n")
    whole = read_warmup_trace(f"{tmp_path}/*.csv")
    assert [(r.arrival_s, r.isl) for r in whole] == [
        (0.0, 9),
        (1.25, 10),
        (7.0, 11),
        (3604.5, 20),
    ]
    assert read_warmup_trace(tmp_path / "a.csv") == read_trace(tmp_path / "a.csv")


def test_warmup_trace_rejects_a_file_twice_mixed_formats_and_empty_matches(
    tmp_path: Path,
) -> None:
    row = '{"timestamp": 1, "input_length": 9, "output_length": 2}\n'
    _write(tmp_path, "a.jsonl", row)
    _write(tmp_path, "a.jsonl.gz", row)
    with pytest.raises(TraceFormatError, match=r"both a\.jsonl and a\.jsonl\.gz exist"):
        read_warmup_trace(tmp_path)

    mixed = tmp_path / "mixed"
    mixed.mkdir()
    _write(mixed, "m.jsonl", row)
    _write(mixed, "d.jsonl", _dynamo_end("r1", 1000) + "\n")
    with pytest.raises(TraceFormatError, match="different formats"):
        read_warmup_trace(mixed)

    with pytest.raises(TraceFormatError, match="no trace files match"):
        read_warmup_trace(f"{tmp_path}/*.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceFormatError, match=r"no \*\.jsonl"):
        read_warmup_trace(tmp_path / "empty")


def test_azure_timestamps_with_a_utc_offset_are_read_with_it(tmp_path: Path) -> None:
    text = (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.5+05:00,10,2\n"  # 13:15:46.5 UTC
        "2023-11-16T13:15:47Z,11,2\n"
        "2023-11-16 13:15:48.25,12,2\n"  # no offset: UTC
        "2023-11-16 08:15:49.5-05,13,2\n"
    )
    rows = read_trace(_write(tmp_path, "a.csv", text))
    assert [(r.arrival_s, r.isl) for r in rows] == [(0.0, 10), (0.5, 11), (1.75, 12), (3.0, 13)]
