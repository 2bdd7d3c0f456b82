"""The DGD actuator's line to the Kubernetes API server: the client (in-cluster config, else the
kubeconfig, with the address, token and CA a ``dgd://`` address overrides) and what a failed
request means — its one-line text, whether it is worth retrying, whether a write may have been
carried out although no answer came back.

A 401 and a 403 say what to check; a 429 or 5xx, a transport error or an answer that cannot be
decoded is transient; a request with no HTTP status may have committed:

>>> from kubernetes.client.exceptions import ApiException
>>> busy = ApiException(status=503, reason="Service Unavailable")
>>> error_text(busy), transient(busy), answer_lost(busy)
('HTTP 503: Service Unavailable', True, False)
>>> transient(ApiException(status=422)), answer_lost(TimeoutError("read timed out"))
(False, True)
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from connectors.dgd_graph import DGD_GROUP, DGD_PLURAL, DGDSA_PLURAL

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
"""Where a pod's service account names the namespace the pod runs in."""
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
UNAUTHORISED = "unauthorised: the token is missing, expired or wrong"
FORBIDDEN = (
    f"forbidden: the service account needs get/patch on {DGD_PLURAL}.{DGD_GROUP} (and on "
    f"{DGDSA_PLURAL}/scale for services with a scaling adapter)"
)


def pod_namespace(path: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """The namespace of the pod we run in (service account file), else ``default``.

    >>> pod_namespace(Path("/nonexistent"))
    'default'
    """
    try:
        return path.read_text().strip() or "default"
    except OSError:
        return "default"


def kube_api_client(
    host: str | None = None,
    token: str | None = None,
    *,
    token_file: str | None = None,
    ca_cert: str | None = None,
) -> k8s.ApiClient:
    """An API client configured in-cluster, else from the kubeconfig (``$KUBECONFIG``, else
    ``~/.kube/config``, read now), with these overrides:

    * ``host``: the server address only; the credentials and CA of the configuration found
      are kept (a private address of the same cluster still needs them). With no
      configuration, the client has none (a local test server); without ``host`` that is an
      error (:class:`ConfigException` saying what to set).
    * ``token`` / ``token_file``: the bearer token, as given or read from the file before
      every request (rotated service-account tokens); an unreadable file fails here.
    * ``ca_cert``: the CA bundle that signs the server's certificate.

    urllib3 retries only failed connection attempts (three times, immediately): a request
    that reached the server is never re-sent by urllib3, neither on a read timeout nor on a
    429/503 carrying ``Retry-After`` (it would sleep out of the actuator's sight). The
    actuator's own bounded loop, with its injectable ``sleep``, retries those.

    >>> kube_api_client("http://127.0.0.1:1").configuration.host
    'http://127.0.0.1:1'
    """
    cfg = _OverriddenConfiguration()
    cfg.retries = urllib3.util.Retry(
        total=3, connect=3, read=False, other=0, respect_retry_after_header=False
    )
    missing = _load_cluster_config(cfg)
    if missing is not None and not host:
        raise ConfigException(
            f"no Kubernetes API server to talk to: {missing}; set KUBECONFIG or give the "
            "address (dgd://NAMESPACE/NAME?host=URL)"
        )
    if missing is not None:
        log.debug("talking to %s without in-cluster or kubeconfig credentials (%s)", host, missing)
    override = _overrides(host, token, token_file, ca_cert)
    try:
        override(cfg)
    except OSError as exc:
        raise ConfigException(f"cannot read the token file {token_file}: {exc}") from exc
    cfg.overrides = override
    return k8s.ApiClient(cfg)


def _load_cluster_config(cfg: k8s.Configuration) -> str | None:
    """Load the in-cluster configuration, else the kubeconfig, into ``cfg``; why neither
    loaded when that is so."""
    try:
        k8s_config.load_incluster_config(client_configuration=cfg)
        return None
    except ConfigException:
        pass
    kubeconfig = os.environ.get("KUBECONFIG") or "~/.kube/config"
    try:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    except ConfigException as exc:
        return f"not inside a pod (no service account) and no usable kubeconfig ({exc})"
    return None


def _overrides(
    host: str | None,
    token: str | None,
    token_file: str | None,
    ca_cert: str | None,
) -> Callable[[k8s.Configuration], None]:
    """What :func:`kube_api_client`'s arguments change in a loaded configuration (the token
    file read anew at each call)."""

    def override(cfg: k8s.Configuration) -> None:
        if host:
            cfg.host = host
        bearer = Path(token_file).read_text().strip() if token_file else token
        if bearer:
            cfg.api_key = {"BearerToken": f"Bearer {bearer}"}
            cfg.api_key_prefix = {}
        elif token_file and not cfg.api_key:  # empty now, and no other credential: the client
            # runs its refresh hook (which reads the file again) only while a token is set
            cfg.api_key = {"BearerToken": "Bearer"}
            cfg.api_key_prefix = {}
        if ca_cert:
            cfg.ssl_ca_cert = ca_cert

    return override


class _OverriddenConfiguration(k8s.Configuration):  # type: ignore[misc]  # untyped base
    """A client configuration whose ``overrides`` run after every refresh hook assigned to it.

    The client runs ``refresh_api_key_hook`` before every request, and the loaders' hooks
    (in-cluster, kubeconfig token) write their own server address and token back *and assign
    themselves again* each time they run. Wrapping the hook once is so undone after the first
    request; a property wraps whatever hook is assigned, so ``host=`` / ``token_file=`` / ``ca=``
    hold for every request.
    """

    def __init__(self) -> None:
        self._loader_hook: Callable[[k8s.Configuration], None] | None = None
        self.overrides: Callable[[k8s.Configuration], None] | None = None
        super().__init__()

    @property  # type: ignore[override]  # the base declares a plain attribute
    def refresh_api_key_hook(self) -> Callable[[k8s.Configuration], None] | None:
        """The hook assigned (by a loader), followed by ``overrides``."""
        loader_hook, overrides = self._loader_hook, self.overrides
        if overrides is None:
            return loader_hook

        def refreshed(config: k8s.Configuration) -> None:
            if loader_hook is not None:
                loader_hook(config)
            overrides(config)

        return refreshed

    @refresh_api_key_hook.setter
    def refresh_api_key_hook(self, hook: Callable[[k8s.Configuration], None] | None) -> None:
        self._loader_hook = hook


class RequestDeadlineError(TimeoutError):
    """A request to the API server took longer, as a whole, than the request timeout (an
    answer trickling in, or none at all); a ``TimeoutError``, so it is retried like one.

    >>> isinstance(RequestDeadlineError("GET cut off after 2 s: no whole answer by then"), OSError)
    True
    """


class MalformedResponseError(ValueError):
    """A request succeeded but its answer is not the object asked for; a ``ValueError``, so
    it is one of the :data:`REQUEST_ERRORS` and retried like an undecodable answer.

    >>> isinstance(MalformedResponseError("GET returned a JSON list, not a DGD"), ValueError)
    True
    """


REQUEST_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError)
"""What a request can raise: HTTP errors, transport errors, and an answer that cannot be
decoded (``ValueError``: malformed JSON, not UTF-8, not a DGD)."""


