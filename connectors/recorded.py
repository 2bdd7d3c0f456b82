"""Recorded event streams: JSONL files (optionally gzipped), one event envelope per line.

Reading is a bytewax source with one partition per file; its resume state is the number of
lines consumed, so a recovered run continues where it stopped. Lines are handed to the flow
undecoded (``schemas.RawEvent``) so that a malformed line becomes a dead letter that names the
file and line number, never a crash. (Writing: ``connectors.console.JsonlFileSink``.)
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Sequence
from pathlib import Path

from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition

from connectors.pipeline_metrics import EVENTS_IN
from schemas import RawEvent

BATCH_LINES = 1000
"""Lines per source batch (bytewax throughput collapses with tiny batches)."""


def open_text(path: Path) -> io.TextIOBase:
    """Open a text file, transparently gunzipping ``*.gz``."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


class _RecordedPartition(StatefulSourcePartition[RawEvent, int]):
    def __init__(self, path: Path, resume_state: int | None) -> None:
        self._path = path
        self._source = str(path)
        self._file = open_text(path)
        self._line = 0
        for _ in range(resume_state or 0):
            self._file.readline()
            self._line += 1

    def next_batch(self) -> list[RawEvent]:
        batch = []
        for _ in range(BATCH_LINES):
            line = self._file.readline()
            if not line:
                break
            self._line += 1
            if line.strip():
                batch.append(RawEvent(self._source, self._line, line))
        if not batch and not line:
            raise StopIteration
        EVENTS_IN.labels(source="recorded").inc(len(batch))
        return batch

    def snapshot(self) -> int:
        return self._line

    def close(self) -> None:
        self._file.close()


class RecordedSource(FixedPartitionedSource[RawEvent, int]):
    """Replay recorded JSONL(.gz) event files, one partition per file.

    >>> import tempfile, os
    >>> from bytewax.testing import run_main
    >>> from bytewax.dataflow import Dataflow
    >>> import bytewax.operators as op
    >>> from bytewax.testing import TestingSink
    >>> d = tempfile.mkdtemp(); p = os.path.join(d, "s.jsonl")
    >>> _ = open(p, "w").write('{"a": 1}\\n\\n{"b": 2}\\n')
    >>> out = []; flow = Dataflow("doc")
    >>> op.output("out", op.input("in", flow, RecordedSource([p])), TestingSink(out))
    >>> run_main(flow); [(e.position, e.data.strip()) for e in out]
    [(1, '{"a": 1}'), (3, '{"b": 2}')]
    """

    def __init__(self, paths: Sequence[str | Path]) -> None:
        self.paths = [Path(p) for p in paths]
        missing = [str(p) for p in self.paths if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"recorded stream not found: {', '.join(missing)}")

    def list_parts(self) -> list[str]:
        return [str(p) for p in self.paths]

    def build_part(
        self, step_id: str, for_part: str, resume_state: int | None
    ) -> _RecordedPartition:
        return _RecordedPartition(Path(for_part), resume_state)
