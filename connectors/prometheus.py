"""Traffic observations read from Prometheus (spec §10.2), as a planner input.

:class:`PrometheusTrafficSource` runs the reference's PromQL for one deployment over a window of
N seconds — frontend metrics (``dynamo_frontend_*``, series picked by ``model``
case-insensitively and ``dynamo_namespace``) or router metrics (``dynamo_component_router_*``,
by namespace, ``-`` → ``_``) as ``throughput_metrics_source`` says — and returns a
:class:`schemas.TrafficObservation`, or ``None`` when the traffic is *unknown*:

* The request count is ``increase(requests_started_total[N])`` (offered load), falling back to
  ``requests_total``; no series → unknown, never 0 (spec §17 item 4).
* A series that took part in the window but is stale at evaluation time (its scrape target
  stopped answering, so Prometheus marked it stale) makes the count unknown as well: a dead
  frontend would otherwise read as a quiet one and fabricate a "confirmed idle" window.
* A window Prometheus does not hold from its start makes the count unknown too
  (``partial_window``): when every series that took part begins late in the window
  (:func:`late_series`) — Prometheus started without its saved storage, or was away, within the
  window — ``increase()`` would read the part it holds as the whole window's demand. A series
  born in the window at 0 (a new frontend scraped before its first request) has missed nothing,
  and one late series beside others held from the start is a frontend that joined: both count.
* A failed query (connection refused, timeout, HTTP or PromQL error, a truncated or malformed
  response: wrong shape, a non-string label value, a value that is not a number or too large for
  a float, several series where an aggregation has one) → unknown. No retries. The request
  timeout bounds the whole request — connect, TLS handshake, headers and body — not each socket
  read: an endpoint that trickles its answer is cut off when it runs out (see
  :mod:`connectors.prometheus_api`).
* A request count that is NaN, infinite or negative → unknown (``bad_count``); a negative mean
  ISL/OSL → unknown (``bad_length``); values no real fleet reports (above the ceilings of
  ``schemas.events.traffic_implausibility``: e.g. 1e300 requests, a mean ISL of 1e299) → unknown
  (``implausible``).
* ISL/OSL are ``increase(_sum)/increase(_count)``. NaN (no completed request) or missing is
  normalised to 0 only when the request count is exactly 0 (a confirmed idle window, spec §17
  item 3); with requests in the window it makes the observation unknown.
* KV hit rate: ``router_kv_hit_rate`` sum/count, tried with the worker-suffixed namespace
  (``<ns>-<DYN_NAMESPACE_WORKER_SUFFIX>``) first, then the base one (§17 item 9); idle, missing,
  failed or outside [0, 1] → ``None`` (unknown), never 0.0. It never makes the whole observation
  unknown.
* Speculative-decoding accept length (only with ``spec_decode_backend`` set: ``vllm``,
  ``sglang`` or ``trtllm``): the backend's PromQL of spec §10.2 over the engines' ``generate``
  endpoint in the namespace (and ``model``, when given); non-finite, below 1, missing or failed →
  ``None`` (the planner keeps its last value). Like the hit rate it never makes the observation
  unknown.

Every unknown is logged and counted in ``flowplanner_traffic_unknown_total{deployment,reason}``
(a read that fails in an unforeseen way too, as ``error``);
:attr:`PrometheusTrafficSource.last_unknown_reason` holds the last explanation.

:class:`PrometheusTrafficInput` is the bytewax source: per deployment it reads the last
``throughput_adjustment_interval_seconds`` every that many seconds (in a background thread, so
the dataflow never blocks on HTTP) — its queries evaluated at one instant of Prometheus' own
clock (``time()``, asked first): a host clock ahead of Prometheus' would put part of the window
in Prometheus' future, where no sample is yet, and read less demand than there is — and yields a
:class:`PrometheusReading` (a :class:`schemas.TrafficEvent`) stamped with the system time it
hands the reading on: a reading is taken on this host's clock, and the live event horizon
places one that other inputs stamped on this host's clock overtook meanwhile at the watermark
rather than dropping it as late (:mod:`flows.horizon`).

At start the input probes each distinct endpoint once (``vector(1)``, on a daemon thread: the
flow starts without waiting for it) and warns, naming the deployments it serves, when it does
not answer.

The connection settings (spec §9.6: endpoint, token, TLS, timeout) and the client that runs
the queries are :mod:`connectors.prometheus_api`'s.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition

from connectors.pipeline_metrics import TRAFFIC_UNKNOWN
from connectors.polling import MAX_SLEEP, PENDING_CHECK, DaemonExecutor
from connectors.prometheus_api import (
    PrometheusClient,
    PrometheusQueryError,
    malformed_response,
)
from connectors.stopping import inputs_ended
from schemas import PlannerConfig, TrafficEvent, TrafficObservation
from schemas.events import traffic_implausibility

log = logging.getLogger(__name__)

MetricsSource = Literal["frontend", "router"]
SpecDecodeBackend = Literal["vllm", "sglang", "trtllm"]


def window_literal(seconds: float) -> str:
    """PromQL range for a window: ``"{N}s"``, or milliseconds when N is fractional.

    >>> window_literal(180), window_literal(2.5)
    ('180s', '2500ms')
    """
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"window must be a positive number of seconds, got {seconds}")
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000)}ms"


def namespace_label(namespace: str) -> str:
    """``dynamo_namespace`` label value of a namespace (labels use ``_`` for ``-``).

    >>> namespace_label("dynamo-prod")
    'dynamo_prod'
    """
    return namespace.replace("-", "_")


def _number(value: float) -> str:
    """A value as Prometheus spells it (``NaN``, ``+Inf``, ``-Inf``, else ``%g``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:g}"


