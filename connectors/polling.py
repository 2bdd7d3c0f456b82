"""What the pollers of the dataflow's inputs share: a one-thread daemon executor for the reads,
and how long a polling partition may sleep.

A partition that reads on a background thread hands a finished read over in ``next_batch``; it
looks every :data:`PENDING_CHECK` whether the read in flight is done, and otherwise sleeps at
most :data:`MAX_SLEEP` (bytewax starts a new epoch only once every partition answers, so a
partition asleep until a poll minutes away would stall every other input).

>>> MAX_SLEEP > PENDING_CHECK
True
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from datetime import timedelta
from typing import Any, TypeVar

__all__ = ["MAX_SLEEP", "PENDING_CHECK", "DaemonExecutor"]

MAX_SLEEP = timedelta(seconds=1)
"""Longest a poller partition sleeps between checks (well under bytewax's 10 s epoch)."""
PENDING_CHECK = timedelta(milliseconds=20)
"""How often a poller partition looks whether a read in flight has finished."""
T = TypeVar("T")


class DaemonExecutor:
    """Runs submitted jobs one at a time, in order, on one daemon thread.

    Like a one-thread :class:`concurrent.futures.ThreadPoolExecutor`, except that its thread
    never holds up the process's exit (a request hung on a remote service must not delay a stop).

    >>> executor = DaemonExecutor("doc")
    >>> executor.submit(lambda: 6 * 7).result()
    42
    >>> executor.shutdown(wait=True)
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None]
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        self._jobs.put((job, future))
        return future

    def _run(self) -> None:
        while (entry := self._jobs.get()) is not None:
            job, future = entry
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while queued
            try:
                future.set_result(job())
            except BaseException as err:  # handed to whoever asks the future
                future.set_exception(err)

    def shutdown(self, *, wait: bool) -> None:
        """Stop after the jobs already submitted (``wait``: until then)."""
        self._jobs.put(None)
        if wait:
            self._thread.join()
