"""The control API: change a live planner's replica floors and GPU budgets over HTTP.

The reference planner serves a localhost-only endpoint/GPU-budget API on ``control_api_port``.
flowplanner's is the same idea on the dataflow's terms: ``flowplanner run --control-port PORT``
(or ``control_api_port`` in a config) serves, on 127.0.0.1 only,

* ``PUT /deployments/NAME/limits`` (NAME percent-encoded as in any URL path: ``caf%C3%A9``,
  ``team%2Fllama``) with a :class:`schemas.Limits` JSON object (say,
  ``{"decode_min_endpoint": 4, "max_gpu_budget": 32}``) → ``202`` and every limit the API has
  accepted for NAME so far; ``400`` for a body that is not JSON, ``422`` for limits that are
  not :class:`schemas.Limits`, ``404`` for a deployment the config does not have, ``411``
  without a ``Content-Length``, ``413`` for a body over :data:`MAX_BODY` bytes;
* ``GET /deployments/NAME/limits`` → those limits (``{}`` before any) — what the API passed
  on, refused ones included (the planner's refusals are dead letters).

An accepted change enters the flow as a ``limits`` event of the deployment
(:class:`ControlApiSource`), the same event a recorded stream or a topic may carry, placed at
the deployment's watermark like every live snapshot: the planner applies it from its next tick
— or, when the config it makes would be refused at start (a ceiling below what the floors
need), dead-letters it with the reason and keeps its limits. ``202`` means accepted for the
planner, not applied. A change lives in the running planner: a restarted worker starts from
its config again (lasting changes belong in the config, or as ``limits`` events in an input a
restart reads again).

>>> api = ControlApi(["llama"], clock=lambda: 0.0)
>>> api.put("llama", b'{"decode_min_endpoint": 3}')
(202, {'deployment': 'llama', 'limits': {'decode_min_endpoint': 3}})
>>> api.put("llama", b'{"decode_min_endpoint": 0}')[0], api.put("gone", b"{}")[0]
(422, 404)
>>> [e.payload.changes() for e in api.take()]
[{'decode_min_endpoint': 3}]
"""

from __future__ import annotations

import json
import logging
import queue
import re
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from pydantic import ValidationError

from connectors.stopping import inputs_ended
from schemas import Limits, LimitsEvent, describe_validation_error

log = logging.getLogger(__name__)

PATH = re.compile(r"^/deployments/([^/]+)/limits/?$")
MAX_BODY = 4096
"""The largest request body read: a :class:`schemas.Limits` object is a few dozen bytes."""
CLIENT_TIMEOUT_S = 10.0
"""A request not received whole within this long is dropped (its thread freed)."""
IDLE_POLL = timedelta(milliseconds=50)
"""How long the source waits after finding no change (a change waits at most this long)."""


