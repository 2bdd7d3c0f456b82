"""A Kubernetes API server for tests: real HTTP on a loopback port, real API semantics.

No kube-apiserver can be installed on the build machines, so the DGD actuator is tested against
this one. It implements what the actuator and the ``kubernetes`` Python client rely on, with the
real server's status codes and ``metav1.Status`` bodies (``tests/kube/test_conformance.py``
checks each behaviour and can be pointed at a real cluster to confirm them there):

* CustomResourceDefinitions (``apiextensions.k8s.io/v1``): create (validated: name, group,
  scope, exactly one storage version, a schema per version), get, list, delete; a created CRD is
  ``Established`` at once and its group/version/resources appear in discovery (``/apis``,
  ``/apis/<group>``, ``/apis/<group>/<version>``).
* custom objects (namespaced or cluster-scoped): create → 201 with ``uid``,
  ``resourceVersion``, ``generation: 1``; duplicate → 409 ``AlreadyExists``; get; list
  (``<Kind>List``, label and field selectors with equality terms); replace (PUT, requires
  ``metadata.resourceVersion``); patch with ``application/merge-patch+json`` (RFC 7386) or
  ``application/json-patch+json`` (RFC 6902, incl. ``test``); strategic merge patch → 415;
  delete (with ``preconditions``); ``dryRun=All``.
* ``resourceVersion`` changes on every write (a no-op write is not a write), ``generation``
  only when the spec changes; a stale ``resourceVersion`` on PUT/patch → 409 ``Conflict``.
* the ``/status`` subresource is separate from the main resource: writes to the object ignore
  ``status`` and writes to ``/status`` change nothing else.
* the ``/scale`` subresource of a CRD that declares one (``subresources.scale``): GET gives an
  ``autoscaling/v1`` ``Scale`` (``spec.replicas`` from ``specReplicasPath``, left out when 0;
  ``status.replicas`` and ``status.selector`` from their paths), PATCH (merge or JSON patch of
  the Scale) and PUT write ``spec.replicas`` back to the object as a write of its spec
  (``resourceVersion`` and ``generation`` move, schema checked, write hooks run); a
  ``metadata.resourceVersion`` in the Scale is a precondition (stale → 409 ``Conflict``), a
  negative count is 422 ``Invalid``, a missing object 404 naming it.
* ``openAPIV3Schema``: unknown fields are pruned (``Warning`` header; ``fieldValidation=Strict``
  → 400), violations → 422 ``Invalid`` with one cause per field (see ``openapi_schema.py``).
* optional bearer-token authentication (401 ``Unauthorized``), and optional TLS (``tls``: a
  certificate chain and its key, PEM files).

Not implemented (a request for them gets a clear 4xx): watch, server-side apply, set-based
label selectors, finalizers, CRD conversion webhooks, defaulting.

Test-only controls are plain Python methods (the server runs in the test process):
:meth:`ApiServer.inject` (next N responses on a path are given error codes),
:attr:`ApiServer.requests` (every request: method, path, query, content type, body, status),
:meth:`ApiServer.read` / :meth:`ApiServer.write_status` (direct store access, used by the
simulated operator in ``dgd_operator.py``) and :meth:`ApiServer.on_write` (write hooks).

>>> server = ApiServer()
>>> server.handle("GET", "/apis/nvidia.com", {}, b"").status
404
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import socket
import ssl
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .api_resources import (
    CRD_GROUP,
    CRD_PLURAL,
    ResourceType,
    ScaleInfo,
    crd_resource_type,
    crd_status,
    discovery_document,
    now_rfc3339,
    resource_type_of_crd,
)
from .api_selectors import field_selector_matches, label_selector_matches
from .api_status import (
    REASONS,
    STALE,
    ApiError,
    Response,
    conflict,
    invalid,
    not_found_page,
    status_body,
)
from .openapi_schema import Cause, prune, validate
from .patching import PatchError, json_equal, json_patch, merge_patch

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_SYSTEM_METADATA = ("uid", "creationTimestamp", "generation", "resourceVersion")


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received (for assertions in tests).

    ``body`` is the decoded JSON body (``None`` if empty or not JSON); ``raw`` the bytes.
    """

    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str | None
    body: Any
    raw: bytes
    status: int
    injected: bool = False