def _stale_count(count: float | None, metric: str) -> None:
    """Raise unknown when series of ``metric`` went stale in the window (or the count is bad)."""
    if count is None or count == 0:
        return
    if not (math.isfinite(count) and count > 0):
        raise _Unknown("bad_count", f"stale-series count of {metric} is {_number(count)}")
    raise _Unknown(
        "stale_series", f"{count:g} {metric} series stopped being scraped within the window"
    )


LATE_SPACINGS = 1.5
"""A series begins late in a window when its first sample there comes more than this many of
its own sample intervals after the window's start (Prometheus' ``increase()`` extrapolates a
gap of up to 1.1 intervals back to the start; a little more allows for scrape jitter) ..."""
LATE_SHARE = 0.1
"""... and after this share of the window (with many samples a window, a gap of a few is a
small part of its demand: a scrape missed at the start does not make it unknown)."""
FIRST_SAMPLE_STEPS = 1000
"""Steps of the subquery that finds a series' first sample in the window (at least 100 ms)."""


def late_series(metric: str, window_s: float, at: float) -> str:
    """PromQL: the series of the counter ``metric`` that Prometheus holds only from late in the
    ``window_s`` seconds before ``at`` (:data:`LATE_SPACINGS`, :data:`LATE_SHARE`), their value
    then above 0.

    The first sample in the window is found by a subquery of ``timestamp()`` (to within its
    step, which the threshold allows for); a counter's lowest value in the window is its first
    (barring a reset); its sample interval is its mean spacing in the window.

    >>> print(late_series("m", 10, 1000.0))  # doctest: +NORMALIZE_WHITESPACE
    (((min_over_time((timestamp(m) >= 990.000)[10s:100ms]) - 990.000)
      > 1.5 * (timestamp(m) - min_over_time((timestamp(m) >= 990.000)[10s:100ms]))
        / (count_over_time(m[10s]) - 1) + 0.1) > 1)
    and (min_over_time(m[10s]) > 0)
    """
    start = f"{at - window_s:.3f}"
    window = window_literal(window_s)
    step_s = max(window_s / FIRST_SAMPLE_STEPS, 0.1)
    first = f"min_over_time((timestamp({metric}) >= {start})[{window}:{window_literal(step_s)}])"
    spacing = f"(timestamp({metric}) - {first}) / (count_over_time({metric}[{window}]) - 1)"
    return (
        f"((({first} - {start}) > {LATE_SPACINGS:g} * {spacing} + {step_s:g})"
        f" > {LATE_SHARE * window_s:g})"
        f" and (min_over_time({metric}[{window}]) > 0)"
    )


