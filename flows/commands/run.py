"""``flowplanner run``: run the planner dataflow on recorded or live inputs.

A recorded input replays on its own event time and the command exits when it ends. A live
input (Kafka followed, ZMQ, a DGD) makes it a long-lived worker; SIGTERM or SIGINT stops it
cleanly (sinks flush and close, the exit status is 0).
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import FrameType

from bytewax._bytewax import cli_main
from bytewax.dataflow import Dataflow
from bytewax.errors import BytewaxRuntimeError
from kubernetes.config.config_exception import ConfigException as KubeConfigException
from prometheus_client import REGISTRY

from connectors.console import JsonlFileSink, LineSink
from connectors.control_api import ControlApi, ControlApiSource
from connectors.dgd import DgdUnavailableError
from connectors.diagnostics import DiagnosticsReportSink
from connectors.kafka import KafkaConnectorError
from connectors.metrics import MetricsServer, MetricsSink, PlannerMetrics
from connectors.profiles import load_profile, read_benchmark
from connectors.prometheus_api import PrometheusQueryError
from connectors.stopping import end_inputs, stop_waiting
from connectors.traces import read_warmup_trace
from flows.cli import MAX_WORKERS, port_number, worker_count
from flows.display import format_time
from flows.endpoints import EndpointError, Wiring, wire
from flows.horizon import untimed
from flows.planner import PlannerSinks, build_flow
from operators.bootstrap import benchmark_fpms, profile_to_fpms
from operators.predictors.warmup import trace_observations
from schemas import (
    ConfigError,
    DeliveredDecision,
    ForwardPassMetrics,
    PlannerConfig,
    Role,
    TrafficObservation,
    load_config,
)

STOP_GRACE_S = 20
"""How long a stop may take before the dataflow is interrupted (a source stuck in a broker
request: they time out in 10 s)."""


class StopRequest:
    """Turns SIGTERM/SIGINT into the end of the inputs, remembering which signal.

    The first signal ends every input at its next read and makes the sinks that wait stop
    waiting (:mod:`connectors.stopping`): the dataflow finishes as at the end of a recording —
    the window still open does not tick, the sinks flush and close — and the runtime exits
    normally. Should that take over :data:`STOP_GRACE_S`, the dataflow is interrupted instead
    (``SIGALRM``; the runtime then prints a panic line as it unwinds its worker threads). Later
    signals are said, nothing more: an interrupt raised inside a sink's ``close()`` would
    abort the process without the summary line.

    It is installed as the handler of SIGTERM, SIGINT and its own SIGALRM for the length of a
    run:

    >>> request = StopRequest()
    >>> request.signal is None  # no signal yet: the run goes on
    True
    """

    def __init__(self) -> None:
        self.signal: str | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGALRM:
            raise KeyboardInterrupt(self.signal)
        if self.signal is not None:
            print(
                f"flowplanner run: {signal.Signals(signum).name} again: already stopping "
                "(sinks are closing)",
                file=sys.stderr,
                flush=True,
            )
            return
        self.signal = signal.Signals(signum).name
        end_inputs()
        # sinks on worker threads waiting (signals reach only this thread): for a broker, for
        # an API server's answer to a DGD patch
        stop_waiting()
        signal.alarm(STOP_GRACE_S)


def run_until_stopped(flow: Dataflow, workers: int, command: str) -> tuple[int, str | None]:
    """Run ``flow`` until its inputs end or SIGTERM/SIGINT stop it (:class:`StopRequest`):
    the exit status (1 after a failure a user can fix, said in one line on stderr) and the
    signal that stopped it, if one did. Other failures are raised. Call it within a long-lived
    command (:data:`flows.cli.LONG_LIVED_COMMANDS`): once the run is over, a signal is only
    said until the command returns (its summary and clean-up still run), and
    :func:`flows.cli.main` puts back the handlers it found."""
    stop = StopRequest()
    end_inputs(False)
    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGALRM)
    previous = {sig: signal.signal(sig, stop) for sig in signals}
    try:
        cli_main(flow, workers_per_process=workers)
    except (KeyboardInterrupt, BytewaxRuntimeError) as exc:
        if stop.signal is None:  # a real failure, not our stop
            cause = user_facing_cause(exc)
            if cause is None:
                raise
            print(f"{command}: {cause}", file=sys.stderr)
            return 1, None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous[signal.SIGALRM])
        for sig in (signal.SIGTERM, signal.SIGINT):  # the run is over: a signal is only said
            # (the start-up's handlers come back as the command returns: flows.cli.main)
            signal.signal(sig, functools.partial(_finishing, command))
    return 0, stop.signal


def _finishing(command: str, signum: int, frame: FrameType | None) -> None:
    print(f"{command}: {signal.Signals(signum).name}: already stopping", file=sys.stderr)


def counter_total(name: str) -> int:
    """Sum of a counter over all its labels (0 when it has no samples)."""
    return int(
        sum(
            sample.value
            for metric in REGISTRY.collect()
            for sample in metric.samples
            if sample.name == f"{name}_total"
        )
    )


USER_FACING_ERRORS = (
    OSError,
    ValueError,
    KafkaConnectorError,
    DgdUnavailableError,
    PrometheusQueryError,
    KubeConfigException,
)
"""Failures a user can fix (an unreachable broker, an unwritable path, no kube config): a
source or sink raises them inside the bytewax runtime, which wraps them in its own errors."""


def user_facing_cause(error: BaseException) -> str | None:
    """The first error under bytewax's wrappers, as one line, when it is one a user can fix.

    >>> try:
    ...     try:
    ...         open("/nonexistent/ticks.jsonl", "w")
    ...     except OSError as exc:
    ...         raise BytewaxRuntimeError("error init StatefulSink") from exc
    ... except BytewaxRuntimeError as wrapped:
    ...     print(user_facing_cause(wrapped))
    [Errno 2] No such file or directory: '/nonexistent/ticks.jsonl'
    """
    seen: set[int] = set()
    cause: BaseException | None = error
    while isinstance(cause, BytewaxRuntimeError) and id(cause) not in seen:
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    if not isinstance(cause, USER_FACING_ERRORS):
        return None
    return " ".join(str(cause).split()) or type(cause).__name__


def preload(
    configs: dict[str, PlannerConfig],
) -> tuple[dict[str, dict[Role, list[ForwardPassMetrics]]], dict[str, list[TrafficObservation]]]:
    """What each deployment knows before live data: perf-model bootstrap FPMs from a worker's
    self-benchmark (``self_benchmark_file``) or else its pre-deployment profile
    (``profile_results_dir``; spec §6.3), and predictor warm-up windows from a trace
    (``load_predictor_warmup_trace``, spec §7.6)."""
    bootstrap, warmup = {}, {}
    for name, config in configs.items():
        if config.self_benchmark_file:
            document = read_benchmark(config.self_benchmark_file)
            bootstrap[name] = benchmark_fpms(document, source=config.self_benchmark_file)
        elif config.profile_results_dir:
            directory = config.profile_results_dir
            bootstrap[name] = profile_to_fpms(load_profile(directory), source=directory)
        if config.load_predictor_warmup_trace:
            warmup[name] = trace_observations(
                read_warmup_trace(config.load_predictor_warmup_trace),
                config.throughput_adjustment_interval_seconds,
            )
    return bootstrap, warmup


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""Log lines of a worker: when, how bad, which part (what an operator greps for)."""