def _content_type(headers: dict[str, str]) -> str | None:
    value = headers.get("content-type")
    return value.split(";")[0].strip().lower() if value else None


class ApiServer:
    """The test API server: an in-memory object store behind a threaded HTTP server.

    Use as a context manager (``with ApiServer() as server:``) or call :meth:`start` /
    :meth:`stop`. :meth:`handle` is the whole API without HTTP (used by the handler thread).

    >>> ApiServer(token="s3cret").handle("GET", "/apis", {}, b"").status
    401
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: tuple[str, str] | None = None,
    ):
        self.token = token
        self.tls = tls
        self._address = (host, port)
        self._lock = threading.RLock()
        self._types: dict[tuple[str, str], ResourceType] = {
            (CRD_GROUP, CRD_PLURAL): crd_resource_type()
        }
        self._objects: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {
            (CRD_GROUP, CRD_PLURAL): {}
        }
        self._revision = 0
        self._requests: list[RecordedRequest] = []
        self._injections: list[tuple[str, str | None, deque[int]]] = []
        self._hooks: list[Callable[[str, dict[str, Any] | None, dict[str, Any] | None], None]] = []
        self._before: list[Callable[[str, str], None]] = []
        self._http: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> ApiServer:
        """Listen on the loopback port and serve in a daemon thread."""
        self._http = ThreadingHTTPServer(self._address, _Handler)
        self._http.daemon_threads = True
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.tls)
            self._http.socket = context.wrap_socket(self._http.socket, server_side=True)
        self._http.app = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._http.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="test-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (``https`` with TLS) of the running server."""
        if self._http is None:
            raise RuntimeError("the server is not running")
        host, port = self._http.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host}:{port}"

    # ------------------------------------------------------------------ test controls
    def inject(self, path: str, *codes: int, method: str | None = None) -> None:
        """Answer the next ``len(codes)`` requests to ``path`` (and ``method``) with these codes.

        The request is recorded but not executed; the response is a Status of that code.
        """
        with self._lock:
            self._injections.append((path, method.upper() if method else None, deque(codes)))

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        """Forget the recorded requests."""
        with self._lock:
            self._requests.clear()

    def on_write(
        self, hook: Callable[[str, dict[str, Any] | None, dict[str, Any] | None], None]
    ) -> None:
        """Call ``hook(path, old, new)`` after every committed write (outside the store lock).

        ``path`` is the object's path without subresource; ``new`` is ``None`` after a delete.
        """
        with self._lock:
            self._hooks.append(hook)

    def before_request(self, hook: Callable[[str, str], None]) -> None:
        """Call ``hook(method, path)`` before each client request is served (under the store
        lock, so what the hook writes with ``handle(..., client=False)`` lands strictly before
        the request: a race made exact)."""
        with self._lock:
            self._before.append(hook)

    def read(self, path: str) -> dict[str, Any]:
        """The stored object at an API path (a deep copy); raises ``ApiError`` if absent."""
        with self._lock:
            rt, _version, ns, name, _sub = self._route_object(path)
            if name is None:
                raise ApiError(400, "BadRequest", "read() needs an object path")
            return copy.deepcopy(self._get(rt, ns, name))

    def write_status(self, path: str, status: dict[str, Any]) -> dict[str, Any]:
        """Replace an object's status as a controller would (a write: bumps resourceVersion).

        Sent as a JSON patch to ``<path>/status`` through :meth:`handle` (``client=False``), so
        it goes through the same rules and write hooks as a client's request.
        """
        response = self.handle(
            "PATCH",
            path.rstrip("/") + "/status",
            {"content-type": JSON_PATCH},
            json.dumps([{"op": "add", "path": "/status", "value": status}]).encode(),
            client=False,
        )
        if response.status != 200:
            raise ApiError(response.status, response.body["reason"], response.body["message"])
        return response.body

    # ------------------------------------------------------------------ HTTP entry
    def handle(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        raw: bytes,
        *,
        client: bool = True,
    ) -> Response:
        """Serve one request (``target`` = path and query).

        A client request (the default; every HTTP request is one) is authenticated, may be
        answered by an injected fault, runs the :meth:`before_request` hooks and is recorded.
        ``client=False`` is the test's own write (a controller, a racing writer): none of that.
        """
        method = method.upper()
        headers = {k.lower(): v for k, v in headers.items()}
        parts = urlsplit(target)
        path = parts.path.rstrip("/") or "/"
        query = parse_qs(parts.query)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        injected = False
        events: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = []
        with self._lock:
            if client:
                for before in list(self._before):
                    before(method, path)
            code = self._take_injection(method, path) if client else None
            if code is not None:
                injected = True
                response = self._injected_response(code, path)
            else:
                try:
                    if client:
                        self._authenticate(headers)
                    response = self._dispatch(method, path, query, headers, raw, events)
                except ApiError as err:
                    response = err.response()
            if client:
                self._requests.append(
                    RecordedRequest(
                        method,
                        path,
                        query,
                        _content_type(headers),
                        body,
                        raw,
                        response.status,
                        injected,
                    )
                )
            hooks = list(self._hooks)
        for event in events:
            for hook in hooks:
                hook(*event)
        return response

    def _take_injection(self, method: str, path: str) -> int | None:
        for rule_path, rule_method, codes in self._injections:
            if codes and rule_path.rstrip("/") == path and rule_method in (None, method):
                return codes.popleft()
        return None

    @staticmethod
    def _injected_response(code: int, path: str) -> Response:
        reason = REASONS.get(code, "InternalError")
        if code == 409:
            message = f'Operation cannot be fulfilled on "{path}": {STALE}'
        else:
            message = f"injected {code} {reason} for {path}"
        headers = (("Retry-After", "1"),) if code in (429, 503) else ()
        return Response(code, status_body(code, reason, message, {}), headers)

    def _authenticate(self, headers: dict[str, str]) -> None:
        if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
            raise ApiError(401, "Unauthorized", "Unauthorized")

    # ------------------------------------------------------------------ routing
    def _dispatch(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
        raw: bytes,
        events: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]],
    ) -> Response:
        segments = [s for s in path.split("/") if s]
        if path == "/version" and method == "GET":
            return Response(
                200,
                {
                    "major": "1",
                    "minor": "31",
                    "gitVersion": "v1.31.0-flowplanner-test",
                    "platform": "linux/amd64",
                },
            )
        if segments[:1] == ["api"] and method == "GET":
            if len(segments) == 1:
                return Response(
                    200,
                    {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
                )
            if segments == ["api", "v1"]:
                return Response(
                    200, {"kind": "APIResourceList", "groupVersion": "v1", "resources": []}
                )
        if segments[:1] != ["apis"]:
            raise not_found_page()
        if len(segments) <= 3:
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on {path}")
            return Response(200, discovery_document(self._types.values(), segments[1:]))
        rt, version, ns, name, sub = self._route_object(path)
        return self._object_request(method, rt, version, ns, name, sub, query, headers, raw, events)

    def _route_object(
        self, path: str
    ) -> tuple[ResourceType, str, str | None, str | None, str | None]:
        segments = [s for s in path.split("/") if s]
        if len(segments) < 4 or segments[0] != "apis":
            raise not_found_page()
        group, version, rest = segments[1], segments[2], segments[3:]
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise not_found_page()
        rt = self._types.get((group, rest[0]))
        if rt is None or version not in rt.versions:
            raise not_found_page()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if (ns is not None and not rt.namespaced) or (rt.namespaced and ns is None and name):
            raise not_found_page()
        info = rt.versions[version]
        if sub is not None and not (
            (sub == "status" and info.status_subresource)
            or (sub == "scale" and info.scale is not None)
        ):
            raise not_found_page()
        return rt, version, ns, name, sub

    # ------------------------------------------------------------------ object verbs
    def _object_request(
        self,
        method: str,
        rt: ResourceType,
        version: str,
        ns: str | None,
        name: str | None,
        sub: str | None,
        query: dict[str, list[str]],
        headers: dict[str, str],
        raw: bytes,
        events: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]],
    ) -> Response:
        if "watch" in query and query["watch"][0] in ("true", "1"):
            raise ApiError(400, "BadRequest", "watch is not supported by the test server")
        dry_run = query.get("dryRun", [""])[0] == "All"
        strict = query.get("fieldValidation", [""])[0] == "Strict"
        if name is None:
            if method == "GET":
                return Response(200, self._list(rt, version, ns, query))
            if method == "POST":
                if rt.namespaced and ns is None:
                    raise not_found_page()
                body = self._json_body(raw)
                return self._create(rt, version, ns, body, dry_run, strict, events)
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on a collection")
        if sub == "scale":
            return self._scale_request(method, rt, version, ns, name, headers, raw, dry_run, events)
        if method == "GET":
            return Response(200, self._present(rt, version, self._get(rt, ns, name)))
        if method == "PUT":
            body = self._json_body(raw)
            return self._update(rt, version, ns, name, sub, body, True, dry_run, strict, events)
        if method == "PATCH":
            old = self._get(rt, ns, name)
            patched = self._apply_patch(old, _content_type(headers), raw)
            return self._update(rt, version, ns, name, sub, patched, False, dry_run, strict, events)
        if method == "DELETE" and sub is None:
            options = self._json_body(raw) if raw else {}
            return self._delete(rt, version, ns, name, options or {}, dry_run, events)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {rt.group_resource}")

    @staticmethod
    def _json_body(raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except ValueError as err:
            raise ApiError(400, "BadRequest", f"the request body is not valid JSON: {err}") from err

    def _get(self, rt: ResourceType, ns: str | None, name: str) -> dict[str, Any]:
        obj = self._objects[(rt.group, rt.plural)].get((ns or "", name))
        if obj is None:
            raise ApiError(
                404,
                "NotFound",
                f'{rt.group_resource} "{name}" not found',
                {"name": name, "group": rt.group, "kind": rt.plural},
            )
        return obj

    @staticmethod
    def _present(rt: ResourceType, version: str, obj: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(obj)
        out["apiVersion"] = f"{rt.group}/{version}"
        out["kind"] = rt.kind
        return out

    def _list(
        self, rt: ResourceType, version: str, ns: str | None, query: dict[str, list[str]]
    ) -> dict[str, Any]:
        labels = query.get("labelSelector", [""])[0]
        fields = query.get("fieldSelector", [""])[0]
        items = []
        for (obj_ns, _name), obj in sorted(self._objects[(rt.group, rt.plural)].items()):
            if ns is not None and obj_ns != ns:
                continue
            if labels and not label_selector_matches(labels, obj["metadata"].get("labels", {})):
                continue
            if fields and not field_selector_matches(fields, obj):
                continue
            items.append(self._present(rt, version, obj))
        return {
            "apiVersion": f"{rt.group}/{version}",
            "kind": rt.list_kind,
            "metadata": {"resourceVersion": str(self._revision)},
            "items": items,
        }

    def _next_revision(self) -> str:
        self._revision += 1
        return str(self._revision)

    def _prune_and_validate(
        self, rt: ResourceType, version: str, name: str, obj: dict[str, Any], strict: bool
    ) -> tuple[dict[str, Any], list[str]]:
        schema = rt.versions[version].schema
        if schema is None:
            return obj, []
        fixed = {k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj}
        rest = {k: v for k, v in obj.items() if k not in fixed}
        pruned, dropped = prune(rest, schema)
        if dropped and strict:
            unknown = ", ".join(f'unknown field "{d}"' for d in dropped)
            raise ApiError(400, "BadRequest", f"strict decoding error: {unknown}")
        causes = validate(pruned, schema)
        if causes:
            raise invalid(rt, name, causes)
        return {**fixed, **pruned}, dropped

    @staticmethod
    def _warnings(dropped: list[str]) -> tuple[tuple[str, str], ...]:
        return tuple(("Warning", f'299 - "unknown field \\"{d}\\""') for d in dropped)

    def _object_path(self, rt: ResourceType, version: str, ns: str | None, name: str) -> str:
        scope = f"/namespaces/{ns}" if ns is not None else ""
        return f"/apis/{rt.group}/{version}{scope}/{rt.plural}/{name}"

    def _create(
        self,
        rt: ResourceType,
        version: str,
        ns: str | None,
        body: Any,
        dry_run: bool,
        strict: bool,
        events: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]],
    ) -> Response:
        """POST to a collection: kind and version, name, namespace, not a duplicate, the schema
        (a CRD: its own validation too), then stored (a CRD's type served at once)."""
        expected_api = f"{rt.group}/{version}"
        _check_type_meta(rt, expected_api, body)
        meta = _object_meta(body)
        name = _name_to_create(rt, meta)
        _check_namespace(meta, ns)
        store = self._objects[(rt.group, rt.plural)]
        if (ns or "", name) in store:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{rt.group_resource} "{name}" already exists',
                {"name": name, "group": rt.group, "kind": rt.plural},
            )
        obj = copy.deepcopy(body)
        if rt.versions[version].status_subresource:
            obj.pop("status", None)
        obj, dropped = self._prune_and_validate(rt, version, name, obj, strict)
        new_meta = _created_metadata(meta, name, ns)
        obj["metadata"] = new_meta
        obj["apiVersion"], obj["kind"] = expected_api, rt.kind
        if rt.plural == CRD_PLURAL and rt.group == CRD_GROUP:
            new_type = resource_type_of_crd(obj)
        if dry_run:
            new_meta["resourceVersion"] = str(self._revision)
            return Response(201, obj, self._warnings(dropped))
        new_meta["resourceVersion"] = self._next_revision()
        if rt.plural == CRD_PLURAL and rt.group == CRD_GROUP:
            obj["status"] = crd_status(obj)
            self._types[(new_type.group, new_type.plural)] = new_type
            self._objects[(new_type.group, new_type.plural)] = {}
        store[(ns or "", name)] = obj
        events.append((self._object_path(rt, version, ns, name), None, copy.deepcopy(obj)))
        return Response(201, self._present(rt, version, obj), self._warnings(dropped))

    def _apply_patch(self, old: dict[str, Any], ctype: str | None, raw: bytes) -> Any:
        if ctype in (STRATEGIC_MERGE_PATCH, APPLY_PATCH) or ctype not in (MERGE_PATCH, JSON_PATCH):
            if ctype == APPLY_PATCH:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    "server-side apply is not implemented by the test server",
                )
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}",
            )
        patch = self._json_body(raw)
        if ctype == MERGE_PATCH:
            if not isinstance(patch, dict):
                raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
            return merge_patch(old, patch)
        if not isinstance(patch, list):
            raise ApiError(
                400,
                "BadRequest",
                "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
            )
        try:
            return json_patch(old, patch)
        except PatchError as err:
            raise ApiError(422, "Invalid", str(err)) from err

    def _update(
        self,
        rt: ResourceType,
        version: str,
        ns: str | None,
        name: str,
        sub: str | None,
        candidate: Any,
        require_version: bool,
        dry_run: bool,
        strict: bool,
        events: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]],
    ) -> Response:
        """PUT or PATCH of an object or its ``/status``: the object exists, the candidate's
        name, namespace and resourceVersion preconditions hold, the write (of the status or of
        the rest) passes the schema; then stored unless it changes nothing."""
        old = self._get(rt, ns, name)
        if not isinstance(candidate, dict):
            raise ApiError(400, "BadRequest", "the object must be a JSON object")
        meta = _object_meta(candidate)
        _check_name(meta, name)
        _check_namespace(meta, ns)
        _check_resource_version(rt, name, meta, old, require_version)
        has_status = rt.versions[version].status_subresource
        if sub == "status":
            new = _status_write(old, candidate)
        else:
            new = _object_write(old, candidate, meta, has_status)
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
        new, dropped = self._prune_and_validate(rt, version, name, new, strict)
        if json_equal(new, old):
            return Response(200, self._present(rt, version, old), self._warnings(dropped))
        if _spec_changed(old, new, has_status):
            new["metadata"]["generation"] = old["metadata"]["generation"] + 1
        if dry_run:
            return Response(200, self._present(rt, version, new), self._warnings(dropped))
        self._store_update(rt, version, ns, name, old, new, events)
        return Response(200, self._present(rt, version, new), self._warnings(dropped))

    def _store_update(
        self,
        rt: ResourceType,
        version: str,
        ns: str | None,
        name: str,
        old: dict[str, Any],
        new: dict[str, Any],
        events: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]],
    ) -> None:
        """Store ``new`` in place of ``old`` at a new resourceVersion; queue its write event."""
        new["metadata"]["resourceVersion"] = self._next_revision()
        self._objects[(rt.group, rt.plural)][(ns or "", name)] = new
        events.append(
            (self._object_path(rt, version, ns, name), copy.deepcopy(old), copy.deepcopy(new))
        )

    # ------------------------------------------------------------------ scale subresource
    def _scale_request(
        self,
        method: str,
        rt: ResourceType,
        version: str,
        ns: str | None,
        name: str,
        headers: dict[str, str],
        raw: bytes,
        dry_run: bool,
        events: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]],
    ) -> Response:
        """GET, PATCH or PUT of ``<object>/scale`` (see the module docs)."""
        scale = rt.versions[version].scale
        assert scale is not None  # routed here only when the version has one
        old = self._get(rt, ns, name)
        if method == "GET":
            return Response(200, _scale_of(old, scale))
        if method == "PATCH":
            candidate = self._apply_patch(_scale_of(old, scale), _content_type(headers), raw)
        elif method == "PUT":
            candidate = self._json_body(raw)
        else:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on a scale")
        replicas = _scale_replicas(candidate, name, old["metadata"]["resourceVersion"], rt)
        new = copy.deepcopy(old)
        _set_path(new, scale.spec_replicas, replicas)
        self._update(rt, version, ns, name, None, new, False, dry_run, False, events)
        return Response(200, _scale_of(new if dry_run else self._get(rt, ns, name), scale))

    def _delete(
        self,
        rt: ResourceType,
        version: str,
        ns: str | None,
        name: str,
        options: dict[str, Any],
        dry_run: bool,
        events: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]],
    ) -> Response:
        old = self._get(rt, ns, name)
        pre = options.get("preconditions") or {}
        meta = old["metadata"]
        if pre.get("resourceVersion") not in (None, meta["resourceVersion"]):
            raise conflict(
                rt,
                name,
                f"Precondition failed: ResourceVersion in precondition: "
                f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                f"{meta['resourceVersion']}",
            )
        if pre.get("uid") not in (None, meta["uid"]):
            raise conflict(
                rt,
                name,
                f"Precondition failed: UID in precondition: {pre['uid']}, "
                f"UID in object meta: {meta['uid']}",
            )
        if dry_run:
            return Response(200, self._present(rt, version, old))
        del self._objects[(rt.group, rt.plural)][(ns or "", name)]
        self._next_revision()
        if rt.group == CRD_GROUP and rt.plural == CRD_PLURAL:
            spec = old["spec"]
            key = (spec["group"], spec["names"]["plural"])
            self._types.pop(key, None)
            self._objects.pop(key, None)
        events.append((self._object_path(rt, version, ns, name), copy.deepcopy(old), None))
        return Response(200, self._present(rt, version, old))


