"""Readers of recorded request traces: Mooncake JSONL, Azure LLM inference CSV, Dynamo v1 JSONL.

:func:`read_trace` detects the format from the file's suffix and first line, and returns
:class:`schemas.trace.TraceRequest` rows with ``arrival_s`` relative to the first request,
sorted by arrival (stable: rows with equal arrival keep their file order).
:func:`read_warmup_trace` reads a predictor warm-up trace, which may also be a glob or a
directory of traces (spec §7.6).

* **Mooncake** (``*.jsonl``): ``{"timestamp": ms, "input_length", "output_length",
  "hash_ids": [...]}``; each hash covers 512 prompt tokens.
* **Azure** (``*.csv``): header ``TIMESTAMP,ContextTokens,GeneratedTokens`` with timestamps like
  ``2023-11-16 18:15:46.6805900`` (fractional digits kept exactly).
* **Dynamo** ``dynamo.request.trace.v1`` (``*.jsonl`` or ``*.jsonl.gz``; an event may be wrapped
  as ``{"timestamp": ..., "event": {...}}``): only ``request_end`` rows are requests. Arrival is
  ``request.request_received_ms``, else ``event_time_unix_ms - request.total_time_ms``; ISL is
  ``request.replay.input_length`` else ``request.input_tokens``; OSL is
  ``request.output_tokens``. A repeated ``request_id`` keeps its first row (an empty one is
  no id: every such row is kept).

Malformed input raises :class:`TraceFormatError` naming the file and line (a token count above
``schemas.events.MAX_REQUEST_TOKENS`` included); nothing is skipped silently except blank lines
and non-request Dynamo events (tool calls).

A live ``dynamo.request.trace.v1`` stream (a Kafka topic the frontend writes) is read one
message at a time by :func:`dynamo_request_event`.
"""

from __future__ import annotations

import csv
import glob
import gzip
import json
import math
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, Literal, cast

from schemas import RequestEvent, RequestRecord
from schemas.events import MAX_REQUEST_ID, MAX_REQUEST_TOKENS
from schemas.trace import TraceRequest

TraceFormat = Literal["mooncake", "azure", "dynamo"]
DYNAMO_SCHEMA = "dynamo.request.trace.v1"
MOONCAKE_BLOCK_SIZE = 512
_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


class TraceFormatError(ValueError):
    """A trace that cannot be read; the message names the file and (1-based) line.

    >>> str(TraceFormatError("t.jsonl", 3, "invalid JSON"))
    't.jsonl:3: invalid JSON'
    """

    def __init__(self, path: str | Path, line: int | None, reason: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = reason
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {reason}")


def read_trace(path: str | Path, fmt: TraceFormat | None = None) -> list[TraceRequest]:
    """Read a trace file (format auto-detected unless ``fmt`` is given).

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> p = os.path.join(d, "t.jsonl")
    >>> with open(p, "w") as f:
    ...     _ = f.write('{"timestamp": 1500, "input_length": 900, "output_length": 20}\\n'
    ...                 '{"timestamp": 1000, "input_length": 600, "output_length": 10, '
    ...                 '"hash_ids": [1, 2]}\\n')
    >>> [(r.arrival_s, r.isl, r.osl, r.hash_ids) for r in read_trace(p)]
    [(0.0, 600, 10, (1, 2)), (0.5, 900, 20, ())]
    """
    path = Path(path)
    fmt = fmt or detect_format(path)
    return _relative_sorted(_read_rows(path, fmt), _PER_SECOND.get(fmt, 1.0))


def read_warmup_trace(spec: str | Path) -> list[TraceRequest]:
    """The requests of a predictor warm-up trace (spec §7.6): a file, a glob or a directory.

    A directory means every ``*.jsonl`` and ``*.jsonl.gz`` below it (recursively); a glob, the
    files it matches. All files must have one format (a mix is an error), a file may not exist
    both plain and gzipped (``x.jsonl`` and ``x.jsonl.gz`` would count its requests twice), and
    arrivals are relative to the earliest request of all files.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> for name, ts in (("a.jsonl", 1000), ("b.jsonl", 4000)):
    ...     _ = open(os.path.join(d, name), "w").write(
    ...         '{"timestamp": %d, "input_length": 9, "output_length": 2}\\n' % ts)
    >>> [r.arrival_s for r in read_warmup_trace(d)], len(read_warmup_trace(d + "/*.jsonl"))
    ([0.0, 3.0], 2)
    """
    text = str(spec)
    path = Path(text)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.name.endswith((".jsonl", ".jsonl.gz")))
        if not files:
            raise TraceFormatError(path, None, "no *.jsonl or *.jsonl.gz files in this directory")
    elif path.exists() or not glob.has_magic(text):
        files = [path]
    else:
        files = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
        if not files:
            raise TraceFormatError(text, None, "no trace files match this pattern")
    plain = {str(p) for p in files if p.name.endswith(".jsonl")}
    for p in files:
        if p.name.endswith(".jsonl.gz") and str(p)[: -len(".gz")] in plain:
            raise TraceFormatError(p, None, f"both {p.name[:-3]} and {p.name} exist: keep one")
    formats = {p: detect_format(p) for p in files}
    if len(set(formats.values())) > 1:
        kinds = ", ".join(f"{p.name}: {f}" for p, f in formats.items())
        raise TraceFormatError(text, None, f"trace files of different formats ({kinds})")
    rows = [row for p, fmt in formats.items() for row in _read_rows(p, fmt)]
    return _relative_sorted(rows, _PER_SECOND.get(next(iter(formats.values())), 1.0))


