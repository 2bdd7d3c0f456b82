"""Fixtures of the ZMQ tests: endpoint URLs on free loopback ports or fresh IPC paths."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.services.process import free_port


@pytest.fixture(params=["tcp", "ipc"])
def transport(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def new_url(tmp_path: Path, transport: str) -> Callable[[], str]:
    """A factory of unused endpoint URLs of the test's transport."""
    counter = itertools.count()

    def make() -> str:
        if transport == "tcp":
            return f"tcp://127.0.0.1:{free_port()}"
        return f"ipc://{tmp_path}/fpm-{next(counter)}.sock"

    return make
