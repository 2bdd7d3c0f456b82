"""A scripted HTTP server for the faults the test API server cannot produce: a 200 whose body
is not a Kubernetes object (an ingress's HTML error page, a JSON list, an object without
``metadata.resourceVersion``), and a server that accepts a request and never answers.

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
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HANG = None


@dataclass(frozen=True)
class Reply:
    """One scripted HTTP response."""

    status: int
    body: bytes
    content_type: str = "application/json"

    @classmethod
    def json(cls, body: Any, status: int = 200) -> Reply:
        """A JSON reply."""
        return cls(status, json.dumps(body).encode())


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
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    do_GET = do_PATCH = _serve

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request stderr log."""