def _object_meta(obj: dict[str, Any]) -> dict[str, Any]:
    """An object's ``metadata`` (``{}`` when absent or not a JSON object)."""
    return obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}


def _check_type_meta(rt: ResourceType, expected_api: str, body: Any) -> None:
    """400 unless a created object is a JSON object of the URL's apiVersion and kind."""
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the request body must be a JSON object")
    if body.get("apiVersion") != expected_api:
        raise ApiError(
            400,
            "BadRequest",
            f"the API version in the data ({body.get('apiVersion')}) "
            f"does not match the expected API version ({expected_api})",
        )
    if body.get("kind") != rt.kind:
        raise ApiError(
            400,
            "BadRequest",
            f"the kind in the data ({body.get('kind')}) does not "
            f"match the expected kind ({rt.kind})",
        )


def _name_to_create(rt: ResourceType, meta: dict[str, Any]) -> str:
    """A new object's name: ``metadata.name``, else ``generateName`` and 5 random characters;
    422 if there is none or it is no DNS-1123 subdomain."""
    name = meta.get("name") or ""
    if not name and meta.get("generateName"):
        name = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
    if not name:
        cause = Cause(
            "FieldValueRequired",
            "metadata.name",
            "Required value: name or generateName is required",
        )
        raise invalid(rt, "", [cause])
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        message = (
            f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of '
            "lower case alphanumeric characters, '-' or '.', and must start and end "
            "with an alphanumeric character"
        )
        raise invalid(rt, name, [Cause("FieldValueInvalid", "metadata.name", message)])
    return name


