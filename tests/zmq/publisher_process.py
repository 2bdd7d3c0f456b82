"""Engine publishers in a separate process, driven step by step by a test.

The child process binds one :class:`connectors.zmq_publisher.FpmPublisher` per URL, waits until
each has a subscriber (so nothing is lost to ZMQ's slow-joiner window), then runs a script of
steps. Two pieces of shared memory make a live test deterministic:

* ``clock`` — the time the source under test reads as "now" (its event time); the script sets it.
* ``seen`` — how many messages the test's flow has taken in; ``("await_seen", n)`` waits for it,
  so the script can advance the clock only after the source has consumed what came before.

Steps (``i`` = publisher index):
``("clock", t)``, ``("fpm", i, fields)``, ``("payload", i, bytes)``, ``("frames", i, [bytes])``,
``("skip", i, n)``, ``("reset_seq", i)``, ``("await_seen", n)``.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Sequence
from multiprocessing.sharedctypes import Synchronized
from typing import Any

import zmq

SUBSCRIBER_TIMEOUT_S = 30.0
AWAIT_TIMEOUT_S = 60.0

Step = tuple[Any, ...]


def _run(
    urls: Sequence[str], steps: Sequence[Step], clock: Synchronized, seen: Synchronized
) -> None:
    from connectors.zmq_publisher import FpmPublisher
    from schemas import ForwardPassMetrics

    context = zmq.Context()
    publishers = [FpmPublisher(url, context=context) for url in urls]
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
    """

    def __init__(self, urls: Sequence[str], steps: Sequence[Step], start_time: float = 1000.0):
        ctx = mp.get_context("spawn")
        self.clock = ctx.Value("d", start_time)
        self.seen = ctx.Value("q", 0)
        self.process = ctx.Process(
            target=_run, args=(list(urls), list(steps), self.clock, self.seen), daemon=True
        )

    def now(self) -> float:
        return self.clock.value

    def count(self, n: int) -> None:
        """Record that the flow took in ``n`` more messages."""
        with self.seen.get_lock():
            self.seen.value += n

    def start(self) -> PublisherProcess:
        self.process.start()
        return self

    def join(self, timeout: float = 30.0) -> int | None:
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        return self.process.exitcode
