"""The Prometheus bearer token goes to the configured endpoint only, never along a redirect.

urllib's redirect handler copies a request's headers onto the redirected request whatever
host it points at: an endpoint answering ``302`` to another host (a misconfigured proxy, a
compromised one) was handed ``PROMETHEUS_TOKEN``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from connectors.prometheus_api import PrometheusClient, PrometheusSettings

EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}


class Recorder(BaseHTTPRequestHandler):
    """Keeps each request's ``Authorization`` header (None: none) in the server's ``seen``;
    answers an empty vector, or a redirect when the server has a ``location``."""

    server: RecordingServer

    def do_GET(self) -> None:
        self.server.seen.append(self.headers.get("Authorization"))
        if self.server.location is not None:
            self.send_response(302)
            self.send_header("Location", self.server.location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps(EMPTY).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class RecordingServer(ThreadingHTTPServer):
    def __init__(self, host: str, location: str | None = None) -> None:
        super().__init__((host, 0), Recorder)
        self.seen: list[str | None] = []
        self.location = location
        self.url = f"http://{host}:{self.server_address[1]}"


@pytest.fixture
def servers() -> Iterator[tuple[RecordingServer, RecordingServer]]:
    """The endpoint on 127.0.0.1, redirecting to another host, 127.0.0.2."""
    other = RecordingServer("127.0.0.2")
    endpoint = RecordingServer("127.0.0.1", location=f"{other.url}/api/v1/query?query=up")
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (endpoint, other)]
    for thread in threads:
        thread.start()
    try:
        yield endpoint, other
    finally:
        for server in (endpoint, other):
            server.shutdown()
            server.server_close()


def test_a_redirect_to_another_host_does_not_carry_the_token(
    servers: tuple[RecordingServer, RecordingServer],
) -> None:
    endpoint, other = servers
    client = PrometheusClient(PrometheusSettings(endpoint=endpoint.url, token="SECRET-TOKEN"))

    assert client.query("up") == []  # the redirect was followed

    assert endpoint.seen == ["Bearer SECRET-TOKEN"]
    assert other.seen == [None]
