"""A scripted HTTP server for the faults the test API server cannot produce: a 200 whose body
is not a Kubernetes object (an ingress's HTML error page, a JSON list, an object without
``metadata.resourceVersion``), a server that accepts a request and never answers, and one that
answers a byte at a time (:meth:`Reply.trickling`: each byte in time for any per-read timeout,
the whole answer taking minutes).

Each request takes the next scripted :class:`Reply`, then ``default`` once the script is used
up; a ``None`` reply (:data:`HANG`) is never answered (until :meth:`ScriptedServer.stop`).
Every request is recorded as ``(method, path)`` before it is answered.

>>> Reply.json({"kind": "Status"}).body
b'{"kind": "Status"}'
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HANG = None


@dataclass(frozen=True)
class Reply:
    """One scripted HTTP response."""

    status: int
    body: bytes
    content_type: str = "application/json"
    trickle_s: float = 0.0
    trickle_headers: bool = False

    @classmethod
    def json(cls, body: Any, status: int = 200) -> Reply:
        """A JSON reply."""
        return cls(status, json.dumps(body).encode())

    def trickling(self, pause_s: float, *, headers: bool = False) -> Reply:
        """This reply with its body (and its status line and headers, if ``headers``) sent a
        byte every ``pause_s`` seconds (until the client hangs up or the server stops).

        >>> Reply.json({}).trickling(0.2).trickle_s
        0.2
        """
        return replace(self, trickle_s=pause_s, trickle_headers=headers)


class ScriptedServer:
    """Answers requests from a script (see the module docs); a context manager."""

    def __init__(self, *replies: Reply | None, default: Reply | None = HANG) -> None:
        self._replies: deque[Reply | None] = deque(replies)
        self.default = default
        self._requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self.stopped = threading.Event()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._http.daemon_threads = True
        self._http.app = self  # type: ignore[attr-defined]

    def __enter__(self) -> ScriptedServer:
        threading.Thread(
            target=self._http.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="scripted-server",
            daemon=True,
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Release hung requests, stop serving and close the socket."""
        self.stopped.set()
        self._http.shutdown()
        self._http.server_close()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        host, port = self._http.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def requests(self) -> list[tuple[str, str]]:
        """``(method, path)`` of every request received, oldest first."""
        with self._lock:
            return list(self._requests)

    def take(self, method: str, path: str) -> Reply | None:
        """Record a request and return its reply (``None``: never answer)."""
        with self._lock:
            self._requests.append((method, path))
            return self._replies.popleft() if self._replies else self.default


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        app: ScriptedServer = self.server.app  # type: ignore[attr-defined]
        reply = app.take(self.command, self.path)
        if reply is None:
            app.stopped.wait()
            self.close_connection = True
            return
        head = (
            f"HTTP/1.1 {reply.status} {self.responses.get(reply.status, ('',))[0]}\r\n"
            f"Content-Type: {reply.content_type}\r\n"
            f"Content-Length: {len(reply.body)}\r\n\r\n"
        ).encode()
        if not reply.trickle_s:
            self.wfile.write(head + reply.body)
        elif reply.trickle_headers:
            self._trickle(app, head + reply.body, reply.trickle_s)
        else:
            self.wfile.write(head)
            self._trickle(app, reply.body, reply.trickle_s)

    def _trickle(self, app: ScriptedServer, data: bytes, pause_s: float) -> None:
        """Send ``data`` a byte at a time; stop when the client hangs up or the server stops."""
        self.close_connection = True
        for i in range(len(data)):
            try:
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
            except OSError:
                return
            if app.stopped.wait(pause_s):
                return

    do_GET = do_PATCH = _serve

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request stderr log."""
