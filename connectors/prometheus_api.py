"""Reaching Prometheus: connection settings (spec §9.6, from the environment or given), and
instant queries over its HTTP API whose answers are checked before they are believed.

:class:`PrometheusClient` makes one attempt per query, never retries, and bounds the whole
request — connect, TLS handshake, headers and body — by the settings' timeout. Whatever goes
wrong (connection refused, a timeout, an HTTP or PromQL error, a truncated body, an answer of the
wrong shape, a label value that is not a string, a value that is not a number) is one
:class:`PrometheusQueryError` saying what. The bearer token (``PROMETHEUS_TOKEN`` /
``PROMETHEUS_TOKEN_FILE``, the file re-read on every request) goes to the endpoint only, never
along a redirect.

>>> settings = PrometheusSettings.from_env({"PROMETHEUS_ENDPOINT": "http://127.0.0.1:9"})
>>> try:
...     PrometheusClient(settings).query("up")
... except PrometheusQueryError as error:
...     print(str(error).split(":")[0])
cannot query Prometheus
"""

from __future__ import annotations

import http.client
import json
import math
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from connectors.http_deadline import Deadline, opener

DEFAULT_ENDPOINT = "http://prometheus-kube-prometheus-prometheus.monitoring.svc.cluster.local:9090"


class PrometheusQueryError(RuntimeError):
    """A query that did not produce a result (network, HTTP, PromQL error, malformed response).

    >>> settings = PrometheusSettings("http://127.0.0.1:9", token_file="/nonexistent/token")
    >>> try:
    ...     PrometheusClient(settings).query("up")
    ... except PrometheusQueryError as error:
    ...     print(str(error).split(":")[0])
    cannot read PROMETHEUS_TOKEN_FILE
    """