def metrics_port(
    flag: int | None, configs: Mapping[str, PlannerConfig], env: Mapping[str, str]
) -> int | None:
    """The exporter's port, ``None`` for none: ``--metrics-port`` (0 = any free port), else the
    largest ``metric_reporting_prometheus_port`` a config sets, else ``PLANNER_PROMETHEUS_PORT``
    (spec §9.6: the field's default); 0 in the config or the environment means off.

    >>> metrics_port(None, {}, {"PLANNER_PROMETHEUS_PORT": "9085"})
    9085
    >>> off = {"d": PlannerConfig(metric_reporting_prometheus_port=0)}
    >>> metrics_port(None, off, {"PLANNER_PROMETHEUS_PORT": "9085"}) is None  # set: off
    True
    """
    if flag is not None:
        return flag
    field = "metric_reporting_prometheus_port"
    configured = [c.metric_reporting_prometheus_port for c in configs.values()]
    text = env.get("PLANNER_PROMETHEUS_PORT", "").strip()
    if any(field in c.model_fields_set for c in configs.values()) or not text:
        return max(configured, default=0) or None
    try:
        return port_number(text) or None
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"PLANNER_PROMETHEUS_PORT: {exc}") from None


def control_api_port(flag: int | None, configs: Mapping[str, PlannerConfig]) -> int | None:
    """The control API's port, ``None`` for none: ``--control-port`` (0 = any free port), else
    the largest ``control_api_port`` a config sets (0, the default, is off).

    >>> control_api_port(None, {"d": PlannerConfig()}) is None
    True
    >>> control_api_port(None, {"d": PlannerConfig(control_api_port=9086)}), control_api_port(0, {})
    (9086, 0)
    """
    if flag is not None:
        return flag
    return max((c.control_api_port for c in configs.values()), default=0) or None


