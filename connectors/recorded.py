"""Recorded event streams: JSONL files (optionally gzipped), one event envelope per line.

Reading is a bytewax source with a single partition. Lines are handed to the flow undecoded,
as bytes (``schemas.RawEvent``), so that a malformed line — bad JSON, invalid UTF-8 — becomes a
dead letter that names the file and line number, never a crash. A UTF-8 byte order mark at the
start of a file (some editors write one) is not part of its first line. A ``.gz`` file that is cut
short or corrupt ends in one ``schemas.DeadLetter`` naming the file and the line where the
stream breaks; the lines before it are used. (Writing: ``connectors.console.JsonlFileSink``.)

Several files (e.g. one per engine, or per recorder) are read as ONE time-ordered stream: each
recording is ordered by event time, and the files are merged on ``(time, file index, line
number)``, where the time is the line's merge key (:class:`connectors.merge_keys.MergeKeys`):
the event time of the line. A line that is not a valid event keeps the key of the line before
it in its file, even when it has a ``"time"`` field (a producer writing milliseconds, a line cut
short); so does a valid event the flow's admission refuses (its deployment or role is not
configured: given as ``refusal``), which never moves the event time read alone either; and so
does a valid one stamped more than a minute past that key unless the next line
with a time confirms the jump (a stray timestamp): it stays with its neighbours and admission
or the event-time step dead-letters it there, instead of holding the rest of its file back
behind the other files. Merging matters because the planner's watermark follows the newest
event time seen: files read side by side in chunks would let one file's chunk push the
watermark past the other file's events, which would then be dropped as late (and depend on how
the runtime interleaves the reads).

The resume state is the number of lines consumed from each file (by path), so a recovered run
continues where it stopped, with the same merge order.

A recording is a backlog (:data:`connectors.backlog.BACKLOG`) until its end: joined with live
inputs, the run's clock keeps to its data while it is read, however slowly the host reads it.
"""

from __future__ import annotations

import codecs
import functools
import gzip
import heapq
import io
import itertools
import zlib
from collections.abc import Callable, Generator, Sequence
from contextlib import closing
from pathlib import Path

from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition

from connectors.backlog import BACKLOG
from connectors.merge_keys import MergeKeys
from connectors.pipeline_metrics import EVENTS_IN
from connectors.stopping import inputs_ended
from schemas import DeadLetter, Event, RawEvent, parse_event

BATCH_LINES = 1000
"""Lines per source batch (bytewax throughput collapses with tiny batches)."""

PARTITION = "recorded"
"""The source's one partition: all files are merged into one ordered stream."""

ResumeState = dict[str, int]
"""Lines consumed per file path."""

MergeKey = tuple[float, int, int]
"""``(event time, file index, line number)``: the merge order of several recordings."""

Refusal = Callable[[Event], str | None]
"""Why admission refuses a decoded event, ``None`` if it admits it
(:meth:`operators.admission.Admission.refusal`)."""

LineTime = Callable[[bytes], float | None]
"""A line's merge time (:func:`line_time`, with the source's refusal)."""

_UNREADABLE = (EOFError, zlib.error, gzip.BadGzipFile)
"""What reading a cut or corrupt ``.gz`` file raises."""


def open_recording(path: Path) -> io.BufferedIOBase:
    """Open a recording for reading bytes, transparently gunzipping ``*.gz``."""
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def line_time(line: str | bytes, refusal: Refusal | None = None) -> float | None:
    """The event time of a valid event line that ``refusal`` (if given) has no reason to
    refuse, else ``None`` (it keeps the key before it).

    >>> line_time(b'{"type": "clock", "deployment": "d", "time": 12.5}')
    12.5
    >>> line_time(b'{"type": "clock", "deployment": "d", "time": 1.7e12}') is None  # ms, not s
    True
    >>> line_time(b'{"type": "clock", "time": "soon"}'), line_time(b"{oops")
    (None, None)
    >>> line_time(b'{"type": "clock", "deployment": "x", "time": 3}', lambda e: "unknown") is None
    True
    """
    try:
        event = parse_event(line)
    except Exception:  # any reason the line is not an event: admission names it
        return None
    return event.time if refusal is None or refusal(event) is None else None


def unreadable(source: str, position: int, exc: Exception) -> DeadLetter:
    """The dead letter that ends a file whose compressed stream breaks at ``position``.

    >>> unreadable("a.jsonl.gz", 7, EOFError("ended early")).reason
    'truncated input: a.jsonl.gz is cut at line 7 (ended early); nothing after it is read'
    """
    if isinstance(exc, EOFError):
        what = f"truncated input: {source} is cut at line {position}"
    else:
        what = f"corrupt input: {source} is unreadable from line {position}"
    return DeadLetter(
        source=source, position=position, reason=f"{what} ({exc}); nothing after it is read"
    )


def _read_file(
    path: Path, index: int, skip: int, timed: LineTime | None
) -> Generator[tuple[MergeKey, RawEvent | DeadLetter], None, None]:
    """The non-blank lines of one file after line ``skip``, with their merge keys (those of the
    lines before ``skip`` are computed too: a key depends on the lines before it)."""
    keys: MergeKeys[tuple[int, RawEvent | DeadLetter]] = MergeKeys()

    def keyed() -> Generator[tuple[float, tuple[int, RawEvent | DeadLetter]], None, None]:
        with closing(_read_lines(path, timed)) as lines:
            for time, line_no, item in lines:
                yield from keys.add(time, (line_no, item))
        yield from keys.end()

    for key, (position, ready) in keyed():
        if position > skip:  # else it was emitted before the run was resumed
            yield (key, index, position), ready