class ControlApi:
    """Limits accepted over HTTP, queued for the flow as ``limits`` events stamped by
    ``clock`` (``flowplanner run`` stamps them 0: the planner places them at the watermark).

    >>> api = ControlApi(["a"], clock=lambda: 0.0)
    >>> url = api.serve(0)
    >>> import urllib.request
    >>> request = urllib.request.Request(f"{url}/deployments/a/limits", method="PUT",
    ...                                  data=b'{"min_endpoint": 2}')
    >>> json.load(urllib.request.urlopen(request))
    {'deployment': 'a', 'limits': {'min_endpoint': 2}}
    >>> api.stop()
    """

    def __init__(self, deployments: Iterable[str], clock: Callable[[], float]) -> None:
        self.deployments = sorted(deployments)
        self.clock = clock
        self.accepted: dict[str, Limits] = {}
        self._queue: queue.SimpleQueue[LimitsEvent] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def put(self, deployment: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """Accept ``body`` as ``deployment``'s new limits: the HTTP status and reply."""
        if deployment not in self.deployments:
            return self._unknown(deployment)
        try:
            limits = Limits.model_validate_json(body)
        except ValidationError as error:
            status = 400 if error.errors()[0]["type"] == "json_invalid" else 422
            return status, {"error": describe_validation_error(error)}
        with self._lock:
            earlier = self.accepted.get(deployment)
            self.accepted[deployment] = earlier.merged(limits) if earlier else limits
            self._queue.put(LimitsEvent(deployment=deployment, time=self.clock(), payload=limits))
        log.info("control API: limits of %s: %s", deployment, limits.changes())
        return 202, self.get(deployment)[1]

    def get(self, deployment: str) -> tuple[int, dict[str, Any]]:
        """The limits accepted for ``deployment`` so far: the HTTP status and reply."""
        if deployment not in self.deployments:
            return self._unknown(deployment)
        with self._lock:
            limits = self.accepted.get(deployment)
        return 200, {"deployment": deployment, "limits": limits.changes() if limits else {}}

    def _unknown(self, deployment: str) -> tuple[int, dict[str, Any]]:
        return 404, {"error": f"unknown deployment {deployment!r}", "known": self.deployments}

    def take(self) -> list[LimitsEvent]:
        """The changes accepted since the last call, in order."""
        events = []
        while True:
            try:
                events.append(self._queue.get_nowait())
            except queue.Empty:
                return events

    def serve(self, port: int) -> str:
        """Serve on 127.0.0.1:``port`` (0: any free port) on a thread; returns the base URL."""
        api = self

        class Handler(BaseHTTPRequestHandler):
            timeout = CLIENT_TIMEOUT_S  # a client stalled mid-request must not hold a thread

            def do_GET(self) -> None:
                self._answer(api.get)

            def do_PUT(self) -> None:
                length = self.headers.get("Content-Length", "").strip()
                if not (length.isascii() and length.isdigit()):  # none (chunked), -1, "²"
                    self._reply(411, {"error": "give the body's length (Content-Length)"})
                    return
                if int(length) > MAX_BODY:
                    self._reply(413, {"error": f"a body of at most {MAX_BODY} bytes"})
                    return
                body = self.rfile.read(int(length))
                if len(body) < int(length):  # the client went away mid-body
                    self._reply(400, {"error": "the body is shorter than its Content-Length"})
                    return
                self._answer(lambda name: api.put(name, body))

            def do_POST(self) -> None:
                self._reply(405, {"error": "PUT the limits, GET them"})

            do_DELETE = do_PATCH = do_POST

            def _answer(self, handle: Callable[[str], tuple[int, dict[str, Any]]]) -> None:
                match = PATH.match(urlsplit(self.path).path)  # a query string is ignored
                try:  # matched before decoding, so %2F reaches a name that holds a '/'
                    name = unquote(match.group(1), errors="strict") if match else None
                except UnicodeDecodeError:
                    name = None
                if name is None:
                    self._reply(404, {"error": "the API is /deployments/NAME/limits"})
                    return
                self._reply(*handle(name))

            def _reply(self, status: int, reply: dict[str, Any]) -> None:
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("control API: " + format, *args)

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="control API", daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _ControlPartition(StatefulSourcePartition[LimitsEvent, None]):
    def __init__(self, api: ControlApi) -> None:
        self._api = api
        self._awake: datetime | None = None

    def next_batch(self) -> list[LimitsEvent]:
        if inputs_ended():
            raise StopIteration
        events = self._api.take()
        self._awake = None if events else datetime.now(UTC) + IDLE_POLL
        return events

    def next_awake(self) -> datetime | None:
        return self._awake

    def snapshot(self) -> None:
        return None


class ControlApiSource(FixedPartitionedSource[LimitsEvent, None]):
    """The limits accepted by a :class:`ControlApi`, as ``limits`` events (a live input: it
    ends only when the run stops).

    >>> ControlApiSource(ControlApi(["a"], clock=lambda: 0.0)).list_parts()
    ['control-api']
    """

    def __init__(self, api: ControlApi) -> None:
        self.api = api

    def list_parts(self) -> list[str]:
        return ["control-api"]

    def build_part(self, step_id: str, for_part: str, resume_state: None) -> _ControlPartition:
        return _ControlPartition(self.api)
