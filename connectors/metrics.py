"""The planner's Prometheus metrics: reference gauges and enums, fed from tick records.

:class:`PlannerMetrics` holds the metrics of spec §10.3 under their reference names (prefix
``dynamo_planner_``), every one labelled by ``deployment`` (one flow plans many deployments; the
reference ran one planner per deployment and had no such label). Per-engine gauges also carry
``role``, ``worker_id`` and ``dp_rank``. :meth:`PlannerMetrics.observe` updates them from one
:class:`schemas.TickRecord`:

=================================================  ===============================================
metric                                             from the tick record
=================================================  ===============================================
``num_prefill_replicas``, ``num_decode_replicas``  ready counts (removed when a tick has none)
``observed_requests_per_second``                   ``observed_traffic.num_req / duration_s``
``observed_input/output_sequence_tokens``          ``observed_traffic.isl`` / ``.osl``
``predicted_requests_per_second``                  ``predicted_num_req`` / traffic window (§12)
``predicted_input/output_sequence_tokens``         ``predicted_isl`` / ``predicted_osl``
``predicted_num_prefill/decode_replicas``          the decision's targets
``estimated_ttft_ms``, ``estimated_itl_ms``        diagnostics
``engine_prefill/decode_capacity_..._per_second``  ``engine_rps_prefill`` / ``engine_rps_decode``
``engine_queued_prefill_tokens`` (and 2 more)      ``engines`` (series of engines that are gone
                                                   are removed)
``load_scaling_decision`` (Enum, §4.8 states)      ``load_decision_reason``
``throughput_scaling_decision`` (Enum, §5.3)       ``throughput_decision_reason``
``gpu_hours``                                      integral of ready replicas × GPUs per replica
                                                   over event time
``power_budget_total_watts``,                      ``power_budget_total_watts``,
``power_projected_watts``                          ``power_projected_watts`` (power awareness on)
``power_budget_utilization``                       projected ÷ total
=================================================  ===============================================

Two metrics of ours say whether the planner is alive and how far behind it is:
``flowplanner_ticks_total{deployment}`` counts planner ticks (records on which a loop ran) and
``flowplanner_event_time_seconds{deployment}`` is the end of the latest closed tick window, in
event time (Unix seconds): on a live run ``time() - flowplanner_event_time_seconds`` is the lag.
``flowplanner_perf_samples_set_aside_total{deployment,role}`` counts forward passes a perf model
did not learn from: far off its fit and never confirmed by a second one (a stall, a wrong unit).

A value the record does not carry (``None``) leaves the gauge at its last value, so a gauge
always shows the latest known number (e.g. the throughput reason stays visible between the
throughput ticks). Ready counts are the exception on a record of a tick (one on which a loop
ran): there a missing count means the inventory does not know the role (its service is gone),
so ``num_prefill_replicas`` / ``num_decode_replicas`` of that deployment is removed (absent,
as the series of engines that are gone) and ``gpu_hours`` stops counting the role's replicas.
Records of windows without a tick leave both as they were.

The reference's ``observed_ttft_ms``, ``observed_itl_ms`` and
``observed_request_duration_seconds`` are not exported: traffic observations carry no latencies.

:meth:`PlannerMetrics.serve` starts the HTTP exporter; it serves these metrics together with the
default registry, which holds the pipeline health counters of :mod:`connectors.pipeline_metrics`.
:class:`MetricsSink` is the bytewax sink that observes every tick record of a flow.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from bytewax.outputs import DynamicSink, StatelessSinkPartition
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Enum, Gauge, start_http_server
from prometheus_client.registry import Collector

from schemas import LOAD_REASONS, THROUGHPUT_REASONS, PlannerConfig, TickRecord

PREFIX = "dynamo_planner_"
ENGINE_LABELS = ("deployment", "role", "worker_id", "dp_rank")


@dataclass
class _GpuClock:
    """Per-deployment integration state of ``gpu_hours``."""

    hours: float = 0.0
    last_time: float | None = None
    prefill: int = 0
    decode: int = 0
    gpus_prefill: int = 1
    gpus_decode: int = 1


class PlannerMetrics:
    """The planner's gauges and enums (reference names, labelled by deployment).

    ``gpu_hours`` counts each replica with the GPUs the tick record says it has (the workers'
    capabilities), else ``configs``' ``prefill_engine_num_gpu`` / ``decode_engine_num_gpu``,
    else 1. ``configs`` also gives the throughput window used to turn a predicted request
    count into a rate when the record has no traffic window. ``registry`` defaults to a
    private one, so several instances can live in one process.

    >>> from schemas import TickRecord, TickDiagnostics
    >>> metrics = PlannerMetrics()
    >>> metrics.observe(TickRecord(deployment="llama", time=60.0, ready_decode=3, ran_load=True,
    ...     diagnostics=TickDiagnostics(load_decision_reason="scale_up")))
    >>> metrics.value("num_decode_replicas", deployment="llama")
    3.0
    >>> metrics.value("load_scaling_decision", deployment="llama",
    ...               dynamo_planner_load_scaling_decision="scale_up")
    1
    >>> metrics.value("flowplanner_ticks_total", deployment="llama")
    1.0
    """

    def __init__(
        self,
        configs: Mapping[str, PlannerConfig] | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.configs = dict(configs or {})
        self.registry = registry if registry is not None else CollectorRegistry()
        self._lock = threading.Lock()
        self._gpu: dict[str, _GpuClock] = {}
        self._engines: dict[str, set[tuple[str, str, str, str]]] = {}
        self._latest: dict[str, float] = {}
        self._set_aside: dict[tuple[str, str], int] = {}  # the totals the counter holds

        def gauge(name: str, doc: str, labels: Iterable[str] = ("deployment",)) -> Gauge:
            return Gauge(PREFIX + name, doc, list(labels), registry=self.registry)

        self.num_prefill_replicas = gauge("num_prefill_replicas", "Ready prefill replicas")
        self.num_decode_replicas = gauge(
            "num_decode_replicas", "Ready decode (or aggregated) replicas"
        )
        self.observed_requests_per_second = gauge(
            "observed_requests_per_second", "Observed requests per second over the traffic window"
        )
        self.observed_input_sequence_tokens = gauge(
            "observed_input_sequence_tokens", "Observed mean input sequence length (tokens)"
        )
        self.observed_output_sequence_tokens = gauge(
            "observed_output_sequence_tokens", "Observed mean output sequence length (tokens)"
        )
        self.predicted_requests_per_second = gauge(
            "predicted_requests_per_second", "Predicted requests per second, next window"
        )
        self.predicted_input_sequence_tokens = gauge(
            "predicted_input_sequence_tokens", "Predicted mean input sequence length (tokens)"
        )
        self.predicted_output_sequence_tokens = gauge(
            "predicted_output_sequence_tokens", "Predicted mean output sequence length (tokens)"
        )
        self.predicted_num_prefill_replicas = gauge(
            "predicted_num_prefill_replicas", "Prefill replicas the planner decided on"
        )
        self.predicted_num_decode_replicas = gauge(
            "predicted_num_decode_replicas", "Decode replicas the planner decided on"
        )
        self.gpu_hours = gauge("gpu_hours", "Cumulative GPU-hours of ready replicas")
        self.power_budget_total = gauge(
            "power_budget_total_watts", "GPU power budget (total_gpu_power_limit), W"
        )
        self.power_projected = gauge(
            "power_projected_watts", "Power the planned replicas draw at their GPU caps, W"
        )
        self.power_utilization = gauge(
            "power_budget_utilization", "Projected power / power budget (1 = at the limit)"
        )
        self.estimated_ttft_ms = gauge(
            "estimated_ttft_ms", "Estimated time to first token (max over engines), ms"
        )
        self.estimated_itl_ms = gauge(
            "estimated_itl_ms", "Estimated inter-token latency (max over engines), ms"
        )
        self.engine_prefill_capacity = gauge(
            "engine_prefill_capacity_requests_per_second",
            "Requests per second one prefill engine sustains within the TTFT SLA",
        )
        self.engine_decode_capacity = gauge(
            "engine_decode_capacity_requests_per_second",
            "Requests per second one decode engine sustains within the ITL SLA",
        )
        self.engine_queued_prefill_tokens = gauge(
            "engine_queued_prefill_tokens", "Prompt tokens waiting in one engine", ENGINE_LABELS
        )
        self.engine_queued_decode_kv_tokens = gauge(
            "engine_queued_decode_kv_tokens",
            "KV tokens of preempted decode requests waiting in one engine",
            ENGINE_LABELS,
        )
        self.engine_inflight_decode_kv_tokens = gauge(
            "engine_inflight_decode_kv_tokens",
            "KV tokens of decode requests scheduled in one engine",
            ENGINE_LABELS,
        )
        self.ticks = Counter(
            "flowplanner_ticks",
            "Planner ticks (tick windows in which a scaling loop ran)",
            ["deployment"],
            registry=self.registry,
        )
        self.perf_samples_set_aside = Counter(
            "flowplanner_perf_samples_set_aside",
            "Forward passes far off the perf model that no second one confirmed (not learned)",
            ["deployment", "role"],
            registry=self.registry,
        )
        self.event_time = Gauge(
            "flowplanner_event_time_seconds",
            "End of the latest closed tick window, event time (Unix s); time() minus it = lag",
            ["deployment"],
            registry=self.registry,
        )
        self.load_scaling_decision = Enum(
            PREFIX + "load_scaling_decision",
            "Reason of the latest load-scaling decision",
            ["deployment"],
            states=list(LOAD_REASONS),
            registry=self.registry,
        )
        self.throughput_scaling_decision = Enum(
            PREFIX + "throughput_scaling_decision",
            "Reason of the latest throughput-scaling decision",
            ["deployment"],
            states=list(THROUGHPUT_REASONS),
            registry=self.registry,
        )

    # --- updates ------------------------------------------------------------------------------

    def observe(self, record: TickRecord) -> None:
        """Update every metric of ``record.deployment`` from one tick record."""
        with self._lock:
            self._observe(record)

    def _observe(self, record: TickRecord) -> None:
        d = record.deployment
        self._integrate_gpu_hours(record)
        self._observe_progress(record)
        ticked = record.ran_load or record.ran_throughput
        _set_count(self.num_prefill_replicas, d, record.ready_prefill, ticked)
        _set_count(self.num_decode_replicas, d, record.ready_decode, ticked)

        traffic = record.observed_traffic
        window = traffic.duration_s if traffic is not None and traffic.duration_s > 0 else None
        if traffic is not None:
            _set(self.observed_requests_per_second, d, _ratio(traffic.num_req, window))
            _set(self.observed_input_sequence_tokens, d, traffic.isl)
            _set(self.observed_output_sequence_tokens, d, traffic.osl)

        diag = record.diagnostics
        if window is None and d in self.configs:
            window = self.configs[d].throughput_adjustment_interval_seconds
        _set(self.predicted_requests_per_second, d, _ratio(diag.predicted_num_req, window))
        _set(self.predicted_input_sequence_tokens, d, diag.predicted_isl)
        _set(self.predicted_output_sequence_tokens, d, diag.predicted_osl)
        _set(self.estimated_ttft_ms, d, diag.estimated_ttft_ms)
        _set(self.estimated_itl_ms, d, diag.estimated_itl_ms)
        _set(self.engine_prefill_capacity, d, diag.engine_rps_prefill)
        _set(self.engine_decode_capacity, d, diag.engine_rps_decode)
        _set(self.power_budget_total, d, diag.power_budget_total_watts)
        _set(self.power_projected, d, diag.power_projected_watts)
        _set(
            self.power_utilization,
            d,
            _ratio(diag.power_projected_watts, diag.power_budget_total_watts),
        )
        if record.decision is not None:
            _set(self.predicted_num_prefill_replicas, d, record.decision.num_prefill)
            _set(self.predicted_num_decode_replicas, d, record.decision.num_decode)
        if diag.load_decision_reason is not None:
            self.load_scaling_decision.labels(deployment=d).state(diag.load_decision_reason)
        if diag.throughput_decision_reason is not None:
            self.throughput_scaling_decision.labels(deployment=d).state(
                diag.throughput_decision_reason
            )
        if record.ran_load or record.ran_throughput:
            self._observe_engines(record)

    def _observe_engines(self, record: TickRecord) -> None:
        d = record.deployment
        current: set[tuple[str, str, str, str]] = set()
        for engine in record.engines:
            labels = (d, engine.role, engine.worker_id, str(engine.dp_rank))
            current.add(labels)
            self.engine_queued_prefill_tokens.labels(*labels).set(engine.queued_prefill_tokens)
            self.engine_queued_decode_kv_tokens.labels(*labels).set(engine.queued_decode_kv_tokens)
            self.engine_inflight_decode_kv_tokens.labels(*labels).set(
                engine.inflight_decode_kv_tokens
            )
        for gone in self._engines.get(d, set()) - current:
            for gauge in (
                self.engine_queued_prefill_tokens,
                self.engine_queued_decode_kv_tokens,
                self.engine_inflight_decode_kv_tokens,
            ):
                gauge.remove(*gone)
        self._engines[d] = current

    def _observe_progress(self, record: TickRecord) -> None:
        if record.ran_load or record.ran_throughput:
            self.ticks.labels(deployment=record.deployment).inc()
        else:
            self.ticks.labels(deployment=record.deployment)  # 0 is a value too
        for role, total in record.perf_samples_set_aside.items():
            counter = self.perf_samples_set_aside.labels(deployment=record.deployment, role=role)
            seen = self._set_aside.get((record.deployment, role), 0)
            if total > seen:
                counter.inc(total - seen)
                self._set_aside[(record.deployment, role)] = total
        gauge = self.event_time.labels(deployment=record.deployment)
        latest = self._latest.get(record.deployment)
        if latest is None or record.time > latest:
            self._latest[record.deployment] = record.time
            gauge.set(record.time)

    def _integrate_gpu_hours(self, record: TickRecord) -> None:
        clock = self._gpu.get(record.deployment)
        if clock is None:  # GPUs per replica: the config's until the planner knows better
            config = self.configs.get(record.deployment)
            clock = self._gpu[record.deployment] = _GpuClock(
                gpus_prefill=(config and config.prefill_engine_num_gpu) or 1,
                gpus_decode=(config and config.decode_engine_num_gpu) or 1,
            )
        if clock.last_time is not None and record.time > clock.last_time:
            gpus = clock.prefill * clock.gpus_prefill + clock.decode * clock.gpus_decode
            clock.hours += (record.time - clock.last_time) * gpus / 3600.0
        if clock.last_time is None or record.time > clock.last_time:
            clock.last_time = record.time
        # a tick without a role's count: the inventory no longer knows the role (its service is
        # gone) and its replicas stop counting; a window without a tick changes nothing
        ticked = record.ran_load or record.ran_throughput
        if record.ready_prefill is not None or ticked:
            clock.prefill = record.ready_prefill or 0
        if record.ready_decode is not None or ticked:
            clock.decode = record.ready_decode or 0
        # what the planner knows (workers' capabilities) holds until it says otherwise: a record
        # of a window without a tick carries none
        clock.gpus_prefill = record.gpus_per_prefill or clock.gpus_prefill
        clock.gpus_decode = record.gpus_per_decode or clock.gpus_decode
        self.gpu_hours.labels(deployment=record.deployment).set(clock.hours)

    # --- reading and serving ------------------------------------------------------------------

    def value(self, name: str, **labels: str) -> float | None:
        """Current value of ``dynamo_planner_<name>`` (or of a ``flowplanner_*`` sample named in
        full) with these labels (None if absent)."""
        full = name if name.startswith("flowplanner_") else PREFIX + name
        return self.registry.get_sample_value(full, labels)

    def serve(self, port: int = 0, host: str = "0.0.0.0") -> MetricsServer:
        """Start the HTTP exporter (``/metrics``); ``port=0`` picks a free port.

        It serves the planner metrics and the default registry (pipeline health counters).
        The flow decides whether to call this: ``metric_reporting_prometheus_port == 0`` in the
        config means "disabled" (spec §9.6).
        """
        exposed = CollectorRegistry(support_collectors_without_names=True)
        sources = [self.registry] if self.registry is REGISTRY else [self.registry, REGISTRY]
        exposed.register(_Union(sources))
        httpd, thread = start_http_server(port, addr=host, registry=exposed)
        return MetricsServer(httpd, thread)


def _set(gauge: Gauge, deployment: str, value: float | None) -> None:
    if value is not None:
        gauge.labels(deployment=deployment).set(value)


def _set_count(gauge: Gauge, deployment: str, count: int | None, ticked: bool) -> None:
    """A ready count; on a tick that has none the role is unknown and its series is removed."""
    if count is not None:
        gauge.labels(deployment=deployment).set(count)
    elif ticked:
        gauge.remove(deployment)


def _ratio(count: float | None, window: float | None) -> float | None:
    return None if count is None or not window else count / window


class _Union(Collector):
    """Collects several registries as one (what the exporter serves)."""

    def __init__(self, registries: list[CollectorRegistry]) -> None:
        self.registries = registries

    def collect(self) -> Iterable[Any]:
        for registry in self.registries:
            yield from registry.collect()


@dataclass
class MetricsServer:
    """A running exporter; :meth:`stop` shuts it down and frees the port.

    >>> server = PlannerMetrics().serve(port=0, host="127.0.0.1")
    >>> server.url.startswith("http://127.0.0.1:")
    True
    >>> server.stop()
    """

    httpd: Any
    thread: threading.Thread
    port: int = field(init=False)
    host: str = field(init=False)

    def __post_init__(self) -> None:
        self.host, self.port = self.httpd.server_address[:2]

    @property
    def url(self) -> str:
        """``http://host:port/metrics``."""
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class _MetricsPartition(StatelessSinkPartition[TickRecord]):
    def __init__(self, metrics: PlannerMetrics) -> None:
        self.metrics = metrics

    def write_batch(self, items: list[TickRecord]) -> None:
        for item in items:
            if not isinstance(item, TickRecord):
                raise TypeError(f"MetricsSink takes TickRecords, got {type(item).__name__}")
            self.metrics.observe(item)


class MetricsSink(DynamicSink[TickRecord]):
    """Bytewax sink: every tick record updates ``metrics`` (shared by all workers of a process).

    >>> sink = MetricsSink(PlannerMetrics())
    >>> sink.build("metrics", 0, 1).write_batch([TickRecord(deployment="d", time=1.0)])
    """

    def __init__(self, metrics: PlannerMetrics) -> None:
        self.metrics = metrics

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _MetricsPartition:
        return _MetricsPartition(self.metrics)