def detect_format(path: str | Path) -> TraceFormat:
    """The format of a trace file, from its suffix and its first non-blank line.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "x.csv")
    >>> _ = open(p, "w").write("TIMESTAMP,ContextTokens,GeneratedTokens\\n")
    >>> detect_format(p)
    'azure'
    """
    path = Path(path)
    for lineno, line in _lines(path):
        text = line.strip()
        if not text:
            continue
        if not text.startswith("{"):
            try:
                header = [c.strip() for c in next(csv.reader([text]))]
            except csv.Error:  # e.g. a field above csv's limit (a 200 000-character line)
                header = []
            if all(c in header for c in _AZURE_COLUMNS):
                return "azure"
            raise TraceFormatError(
                path,
                lineno,
                "not a JSONL trace and not an Azure CSV header "
                f"(need columns {', '.join(_AZURE_COLUMNS)})",
            )
        obj = _parse_json(path, lineno, text)
        if _dynamo_event(obj) is not None:
            return "dynamo"
        if all(k in obj for k in ("timestamp", "input_length", "output_length")):
            return "mooncake"
        raise TraceFormatError(
            path,
            lineno,
            f"unrecognised trace row: neither {DYNAMO_SCHEMA} nor Mooncake "
            "(timestamp, input_length, output_length)",
        )
    raise TraceFormatError(path, None, "empty trace file")


# --- helpers --------------------------------------------------------------------------------


def _read_rows(path: Path, fmt: TraceFormat) -> list[_Row]:
    if fmt == "azure":
        return list(_read_azure(path))
    if fmt == "mooncake":
        return list(_read_mooncake(path))
    if fmt == "dynamo":
        return list(_read_dynamo(path))
    raise TraceFormatError(path, None, f"unknown trace format {fmt!r}")


@dataclass(slots=True)
class _Row:
    """A request as read, its arrival still in the file's unit (``_PER_SECOND``) and absolute:
    ``request.arrival_s`` is set once the origin is known (:func:`_relative_sorted`)."""

    arrival: float
    request: TraceRequest
    base: int = 0
    """The whole seconds ``arrival`` counts from: an Azure file's first second (its arrivals
    are kept small to keep their fractions exact); 0 where arrivals are absolute."""


_PER_SECOND: dict[str, float] = {"azure": 1.0, "mooncake": 1000.0, "dynamo": 1000.0}
"""The unit of ``_Row.arrival`` per format, per second: Mooncake and Dynamo arrivals stay in the
file's milliseconds until the origin is subtracted (integer milliseconds subtract exactly;
seconds since 1970 in a float are only good to 0.2 µs, which put an arrival 1.1 s after the first
a hair before it); Azure's are already exact seconds from the first whole second."""


def _relative_sorted(rows: list[_Row], per_second: float = 1.0) -> list[TraceRequest]:
    if not rows:
        return []
    base = min(r.base for r in rows)  # files of several bases (an Azure glob): on one axis
    origin = min(rows, key=lambda r: (r.base - base) + r.arrival)

    def since_origin(row: _Row) -> float:
        return (row.base - origin.base) + (row.arrival - origin.arrival)

    rows.sort(key=since_origin)  # stable
    return [replace(r.request, arrival_s=float(since_origin(r)) / per_second) for r in rows]


def _open_bytes(path: Path) -> BinaryIO:
    """The file's bytes, decompressed if it is gzipped (by its magic number, not its name)."""
    try:
        with path.open("rb") as probe:
            magic = probe.read(2)
        return cast(BinaryIO, gzip.open(path, "rb")) if magic == b"\x1f\x8b" else path.open("rb")
    except OSError as exc:
        raise TraceFormatError(path, None, f"cannot open: {exc}") from exc


