"""HTTP requests bounded as a whole: connect, TLS handshake, headers and body together.

``urllib``'s ``timeout`` bounds each socket operation, so an endpoint that trickles its answer
a byte at a time holds a request for as long as it likes. :class:`Deadline` shuts the
request's sockets down when its time is up (which ends a read in progress at once) and
:func:`opener` builds a ``urllib`` opener whose connections it watches and which connect
within the time left.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import socket
import ssl
import threading
import time
import urllib.request
from typing import Any


class Deadline:
    """Shuts down the sockets of one request once ``seconds`` have passed (a timer thread).

    Shutting a socket down ends a read blocked on it at once, whatever its per-read timeout.
    :meth:`cancel` (the request is over) guarantees no socket is touched afterwards.

    >>> deadline = Deadline(60.0)
    >>> deadline.remaining() > 59, deadline.expired
    (True, False)
    >>> deadline.cancel()
    """

    def __init__(self, seconds: float) -> None:
        self._at = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._over = False
        self.expired = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        """Seconds left (a millisecond at least: a socket timeout of 0 means non-blocking)."""
        return max(self._at - time.monotonic(), 0.001)

    def watch(self, sock: socket.socket) -> None:
        """Shut ``sock`` down at the deadline (now, if it has passed)."""
        with self._lock:
            if self._over:
                return
            if not self.expired:
                self._sockets.append(sock)
                return
            _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            if self._over:
                return
            self.expired = True
            for sock in self._sockets:
                _shut(sock)

    def cancel(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._over = True
            self._sockets.clear()


def _shut(sock: socket.socket) -> None:
    # the plain socket's shutdown: an SSLSocket's own would drop its TLS state meanwhile;
    # OSError: already closed (or never connected)
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _WatchedConnection(http.client.HTTPConnection):
    """An HTTP connection whose sockets a :class:`Deadline` watches, connecting within the
    time left (a proxy tunnel and the TLS handshake are bounded by that socket timeout too)."""

    def __init__(self, *args: Any, deadline: Deadline, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline
        self._create_connection = self._connect_watched

    def _connect_watched(
        self,
        address: tuple[str, int],
        timeout: float | None = None,
        source_address: tuple[str, int] | None = None,
    ) -> socket.socket:
        sock = socket.create_connection(address, self._deadline.remaining(), source_address)
        self._deadline.watch(sock)
        return sock

    def connect(self) -> None:
        super().connect()
        self._deadline.watch(self.sock)  # over TLS: the wrapped socket


class _WatchedTLSConnection(_WatchedConnection, http.client.HTTPSConnection):
    pass


class _DeadlineHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_WatchedConnection, deadline=self._deadline), req)


class _DeadlineHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: Deadline, context: ssl.SSLContext) -> None:
        super().__init__(context=context)
        self._deadline = deadline
        self._tls = context

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        connection = functools.partial(_WatchedTLSConnection, deadline=self._deadline)
        return self.do_open(connection, req, context=self._tls)


def opener(deadline: Deadline, context: ssl.SSLContext) -> urllib.request.OpenerDirector:
    """A ``urllib`` opener whose HTTP and HTTPS connections ``deadline`` bounds.

    >>> deadline = Deadline(5.0)
    >>> type(opener(deadline, ssl.create_default_context())).__name__
    'OpenerDirector'
    >>> deadline.cancel()
    """
    return urllib.request.build_opener(
        _DeadlineHTTPHandler(deadline), _DeadlineHTTPSHandler(deadline, context)
    )