def _created_metadata(meta: dict[str, Any], name: str, ns: str | None) -> dict[str, Any]:
    """A new object's metadata: the client's, less what the server owns, with its name,
    namespace, uid, generation 1 and creation time (the resourceVersion is set on storing)."""
    new_meta = {
        k: v
        for k, v in copy.deepcopy(meta).items()
        if k not in (*_SYSTEM_METADATA, "deletionTimestamp", "managedFields")
    }
    new_meta["name"] = name
    if ns is not None:
        new_meta["namespace"] = ns
    new_meta.update(uid=str(uuid.uuid4()), generation=1, creationTimestamp=now_rfc3339())
    return new_meta


def _check_name(meta: dict[str, Any], name: str) -> None:
    """400 if a written object names another object than the URL does."""
    if meta.get("name") not in (None, name):
        raise ApiError(
            400,
            "BadRequest",
            f"the name of the object ({meta.get('name')}) does "
            f"not match the name on the URL ({name})",
        )


def _check_namespace(meta: dict[str, Any], ns: str | None) -> None:
    """400 if a written object is in another namespace than the URL."""
    if ns is not None and meta.get("namespace") not in (None, "", ns):
        raise ApiError(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
        )


def _check_resource_version(
    rt: ResourceType, name: str, meta: dict[str, Any], old: dict[str, Any], require_version: bool
) -> None:
    """An update's ``metadata.resourceVersion``: 422 if required (PUT) and missing, 409
    ``Conflict`` if stale."""
    wanted = meta.get("resourceVersion")
    if require_version and not wanted:
        message = "Invalid value: 0x0: must be specified for an update"
        raise invalid(rt, name, [Cause("FieldValueInvalid", "metadata.resourceVersion", message)])
    if wanted and wanted != old["metadata"]["resourceVersion"]:
        raise conflict(rt, name, STALE)