_UNREADABLE = (UnicodeDecodeError, EOFError, gzip.BadGzipFile, zlib.error, OSError)
"""What reading a (possibly gzipped) text file raises on a damaged file: bad UTF-8, a cut or
corrupt gzip stream (``zlib.error`` for a bad deflate block), an I/O error."""


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The file's numbered lines, each decoded alone — so bad UTF-8 is named at its own line
    (a text wrapper decodes 8 KB ahead, and named a line before it); a byte-order mark at the
    start (spreadsheet exports) is not part of line 1. Lines end as in text mode: at ``\n``,
    ``\r\n`` or a lone ``\r`` (old Mac and some spreadsheet exports)."""
    with _open_bytes(path) as fh:
        lineno = 0
        try:
            for chunk in fh:  # ends at b"\n", so a b"\r\n" is never split across two
                for raw in chunk.splitlines(keepends=True):
                    lineno += 1
                    yield lineno, raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
        except _UNREADABLE as exc:
            at = lineno if isinstance(exc, UnicodeDecodeError) else lineno + 1
            raise TraceFormatError(path, at, f"unreadable: {exc}") from exc


def _parse_json(path: Path, lineno: int, text: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(path, lineno, f"invalid JSON: {exc.msg}") from exc
    except ValueError as exc:  # an integer of more than 4300 digits (int's conversion limit)
        raise TraceFormatError(path, lineno, f"invalid JSON: {exc}") from exc
    except RecursionError:
        raise TraceFormatError(path, lineno, "invalid JSON: nested too deeply") from None
    if not isinstance(obj, dict):
        raise TraceFormatError(path, lineno, "a row must be a JSON object")
    return obj


def _number(path: Path, lineno: int, name: str, value: Any, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceFormatError(path, lineno, f"{name} must be a number, got {value!r}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer too large for a float (JSON allows 4300 digits)
        finite = False
    if not finite or value < minimum:
        raise TraceFormatError(path, lineno, f"{name} must be finite and >= {minimum:g}")
    return value


def _count(path: Path, lineno: int, name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceFormatError(path, lineno, f"{name} must be an integer, got {value!r:.60}")
    if value < minimum:
        raise TraceFormatError(path, lineno, f"{name} must be >= {minimum}, got {value}")
    return value


def _length(path: Path, lineno: int, name: str, value: Any, minimum: int = 0) -> int:
    """A request's token count: an integer from ``minimum`` to ``MAX_REQUEST_TOKENS``."""
    count = _count(path, lineno, name, value, minimum)
    if count > MAX_REQUEST_TOKENS:
        raise TraceFormatError(
            path,
            lineno,
            f"{name} = {count} is implausible (above MAX_REQUEST_TOKENS = {MAX_REQUEST_TOKENS})",
        )
    return count


def _hashes(path: Path, lineno: int, name: str, value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in value
    ):
        raise TraceFormatError(path, lineno, f"{name} must be a list of integers")
    return tuple(value)


def _read_mooncake(path: Path) -> Iterator[_Row]:
    for lineno, line in _lines(path):
        text = line.strip()
        if not text:
            continue
        obj = _parse_json(path, lineno, text)
        if _dynamo_event(obj) is not None:
            raise TraceFormatError(path, lineno, f"{DYNAMO_SCHEMA} row in a Mooncake trace")
        for key in ("timestamp", "input_length", "output_length"):
            if key not in obj:
                raise TraceFormatError(path, lineno, f"missing field {key!r}")
        ts = _number(path, lineno, "timestamp", obj["timestamp"])
        request = TraceRequest(
            arrival_s=0.0,
            isl=_length(path, lineno, "input_length", obj["input_length"], 1),
            osl=_length(path, lineno, "output_length", obj["output_length"]),
            hash_ids=_hashes(path, lineno, "hash_ids", obj.get("hash_ids")),
            block_size=MOONCAKE_BLOCK_SIZE if obj.get("hash_ids") else None,
        )
        yield _Row(ts, request)  # ms (_PER_SECOND)


