"""A real Prometheus server for tests: Debian's ``/usr/bin/prometheus`` on a free loopback port.

:func:`prometheus_server` writes a config that scrapes the given targets every
``scrape_interval`` (250 ms by default, so tests wait little), starts the server with its own
TSDB directory, waits until ``/-/ready`` answers, and always stops it (terminate, then kill; the
child also gets SIGKILL via ``PR_SET_PDEATHSIG`` if the test process dies). The
:class:`PrometheusServer` it yields runs PromQL over ``/api/v1/query`` and can wait until a
query's result satisfies a condition (e.g. "the target has been scraped").

Install: ``make services`` (``apt-get install prometheus``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.services.process import die_with_parent, service_on_free_port

STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 5.0
WAIT_TIMEOUT_S = 60.0
"""For a PromQL condition (scrapes every 250 ms) on a loaded CI machine; a passing wait is short."""
PORT_ATTEMPTS = 5
BINARY = "prometheus"


class PrometheusStartError(RuntimeError):
    """Prometheus is missing, or did not become ready in time."""


def prometheus_binary() -> str:
    """Path of the ``prometheus`` executable; raises :class:`PrometheusStartError` if absent."""
    path = shutil.which(BINARY) or (Path("/usr/bin") / BINARY).as_posix()
    if not Path(path).is_file():
        raise PrometheusStartError(
            "prometheus is not installed; run `make services` (apt-get install prometheus)"
        )
    return path


def scrape_config(jobs: Mapping[str, Sequence[str]], scrape_interval: str) -> dict[str, Any]:
    """The Prometheus config scraping ``jobs`` (job name → ``host:port`` targets).

    >>> scrape_config({"planner": ["127.0.0.1:9000"]}, "250ms")["scrape_configs"][0]["job_name"]
    'planner'
    """
    return {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval},
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": list(targets)}]}
            for job, targets in jobs.items()
        ],
    }


@dataclass
class PrometheusServer:
    """A running Prometheus: its base URL and PromQL helpers."""

    url: str
    process: subprocess.Popen

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query; the ``result`` list of a vector (raises ``RuntimeError`` on error)."""
        params = {"query": promql}
        if at is not None:
            params["time"] = repr(at)
        request = f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as error:
            body = json.load(error)
        if body.get("status") != "success":
            raise RuntimeError(f"query {promql!r} failed: {body}")
        return body["data"]["result"]

    def scalar(self, promql: str, at: float | None = None) -> float | None:
        """The value of a single-series result (None when the result is empty)."""
        result = self.query(promql, at)
        if not result:
            return None
        if len(result) > 1:
            raise RuntimeError(f"query {promql!r} returned {len(result)} series")
        return float(result[0]["value"][1])

    def wait_for(
        self,
        promql: str,
        condition: Callable[[list[dict[str, Any]]], bool],
        timeout: float = WAIT_TIMEOUT_S,
    ) -> list[dict[str, Any]]:
        """Poll ``promql`` until ``condition(result)`` holds; returns that result."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if condition(result):
                return result
            if time.monotonic() > deadline:
                raise TimeoutError(f"{promql!r} did not reach the condition; last: {result}")
            time.sleep(0.05)

    def wait_for_value(self, promql: str, value: float, timeout: float = WAIT_TIMEOUT_S) -> None:
        """Wait until the single-series ``promql`` equals ``value``."""
        self.wait_for(
            promql,
            lambda r: len(r) == 1 and float(r[0]["value"][1]) == value,
            timeout,
        )

    def wait_for_scrapes(self, job: str, count: int = 1, timeout: float = WAIT_TIMEOUT_S) -> None:
        """Wait until every target of ``job`` has been scraped successfully ``count`` times."""
        self.wait_for(
            f'sum_over_time(up{{job="{job}"}}[10m])',
            lambda r: bool(r) and all(float(s["value"][1]) >= count for s in r),
            timeout,
        )

    def scrape_after(self, promql: str, since: float, timeout: float = WAIT_TIMEOUT_S) -> float:
        """Wait for a sample of the single-series ``promql`` scraped after Unix time ``since``
        and return its timestamp: that scrape saw every change made before ``since``. (A
        scrape that only shows the last change may have read the metrics before it earlier:
        a client's scrape is not atomic across metric families.)"""
        result = self.wait_for(f"timestamp({promql}) > {since:.3f}", lambda r: len(r) == 1, timeout)
        return float(result[0]["value"][1])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def prometheus_server(
    jobs: Mapping[str, Sequence[str]], scrape_interval: str = "250ms"
) -> Iterator[PrometheusServer]:
    """Run Prometheus scraping ``jobs`` (job → targets); stopped when the block exits."""
    binary = prometheus_binary()
    with tempfile.TemporaryDirectory(prefix="prometheus-") as workdir:
        config = Path(workdir) / "prometheus.yml"
        config.write_text(yaml.safe_dump(scrape_config(jobs, scrape_interval)))
        log = Path(workdir) / "prometheus.log"

        def launch(port: int) -> subprocess.Popen:
            with open(log, "wb") as out:
                return subprocess.Popen(
                    [
                        binary,
                        f"--config.file={config}",
                        f"--web.listen-address=127.0.0.1:{port}",
                        f"--storage.tsdb.path={workdir}/data",
                        "--log.level=warn",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    preexec_fn=die_with_parent,
                )

        with service_on_free_port(
            "Prometheus",
            launch,
            lambda port: _ready(f"http://127.0.0.1:{port}"),
            log,
            PrometheusStartError,
            startup_timeout_s=STARTUP_TIMEOUT_S,
            stop_timeout_s=STOP_TIMEOUT_S,
            attempts=PORT_ATTEMPTS,
        ) as (port, process):
            yield PrometheusServer(f"http://127.0.0.1:{port}", process)


StartPrometheus = Callable[..., PrometheusServer]


@pytest.fixture
def start_prometheus() -> Iterator[StartPrometheus]:
    """Factory fixture: ``start_prometheus({"job": ["127.0.0.1:PORT"]})`` → a ready server.

    Targets are known only once the test has started its exporters, hence a factory; every
    server it started is stopped at teardown.
    """
    with contextlib.ExitStack() as stack:

        def start(
            jobs: Mapping[str, Sequence[str]], scrape_interval: str = "250ms"
        ) -> PrometheusServer:
            try:
                return stack.enter_context(prometheus_server(jobs, scrape_interval))
            except PrometheusStartError as error:
                pytest.fail(str(error), pytrace=False)

        yield start