def error_text(err: Exception) -> str:
    """One line on a failed request; a 401 and a 403 say what to check.

    >>> error_text(ApiException(status=401, reason="Unauthorized"))
    'HTTP 401: Unauthorized (unauthorised: the token is missing, expired or wrong)'
    """
    if isinstance(err, MalformedResponseError):
        return f"malformed response: {err}"
    if isinstance(err, ValueError):
        return f"malformed response: {type(err).__name__}: {err}"
    if isinstance(err, RequestDeadlineError):
        return str(err)
    if isinstance(err, ApiException):
        message = err.reason or ""
        try:
            body = json.loads(err.body or "")
            message = body.get("message") or message
        except (ValueError, AttributeError):
            pass
        hint = {401: UNAUTHORISED, 403: FORBIDDEN}.get(err.status)
        return f"HTTP {err.status}: {message}" + (f" ({hint})" if hint else "")
    return f"{type(err).__name__}: {err}"


def names_object(err: Exception) -> bool:
    """The error is an API Status naming an object (``details.name``), as a 404 of a missing
    object does; the 404 of a resource type the server does not serve names none.

    >>> missing = ApiException(status=404)
    >>> missing.body = '{"kind": "Status", "reason": "NotFound", "details": {"name": "llama"}}'
    >>> names_object(missing), names_object(ApiException(status=404))
    (True, False)
    """
    if not isinstance(err, ApiException):
        return False
    try:
        details = json.loads(err.body or "").get("details")
    except (ValueError, AttributeError):
        return False
    return isinstance(details, dict) and bool(details.get("name"))


def retry_after(err: Exception) -> float | None:
    headers = getattr(err, "headers", None)
    if not headers:
        return None
    try:
        return float(headers.get("Retry-After"))
    except (TypeError, ValueError):
        return None


def transient(err: Exception) -> bool:
    if isinstance(err, ApiException):
        return err.status in RETRYABLE_STATUS or not err.status
    return isinstance(err, urllib3.exceptions.HTTPError | OSError | ValueError)


def answer_lost(err: Exception) -> bool:
    """No HTTP status came back (timeout, dropped connection, unreadable answer): the request
    may have been carried out."""
    return not isinstance(err, ApiException) or not err.status
