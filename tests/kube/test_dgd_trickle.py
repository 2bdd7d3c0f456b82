"""An API server that answers a byte at a time: each byte comes in time for urllib3's per-read
timeout, the whole answer takes minutes. The request timeout bounds every DGD request as a
whole, so reads fail (and are counted), and applies end within their documented bound:
``max_attempts`` × (requests × request timeout + backoff).

Each call runs on a helper thread joined with a generous bound, so a request that is not cut
off fails the test instead of hanging it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY

from connectors.dgd import ApplyResult, DgdActuator, DgdUnavailableError
from connectors.dgd_api import kube_api_client
from connectors.dgd_dataflow import DgdInventorySource
from tests.decisions import decision

from .conftest import DgdFixture, Sleeps
from .scripted_server import Reply, ScriptedServer

pytestmark = pytest.mark.services

TIMEOUT_S = 1.0
"""The actuator's request timeout in these tests."""
PAUSE_S = 0.2
"""Between two bytes of a trickling answer: well inside the per-read timeout."""
GUARD_S = 20.0
"""How long a call may take before the test gives up on it (it is then hung)."""


def actuator(server: ScriptedServer, **options: Any) -> DgdActuator:
    return DgdActuator(
        kube_api_client(server.url),
        "dynamo",
        "vllm-disagg",
        sleep=options.pop("sleep", Sleeps()),
        request_timeout_s=TIMEOUT_S,
        **options,
    )


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    """``call()``'s result (or the exception it raised) and its duration; fails the test if it
    has not returned within :data:`GUARD_S`."""
    out: dict[str, Any] = {}

    def run() -> None:
        start = time.monotonic()
        try:
            out["result"] = call()
        except Exception as err:  # handed to the test
            out["result"] = err
        out["took"] = time.monotonic() - start

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(GUARD_S)
    assert not thread.is_alive(), f"still waiting on the API server after {GUARD_S} s"
    return out["result"], out["took"]


@pytest.mark.parametrize("headers", [False, True], ids=["body", "headers"])
def test_a_trickling_read_fails_after_the_request_timeout(dgd: DgdFixture, headers: bool):
    slow = Reply.json(dgd.get()).trickling(PAUSE_S, headers=headers)
    with ScriptedServer(default=slow) as server:
        error, took = timed(lambda: actuator(server).read(retry=False))
    assert isinstance(error, DgdUnavailableError)
    assert "GET cut off after 1 s: no whole answer by then" in str(error)
    assert TIMEOUT_S <= took < TIMEOUT_S + 2


def test_a_trickling_inventory_poll_is_a_counted_and_logged_read_error(
    dgd: DgdFixture, caplog: pytest.LogCaptureFixture
):
    good = dgd.get()
    errors = {"dgd": "dynamo/vllm-disagg"}
    before = REGISTRY.get_sample_value("flowplanner_dgd_read_errors_total", errors) or 0.0
    with ScriptedServer(Reply.json(good), default=Reply.json(good).trickling(PAUSE_S)) as server:
        source = DgdInventorySource(
            lambda: actuator(server, max_attempts=1),
            "llama",
            timedelta(milliseconds=1),
            clock=lambda: 100.0,
            max_polls=2,
        )
        partition = source.build_part("inventory", source.list_parts()[0], None)  # validates
        events: list[Any] = []
        with caplog.at_level(logging.WARNING):
            deadline = time.monotonic() + GUARD_S
            while time.monotonic() < deadline:
                try:
                    events += partition.next_batch()
                except StopIteration:
                    break
                time.sleep(0.05)
            else:
                pytest.fail(f"two polls did not end within {GUARD_S} s")
        partition.close()
    assert events == []  # an unreadable DGD is never reported as zero workers
    after = REGISTRY.get_sample_value("flowplanner_dgd_read_errors_total", errors)
    assert after == before + 2
    polls = [r.getMessage() for r in caplog.records if "inventory poll failed" in r.getMessage()]
    assert len(polls) == 2 and all("GET cut off after 1 s" in m for m in polls)


def test_a_trickling_read_fails_an_apply_within_its_bound(dgd: DgdFixture):
    good = dgd.get()
    sleeps = Sleeps()
    with ScriptedServer(Reply.json(good), default=Reply.json(good).trickling(PAUSE_S)) as server:
        planner = actuator(server, max_attempts=2, sleep=sleeps)
        planner.validate()
        result, took = timed(lambda: planner.apply(decision(num_decode=2)))
    assert isinstance(result, ApplyResult) and result.outcome == "failed"
    assert result.reason == (
        "gave up after 2 attempts; last error: read: GET cut off after 1 s: no whole answer by "
        "then (the API server answers too slowly, or not at all)"
    )
    assert sleeps == [0.5] and result.attempts == 0
    assert took < 2 * TIMEOUT_S + 2  # max_attempts × request timeout (the backoff not slept)


def test_a_trickling_patch_answer_is_a_lost_answer_then_checked(dgd: DgdFixture):
    good = dgd.get()
    slow = Reply.json(good).trickling(PAUSE_S)
    # validate, read, PATCH (trickles), then the re-read after the lost answer: not committed
    with ScriptedServer(Reply.json(good), Reply.json(good), slow, Reply.json(good)) as server:
        planner = actuator(server, max_attempts=1)
        planner.validate()
        result, took = timed(lambda: planner.apply(decision(num_decode=2)))
        methods = [m for m, _ in server.requests]
    assert isinstance(result, ApplyResult) and result.outcome == "failed"
    assert "patch: PATCH cut off after 1 s" in result.reason
    assert "the last PATCH got no answer and may have committed" in result.reason
    assert result.attempts == 1 and methods == ["GET", "GET", "PATCH", "GET"]
    assert took < TIMEOUT_S + 2
