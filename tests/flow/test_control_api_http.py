"""The control API's HTTP edges: deployment names percent-encoded as in any URL path, and a
client that stalls mid-request (a real server on a real socket)."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

import connectors.control_api as control_api
from connectors.control_api import ControlApi


@pytest.fixture
def api() -> Iterator[tuple[ControlApi, str]]:
    served = ControlApi(["café", "team/llama", "llama"], clock=lambda: 0.0)
    url = served.serve(0)
    yield served, url
    served.stop()


def put(url: str, body: dict) -> int:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="PUT")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def test_names_are_percent_decoded(api: tuple[ControlApi, str]) -> None:
    """A name that needs encoding was answered 404 (the path was matched undecoded)."""
    served, url = api
    limits = {"decode_min_endpoint": 2}
    assert put(f"{url}/deployments/caf%C3%A9/limits", limits) == 202
    assert put(f"{url}/deployments/team%2Fllama/limits", limits) == 202
    assert put(f"{url}/deployments/llama/limits?from=script", limits) == 202  # query ignored
    assert put(f"{url}/deployments/caf%E9/limits", limits) == 404  # not UTF-8: no name
    assert sorted(event.deployment for event in served.take()) == ["café", "llama", "team/llama"]


def test_a_stalled_client_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A PUT that never sends its whole body held a server thread for ever."""
    monkeypatch.setattr(control_api, "CLIENT_TIMEOUT_S", 0.5, raising=False)
    served = ControlApi(["llama"], clock=lambda: 0.0)
    host, port = served.serve(0).removeprefix("http://").split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=60) as client:
            client.sendall(
                b"PUT /deployments/llama/limits HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n{"
            )
            started = time.monotonic()
            assert client.recv(1024) == b""  # the server closed the connection
            assert time.monotonic() - started < 30  # on its timeout (0.5 s), not ours
        assert served.take() == []
    finally:
        served.stop()
