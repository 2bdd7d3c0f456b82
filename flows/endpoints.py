"""Where ``flowplanner run`` reads and writes: addresses → bytewax sources and sinks.

Inputs (``--input``, repeatable):
  ``PATH``                                      recorded JSONL (``.gz`` ok), replayed on event time;
                                                several files are merged into one stream
                                                ordered by event time (connectors.recorded)
  ``kafka://HOST:PORT/TOPIC``                   an event topic, followed (live)
  ``kafka://HOST:PORT/TOPIC?until=end``         an event topic up to its end at start (replay;
                                                also ``start=end``, see connectors.kafka.url)
  ``kafka://HOST:PORT/TOPIC?format=dynamo-trace&deployment=D``
                                                a frontend's ``dynamo.request.trace.v1`` topic:
                                                its finished requests are D's traffic
  ``zmq+tcp://HOST:PORT?deployment=D&role=R``   an engine FPM publisher (live; ``zmq+ipc://`` too)
  ``prometheus://HOST:PORT?deployment=D``       traffic observations from Prometheus (live;
                                                options ``model``, ``namespace``, and
                                                ``spec_decode=vllm|sglang|trtllm`` to read the
                                                speculative accept length; no HOST:PORT
                                                = ``PROMETHEUS_ENDPOINT``; the token, CA
                                                bundle and TLS check come from the other
                                                ``PROMETHEUS_*`` settings;
                                                ``prometheus+https://`` for TLS)

A run reads its history inputs — recordings and topics, followed or ``?until=end`` — as one
stream merged by event time (connectors.merged), so a replay decides the same however its
events are split among them, and a live worker that reads several followed topics back after a
restart decides as their replay; a followed topic, once read back, goes on as its messages
arrive. (The engines' ZMQ passes and Prometheus readings are stamped on receipt, not merged:
the event horizon holds them while a history is read, flows.horizon.)

Decision outputs (``--output``, repeatable):
  ``-``                                         readable lines on stdout (the default)
  ``PATH``                                      JSON lines
  ``kafka://HOST:PORT/TOPIC``                   one JSON message per decision, key = deployment
  ``virtual+kafka://HOST:PORT/TOPIC?acks=ACKS`` the virtual connector: decisions to TOPIC, held
                                                until acknowledged on ACKS (``flowplanner ack``;
                                                created if missing)
  ``dgd://NAMESPACE/NAME?deployment=D``         patch the DynamoGraphDeployment's replicas, and
                                                read its worker inventory back as an input
                                                (options: ``backend``, ``interval``; ``host``
                                                overrides the API server address only, keeping
                                                the in-cluster or kubeconfig credentials and
                                                CA; ``token_file``, ``ca``: a bearer token file
                                                and a CA bundle; in a pod NAMESPACE may be left
                                                out, and NAME too if
                                                ``DYN_PARENT_DGD_K8S_NAME`` is set)
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, cast, get_args
from urllib.parse import urlsplit

from bytewax.inputs import Source
from bytewax.outputs import Sink

from connectors.address import address_options, has_host_port
from connectors.console import JsonlFileSink, LineSink
from connectors.dgd import DGD_NAME_ENV
from connectors.dgd_api import SERVICE_ACCOUNT_NAMESPACE, pod_namespace
from connectors.dgd_dataflow import DgdInventorySource, DgdSink, parse_dgd_target
from connectors.dgd_graph import check_backend
from connectors.kafka import KafkaConnectorError, KafkaDecisionSink, ensure_topic
from connectors.kafka.sink import DECISIONS_TOPIC_CONFIG
from connectors.kafka.source import KafkaTopicSource
from connectors.kafka.url import KafkaUrl
from connectors.merged import MergedSource, TimedSource
from connectors.prometheus import PrometheusTrafficInput, PrometheusTrafficSource, SpecDecodeBackend
from connectors.prometheus_api import PrometheusClient, PrometheusSettings
from connectors.recorded import RecordedSource, Refusal
from connectors.virtual import AckSource, newest_acks
from connectors.zmq_source import EndpointSpec, ZmqFpmSource
from flows.display import decision_line
from flows.horizon import untimed
from operators.admission import Admission
from schemas import DeliveredDecision, PlannerConfig, Role

log = logging.getLogger(__name__)

LIVE_SKEW_S = 1.0
"""The allowed lateness that covers two followed topics' live skew (measured: at 0, 9 % of a
second topic's events came late; at 1 s none, and the decisions were the replay's)."""


class EndpointError(ValueError):
    """An input or output address that cannot be used.

    >>> try:
    ...     wire(["gopher://x"], [], {})
    ... except EndpointError as error:
    ...     print(error)
    unsupported input 'gopher://x'
    """


@dataclass
class Wiring:
    """Sources and sinks for one run, and whether its clock is the system's (live).

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile(suffix=".jsonl") as recorded:
    ...     wiring = wire([recorded.name], ["-"], {"llama": PlannerConfig()})
    >>> [type(s).__name__ for s in wiring.inputs + wiring.decision_sinks], wiring.live
    (['RecordedSource', 'LineSink'], False)
    """

    inputs: list[Source] = field(default_factory=list)
    decision_sinks: list[Sink] = field(default_factory=list)
    actuators: list[Sink] = field(default_factory=list)
    acks: Source | None = None
    live: bool = False

    def delivered(self) -> tuple[dict[str, DeliveredDecision], dict[str, DeliveredDecision]]:
        """Per deployment, the newest decision the outputs already hold (a decisions topic, a
        DGD's annotation), read once from each — a restarted worker resumes after it — and the
        newest the outputs that change a fleet hold (what the virtual connector's orchestrator
        may still have to acknowledge)."""
        held = {id(sink): sink.delivered() for sink in self._remembering()}
        actuated = [m for sink in self.actuators for m in held.get(id(sink), [])]
        everywhere = [mark for marks in held.values() for mark in marks]
        return DeliveredDecision.newest(everywhere), DeliveredDecision.newest(actuated)

    def acknowledged(self) -> dict[str, int]:
        """Per deployment, the highest decision id the virtual connector's acknowledgement
        topic holds now (:func:`connectors.virtual.newest_acks`; none without the connector)."""
        acks = self.acks
        if not isinstance(acks, AckSource):
            return {}
        return newest_acks(acks.bootstrap, acks.topic, **acks.requests())

    def _remembering(self) -> list[KafkaDecisionSink | DgdSink]:
        sinks = self.decision_sinks + self.actuators
        return [s for s in sinks if isinstance(s, KafkaDecisionSink | DgdSink)]


def _parts(address: str) -> tuple[str, str, str, dict[str, str]]:
    """Scheme, host, path and options of an address; like ``KafkaUrl``, an option given twice
    or given empty is refused (keeping the last, or falling back to a default, would silently
    use something the address did not say).

    >>> _parts("prometheus://h:9090?deployment=a&role=")
    Traceback (most recent call last):
    ...
    flows.endpoints.EndpointError: 'prometheus://h:9090?deployment=a&role=': option 'role' is empty
    """
    url = urlsplit(address)
    try:
        query = address_options(repr(address), url.query)
    except ValueError as exc:
        raise EndpointError(str(exc)) from None
    for name, value in query.items():
        if not value:
            raise EndpointError(f"{address!r}: option {name!r} is empty")
    return url.scheme, url.netloc, url.path, query


def _only(query: dict[str, str], allowed: set[str], address: str) -> None:
    unknown = set(query) - allowed
    if unknown:
        raise EndpointError(
            f"{address!r}: option(s) {', '.join(sorted(unknown))} do not apply here "
            f"(this address takes {', '.join(sorted(allowed))})"
        )


def _kafka_url(address: str) -> KafkaUrl:
    try:
        return KafkaUrl.parse(address)
    except ValueError as exc:
        raise EndpointError(str(exc)) from exc


def wire(inputs: list[str], outputs: list[str], configs: dict[str, PlannerConfig]) -> Wiring:
    """Resolve every address; raises :class:`EndpointError` naming a bad one."""
    wiring = Wiring()
    followed = _wire_inputs(wiring, inputs, configs)
    _wire_outputs(wiring, outputs or ["-"], configs)
    history = [s for s in wiring.inputs if isinstance(s, RecordedSource | KafkaTopicSource)]
    if len(history) > 1:  # one stream in event-time order while any reads its history
        at = wiring.inputs.index(history[0])
        wiring.inputs = [s for s in wiring.inputs if s not in history]
        wiring.inputs.insert(at, MergedSource(cast(list[TimedSource], history)))
    short = sorted(d for d, c in configs.items() if c.allowed_lateness_seconds < LIVE_SKEW_S)
    if len(followed) > 1 and short:
        log.warning(
            "%d followed Kafka topics: once their histories are read back, each goes on as its "
            "messages arrive, and the one read ahead leaves the other's events late; give "
            "allowed_lateness_seconds at least %g s (deployment(s) %s have less)",
            len(followed),
            LIVE_SKEW_S,
            ", ".join(short),
        )
    return wiring


def _wire_inputs(wiring: Wiring, inputs: list[str], configs: dict[str, PlannerConfig]) -> list[str]:
    """Add the sources of ``inputs`` to ``wiring`` (the recorded files as one, at the first's
    place; the Prometheus endpoints as one; the ZMQ publishers as one); the Kafka topics it
    follows live."""
    gathered = _GatheredInputs(wiring, configs, Admission(configs).refusal)
    for address in inputs:
        gathered.add(address)
    gathered.add_recordings()
    gathered.add_traffic()
    gathered.add_engines()
    return gathered.followed


@dataclass
class _GatheredInputs:
    """The ``--input`` addresses of one run as they are read: a topic's source is wired at
    once; the recorded files, the Prometheus endpoints and the ZMQ publishers are gathered,
    each kind into one source once every address is read."""

    wiring: Wiring
    configs: dict[str, PlannerConfig]
    refusal: Refusal  # a refused event's time orders no merge
    recorded: list[str] = field(default_factory=list)
    recorded_at: int = 0
    traffic: list[PrometheusTrafficSource] = field(default_factory=list)
    engines: list[EndpointSpec] = field(default_factory=list)
    followed: list[str] = field(default_factory=list)

    def add(self, address: str) -> None:
        """Wire or gather one input address."""
        scheme, netloc, path, query = _parts(address) if "://" in address else ("", "", "", {})
        if scheme in ("", "file"):
            self._recording(address)
        elif scheme == "kafka":
            self._topic(address, query)
        elif scheme in ("zmq+tcp", "zmq+ipc"):
            self._fpm_publisher(address, scheme, netloc, path, query)
        elif scheme in ("prometheus", "prometheus+https"):
            http = "https" if scheme.endswith("https") else "http"
            self.traffic.append(_prometheus(address, http, netloc, query, self.configs))
            self.wiring.live = True
        else:
            raise EndpointError(f"unsupported input {address!r}")

    def _recording(self, address: str) -> None:
        """A recorded file (``PATH`` or ``file://PATH``); the first one's place is the source's."""
        if not self.recorded:
            self.recorded_at = len(self.wiring.inputs)
        self.recorded.append(address.removeprefix("file://"))

    def _topic(self, address: str, query: dict[str, str]) -> None:
        """A ``kafka://`` topic's source, wired now; a followed one makes the run live."""
        _only(query, {"until", "start", "format", "deployment"}, address)
        url = _kafka_url(address)
        if url.format == "dynamo-trace":
            url = replace(url, deployment=_trace_deployment(address, url, self.configs))
        self.wiring.inputs.append(url.event_source(self.refusal))
        self.wiring.live |= not url.until_end
        if not url.until_end:
            self.followed.append(address)

    def _fpm_publisher(
        self, address: str, scheme: str, netloc: str, path: str, query: dict[str, str]
    ) -> None:
        """An engine FPM publisher (``zmq+tcp://`` or ``zmq+ipc://``)."""
        _only(query, {"deployment", "role"}, address)
        if scheme == "zmq+tcp" and not has_host_port(netloc):
            raise EndpointError(f"{address!r}: give the publisher's HOST:PORT, a port 1-65535")
        zmq_url = f"{scheme.removeprefix('zmq+')}://{netloc}{path}"
        self.engines.append(EndpointSpec(zmq_url, *_zmq_target(address, query, self.configs)))
        self.wiring.live = True

    def add_recordings(self) -> None:
        """The recorded files as one source, read as one time-ordered stream."""
        if not self.recorded:
            return
        try:
            self.wiring.inputs.insert(self.recorded_at, RecordedSource(self.recorded, self.refusal))
        except (ValueError, OSError) as exc:
            raise EndpointError(str(exc)) from exc

    def add_traffic(self) -> None:
        """The Prometheus endpoints as one source, each deployment read every throughput
        interval."""
        if not self.traffic:
            return
        intervals = {
            s.deployment: self.configs[s.deployment].throughput_adjustment_interval_seconds
            for s in self.traffic
        }
        try:
            self.wiring.inputs.append(PrometheusTrafficInput(self.traffic, intervals))
        except ValueError as exc:
            raise EndpointError(str(exc)) from exc

    def add_engines(self) -> None:
        """The ZMQ publishers as one source, an engine gone after its deployment's silence."""
        if not self.engines:
            return
        try:
            silence = {
                s.deployment: self.configs[s.deployment].engine_silence_seconds
                for s in self.engines
            }
            self.wiring.inputs.append(ZmqFpmSource(self.engines, engine_silence_seconds=silence))
        except ValueError as exc:
            raise EndpointError(str(exc)) from exc


def _wire_outputs(wiring: Wiring, outputs: list[str], configs: dict[str, PlannerConfig]) -> None:
    """Add the decision sinks, actuators and acknowledgement source of ``outputs``."""
    virtual = [a for a in outputs if a.startswith("virtual+kafka:")]
    if len(virtual) > 1:  # refused before connecting to anything
        raise EndpointError(
            f"{virtual[1]!r}: only one virtual+kafka:// output per run (the acknowledgement gate "
            "of a deployment reads one acknowledgement topic)"
        )
    dgds: dict[tuple[str, str, str | None], str] = {}  # the DGDs scaled, by which output
    for address in outputs:
        scheme, netloc, path, query = _parts(address) if "://" in address else ("", "", "", {})
        if address == "-":
            wiring.decision_sinks.append(LineSink(decision_line))
        elif scheme in ("", "file"):
            wiring.decision_sinks.append(JsonlFileSink(address.removeprefix("file://")))
        elif scheme == "kafka":
            _only(query, {"partitions"}, address)
            wiring.decision_sinks.append(_kafka_url(address).decision_sink())
        elif scheme == "virtual+kafka":
            _only(query, {"acks", "partitions"}, address)
            _virtual_connector(wiring, address, netloc, path, query)
        elif scheme == "dgd":
            dgd = _dgd(address, netloc, path, query, configs, wiring)
            if dgd in dgds:  # one restart mark a DGD: each would overwrite the other's
                raise EndpointError(
                    f"{address!r}: {dgds[dgd]!r} scales the same DGD; a DGD's prefill and "
                    "decode are one deployment of mode disagg"
                )
            dgds[dgd] = address
        else:
            raise EndpointError(f"unsupported output {address!r}")


def _virtual_connector(
    wiring: Wiring, address: str, netloc: str, path: str, query: dict[str, str]
) -> None:
    """The decisions topic of a ``virtual+kafka://`` output as an actuator, and its
    acknowledgement topic (created if missing) as the gate's source."""
    acks = query.pop("acks", None)
    if acks is None:
        raise EndpointError(f"{address!r}: name the acknowledgement topic (?acks=TOPIC)")
    rest = "&".join(f"{k}={v}" for k, v in query.items())
    url = _kafka_url(f"kafka://{netloc}{path}" + (f"?{rest}" if rest else ""))
    wiring.actuators.append(url.decision_sink())
    try:  # the orchestrator may not have acknowledged anything yet; compacted, as the
        # decisions topic: a quiet deployment's newest acknowledgement must outlive
        # time-based retention, or a restarted worker waits for it (spec 11.2)
        ensure_topic(url.bootstrap, acks, topic_config=DECISIONS_TOPIC_CONFIG)
    except KafkaConnectorError as exc:  # an outage, not a bad address: exit 1, not 2
        raise KafkaConnectorError(f"{address!r}: {exc}") from exc
    wiring.acks = AckSource(url.bootstrap, acks)
    wiring.live = True


def _zmq_target(
    address: str, query: dict[str, str], configs: dict[str, PlannerConfig]
) -> tuple[str, Role]:
    """The configured deployment and role an FPM publisher's engines belong to."""
    deployment = query.get("deployment")
    if deployment not in configs:
        known = ", ".join(sorted(configs))
        raise EndpointError(
            f"{address!r}: say which configured deployment its engines serve "
            f"(?deployment=NAME, one of {known})"
        )
    roles = configs[deployment].roles
    role = query.get("role", roles[0] if len(roles) == 1 else None)
    if role is None:
        raise EndpointError(
            f"{address!r}: say which role its engines play (?role=R, one of {', '.join(roles)})"
        )
    if role not in roles:
        raise EndpointError(
            f"{address!r}: role {role!r} is not part of mode {configs[deployment].mode!r} "
            f"of {deployment!r} (one of {', '.join(roles)})"
        )
    return deployment, cast(Role, role)


def _trace_deployment(address: str, url: KafkaUrl, configs: dict[str, PlannerConfig]) -> str:
    """The configured deployment whose requests a ``dynamo.request.trace.v1`` topic holds."""
    deployment = url.deployment or (next(iter(configs)) if len(configs) == 1 else None)
    if deployment not in configs:
        known = ", ".join(sorted(configs))
        raise EndpointError(
            f"{address!r}: say which configured deployment its requests belong to "
            f"(&deployment=NAME, one of {known})"
        )
    return deployment


def _interval(address: str, query: dict[str, str], default: float) -> timedelta:
    """The ``interval`` option in seconds: a finite number > 0."""
    text = query.get("interval")
    try:
        seconds = default if text is None else float(text)
        if math.isfinite(seconds) and seconds > 0:
            return timedelta(seconds=seconds)
    except (ValueError, OverflowError):  # not a number, or beyond what a timedelta holds
        pass
    raise EndpointError(f"{address!r}: interval must be a finite number of seconds > 0")


def _prometheus(
    address: str,
    http: str,
    netloc: str,
    query: dict[str, str],
    configs: dict[str, PlannerConfig],
) -> PrometheusTrafficSource:
    _only(query, {"deployment", "model", "namespace", "spec_decode"}, address)
    deployment = query.get("deployment") or (next(iter(configs)) if len(configs) == 1 else None)
    if deployment not in configs:
        known = ", ".join(sorted(configs))
        raise EndpointError(
            f"{address!r}: say which configured deployment it observes "
            f"(?deployment=NAME, one of {known})"
        )
    backend = query.get("spec_decode")
    if backend is not None and backend not in get_args(SpecDecodeBackend):
        known = ", ".join(get_args(SpecDecodeBackend))
        raise EndpointError(f"{address!r}: spec_decode must be one of {known}, not {backend!r}")
    settings = PrometheusSettings.from_env()
    if netloc:
        settings = replace(settings, endpoint=f"{http}://{netloc}")
    return PrometheusTrafficSource.from_config(
        deployment,
        configs[deployment],
        model=query.get("model"),
        namespace=query.get("namespace"),
        client=PrometheusClient(settings),
        spec_decode_backend=cast(SpecDecodeBackend | None, backend),
    )


def _check_dgd_target(address: str, target: str) -> tuple[str, str]:
    """``dgd://NAMESPACE/NAME`` as the namespace and name it scales; the parts may be left out
    only where they can be found: the name in ``$DYN_PARENT_DGD_K8S_NAME``, the namespace in a
    pod's service account (outside a pod, ``dgd://ns`` would otherwise be a DGD named ``ns`` in
    namespace ``default``, found missing only by the Kubernetes client, with an
    unrelated-looking error)."""
    try:
        namespace, name = parse_dgd_target(target)
    except ValueError:
        raise EndpointError(f"{address!r}: expected dgd://NAMESPACE/NAME") from None
    name = name or os.environ.get(DGD_NAME_ENV)
    if not name:
        raise EndpointError(
            f"{address!r}: name the DGD (dgd://NAMESPACE/NAME) or set {DGD_NAME_ENV}"
        )
    if namespace is None and not SERVICE_ACCOUNT_NAMESPACE.is_file():
        raise EndpointError(
            f"{address!r}: give the namespace too (dgd://NAMESPACE/NAME); it may be left out "
            "only in a pod, whose service account names it"
        )
    return namespace or pod_namespace(SERVICE_ACCOUNT_NAMESPACE), name  # as the connector does


def _dgd(
    address: str,
    netloc: str,
    path: str,
    query: dict[str, str],
    configs: dict[str, PlannerConfig],
    wiring: Wiring,
) -> tuple[str, str, str | None]:
    """Wire a ``dgd://`` output (and its inventory input); the DGD it scales: namespace, name,
    and the API server given (``host=``, else ``None``: the configured one)."""
    _only(query, {"deployment", "backend", "host", "interval", "token_file", "ca"}, address)
    target = f"dgd://{netloc}{path}"
    namespace, name = _check_dgd_target(address, target)
    deployment = query.get("deployment") or (next(iter(configs)) if len(configs) == 1 else None)
    if deployment not in configs:
        raise EndpointError(f"{address!r}: say which deployment it scales (?deployment=NAME)")
    backend = query.get("backend", "vllm")
    try:  # checked before any client is set up
        check_backend(backend)
    except ValueError as exc:
        raise EndpointError(f"{address!r}: {exc}") from None
    actuator: dict[str, Any] = {  # DgdActuator.from_environment's options
        "mode": configs[deployment].mode,
        "backend": backend,
        "host": query.get("host"),
        "token_file": query.get("token_file"),
        "ca_cert": query.get("ca"),
    }
    interval = _interval(address, query, default=10.0)
    wiring.actuators.append(DgdSink.from_target(target, deployment=deployment, **actuator))
    # untimed: the horizon places each poll at the watermark (flows.horizon), so a poll on the
    # host clock never makes events behind it late (a restarted worker's replayed history)
    wiring.inputs.append(
        DgdInventorySource.from_target(target, deployment, interval, clock=untimed, **actuator)
    )
    wiring.live = True
    host = query.get("host")
    return namespace, name, host.rstrip("/") if host else None