def jsonl_sink(path: str) -> JsonlFileSink | LineSink:
    """One JSON line per record to ``path``, or to stdout for ``-`` (as ``--output -``; it
    made a file named ``-``).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "ticks.jsonl")
    >>> type(jsonl_sink("-")).__name__, type(jsonl_sink(path)).__name__
    ('LineSink', 'JsonlFileSink')
    """
    if path == "-":
        return LineSink(lambda record: record.model_dump_json())
    return JsonlFileSink(path)


class _CannotStart(Exception):
    """A run that cannot start: the line it says (after ``flowplanner run: ``) and its exit
    status."""

    def __init__(self, line: str, status: int) -> None:
        super().__init__(line)
        self.status = status


@dataclass
class _Start:
    """What a run starts from, read and checked before anything starts."""

    configs: dict[str, PlannerConfig]
    metrics_port: int | None
    control_port: int | None
    wiring: Wiring
    bootstrap: dict[str, dict[Role, list[ForwardPassMetrics]]]
    warmup: dict[str, list[TrafficObservation]]
    reports: DiagnosticsReportSink | None
    delivered: dict[str, DeliveredDecision]
    in_flight: dict[str, DeliveredDecision]
    acknowledged: dict[str, int]


def _start_up(args: argparse.Namespace) -> _Start:
    """Read and check what the run starts from: the configs, ports, wiring and preloaded data
    (:class:`_CannotStart` with status 2 for a mistake in them, 1 for an acknowledgement topic's
    broker out of reach), the reports' sink, then where the outputs resume (status 1 when they
    cannot be read back)."""
    try:
        configs = load_config(args.config)
        port = metrics_port(args.metrics_port, configs, os.environ)
        control_port = control_api_port(args.control_port, configs)
        wiring = wire(args.input, args.output, configs)
        bootstrap, warmup = preload(configs)
    except (ConfigError, EndpointError, ValueError) as exc:  # (an OSError: flows.cli, exit 1)
        raise _CannotStart(f"{exc}", 2) from exc
    except KafkaConnectorError as exc:  # the acknowledgement topic's broker: cannot start
        raise _CannotStart(f"{exc}", 1) from exc
    # an unwritable report directory: an OSError, one line (flows.cli), before anything starts
    reports = DiagnosticsReportSink(configs) if args.reports else None
    try:
        delivered, in_flight = wiring.delivered()
        acknowledged = wiring.acknowledged()
    except USER_FACING_ERRORS as exc:
        raise _CannotStart(f"{user_facing_cause(exc)}", 1) from exc
    return _Start(
        configs=configs,
        metrics_port=port,
        control_port=control_port,
        wiring=wiring,
        bootstrap=bootstrap,
        warmup=warmup,
        reports=reports,
        delivered=delivered,
        in_flight=in_flight,
        acknowledged=acknowledged,
    )