def _status_write(old: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
    """The object after a write to its ``/status``: the candidate's status, nothing else."""
    return _with_status_of(copy.deepcopy(old), candidate)


def _with_status_of(new: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """``new`` with a copy of ``source``'s status, or without any when it has none."""
    if "status" in source:
        new["status"] = copy.deepcopy(source["status"])
    else:
        new.pop("status", None)
    return new


def _object_write(
    old: dict[str, Any], candidate: dict[str, Any], meta: dict[str, Any], has_status: bool
) -> dict[str, Any]:
    """The object after a write to it: the candidate, with the stored name, namespace and
    system metadata, and the stored status when ``/status`` is a subresource."""
    new = {k: copy.deepcopy(v) for k, v in candidate.items() if k != "metadata"}
    new_meta = {
        k: copy.deepcopy(v)
        for k, v in meta.items()
        if k not in (*_SYSTEM_METADATA, "name", "namespace", "managedFields")
    }
    for key in ("name", "namespace", *_SYSTEM_METADATA):
        if key in old["metadata"]:
            new_meta[key] = old["metadata"][key]
    new["metadata"] = new_meta
    return _with_status_of(new, old) if has_status else new


def _spec_changed(old: dict[str, Any], new: dict[str, Any], has_status: bool) -> bool:
    """Whether a write changes more than metadata (and status, when a subresource): what
    moves ``generation``."""
    skip = ("metadata", "status") if has_status else ("metadata",)
    return not json_equal(
        {k: v for k, v in new.items() if k not in skip},
        {k: v for k, v in old.items() if k not in skip},
    )


def _path_value(obj: dict[str, Any], keys: tuple[str, ...]) -> Any:
    node: Any = obj
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _set_path(obj: dict[str, Any], keys: tuple[str, ...], value: Any) -> None:
    node = obj
    for key in keys[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[keys[-1]] = value


def _scale_of(obj: dict[str, Any], scale: ScaleInfo) -> dict[str, Any]:
    """The ``autoscaling/v1`` Scale of an object (``spec.replicas`` omitted when 0, as the
    real one's ``omitempty`` does)."""
    meta = obj["metadata"]
    replicas = _path_value(obj, scale.spec_replicas)
    status: dict[str, Any] = {"replicas": _path_value(obj, scale.status_replicas) or 0}
    if scale.label_selector is not None:
        selector = _path_value(obj, scale.label_selector)
        if isinstance(selector, str) and selector:
            status["selector"] = selector
    keep = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in keep if k in meta},
        "spec": {"replicas": replicas} if replicas else {},
        "status": status,
    }


def _scale_replicas(candidate: Any, name: str, current: str, rt: ResourceType) -> int:
    """The replicas a written Scale asks for, after the checks the real server makes."""
    if not isinstance(candidate, dict):
        raise ApiError(400, "BadRequest", "the Scale must be a JSON object")
    meta = _object_meta(candidate)
    _check_name(meta, name)
    spec = candidate.get("spec") if isinstance(candidate.get("spec"), dict) else {}
    replicas = spec.get("replicas", 0)
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise ApiError(
            400,
            "BadRequest",
            "json: cannot unmarshal into Go struct field ScaleSpec.spec.replicas of type int32",
        )
    if replicas < 0:
        message = f"Invalid value: {replicas}: must be greater than or equal to 0"
        scale_type = ResourceType("autoscaling", "scales", "scale", "Scale", "", True, {})
        raise invalid(scale_type, name, [Cause("FieldValueInvalid", "spec.replicas", message)])
    if meta.get("resourceVersion") not in (None, "", current):
        raise conflict(rt, name, STALE)
    return replicas


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "flowplanner-test-apiserver/1"

    def setup(self) -> None:
        super().setup()
        # headers and body go out in separate writes: without this, Nagle + delayed ACK
        # add ~40 ms to every response on a keep-alive connection.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        app: ApiServer = self.server.app  # type: ignore[attr-defined]
        response = app.handle(self.command, self.path, dict(self.headers.items()), raw)
        data = json.dumps(response.body, separators=(",", ":")).encode()
        self.send_response(response.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in response.headers:
            self.send_header(key, value)
        self.end_headers()
        # a client that gave up first (the lost-answer tests cut it off) is no server error
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request stderr log (requests are recorded instead)."""