def _read_lines(
    path: Path, timed: LineTime | None
) -> Generator[tuple[float | None, int, RawEvent | DeadLetter], None, None]:
    """The non-blank lines of one file: event time (by ``timed``, if given), line number and
    the line."""
    source, line_no = str(path), 0
    with open_recording(path) as file:
        while True:
            try:
                line = file.readline()
            except _UNREADABLE as exc:
                line_no += 1
                yield None, line_no, unreadable(source, line_no, exc)
                return
            if not line:
                return
            line_no += 1
            if line_no == 1 and line.startswith(codecs.BOM_UTF8):
                line = line[len(codecs.BOM_UTF8) :]  # an editor's byte order mark, not data
            if not line.strip():
                continue
            yield (timed(line) if timed else None), line_no, RawEvent(source, line_no, line)


class _RecordedPartition(StatefulSourcePartition[RawEvent | DeadLetter, ResumeState]):
    def __init__(
        self, paths: list[Path], resume_state: ResumeState | None, refusal: Refusal | None
    ) -> None:
        self._paths = [str(p) for p in paths]
        self._consumed = {p: (resume_state or {}).get(p, 0) for p in self._paths}
        timed: LineTime | None = None  # one file needs no merge, so no parsing here
        if len(paths) > 1:
            timed = functools.partial(line_time, refusal=refusal)
        self._files = [_read_file(p, i, self._consumed[str(p)], timed) for i, p in enumerate(paths)]
        self._merged = heapq.merge(*self._files, key=lambda keyed: keyed[0])
        BACKLOG.behind(self)

    def next_batch(self) -> list[RawEvent | DeadLetter]:
        if inputs_ended():
            raise StopIteration
        batch = list(itertools.islice(self._merged, BATCH_LINES))
        if not batch:
            BACKLOG.caught_up(self)  # the flow has had every line
            raise StopIteration
        for (_time, index, line_no), _item in batch:
            self._consumed[self._paths[index]] = line_no
        EVENTS_IN.labels(source="recorded").inc(len(batch))
        return [item for _key, item in batch]

    def snapshot(self) -> ResumeState:
        return dict(self._consumed)

    def close(self) -> None:
        BACKLOG.forget(self)
        for file in self._files:
            file.close()


class RecordedSource(FixedPartitionedSource[RawEvent | DeadLetter, ResumeState]):
    """Replay recorded JSONL(.gz) event files as one stream, merged on event time.

    ``refusal`` is the flow's admission (:meth:`operators.admission.Admission.refusal`): an
    event it refuses is merged at the key before it, not at its own time.

    >>> import tempfile, os
    >>> from bytewax.testing import run_main
    >>> from bytewax.dataflow import Dataflow
    >>> import bytewax.operators as op
    >>> from bytewax.testing import TestingSink
    >>> d = tempfile.mkdtemp(); a, b = os.path.join(d, "a.jsonl"), os.path.join(d, "b.jsonl")
    >>> def at(t): return '{"type": "clock", "deployment": "d", "time": %d}\\n' % t
    >>> _ = open(a, "w").write(at(1) + "\\n" + at(3))
    >>> _ = open(b, "w").write(at(2))
    >>> out = []; flow = Dataflow("doc")
    >>> op.output("out", op.input("in", flow, RecordedSource([a, b])), TestingSink(out))
    >>> run_main(flow); [(os.path.basename(e.source), e.position) for e in out]
    [('a.jsonl', 1), ('b.jsonl', 1), ('a.jsonl', 3)]
    >>> out[0].data
    b'{"type": "clock", "deployment": "d", "time": 1}\\n'
    """

    def __init__(self, paths: Sequence[str | Path], refusal: Refusal | None = None) -> None:
        self.paths = [Path(p) for p in paths]
        self.refusal = refusal
        if not self.paths:
            raise ValueError("no recorded streams given")
        folders = [str(p) for p in self.paths if p.is_dir()]
        if folders:
            raise IsADirectoryError(f"a recorded stream is a file, not a directory: {folders[0]}")
        missing = [str(p) for p in self.paths if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"recorded stream not found: {', '.join(missing)}")
        seen: dict[tuple[int, int], Path] = {}
        for path in self.paths:  # the same file, however its path is spelled
            stat = path.stat()
            first = seen.setdefault((stat.st_dev, stat.st_ino), path)
            if first is not path:
                raise ValueError(f"a recorded stream is given twice: {first} and {path}")

    def list_parts(self) -> list[str]:
        return [PARTITION]

    def merge_time(self, item: RawEvent | DeadLetter) -> float | None:
        """The event time to merge a line on with other inputs
        (:class:`connectors.merged.MergedSource`): its :func:`line_time`."""
        return line_time(item.data, self.refusal) if isinstance(item, RawEvent) else None

    def build_part(
        self, step_id: str, for_part: str, resume_state: ResumeState | None
    ) -> _RecordedPartition:
        return _RecordedPartition(self.paths, resume_state, self.refusal)