def _held_from_start(covered: float, metric: str) -> None:
    """Raise unknown when no series of ``metric`` that took part is held from the window's start."""
    if covered == 0:
        raise _Unknown(
            "partial_window",
            f"Prometheus holds no {metric} series from the window's start "
            "(it started, or was away, within the window)",
        )


class _Unknown(Exception):
    """Traffic is unknown; ``kind`` is the metric label, the message the explanation."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class PrometheusTrafficSource:
    """Observed traffic of one deployment from Prometheus (see the module docstring).

    ``model`` / ``namespace`` select the series (None = no filter on that label);
    ``metrics_source`` is the config's ``throughput_metrics_source``; ``worker_suffix`` defaults
    to ``DYN_NAMESPACE_WORKER_SUFFIX``.

    >>> from connectors.prometheus_api import PrometheusClient, PrometheusSettings
    >>> client = PrometheusClient(PrometheusSettings(endpoint="http://prometheus:9090"))
    >>> source = PrometheusTrafficSource(client, deployment="llama", model="Llama-3",
    ...                                  namespace="dynamo-prod", metrics_source="router")
    >>> source._selector()
    '{dynamo_namespace="dynamo_prod"}'
    """

    client: PrometheusClient
    deployment: str
    model: str | None = None
    namespace: str | None = None
    metrics_source: MetricsSource = "frontend"
    worker_suffix: str | None = field(
        default_factory=lambda: os.environ.get("DYN_NAMESPACE_WORKER_SUFFIX") or None
    )
    last_unknown_reason: str | None = None
    spec_decode_backend: SpecDecodeBackend | None = None

    @classmethod
    def from_config(
        cls,
        deployment: str,
        config: PlannerConfig,
        *,
        model: str | None,
        namespace: str | None,
        client: PrometheusClient | None = None,
        spec_decode_backend: SpecDecodeBackend | None = None,
    ) -> PrometheusTrafficSource:
        """A source for one configured deployment (its ``throughput_metrics_source``)."""
        return cls(
            client or PrometheusClient(),
            deployment=deployment,
            model=model,
            namespace=namespace,
            metrics_source=config.throughput_metrics_source,
            spec_decode_backend=spec_decode_backend,
        )

    # --- the observation ----------------------------------------------------------------------

    def observe(self, window_s: float, at: float | None = None) -> TrafficObservation | None:
        """Traffic over the ``window_s`` seconds before ``at`` (Unix seconds on Prometheus'
        clock; None = Prometheus' now: :meth:`PrometheusClient.now`).

        Every query of the read is evaluated at that one instant: the means are ratios of two
        ``increase()`` s, extrapolated alike only over the same window, and the stale-series
        check must look at the window the count came from.
        """
        window_literal(window_s)  # validates the window
        try:
            if at is None:
                at = self.client.now()
            if self.metrics_source == "frontend":
                num_req, isl, osl = self._frontend(window_s, at)
            else:
                num_req, isl, osl = self._router(window_s, at)
            if not (math.isfinite(num_req) and num_req >= 0):
                raise _Unknown("bad_count", f"request count is {_number(num_req)}, not a count")
            if num_req == 0:  # confirmed idle: NaN or missing lengths mean "no request"
                isl = 0.0 if isl is None or math.isnan(isl) else isl
                osl = 0.0 if osl is None or math.isnan(osl) else osl
            for name, value in (("ISL", isl), ("OSL", osl)):
                if value is None or not math.isfinite(value):
                    state = "missing" if value is None else _number(value)
                    raise _Unknown(
                        "lengths_unknown", f"{name} is {state} while {num_req:g} requests arrived"
                    )
                if value < 0:
                    raise _Unknown("bad_length", f"{name} is {_number(value)}, not a length")
            assert isl is not None and osl is not None
            observation = TrafficObservation(
                duration_s=window_s,
                num_req=num_req,
                isl=isl,
                osl=osl,
                kv_hit_rate=self.kv_hit_rate(window_s, at),
                accept_length=self.accept_length(window_s, at),
            )
            problem = traffic_implausibility(observation)
            if problem is not None:
                raise _Unknown("implausible", problem)
        except _Unknown as unknown:
            self._unknown(unknown.kind, str(unknown))
            return None
        except PrometheusQueryError as exc:
            self._unknown("query_failed", f"query failed: {exc}")
            return None
        self.last_unknown_reason = None  # only once the read really produced an observation
        return observation

    def _unknown(self, kind: str, reason: str) -> None:
        self.last_unknown_reason = reason
        TRAFFIC_UNKNOWN.labels(deployment=self.deployment, reason=kind).inc()
        log.warning("traffic of %s unknown: %s", self.deployment, reason)

    # --- frontend ----------------------------------------------------------------------------

    def _frontend(self, window_s: float, at: float) -> tuple[float, float | None, float | None]:
        window = window_literal(window_s)
        num_req = None
        for counter in ("requests_started_total", "requests_total"):
            metric = f"dynamo_frontend_{counter}"
            num_req = self._frontend_sum(f"increase({metric}[{window}])", at)
            if num_req is not None:
                stale = self._frontend_sum(
                    f"increase({metric}[{window}]) unless {metric}", at, count=True
                )
                _stale_count(stale, metric)
                late = late_series(metric, window_s, at)
                covered = self._frontend_sum(
                    f"increase({metric}[{window}]) unless ({late})", at, count=True
                )
                _held_from_start(covered or 0.0, metric)
                break
        if num_req is None:
            raise _Unknown("no_data", "no dynamo_frontend request counter series match")
        return (
            num_req,
            self._frontend_mean("input_sequence_tokens", window, at),
            (self._frontend_mean("output_sequence_tokens", window, at)),
        )

    def _frontend_sum(self, expression: str, at: float | None, count: bool = False) -> float | None:
        op = "count" if count else "sum"
        samples = self.client.query(f"{op} by (model, dynamo_namespace) ({expression})", at)
        matched = [value for labels, value in samples if self._matches(labels)]
        if count:
            return sum(matched)
        return sum(matched) if matched else None

    def _matches(self, labels: dict[str, str]) -> bool:
        if self.model is not None and labels.get("model", "").casefold() != self.model.casefold():
            return False
        if self.namespace is not None:
            return namespace_label(labels.get("dynamo_namespace", "")) == namespace_label(
                self.namespace
            )
        return True

    def _frontend_mean(self, metric: str, window: str, at: float | None) -> float | None:
        total = self._frontend_sum(f"increase(dynamo_frontend_{metric}_sum[{window}])", at)
        count = self._frontend_sum(f"increase(dynamo_frontend_{metric}_count[{window}])", at)
        if total is None or count is None:
            return None
        return total / count if count > 0 else math.nan

    # --- router ------------------------------------------------------------------------------

    def _selector(self, namespace: str | None = None) -> str:
        namespace = self.namespace if namespace is None else namespace
        if namespace is None:
            return ""
        return f'{{dynamo_namespace="{namespace_label(namespace)}"}}'

    def _router(self, window_s: float, at: float) -> tuple[float, float | None, float | None]:
        window, sel = window_literal(window_s), self._selector()
        started = f"dynamo_component_router_requests_started_total{sel}"
        total = f"dynamo_component_router_requests_total{sel}"
        num_req = self._scalar(
            f"sum(increase({started}[{window}]) or ignoring(__name__) increase({total}[{window}]))",
            at,
        )
        if num_req is None:
            num_req = self._scalar(f"sum(increase({total}[{window}]))", at)
        if num_req is None:
            raise _Unknown("no_data", f"no router request counter series for {sel or 'any'}")
        covered = 0.0
        for metric in (started, total):
            stale = self._scalar(f"count(increase({metric}[{window}]) unless {metric})", at)
            _stale_count(stale, metric)
            late = late_series(metric, window_s, at)
            covered += self._scalar(f"count(increase({metric}[{window}]) unless ({late}))", at) or 0
        _held_from_start(covered, "router request counter")
        return (
            num_req,
            self._router_mean("input_sequence_tokens", window, at),
            (self._router_mean("output_sequence_tokens", window, at)),
        )

    def _scalar(self, promql: str, at: float | None) -> float | None:
        """The value of an aggregation without ``by`` (None: no series).

        Such a query has one series at most: more is a malformed answer (a proxy or federation
        layer in between), a :class:`PrometheusQueryError` — picking one, or adding them up,
        would be a guess at which the answer meant.
        """
        samples = self.client.query(promql, at)
        if len(samples) > 1:
            raise malformed_response(promql, f"{len(samples)} series, where an aggregation has one")
        return samples[0][1] if samples else None

    def _router_mean(
        self, metric: str, window: str, at: float | None, namespace: str | None = None
    ) -> float | None:
        sel = self._selector(namespace)
        name = f"dynamo_component_router_{metric}"
        total = self._scalar(f"sum(increase({name}_sum{sel}[{window}]))", at)
        count = self._scalar(f"sum(increase({name}_count{sel}[{window}]))", at)
        if total is None or count is None:
            return None
        return total / count if count > 0 else math.nan

    # --- KV hit rate -------------------------------------------------------------------------

    def kv_hit_rate(self, window_s: float, at: float | None = None) -> float | None:
        """Router KV hit rate over the window (suffixed namespace first); None = unknown."""
        window = window_literal(window_s)
        candidates: list[str | None] = [self.namespace]
        if self.namespace is not None and self.worker_suffix:
            candidates.insert(0, f"{self.namespace}-{self.worker_suffix}")
        for namespace in candidates:
            try:
                rate = self._router_mean("kv_hit_rate", window, at, namespace)
            except PrometheusQueryError as exc:
                log.warning("KV hit rate of %s unknown: %s", self.deployment, exc)
                return None
            if rate is None:
                continue  # no series under this namespace: try the next one
            if not (0.0 <= rate <= 1.0):  # NaN (idle) included
                if not math.isnan(rate):
                    log.warning("KV hit rate of %s out of range: %s", self.deployment, rate)
                return None
            return rate
        return None

    # --- speculative decoding -------------------------------------------------------------

    def _spec_selector(self) -> str:
        labels = []
        if self.namespace is not None:
            labels.append(f'dynamo_namespace="{namespace_label(self.namespace)}"')
        labels.append('dynamo_endpoint="generate"')
        if self.model is not None:
            labels.append(f"model={json.dumps(self.model)}")  # a quoted, escaped string
        return "{" + ", ".join(labels) + "}"

    def accept_length_query(self, window_s: float) -> str | None:
        """The backend's accept-length PromQL (spec §10.2); None without a backend.

        >>> from connectors.prometheus_api import PrometheusClient, PrometheusSettings
        >>> client = PrometheusClient(PrometheusSettings(endpoint="http://prometheus:9090"))
        >>> source = PrometheusTrafficSource(client, deployment="d", namespace="ns",
        ...                                  spec_decode_backend="sglang")
        >>> print(source.accept_length_query(60))  # doctest: +NORMALIZE_WHITESPACE
        avg(avg_over_time(sglang:spec_accept_length{dynamo_namespace="ns",
        dynamo_endpoint="generate"}[60s]))
        """
        window, sel = window_literal(window_s), self._spec_selector()
        if self.spec_decode_backend == "vllm":
            accepted = f"vllm:spec_decode_num_accepted_tokens_total{sel}"
            drafts = f"vllm:spec_decode_num_drafts_total{sel}"
            return f"1 + (sum(rate({accepted}[{window}]))) / (sum(rate({drafts}[{window}])))"
        if self.spec_decode_backend == "sglang":
            return f"avg(avg_over_time(sglang:spec_accept_length{sel}[{window}]))"
        if self.spec_decode_backend == "trtllm":
            return f"avg(avg_over_time(trtllm_spec_decode_acceptance_length{sel}[{window}]))"
        return None

    def accept_length(self, window_s: float, at: float | None = None) -> float | None:
        """Observed speculative-decoding accept length over the window; None = unknown."""
        promql = self.accept_length_query(window_s)
        if promql is None:
            return None
        try:
            value = self._scalar(promql, at)
        except PrometheusQueryError as exc:
            log.warning("accept length of %s unknown: %s", self.deployment, exc)
            return None
        if value is None or not math.isfinite(value):
            return None
        if value < 1.0:
            log.warning("accept length of %s below 1: %s", self.deployment, value)
            return None
        return value


# --- the bytewax source -------------------------------------------------------------------------


class PrometheusReading(TrafficEvent):
    """A traffic observation read by :class:`PrometheusTrafficInput`, stamped on this host's
    clock when the input hands it on.

    A reading is taken on the host clock, as a DGD inventory poll is, not carried by the data:
    while its queries run (and while it crosses to its deployment's worker) forward passes
    stamped on receipt move event time on. So the live event horizon places a reading behind
    the watermark at the watermark instead of dropping it as late; one ahead of it moves event
    time as any measurement does (a throughput-only deployment may have no other clock). A
    :class:`schemas.TrafficEvent` read from Kafka or a recording is data and stays subject to
    the lateness rules: only this input makes readings — parsing never does (the wire type is
    still ``traffic``), and everywhere else a reading is the TrafficEvent it subclasses (same
    JSON, same window). Defined at module level, so bytewax can pickle it (snapshots, and the
    exchange to the deployment's worker).

    >>> import pickle
    >>> reading = PrometheusReading(deployment="d", time=60.0, payload=TrafficObservation(
    ...     duration_s=60, num_req=120, isl=3000, osl=150))
    >>> copy = pickle.loads(pickle.dumps(reading))
    >>> type(copy).__name__, copy == reading, isinstance(copy, TrafficEvent), copy.type
    ('PrometheusReading', True, True, 'traffic')
    """


@dataclass
class _TrafficPartition(StatefulSourcePartition[PrometheusReading, None]):
    source: PrometheusTrafficSource
    interval_s: float
    clock: Callable[[], float]
    max_polls: int | None
    next_poll: datetime
    polls: int = 0
    _executor: DaemonExecutor = field(init=False)
    """Reads on a daemon thread: a read hung on Prometheus never holds up the process's exit."""
    _pending: Future[TrafficObservation | None] | None = None

    def __post_init__(self) -> None:
        self._executor = DaemonExecutor(f"traffic-{self.source.deployment}")

    def next_batch(self) -> list[PrometheusReading]:
        if inputs_ended():
            raise StopIteration
        if self._pending is not None:
            if not self._pending.done():
                return []
            observation = self._pending.result()
            self._pending = None
            if observation is None:
                return []
            # stamped now, not when the read began: the queries and the wait for this call
            # must not leave it behind what the host-clock inputs handed on meanwhile
            deployment = self.source.deployment
            return [
                PrometheusReading(deployment=deployment, time=self.clock(), payload=observation)
            ]
        if self.max_polls is not None and self.polls >= self.max_polls:
            raise StopIteration
        if datetime.now(UTC) >= self.next_poll:
            self.polls += 1
            self.next_poll += timedelta(seconds=self.interval_s)
            self._pending = self._executor.submit(self._observe)
        return []

    def _observe(self) -> TrafficObservation | None:
        """The window up to Prometheus' now (:meth:`PrometheusClient.now`), on the read's
        thread; ``clock`` only stamps the reading (:meth:`next_batch`)."""
        try:
            return self.source.observe(self.interval_s)
        except Exception:  # never let a bug in a read kill the dataflow: unknown, logged
            log.exception("traffic read of %s failed", self.source.deployment)
            TRAFFIC_UNKNOWN.labels(deployment=self.source.deployment, reason="error").inc()
            return None

    def next_awake(self) -> datetime | None:
        if self._pending is not None:
            return datetime.now(UTC) + PENDING_CHECK
        if self.max_polls is not None and self.polls >= self.max_polls:
            return None  # done: let next_batch end the partition now
        # Never sleep past bytewax's epoch (10 s): a new epoch waits for every partition, so
        # sleeping until a poll 180 s away stalled every other input (next_batch checks the time).
        return min(self.next_poll, datetime.now(UTC) + MAX_SLEEP)

    def snapshot(self) -> None:
        return None

    def close(self) -> None:
        if self._pending is not None:
            self._pending.cancel()  # a read not yet started never starts
        self._executor.shutdown(wait=False)


class PrometheusTrafficInput(FixedPartitionedSource[PrometheusReading, None]):
    """Bytewax source of :class:`PrometheusReading`: one partition (poller) per deployment.

    Each deployment's source is read every ``interval_seconds`` (a number, or one per
    deployment — normally ``throughput_adjustment_interval_seconds``) over that same window;
    the first read comes one interval after start (``first_read_after_seconds`` changes that).
    Unknown traffic yields nothing (the planner then has no traffic for that tick).
    ``max_polls`` ends each partition after that many reads (tests).

    When the first of its partitions is built, each distinct endpoint is probed once
    (:meth:`_probe`), in the background; :attr:`probes` holds each probe's future by endpoint.

    >>> from connectors.prometheus_api import PrometheusClient, PrometheusSettings
    >>> settings = PrometheusSettings(endpoint="http://127.0.0.1:9")
    >>> source = PrometheusTrafficSource(PrometheusClient(settings), deployment="llama")
    >>> PrometheusTrafficInput([source], interval_seconds=180).list_parts()
    ['llama']
    """

    def __init__(
        self,
        sources: list[PrometheusTrafficSource],
        interval_seconds: float | Mapping[str, float],
        *,
        first_read_after_seconds: float | None = None,
        max_polls: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sources = {source.deployment: source for source in sources}
        if len(self.sources) != len(sources):
            raise ValueError("each deployment may have one traffic source")
        if isinstance(interval_seconds, Mapping):
            self.intervals = {d: float(interval_seconds[d]) for d in self.sources}
        else:
            self.intervals = dict.fromkeys(self.sources, float(interval_seconds))
        for deployment, interval in self.intervals.items():
            window_literal(interval)  # validates
            if interval <= 0:
                raise ValueError(f"{deployment}: interval must be > 0")
        self.first_read_after_seconds = first_read_after_seconds
        self.max_polls = max_polls
        self.clock = clock
        self.probes: dict[str, Future[None]] = {}
        self._probes_lock = threading.Lock()  # the workers of a process build parts at once

    def list_parts(self) -> list[str]:
        return sorted(self.sources)

    def build_part(self, step_id: str, for_part: str, resume_state: None) -> _TrafficPartition:
        self._start_probe(_endpoint(self.sources[for_part]))
        return _TrafficPartition(
            source=self.sources[for_part],
            interval_s=self.intervals[for_part],
            clock=self.clock,
            max_polls=self.max_polls,
            next_poll=datetime.now(UTC) + timedelta(seconds=self._first_read_after(for_part)),
        )

    def _first_read_after(self, deployment: str) -> float:
        if self.first_read_after_seconds is None:
            return self.intervals[deployment]
        return self.first_read_after_seconds

    def _start_probe(self, endpoint: str) -> None:
        """Probe ``endpoint`` on a daemon thread of its own, unless it has been already.

        Not in ``build_part`` itself: bytewax builds the partitions one after another before
        any input runs, so a Prometheus that accepts connections and never answers held the
        whole flow up for a full request timeout per deployment.
        """
        with self._probes_lock:
            if endpoint in self.probes:
                return
            executor = DaemonExecutor(f"prometheus-probe-{endpoint}")
            self.probes[endpoint] = executor.submit(lambda: self._probe(endpoint))
        executor.shutdown(wait=False)

    def _probe(self, endpoint: str) -> None:
        """Say now, not at the first read (minutes away), when ``endpoint`` does not answer,
        naming the deployments it serves; a failing probe changes nothing else."""
        deployments = [d for d, source in self.sources.items() if _endpoint(source) == endpoint]
        try:
            self.sources[deployments[0]].client.query("vector(1)")
        except PrometheusQueryError as exc:
            log.warning(
                "%s: Prometheus at %s does not answer (%s); its traffic is unknown until it "
                "does (first read in %g s)",
                ", ".join(deployments),
                endpoint,
                exc,
                min(self._first_read_after(d) for d in deployments),
            )


def _endpoint(source: PrometheusTrafficSource) -> str:
    """The endpoint ``source`` queries, as the start-up probe tells endpoints apart."""
    return source.client.settings.endpoint.rstrip("/")
