"""``flowplanner relay``: forward an engine's forward passes from its ZMQ publisher to Kafka.

An engine publishes its ForwardPassMetrics on its own pod's localhost (spec §2.3), where a
planner in another pod cannot subscribe, and a Service's address would reach one pod of many.
The relay runs beside each engine (a sidecar): it subscribes to the engine's publisher, stamps
each forward pass with its receive time (as the planner's own ZMQ input does) and writes it to
a Kafka topic as an input event (key = deployment). The planner follows that topic
(``--input kafka://HOST:PORT/TOPIC``) and so hears every engine, however many the deployment
scales to. Frames that are not forward passes are dead letters on stderr, never forwarded.
SIGTERM/SIGINT stop it once what it read is delivered.

The relays' clocks stamp the events, and the relays of one deployment share its partition:
give the planner an ``allowed_lateness_seconds`` that covers the skew between the engines'
hosts plus the delivery delay (1 s at least), or a pass stamped a little before another
relay's newest is late. The relay's own metrics (ZMQ sequence gaps, engines heard, dead
letters) are on its ``--metrics-port``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import cast, get_args
from urllib.parse import urlsplit

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from prometheus_client import start_http_server

from connectors.address import address_options, has_host_port
from connectors.console import LineSink
from connectors.kafka import KafkaConnectorError, ensure_topic
from connectors.kafka.event_sink import KafkaEventSink
from connectors.kafka.url import KafkaUrl
from connectors.metrics import MetricsServer
from connectors.zmq_source import EndpointSpec, ZmqFpmSource
from flows.cli import port_number
from flows.commands.run import LOG_FORMAT, run_until_stopped
from flows.planner import count_dead_letter, is_event
from schemas import DeadLetter, Role


def publisher(address: str) -> EndpointSpec:
    """``zmq+tcp://HOST:PORT?deployment=D&role=R`` (or ``zmq+ipc://PATH?...``) as an endpoint;
    ``ValueError`` naming what is wrong.

    >>> publisher("zmq+tcp://127.0.0.1:20380?deployment=llama&role=decode").url
    'tcp://127.0.0.1:20380'
    >>> publisher("zmq+tcp://127.0.0.1:20380?deployment=llama")
    Traceback (most recent call last):
    ValueError: 'zmq+tcp://127.0.0.1:20380?deployment=llama': give ?deployment=D&role=prefill|decode
    """
    url = urlsplit(address)
    query = address_options(repr(address), url.query)
    if url.scheme not in ("zmq+tcp", "zmq+ipc"):
        raise ValueError(f"{address!r}: an engine's publisher is zmq+tcp:// or zmq+ipc://")
    if url.scheme == "zmq+tcp" and not has_host_port(url.netloc):
        raise ValueError(f"{address!r}: give the publisher's HOST:PORT, a port 1-65535")
    deployment, role = query.get("deployment"), query.get("role")
    if not deployment or role not in get_args(Role) or set(query) - {"deployment", "role"}:
        raise ValueError(f"{address!r}: give ?deployment=D&role=prefill|decode")
    url_of_socket = f"{url.scheme.removeprefix('zmq+')}://{url.netloc}{url.path}"
    return EndpointSpec(url_of_socket, deployment, cast(Role, role))


def build_relay(publishers: list[EndpointSpec], to: KafkaUrl) -> Dataflow:
    """The relay's dataflow: the publishers' forward passes to ``to``'s topic."""
    flow = Dataflow("relay")
    items = op.input("fpm", flow, ZmqFpmSource(publishers))
    split = op.branch("events", items, is_event)
    op.output("to_kafka", split.trues, KafkaEventSink(to.bootstrap, to.topic))
    render = LineSink(lambda d: f"dead-letter: {d.model_dump_json()}", "stderr")
    # bytewax's branch narrows only its trues: its falses are the dead letters
    letters = cast(op.Stream[DeadLetter], split.falses)
    dead = op.map("count_dead_letters", letters, count_dead_letter)  # on --metrics-port
    op.output("dead_letters", dead, render)
    return flow


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(format=LOG_FORMAT, level=logging.WARNING)
    logging.getLogger("connectors").setLevel(logging.INFO)
    try:
        publishers = [publisher(address) for address in args.source]
        to = KafkaUrl.parse(args.to)
        if set(address_options(args.to, urlsplit(args.to).query)) - {"partitions"}:
            raise ValueError(f"{args.to}: the relay writes events; only ?partitions=N applies")
        flow = build_relay(publishers, to)
    except ValueError as error:
        print(f"flowplanner relay: {error}", file=sys.stderr)
        return 2
    try:
        # an unreachable broker: one line, before starting
        ensure_topic(to.bootstrap, to.topic, partitions=to.partitions)
    except KafkaConnectorError as error:
        print(f"flowplanner relay: {error}", file=sys.stderr)
        return 1
    server = None
    if args.metrics_port is not None:
        try:
            server = MetricsServer(*start_http_server(args.metrics_port))
        except OSError as error:
            print(f"flowplanner relay: cannot serve metrics: {error}", file=sys.stderr)
            return 1
        print(f"flowplanner relay: metrics on {server.url}", file=sys.stderr)
    print(f"flowplanner relay: {len(publishers)} publisher(s) -> {args.to}", file=sys.stderr)
    try:
        status, stopped = run_until_stopped(flow, 1, "flowplanner relay")
    finally:
        if server is not None:
            server.stop()
    if not status:
        print(f"flowplanner relay: stopped by {stopped or 'the end of its input'}", file=sys.stderr)
    return status


def add_to(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "relay",
        help="forward an engine's forward passes from its ZMQ publisher to a Kafka topic",
        description="Run beside an engine (a sidecar): its forward passes, stamped on receipt, "
        "become input events on a Kafka topic that the planner follows.",
    )
    parser.add_argument(
        "--from",
        dest="source",
        action="append",
        required=True,
        metavar="ADDRESS",
        help="the engine's publisher, zmq+tcp://HOST:PORT?deployment=D&role=prefill|decode "
        "(repeatable)",
    )
    parser.add_argument(
        "--to",
        required=True,
        metavar="kafka://HOST:PORT/TOPIC",
        help="the topic the planner follows (created if missing); key = deployment",
    )
    parser.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        metavar="N",
        help="serve the relay's pipeline metrics (flowplanner_fpm_sequence_gaps_total, "
        "flowplanner_fpm_engines, flowplanner_dead_letters_total, ...) on /metrics (0: any "
        "free port); default: none",
    )
    parser.set_defaults(func=run)
