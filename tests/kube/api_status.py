"""Error responses of the test API server: ``metav1.Status`` bodies, as the real one sends.

>>> err = not_found_page()
>>> err.code, err.response().body["reason"]
(404, 'NotFound')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .openapi_schema import Cause

if TYPE_CHECKING:
    from .api_resources import ResourceType

STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


@dataclass(frozen=True)
class Response:
    """An HTTP response of the server: status code, JSON body, extra headers."""

    status: int
    body: Any
    headers: tuple[tuple[str, str], ...] = ()


class ApiError(Exception):
    """A request that fails with a ``metav1.Status`` body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers

    def response(self) -> Response:
        """The error as a Status response."""
        return Response(
            self.code, status_body(self.code, self.reason, self.message, self.details), self.headers
        )


def status_body(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``metav1.Status`` failure body.

    >>> status_body(404, "NotFound", "x not found")["kind"]
    'Status'
    """
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


REASONS = {  # HTTP status code → metav1.StatusReason
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def not_found_page() -> ApiError:
    """The 404 of a path no resource lives at."""
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def invalid(rt: ResourceType, name: str, causes: list[Cause]) -> ApiError:
    """422 Invalid: the object breaks its schema; one cause per field."""
    text = str(causes[0]) if len(causes) == 1 else "[" + ", ".join(str(c) for c in causes) + "]"
    kind_group = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    return ApiError(
        422,
        "Invalid",
        f'{kind_group} "{name}" is invalid: {text}',
        {
            "name": name,
            "group": rt.group,
            "kind": rt.kind,
            "causes": [c.as_status_cause() for c in causes],
        },
    )


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    """409 Conflict on an object (stale resourceVersion, failed precondition)."""
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.group_resource} "{name}": {why}',
        {"name": name, "group": rt.group, "kind": rt.plural},
    )


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)
