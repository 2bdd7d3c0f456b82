"""Plain sinks: JSON lines to a file, rendered lines to stdout/stderr."""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TextIO

from bytewax.connectors.files import FileSink
from bytewax.outputs import (
    DynamicSink,
    FixedPartitionedSink,
    StatefulSinkPartition,
    StatelessSinkPartition,
)
from pydantic import BaseModel


class _JsonlPartition(StatefulSinkPartition[BaseModel, int]):
    def __init__(self, inner: StatefulSinkPartition[str, int]) -> None:
        self._inner = inner

    def write_batch(self, values: list[BaseModel]) -> None:
        self._inner.write_batch([value.model_dump_json() for value in values])

    def snapshot(self) -> int:
        return self._inner.snapshot()

    def close(self) -> None:
        self._inner.close()


class _StreamPartition(StatefulSinkPartition[str, int]):
    """Lines appended to a stream that cannot seek (a character device, a FIFO, a pipe):
    flushed every batch, never truncated nor fsynced; nothing to resume (snapshot 0)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write_batch(self, values: list[str]) -> None:
        for value in values:
            self._stream.write(value)
            self._stream.write("\n")
        self._stream.flush()

    def snapshot(self) -> int:
        return 0

    def close(self) -> None:
        self._stream.close()


def is_stream(path: Path) -> bool:
    """Whether ``path`` exists and is neither a regular file nor a directory: a character
    device (``/dev/null``, a terminal), a FIFO, a pipe (``/dev/stdout | cat``) or a socket.

    >>> is_stream(Path("/dev/null")), is_stream(Path(__file__)), is_stream(Path("/nonexistent"))
    (True, False, False)
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def open_stream(path: Path) -> TextIO:
    """``path`` (see :func:`is_stream`) opened to append lines, without waiting for a reader:
    a FIFO that no process reads is refused (``ENXIO``, one line before the run starts: start
    its reader first) instead of hanging the run; once open, writes block as any pipe's do."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
    except OSError as error:
        if error.errno == errno.ENXIO and stat.S_ISFIFO(path.stat().st_mode):
            raise OSError(errno.ENXIO, "no process reads this FIFO", str(path)) from None
        raise
    os.set_blocking(fd, True)
    return open(fd, "w", encoding="utf-8")


class JsonlFileSink(FixedPartitionedSink[BaseModel, int]):
    """Write pydantic records to one file as JSON lines (emptied when the sink is made, or,
    ``resumable``, when its partition starts without a resume state).

    Like every fixed-partitioned sink it takes ``(key, record)`` pairs; one worker writes.
    A regular file (or a new one) is written by bytewax's ``FileSink``: every batch fsynced.
    For a flow run with bytewax recovery, make it ``resumable``: the file is then emptied when
    its partition starts without a resume state (the first record of a fresh run; one that
    writes nothing leaves the file as it was), and a run resumed from a snapshot keeps what
    was written up to the snapshot and truncates what came after it (emptied when made, the
    file would begin with the snapshot's offset of NUL bytes, the earlier lines lost). A path
    that is not a regular file — ``/dev/null``, ``/dev/stdout`` piped, a FIFO — cannot seek,
    truncate or fsync, so it is opened now (:func:`open_stream`) and each batch is appended and
    flushed.

    >>> import tempfile, os
    >>> from bytewax.dataflow import Dataflow
    >>> import bytewax.operators as op
    >>> from bytewax.testing import TestingSource, run_main
    >>> from schemas import ClockEvent
    >>> path = os.path.join(tempfile.mkdtemp(), "out.jsonl")
    >>> flow = Dataflow("doc")
    >>> src = op.input("in", flow, TestingSource([("d", ClockEvent(deployment="d", time=1))]))
    >>> op.output("out", src, JsonlFileSink(path))
    >>> run_main(flow); open(path).read().strip()
    '{"deployment":"d","time":1.0,"type":"clock","payload":{}}'
    """

    def __init__(self, path: str | Path, *, resumable: bool = False) -> None:
        """Creates the file (and missing parent directories) now, so a path that cannot be
        written is an :class:`OSError` before the dataflow starts; empty, unless
        ``resumable``: a file holds one run's records, even a run that writes none."""
        path = Path(path)
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        self._stream = open_stream(path) if is_stream(path) else None
        if self._stream is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.open("a" if resumable else "w").close()
        self._path = path
        self._resumable = resumable
        self._lines = FileSink(path)

    def list_parts(self) -> list[str]:
        return self._lines.list_parts()

    def part_fn(self, item_key: str) -> int:
        return self._lines.part_fn(item_key)

    def build_part(self, step_id: str, for_part: str, resume_state: int | None) -> _JsonlPartition:
        if self._stream is not None:
            return _JsonlPartition(_StreamPartition(self._stream))
        if self._resumable and resume_state is None:
            self._path.write_text("")
        return _JsonlPartition(self._lines.build_part(step_id, for_part, resume_state))


class _LinePartition(StatelessSinkPartition[Any]):
    def __init__(self, render: Callable[[Any], str], stream: Literal["stdout", "stderr"]):
        self._render = render
        self._stream = stream

    def write_batch(self, items: list[Any]) -> None:
        out = sys.stdout if self._stream == "stdout" else sys.stderr
        for item in items:
            out.write(self._render(item))
            out.write("\n")
        out.flush()


class LineSink(DynamicSink[Any]):
    """Render each item as one line on stdout or stderr.

    >>> from bytewax.dataflow import Dataflow
    >>> import bytewax.operators as op
    >>> from bytewax.testing import TestingSource, run_main
    >>> flow = Dataflow("doc")
    >>> op.output("out", op.input("in", flow, TestingSource([1, 2])), LineSink(lambda x: f"n={x}"))
    >>> run_main(flow)
    n=1
    n=2
    """

    def __init__(
        self,
        render: Callable[[Any], str] = str,
        stream: Literal["stdout", "stderr"] = "stdout",
    ) -> None:
        self.render = render
        self.stream = stream

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _LinePartition:
        return _LinePartition(self.render, self.stream)
