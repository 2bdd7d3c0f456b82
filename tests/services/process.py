"""Ports and process handling shared by the test services."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import socket
import subprocess
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    >>> 0 < free_port() < 65536
    True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