def _dynamo_event(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The Dynamo event inside a row (bare or wrapped under ``event``), or None."""
    if obj.get("schema") == DYNAMO_SCHEMA:
        return obj
    inner = obj.get("event")
    if isinstance(inner, dict) and inner.get("schema") == DYNAMO_SCHEMA:
        return inner
    return None


def _request_end(path: Path, lineno: int, text: str) -> dict[str, Any] | None:
    """The ``request_end`` event of one Dynamo trace line, or ``None`` for its other events (tool
    calls); raises :class:`TraceFormatError` for a line that is no Dynamo event."""
    event = _dynamo_event(_parse_json(path, lineno, text))
    if event is None:
        raise TraceFormatError(path, lineno, f"not a {DYNAMO_SCHEMA} event")
    kind = event.get("event_type")
    if not isinstance(kind, str):
        raise TraceFormatError(path, lineno, f"event_type must be a string, got {kind!r}")
    return event if kind == "request_end" else None


def dynamo_request_event(
    data: str | bytes, deployment: str, source: str = "stream", position: int = 0
) -> RequestEvent | None:
    """One message of a ``dynamo.request.trace.v1`` stream as a planner request event.

    A ``request_end`` event (bare or wrapped under ``event``) becomes a
    :class:`schemas.RequestEvent` of ``deployment`` at its ``event_time_unix_ms`` — when the
    request finished, which is when its record exists: timed by arrival, a long request would
    come behind the planner's watermark. ISL and OSL are read as in a trace file,
    ``request.kv_hit_rate`` when present. The schema's other events (tool calls) are ``None``:
    they describe no request. A malformed message raises :class:`TraceFormatError` naming
    ``source`` and ``position`` (and a ``pydantic.ValidationError`` for an impossible time).

    >>> line = ('{"schema": "dynamo.request.trace.v1", "event_type": "request_end", '
    ...         '"event_time_unix_ms": 1779163050197, "request": {"input_tokens": 15, '
    ...         '"output_tokens": 3, "request_received_ms": 1779163048815, "kv_hit_rate": 0.5}}')
    >>> event = dynamo_request_event(line, "qwen")
    >>> event.time, event.payload.isl, event.payload.osl, event.payload.kv_hit_rate
    (1779163050.197, 15, 3, 0.5)
    >>> dynamo_request_event(line.replace("request_end", "tool_start"), "qwen") is None
    True
    """
    try:
        text = data.decode() if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise TraceFormatError(source, position, f"not UTF-8: {exc.reason}") from None
    event = _request_end(Path(source), position, text)
    if event is None:
        return None
    row = _dynamo_row(Path(source), position, event)
    if event.get("event_time_unix_ms") is None:
        raise TraceFormatError(source, position, "missing event_time_unix_ms")
    end_ms = _number(Path(source), position, "event_time_unix_ms", event["event_time_unix_ms"])
    hit = event["request"].get("kv_hit_rate")
    if hit is not None:
        hit = _number(Path(source), position, "request.kv_hit_rate", hit)
    request = row.request
    record = RequestRecord(
        request_id=request.request_id, isl=request.isl, osl=request.osl, kv_hit_rate=hit
    )
    return RequestEvent(deployment=deployment, time=end_ms / 1000.0, payload=record)


def _read_dynamo(path: Path) -> Iterator[_Row]:
    seen: set[str] = set()
    for lineno, line in _lines(path):
        text = line.strip()
        if not text:
            continue
        event = _request_end(path, lineno, text)
        if event is None:
            continue
        row = _dynamo_row(path, lineno, event)
        request_id = row.request.request_id
        if request_id is not None:
            if request_id in seen:
                continue
            seen.add(request_id)
        yield row


def _dynamo_row(path: Path, lineno: int, event: dict[str, Any]) -> _Row:
    """The request of one ``request_end`` event."""
    request = event.get("request")
    if not isinstance(request, dict):
        raise TraceFormatError(path, lineno, "request_end without a 'request' object")
    request_id = request.get("request_id")
    if request_id is not None and not isinstance(request_id, str):
        raise TraceFormatError(path, lineno, "request.request_id must be a string")
    if request_id is not None and len(request_id) > MAX_REQUEST_ID:
        raise TraceFormatError(
            path, lineno, f"request.request_id is longer than MAX_REQUEST_ID = {MAX_REQUEST_ID}"
        )
    request_id = request_id or None  # an empty id is a field left unset, not an id
    replay = request.get("replay")
    if replay is not None and not isinstance(replay, dict):
        raise TraceFormatError(path, lineno, "request.replay must be an object")
    replay = replay or {}
    if request.get("request_received_ms") is not None:
        arrival_ms = _number(
            path, lineno, "request.request_received_ms", request["request_received_ms"]
        )
    elif "event_time_unix_ms" in event and request.get("total_time_ms") is not None:
        end = _number(path, lineno, "event_time_unix_ms", event["event_time_unix_ms"])
        total = _number(path, lineno, "request.total_time_ms", request["total_time_ms"])
        arrival_ms = end - total
    else:
        raise TraceFormatError(
            path,
            lineno,
            "no arrival time: need request.request_received_ms, or "
            "event_time_unix_ms and request.total_time_ms",
        )
    if replay.get("input_length") is not None:
        isl = _length(path, lineno, "request.replay.input_length", replay["input_length"], 1)
    elif request.get("input_tokens") is not None:
        isl = _length(path, lineno, "request.input_tokens", request["input_tokens"], 1)
    else:
        raise TraceFormatError(
            path, lineno, "no input length (replay.input_length or request.input_tokens)"
        )
    if request.get("output_tokens") is None:
        raise TraceFormatError(path, lineno, "missing request.output_tokens")
    osl = _length(path, lineno, "request.output_tokens", request["output_tokens"])
    hashes = _hashes(
        path,
        lineno,
        "request.replay.input_sequence_hashes",
        replay.get("input_sequence_hashes"),
    )
    block = replay.get("trace_block_size")
    block_size = _count(path, lineno, "replay.trace_block_size", block, 1) if block else None
    request = TraceRequest(
        arrival_s=0.0,
        isl=isl,
        osl=osl,
        hash_ids=hashes,
        request_id=request_id,
        block_size=block_size,
    )
    return _Row(arrival_ms, request)  # ms (_PER_SECOND)


_UTC_OFFSET = re.compile(r"(Z|[+-][0-9]{2}(:?[0-9]{2})?)$")


def _azure_seconds(path: Path, lineno: int, stamp: str) -> tuple[int, int, int]:
    """(whole seconds since the epoch, fraction numerator, fraction digits) — exact. A stamp
    without a UTC offset is UTC (the Azure traces carry none); one with an offset is read
    with it.

    >>> _azure_seconds(Path("t.csv"), 2, "2023-11-16 18:15:46.25+05:00")
    (1700140546, 25, 2)
    >>> _azure_seconds(Path("t.csv"), 2, "2023-11-16 13:15:46.25")
    (1700140546, 25, 2)
    """
    text = stamp.strip()
    offset = _UTC_OFFSET.search(text) if " " in text or "T" in text else None
    main, _, frac = text[: offset.start() if offset else None].partition(".")
    try:
        when = datetime.fromisoformat(main + (offset.group() if offset else ""))
    except ValueError as exc:
        raise TraceFormatError(path, lineno, f"bad TIMESTAMP {stamp!r}") from exc
    when = when.replace(tzinfo=UTC) if when.tzinfo is None else when
    if frac and not (frac.isascii() and frac.isdigit() and len(frac) <= 18):
        raise TraceFormatError(path, lineno, f"bad TIMESTAMP {stamp[:60]!r}")
    return int(when.timestamp()), int(frac or 0), len(frac)


def _read_azure(path: Path) -> Iterator[_Row]:
    stamps: list[tuple[int, int, int]] = []
    rows: list[_Row] = []
    reader = csv.reader(text for _, text in _lines(path))
    header: list[str] | None = None
    lineno = 0
    try:
        for record in reader:
            lineno = reader.line_num
            if not record or all(not c.strip() for c in record):
                continue
            if header is None:
                header = [c.strip().lstrip("\ufeff") for c in record]
                missing = [c for c in _AZURE_COLUMNS if c not in header]
                if missing:
                    raise TraceFormatError(path, lineno, f"missing columns {missing}")
                idx = [header.index(c) for c in _AZURE_COLUMNS]
                continue
            if len(record) != len(header):
                raise TraceFormatError(
                    path, lineno, f"expected {len(header)} fields, got {len(record)}"
                )
            stamp, ctx, gen = (record[i] for i in idx)
            stamps.append(_azure_seconds(path, lineno, stamp))
            isl = _length(path, lineno, "ContextTokens", _int_text(ctx), 1)
            osl = _length(path, lineno, "GeneratedTokens", _int_text(gen))
            rows.append(_Row(0.0, TraceRequest(arrival_s=0.0, isl=isl, osl=osl)))
    except csv.Error as exc:
        raise TraceFormatError(path, lineno + 1, f"unreadable CSV: {exc}") from exc
    if header is None:
        raise TraceFormatError(path, None, "empty trace file")
    if stamps:
        base = min(s[0] for s in stamps)
        for row, (whole, num, digits) in zip(rows, stamps, strict=True):
            row.arrival = (whole - base) + (num / 10**digits if digits else 0.0)
            row.base = base
    yield from rows


def _int_text(text: str) -> int | str:
    try:
        return int(text.strip())
    except ValueError:
        return text