def _announce_resumed(delivered: Mapping[str, DeliveredDecision]) -> None:
    """Say, per deployment, the newest decision its outputs already hold: the run resumes
    after it."""
    for mark in delivered.values():
        print(
            f"flowplanner run: {mark.deployment}'s outputs already hold its decisions up to "
            f"#{mark.decision_id} at {format_time(mark.time)}: resuming after it",
            file=sys.stderr,
        )


def _announce_advisory(configs: Mapping[str, PlannerConfig], wiring: Wiring) -> None:
    """Say which deployments are advisory when the run has actuators: theirs are not applied."""
    if wiring.actuators:
        for name in (name for name, config in configs.items() if config.advisory):
            print(
                f"flowplanner run: {name} is advisory: its decisions are logged and exported, "
                "never applied",
                file=sys.stderr,
            )


def _planner_sinks(
    args: argparse.Namespace, wiring: Wiring, reports: DiagnosticsReportSink | None
) -> PlannerSinks:
    """The run's sinks: the wired actuators and decision outputs, ``--ticks`` and the reports
    for the tick records, ``--dead-letters`` (else stderr) for the dead letters."""
    sinks = PlannerSinks(  # a file that cannot be written: an OSError, one line (flows.cli)
        actuators=wiring.actuators,
        decisions=wiring.decision_sinks,
        ticks=[jsonl_sink(args.ticks)] if args.ticks else [],
        dead_letters=[
            jsonl_sink(args.dead_letters)
            if args.dead_letters
            else LineSink(lambda d: f"dead-letter: {d.model_dump_json()}", "stderr")
        ],
    )
    if reports is not None:
        sinks.ticks.append(reports)
    return sinks


class _Servers:
    """The metrics exporter and the control API a run serves, stopped together."""

    def __init__(self) -> None:
        self.metrics: MetricsServer | None = None
        self.control: ControlApi | None = None

    def serve_metrics(
        self, configs: dict[str, PlannerConfig], port: int | None, sinks: PlannerSinks
    ) -> None:
        """Export the tick records' metrics on ``port`` (none for ``None``);
        :class:`_CannotStart` if the port cannot be served."""
        if port is None:
            return
        metrics = PlannerMetrics(configs)
        sinks.ticks.append(MetricsSink(metrics))
        try:
            self.metrics = metrics.serve(port)
        except OSError as exc:
            raise _CannotStart(f"cannot serve metrics on port {port}: {exc}", 1) from exc
        print(f"flowplanner run: metrics on {self.metrics.url}", file=sys.stderr)

    def serve_control(
        self, configs: dict[str, PlannerConfig], port: int | None, wiring: Wiring
    ) -> None:
        """Serve the control API on ``port`` (none for ``None``; none for a replay, said) and
        read its limits as an input; :class:`_CannotStart` if the port cannot be served."""
        if port is None:
            return
        if not wiring.live:
            print(
                "flowplanner run: no control API for a replay (its limits are the `limits` "
                "events of its inputs)",
                file=sys.stderr,
            )
            return
        control = ControlApi(configs, clock=untimed)  # placed at the watermark, as DGD polls
        try:
            url = control.serve(port)
        except OSError as exc:
            raise _CannotStart(f"cannot serve the control API on port {port}: {exc}", 1) from exc
        self.control = control
        print(f"flowplanner run: control API on {url}/deployments/NAME/limits", file=sys.stderr)
        wiring.inputs.append(ControlApiSource(control))

    def stop(self) -> None:
        """Stop what is served."""
        if self.metrics is not None:
            self.metrics.stop()
        if self.control is not None:
            self.control.stop()


