"""HTTP requests bounded as a whole: connect, TLS handshake, headers and body together.

``urllib``'s ``timeout`` bounds each socket operation, so an endpoint that trickles its answer
a byte at a time holds a request for as long as it likes. :class:`Deadline` shuts the
request's sockets down when its time is up (which ends a read in progress at once) and
:func:`opener` builds a ``urllib`` opener whose connections it watches and which connect
within the time left.

urllib3 (the ``kubernetes`` client's transport) has the same per-read timeout: its
``Timeout(total=...)`` is applied once, when the answer starts, to each read. :func:`watch_pools`
makes a urllib3 pool manager's connections report their sockets to the deadline of the
:func:`bounded` block the calling thread is in, which then bounds each request made inside it
as a whole (connections are pooled and reused: each request registers its connection's socket
anew). Outside such a block the connections behave as urllib3's own. As with :func:`opener`,
the name lookup and the TLS handshake are bounded only by the connect timeout (the plain socket
is handed to TLS before the handshake, and the wrapped one is watched from the request on).
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
from collections.abc import Iterator
from typing import Any

import urllib3

CLOCK_SLACK_S = 0.01
"""A request that failed this close to its deadline failed of it (timer and poll rounding)."""


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
        self._slack = min(CLOCK_SLACK_S, seconds / 10)  # a few ms' deadline is not over at once
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._over = False
        self._cut = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    @property
    def expired(self) -> bool:
        """Whether the deadline has passed: the sockets were shut down, or are about to be.

        By the clock too, not only by the timer: a socket timeout set to the time left fires
        as the deadline does, often before the timer thread has run, and that request was cut
        off by the deadline all the same.
        """
        return self._cut or time.monotonic() >= self._at - self._slack

    def remaining(self) -> float:
        """Seconds left (a millisecond at least: a socket timeout of 0 means non-blocking)."""
        return max(self._at - time.monotonic(), 0.001)

    def watch(self, sock: socket.socket) -> None:
        """Shut ``sock`` down at the deadline (now, if it has passed)."""
        with self._lock:
            if self._over:
                return
            if not self._cut:
                self._sockets.append(sock)
                return
            _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            if self._over:
                return
            self._cut = True
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


_current = threading.local()
"""The :class:`Deadline` of the :func:`bounded` block the thread is in (``deadline``)."""


@contextlib.contextmanager
def bounded(seconds: float) -> Iterator[Deadline]:
    """Bound, as a whole, the requests this thread makes in the block through pool managers
    prepared by :func:`watch_pools`: ``seconds`` after entering, their sockets are shut down.

    After a request failed, the yielded deadline's ``expired`` says whether it was cut off.

    >>> with bounded(5.0) as deadline:
    ...     deadline.expired
    False
    """
    deadline = Deadline(seconds)
    outer = getattr(_current, "deadline", None)
    _current.deadline = deadline
    try:
        yield deadline
    finally:
        _current.deadline = outer
        deadline.cancel()


def _watch_current(sock: socket.socket | None) -> None:
    deadline: Deadline | None = getattr(_current, "deadline", None)
    if deadline is not None and sock is not None:
        deadline.watch(sock)


class _WatchedUrllib3Connection:
    """Mixed into a urllib3 connection class: its sockets are watched by the thread's
    :func:`bounded` deadline, the new one at connect (the plain socket, before any TLS) and the
    one in use at each request (a reused connection; over TLS, the wrapped socket)."""

    sock: socket.socket | None

    def _new_conn(self) -> socket.socket:
        sock: socket.socket = super()._new_conn()  # type: ignore[misc]
        _watch_current(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watch_current(self.sock)
        super().request(*args, **kwargs)  # type: ignore[misc]


@functools.cache
def _watched_pool(pool: type[Any]) -> type[Any]:
    connection = pool.ConnectionCls
    if issubclass(connection, _WatchedUrllib3Connection):
        return pool
    # the names stay urllib3's: they appear in its error messages
    watched = type(connection.__name__, (_WatchedUrllib3Connection, connection), {})
    return type(pool.__name__, (pool,), {"ConnectionCls": watched})


def watch_pools(manager: urllib3.PoolManager) -> None:
    """Make the connection pools of ``manager`` watched by :func:`bounded` (whatever their
    kind: plain, TLS, through a proxy); idempotent. Pools it made before are dropped (a request
    in flight on one finishes undisturbed), so every later request goes through a watched one.

    >>> manager = urllib3.PoolManager()
    >>> watch_pools(manager); watch_pools(manager)
    >>> connection = manager.pool_classes_by_scheme["https"].ConnectionCls
    >>> issubclass(connection, _WatchedUrllib3Connection), connection.__name__
    (True, 'HTTPSConnection')
    """
    watched = {
        scheme: _watched_pool(pool) for scheme, pool in manager.pool_classes_by_scheme.items()
    }
    if watched != manager.pool_classes_by_scheme:
        manager.pool_classes_by_scheme = watched
        manager.clear()
