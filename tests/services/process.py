"""Ports and process handling shared by the test services."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    >>> 0 < free_port() < 65536
    True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(
    check: Callable[[], T], what: str, timeout_s: float = 60.0, interval_s: float = 0.2
) -> T:
    """Poll ``check()`` until it returns something truthy and return that; a test synchronises
    on what it can observe (a file line, a metric, a Kafka record), never on a fixed sleep.

    Raises ``AssertionError`` naming ``what`` if ``timeout_s`` passes first.

    >>> answers = iter([0, [], "ready"])
    >>> wait_until(lambda: next(answers), "the third answer", interval_s=0)
    'ready'
    >>> wait_until(lambda: None, "nothing", timeout_s=0, interval_s=0)
    Traceback (most recent call last):
    AssertionError: timed out after 0 s waiting for nothing
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)


def pause(process: subprocess.Popen) -> None:
    """``SIGSTOP`` ``process`` and return once it is stopped: ``kill`` returns at once, and a
    broker thread running on another core may still answer a request sent right after it (on
    a loaded machine, often enough to fail a test that expects no answer).

    >>> sleeper = subprocess.Popen(["sleep", "30"])
    >>> pause(sleeper); _state(sleeper.pid)
    'T'
    >>> sleeper.kill(); _ = sleeper.wait()
    """
    process.send_signal(signal.SIGSTOP)
    wait_until(lambda: _state(process.pid) == "T", "the process to stop", 10, interval_s=0.005)


def _state(pid: int) -> str:
    """The state letter of ``pid`` in ``/proc`` (``T``: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def die_with_parent() -> None:
    """``preexec_fn`` of service processes: the kernel SIGKILLs the child when the test process
    dies, so no broker or server outlives a crashed test run."""
    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def stop(process: subprocess.Popen, grace_s: float) -> None:
    """Terminate a service process, killing it if it has not exited after ``grace_s``."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def tail(log: Path, lines: int = 20) -> str:
    """The last lines of a service's log (empty if it cannot be read), for error messages."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@contextlib.contextmanager
def service_on_free_port(
    name: str,
    launch: Callable[[int], subprocess.Popen],
    ready: Callable[[int], bool],
    log: Path,
    error: type[Exception],
    *,
    startup_timeout_s: float,
    stop_timeout_s: float,
    attempts: int = 5,
) -> Iterator[tuple[int, subprocess.Popen]]:
    """Start a service with ``launch(port)`` on a free loopback port; yield the port and the
    process once ``ready(port)``; always stop it (terminate, then kill after ``stop_timeout_s``).

    A process that exits during start-up most likely lost its port to somebody else between
    the probe and the bind: it is retried on a new port, ``attempts`` times in all. ``error``
    (with the tail of ``log``) is raised when it never becomes ready.
    """
    for _attempt in range(attempts):
        port = free_port()
        process = launch(port)
        try:
            deadline = time.monotonic() + startup_timeout_s
            while process.poll() is None and not ready(port):
                if time.monotonic() > deadline:
                    raise error(
                        f"{name} on 127.0.0.1:{port} not ready within {startup_timeout_s:g} s; "
                        f"log:\n{tail(log)}"
                    )
                time.sleep(0.05)
            if process.poll() is not None:
                continue
            yield port, process
            return
        finally:
            stop(process, stop_timeout_s)
    raise error(f"{name} exited at start-up {attempts} times; last log:\n{tail(log)}")
