"""Fixtures of the ZMQ tests: endpoint URLs (tcp on a port the publisher picks, or IPC paths)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(params=["tcp", "ipc"])
def transport(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def new_url(tmp_path: Path, transport: str) -> Callable[[], str]:
    """A factory of unused endpoint URLs of the test's transport: a tcp URL has port ``*``, the
    publisher binds a free port (subscribe to :attr:`PublisherProcess.urls`, the bound ones)."""
    counter = itertools.count()

    def make() -> str:
        if transport == "tcp":
            return "tcp://127.0.0.1:*"
        return f"ipc://{tmp_path}/fpm-{next(counter)}.sock"

    return make
