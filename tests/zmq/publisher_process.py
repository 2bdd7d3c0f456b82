"""Engine publishers in a separate process, driven step by step by a test.

The child process binds one :class:`connectors.zmq_publisher.FpmPublisher` per URL (``tcp://``
URLs with port ``*``: a free port picked as it binds, so no other process can take it between a
test's pick and the bind), sends the bound URLs back (:attr:`PublisherProcess.urls` once
started), waits until each has a subscriber (so nothing is lost to ZMQ's slow-joiner window),
then runs a script of steps. Two pieces of shared memory make a live test deterministic:

* ``clock`` — the time the source under test reads as "now" (its event time); the script sets it.
* ``seen`` — how many messages the test's flow has taken in; ``("await_seen", n)`` waits for it,
  so the script can advance the clock only after the source has consumed what came before.

Steps (``i`` = publisher index):
``("clock", t)``, ``("fpm", i, fields)``, ``("payload", i, bytes)``, ``("frames", i, [bytes])``,
``("skip", i, n)``, ``("reset_seq", i)``, ``("await_seen", n)``.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from collections.abc import Sequence
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from typing import Any

import zmq

SUBSCRIBER_TIMEOUT_S = 30.0
START_TIMEOUT_S = 120.0
"""For the spawned process to start (it imports afresh) and bind, even on a loaded machine."""
AWAIT_TIMEOUT_S = 60.0

Step = tuple[Any, ...]


def _run(
    urls: Sequence[str],
    steps: Sequence[Step],
    clock: Synchronized,
    seen: Synchronized,
    bound: Queue,
) -> None:
    from connectors.zmq_publisher import FpmPublisher
    from schemas import ForwardPassMetrics

    context = zmq.Context()
    publishers = [FpmPublisher(url, context=context) for url in urls]
    bound.put([publisher.url for publisher in publishers])
    try:
        for publisher in publishers:
            if not publisher.wait_for_subscribers(1, SUBSCRIBER_TIMEOUT_S):
                raise SystemExit(f"no subscriber on {publisher.url}")
        for step in steps:
            kind = step[0]
            if kind == "clock":
                clock.value = step[1]
            elif kind == "fpm":
                publishers[step[1]].publish(ForwardPassMetrics.model_validate(step[2]))
            elif kind == "payload":
                publishers[step[1]].publish_payload(step[2])
            elif kind == "frames":
                publishers[step[1]].publish_frames(step[2])
            elif kind == "skip":
                publishers[step[1]].skip(step[2])
            elif kind == "reset_seq":
                publishers[step[1]].seq = 0
            elif kind == "await_seen":
                deadline = time.monotonic() + AWAIT_TIMEOUT_S
                while seen.value < step[1]:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"flow saw {seen.value} messages, expected {step[1]}")
                    time.sleep(0.002)
            else:
                raise SystemExit(f"unknown step {step!r}")
        time.sleep(0.2)  # let the last messages leave before the sockets close
    finally:
        for publisher in publishers:
            publisher.close()
        context.term()


class PublisherProcess:
    """Start the scripted publishers (spawned, so no ZMQ state crosses a fork).

    ``clock`` starts at ``start_time``; read it with :meth:`now` (pass that as the source clock).
    :attr:`urls` holds the bound URLs once :meth:`start` returns (subscribe to those).
    """

    def __init__(self, urls: Sequence[str], steps: Sequence[Step], start_time: float = 1000.0):
        ctx = mp.get_context("spawn")
        self.clock = ctx.Value("d", start_time)
        self.seen = ctx.Value("q", 0)
        self._bound = ctx.Queue()
        self.urls: list[str] = []
        self.process = ctx.Process(
            target=_run,
            args=(list(urls), list(steps), self.clock, self.seen, self._bound),
            daemon=True,
        )

    def now(self) -> float:
        return self.clock.value

    def count(self, n: int) -> None:
        """Record that the flow took in ``n`` more messages."""
        with self.seen.get_lock():
            self.seen.value += n

    def start(self) -> PublisherProcess:
        """Start the process and wait until its publishers are bound (see :attr:`urls`)."""
        self.process.start()
        try:
            self.urls = self._bound.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            self.join(0)
            raise AssertionError(
                f"publisher process did not bind within {START_TIMEOUT_S:g} s "
                f"(exit code {self.process.exitcode})"
            ) from None
        return self

    def join(self, timeout: float = 30.0) -> int | None:
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        return self.process.exitcode
