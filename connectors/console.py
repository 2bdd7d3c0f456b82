"""Plain sinks: JSON lines to a file, rendered lines to stdout/stderr."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

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


class JsonlFileSink(FixedPartitionedSink[BaseModel, int]):
    """Write pydantic records to one file as JSON lines (emptied when the sink is made).

    Like every fixed-partitioned sink it takes ``(key, record)`` pairs; one worker writes.

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

    def __init__(self, path: str | Path) -> None:
        """Creates the file empty (and missing parent directories) now: a file holds one run's
        records, even a run that writes none, and a path that cannot be written is an
        :class:`OSError` before the dataflow starts."""
        path = Path(path)
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
        self._lines = FileSink(path)

    def list_parts(self) -> list[str]:
        return self._lines.list_parts()

    def part_fn(self, item_key: str) -> int:
        return self._lines.part_fn(item_key)

    def build_part(self, step_id: str, for_part: str, resume_state: int | None) -> _JsonlPartition:
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