def run(args: argparse.Namespace) -> int:
    """``flowplanner run``: start up, run the dataflow until its inputs end or a signal stops
    it, and say what it did; the exit status."""
    logging.basicConfig(format=LOG_FORMAT, level=logging.WARNING)
    for package in ("connectors", "flows", "operators"):  # ours say what they do; others warn
        logging.getLogger(package).setLevel(logging.INFO)
    # the Kubernetes client's HTTP retries: the DGD connector reports what fails, once
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    servers = _Servers()
    try:
        start = _start_up(args)
        _announce_resumed(start.delivered)
        _announce_advisory(start.configs, start.wiring)
        sinks = _planner_sinks(args, start.wiring, start.reports)
        servers.serve_metrics(start.configs, start.metrics_port, sinks)
        servers.serve_control(start.configs, start.control_port, start.wiring)
    except _CannotStart as exc:
        print(f"flowplanner run: {exc}", file=sys.stderr)
        servers.stop()  # the metrics served when the control API cannot be
        return exc.status
    flow = build_flow(
        start.configs,
        start.wiring.inputs,
        sinks,
        live=start.wiring.live,
        acks=start.wiring.acks,
        bootstrap=start.bootstrap,
        warmup=start.warmup,
        delivered=start.delivered,
        in_flight=start.in_flight,
        acknowledged=start.acknowledged,
    )
    try:
        status, stopped = run_until_stopped(flow, args.workers, "flowplanner run")
    finally:
        servers.stop()
    if status:
        return status
    print(
        f"flowplanner run: {'stopped by ' + stopped + ', ' if stopped else ''}"
        f"{counter_total('flowplanner_events_in')} events in, "
        f"{counter_total('flowplanner_dead_letters')} dead-lettered, "
        f"{counter_total('flowplanner_decisions_out')} decisions",
        file=sys.stderr,
    )
    return 0


def add_to(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run the planner dataflow",
        description="Run the planner on recorded (JSONL) or live inputs and emit decisions. "
        "Addresses are described in flows/endpoints.py and the README.",
    )
    parser.add_argument("--config", required=True, help="YAML/JSON planner config, or inline JSON")
    parser.add_argument(
        "--input",
        action="append",
        required=True,
        help="PATH (recorded JSONL, .gz ok) | kafka://H:P/TOPIC[?until=end] | "
        "kafka://H:P/TOPIC?format=dynamo-trace&deployment=D | "
        "zmq+tcp://H:P?deployment=D&role=R (also zmq+ipc://) | "
        "prometheus://H:P?deployment=D[&model=M&namespace=NS&spec_decode=B] (repeatable)",
    )
    parser.add_argument(
        "--output",
        action="append",
        help="- (readable lines on stdout, default) | PATH (JSON lines) | "
        "kafka://H:P/TOPIC[?partitions=N] | virtual+kafka://H:P/TOPIC?acks=ACKS | "
        "dgd://NS/NAME?deployment=D[&backend=B&host=URL&token_file=F&ca=F&interval=S] "
        "(repeatable)",
    )
    parser.add_argument(
        "--ticks",
        help="also write one JSON tick record per deployment and closed tick window to PATH "
        "(- for stdout; ran_load / ran_throughput say whether a loop ran)",
    )
    parser.add_argument(
        "--dead-letters", help="write dead letters to PATH (- for stdout; default: stderr)"
    )
    parser.add_argument(
        "--reports",
        action="store_true",
        help="write diagnostics HTML reports (config: report_interval_hours, report_output_dir)",
    )
    parser.add_argument(
        "--metrics-port",
        type=port_number,
        help="serve Prometheus metrics on this port (0 = any free port; default: the config's "
        "metric_reporting_prometheus_port, else $PLANNER_PROMETHEUS_PORT; 0 there means off)",
    )
    parser.add_argument(
        "--control-port",
        type=port_number,
        help="serve the control API (PUT/GET /deployments/NAME/limits) on 127.0.0.1 at this "
        "port, live runs only (0 = any free port; default: the config's control_api_port, "
        "where 0 means off)",
    )
    parser.add_argument(
        "-w",
        "--workers",
        type=worker_count,
        default=1,
        help=f"bytewax worker threads, at most {MAX_WORKERS} (default: %(default)s)",
    )
    parser.set_defaults(func=run)