@dataclass(frozen=True)
class PrometheusSettings:
    """How to reach Prometheus (spec §9.6).

    >>> PrometheusSettings.from_env({"PROMETHEUS_ENDPOINT": "http://prom:9090",
    ...     "PROMETHEUS_SSL_VERIFY": "yes",
    ...     "DYN_PLANNER_PROMETHEUS_REQUEST_TIMEOUT_SECONDS": "2.5"}).timeout_s
    2.5
    """

    endpoint: str = DEFAULT_ENDPOINT
    token: str | None = None
    token_file: str | None = None
    ssl_verify: bool = False
    ca_bundle: str | None = None
    extra_query_params: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ValueError(f"Prometheus request timeout must be > 0 s, got {self.timeout_s}")
        if self.ca_bundle is not None and not Path(self.ca_bundle).is_file():
            raise ValueError(f"PROMETHEUS_CA_BUNDLE {self.ca_bundle!r} does not exist")
        if not self.endpoint.startswith(("http://", "https://")):
            raise ValueError(f"Prometheus endpoint must be http(s)://..., got {self.endpoint!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PrometheusSettings:
        """Settings from ``PROMETHEUS_*`` and ``DYN_PLANNER_PROMETHEUS_REQUEST_TIMEOUT_SECONDS``."""
        env = os.environ if environ is None else environ
        timeout = env.get("DYN_PLANNER_PROMETHEUS_REQUEST_TIMEOUT_SECONDS")
        try:
            timeout_s = float(timeout) if timeout else 10.0
        except ValueError:
            raise ValueError(
                f"DYN_PLANNER_PROMETHEUS_REQUEST_TIMEOUT_SECONDS={timeout!r} is not a number"
            ) from None
        return cls(
            endpoint=env.get("PROMETHEUS_ENDPOINT") or DEFAULT_ENDPOINT,
            token=env.get("PROMETHEUS_TOKEN") or None,
            token_file=env.get("PROMETHEUS_TOKEN_FILE") or None,
            ssl_verify=env.get("PROMETHEUS_SSL_VERIFY", "").strip().lower() in {"1", "true", "yes"},
            ca_bundle=env.get("PROMETHEUS_CA_BUNDLE") or None,
            extra_query_params=tuple(
                urllib.parse.parse_qsl(env.get("PROMETHEUS_EXTRA_QUERY_PARAMS", ""))
            ),
            timeout_s=timeout_s,
        )


Sample = tuple[dict[str, str], float]
"""One series of an instant vector: its labels and value."""


class PrometheusClient:
    """Instant queries over ``/api/v1/query`` (stdlib HTTP; one attempt, no retries).

    >>> PrometheusClient(PrometheusSettings(endpoint="http://127.0.0.1:9")).settings.timeout_s
    10.0
    """

    def __init__(self, settings: PrometheusSettings | None = None) -> None:
        self.settings = settings or PrometheusSettings.from_env()
        if self.settings.ca_bundle:
            self._ssl = ssl.create_default_context(cafile=self.settings.ca_bundle)
        elif self.settings.ssl_verify:
            self._ssl = ssl.create_default_context()
        else:  # PROMETHEUS_SSL_VERIFY off (the reference's default): no certificate checks
            self._ssl = ssl.create_default_context()
            self._ssl.check_hostname = False
            self._ssl.verify_mode = ssl.CERT_NONE

    def _token(self) -> str | None:
        if self.settings.token_file:  # re-read on every request (rotated service-account tokens)
            try:
                return Path(self.settings.token_file).read_text().strip() or None
            except OSError as exc:
                raise PrometheusQueryError(f"cannot read PROMETHEUS_TOKEN_FILE: {exc}") from None
        return self.settings.token

    def query(self, promql: str, at: float | None = None) -> list[Sample]:
        """Evaluate ``promql`` at time ``at`` (Unix seconds; None = Prometheus' now).

        ``settings.timeout_s`` bounds the whole request: connecting (each address tried gets
        only the time left), the TLS handshake and a proxy tunnel, the headers and the body.
        When it runs out the request's sockets are shut down, which ends a read in progress at
        once, and the query fails with "took longer than X s". The bound is ``timeout_s`` plus
        the host name lookup (``getaddrinfo`` cannot be interrupted) and thread scheduling.

        The token is an unredirected header: urllib copies a request's other headers onto the
        request a redirect makes, whatever host it points at, and would hand the credential to
        it. A redirect is then answered without the token (a Prometheus that needs it refuses:
        the query fails, the traffic is unknown) — point ``PROMETHEUS_ENDPOINT`` at the server
        itself rather than at something that redirects to it.
        """
        params = [("query", promql), *self.settings.extra_query_params]
        if at is not None:
            params.append(("time", f"{at:.3f}"))
        url = f"{self.settings.endpoint.rstrip('/')}/api/v1/query?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        token = self._token()
        if token:
            request.add_unredirected_header("Authorization", f"Bearer {token}")
        timeout = self.settings.timeout_s
        deadline = Deadline(timeout)
        try:
            with opener(deadline, self._ssl).open(request, timeout=timeout) as response:
                try:
                    body = json.load(response)
                finally:
                    deadline.cancel()  # before the socket closes
        except urllib.error.HTTPError as exc:
            try:
                detail = exc.read(500).decode(errors="replace")
            except (OSError, http.client.HTTPException) as read_error:
                detail = f"(body unreadable: {read_error!r})"
            finally:
                deadline.cancel()
            if deadline.expired:
                raise PrometheusQueryError(_too_long(promql, timeout)) from None
            raise PrometheusQueryError(f"HTTP {exc.code} for {promql!r}: {detail}") from None
        except (
            urllib.error.URLError,
            OSError,
            http.client.HTTPException,  # truncated body (IncompleteRead), bad status line, ...
            ValueError,  # not JSON (UnicodeDecodeError included)
            RecursionError,  # JSON nested too deep to decode
        ) as exc:
            deadline.cancel()
            if deadline.expired:  # cut off: whatever the read then saw is not the reason
                raise PrometheusQueryError(_too_long(promql, timeout)) from None
            reason = f"{type(exc).__name__}: {exc}".strip()
            raise PrometheusQueryError(f"cannot query Prometheus: {reason}") from None
        finally:
            deadline.cancel()
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else body
            raise PrometheusQueryError(f"query {promql!r} failed: {error}")
        try:
            return instant_samples(body.get("data"))
        except _MalformedResponse as exc:
            raise malformed_response(promql, str(exc)) from None

    def now(self) -> float:
        """Prometheus' own time (``time()``, Unix seconds), to evaluate queries at.

        A time taken on this host's clock is not it: one ahead of Prometheus' puts the end of
        a window where Prometheus has no sample yet, and ``increase()`` reads less than there
        was — silently.
        """
        samples = self.query("time()")
        if len(samples) != 1 or not math.isfinite(samples[0][1]):
            raise malformed_response("time()", f"{_short(samples)}, not one time")
        return samples[0][1]


def malformed_response(promql: str, problem: str) -> PrometheusQueryError:
    """The error of a successful response to ``promql`` whose answer cannot be right.

    >>> print(malformed_response("up", "data is None, not an object"))
    query 'up': malformed response: data is None, not an object
    """
    return PrometheusQueryError(f"query {promql!r}: malformed response: {problem}")


def _too_long(promql: str, timeout: float) -> str:
    return (
        f"query {promql!r} took longer than {timeout:g} s "
        "(DYN_PLANNER_PROMETHEUS_REQUEST_TIMEOUT_SECONDS)"
    )


class _MalformedResponse(ValueError):
    """The ``data`` of a successful query response is not the shape of an instant query."""


def instant_samples(data: object) -> list[Sample]:
    """Samples of an instant query's ``data`` (a vector, or a scalar as one unlabelled sample).

    Every label value must be a string and every sample value a number (Prometheus sends it as
    a string: ``"12"``, ``"NaN"``, ``"+Inf"``); anything else raises :class:`_MalformedResponse`.

    >>> instant_samples({"resultType": "vector",
    ...                  "result": [{"metric": {"model": "m"}, "value": [1.5, "12"]}]})
    [({'model': 'm'}, 12.0)]
    >>> instant_samples({"resultType": "vector", "result": [{"metric": {"model": None},
    ...                  "value": [1.5, "12"]}]})
    Traceback (most recent call last):
    ...
    connectors.prometheus_api._MalformedResponse: label 'model' is None, not a string
    """
    if not isinstance(data, dict):
        raise _MalformedResponse(f"data is {_short(data)}, not an object")
    result_type, result = data.get("resultType"), data.get("result")
    if result_type == "scalar":
        return [({}, _sample_value(result))]
    if result_type != "vector":
        raise _MalformedResponse(f"expected a vector, got {_short(data)}")
    if not isinstance(result, list):
        raise _MalformedResponse(f"vector result is {_short(result)}, not a list")
    samples: list[Sample] = []
    for item in result:
        if not isinstance(item, dict):
            raise _MalformedResponse(f"vector element is {_short(item)}, not an object")
        samples.append((_sample_labels(item.get("metric")), _sample_value(item.get("value"))))
    return samples


def _sample_labels(metric: object) -> dict[str, str]:
    if not isinstance(metric, dict):
        raise _MalformedResponse(f"sample labels are {_short(metric)}, not an object")
    for name, value in metric.items():
        if not isinstance(value, str):
            raise _MalformedResponse(f"label {name!r} is {_short(value)}, not a string")
    return metric


def _sample_value(value: object) -> float:
    if not (isinstance(value, list) and len(value) == 2):
        raise _MalformedResponse(f"sample value is {_short(value)}, not [time, value]")
    number = value[1]
    if isinstance(number, str):
        try:
            return float(number)
        except ValueError:
            raise _MalformedResponse(f"sample value {_short(number)} is not a number") from None
    if isinstance(number, int | float) and not isinstance(number, bool):
        try:
            return float(number)
        except OverflowError:  # a JSON integer beyond a float
            raise _MalformedResponse(
                f"sample value {_short(number)} is not a number (too large for a float)"
            ) from None
    raise _MalformedResponse(f"sample value {_short(number)} is not a number")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else f"{text[:117]}..."
