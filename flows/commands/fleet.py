"""``flowplanner fleet``: the simulated engine fleet as a live service (for the compose stack).

It runs the simulator in real time and speaks the production protocols: every forward pass is
published over ZMQ as an engine would (one publisher per role, frames ``[topic, seq, msgpack
FPM]``), capabilities, worker inventory and request arrivals go to a Kafka events topic as
event envelopes, and scaling decisions are read from a Kafka decisions topic and applied to the
fleet (start-up delay, drain); decisions of other deployments on that topic are passed over.
Capabilities and inventory are re-published every ``--status-interval`` seconds, as an
operator's status would be re-read, so a planner that starts late (or drops a late event) still
learns them. Event times are Unix seconds.
"""

from __future__ import annotations

import argparse
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterable

import zmq
from confluent_kafka import Producer

from connectors.kafka import (
    DecisionMessage,
    KafkaConnectorError,
    ensure_topic,
    read_decision_messages,
)
from connectors.kafka.sink import DECISIONS_TOPIC_CONFIG
from connectors.zmq_publisher import FpmPublisher
from flows.cli import positive_float
from flows.commands.replay import add_scenario_args, scenario_from_args
from flows.display import decision_line
from schemas import (
    CapabilitiesEvent,
    ClockEvent,
    ConfigError,
    Event,
    FpmBatchEvent,
    InventoryEvent,
    ScalingDecision,
)
from sim.fleet import FleetSim


def follow_decisions(
    messages: Iterable[DecisionMessage], inbox: queue.Queue[ScalingDecision]
) -> None:
    """Queue every decision of the decisions topic for the fleet; a message that is not one is
    passed over with a line saying so (one bad message must not stop the fleet applying all
    that come after it).

    >>> inbox = queue.Queue()
    >>> good = ScalingDecision(deployment="a", decision_id=1, time=0.0, num_decode=3,
    ...                        source="load", reason="scale")
    >>> follow_decisions([DecisionMessage(0, 0, "a", None, "not JSON"),
    ...                   DecisionMessage(0, 1, "a", good)], inbox)
    >>> inbox.get().decision_id
    1
    """
    for message in messages:
        if message.decision is None:
            print(
                f"fleet: passed over the message at partition {message.partition} offset "
                f"{message.offset}: {message.error}",
                file=sys.stderr,
                flush=True,
            )
            continue
        inbox.put(message.decision)


def run(args: argparse.Namespace) -> int:
    try:
        scenario, _config = scenario_from_args(args)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"flowplanner fleet: {exc}", file=sys.stderr)
        return 2
    fleet = scenario.fleet()
    bootstrap, events_topic = args.kafka, args.events_topic
    try:  # a bad address, a port in use, no broker: one line, before anything starts
        publishers = {
            "prefill": FpmPublisher(args.prefill_publish),
            "decode": FpmPublisher(args.decode_publish),
        }
    except (ValueError, zmq.ZMQError) as exc:
        print(f"flowplanner fleet: cannot publish FPMs: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 1
    try:
        ensure_topic(bootstrap, events_topic)
        ensure_topic(bootstrap, args.decisions_topic, topic_config=DECISIONS_TOPIC_CONFIG)
    except KafkaConnectorError as exc:
        for publisher in publishers.values():
            publisher.close()
        print(f"flowplanner fleet: {exc}", file=sys.stderr)
        return 1
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    inbox: queue.Queue[ScalingDecision] = queue.Queue()
    # The reading position is fixed here, before the start line a planner may be waiting for:
    # every decision written after it is applied.
    messages = read_decision_messages(
        bootstrap, args.decisions_topic, follow=True, from_beginning=False
    )
    threading.Thread(target=follow_decisions, args=(messages, inbox), daemon=True).start()
    print(
        f"fleet {scenario.deployment!r}: FPMs on {publishers['prefill'].url} (prefill), "
        f"{publishers['decode'].url} (decode); events to {events_topic}, decisions from "
        f"{args.decisions_topic}",
        file=sys.stderr,
    )
    origin = time.time()
    next_status = origin
    skipped: set[str] = set()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a stop flushes and reports
    try:
        while fleet.now_s < scenario.end_s:
            time.sleep(args.step)
            for line in apply_decisions(fleet, scenario.deployment, inbox, skipped):
                print(f"fleet: {line}", file=sys.stderr, flush=True)
            for event in fleet.advance(min(time.time() - origin, scenario.end_s)):
                _send(event, origin, publishers, producer, events_topic)
            if time.time() >= next_status:  # status, as an operator re-reads it: state, not news
                next_status += args.status_interval
                for status in _status(fleet, scenario.deployment):
                    _send(status, origin, publishers, producer, events_topic)
            producer.poll(0)
    except KeyboardInterrupt:
        pass
    producer.flush(10)
    print(fleet.result().table())
    return 0


def apply_decisions(
    fleet: FleetSim,
    deployment: str,
    inbox: queue.Queue[ScalingDecision],
    skipped: set[str],
) -> list[str]:
    """Apply the queued decisions for ``deployment``; a decisions topic may be shared, so
    another deployment's are passed over (said once per deployment, remembered in
    ``skipped``). Returns what was done, one line each.

    >>> from flows.scenario import Scenario, fleet_spec
    >>> from schemas import PlannerConfig
    >>> fleet = Scenario([], fleet_spec(PlannerConfig(mode="agg")), deployment="a").fleet()
    >>> inbox = queue.Queue()
    >>> for name in ("b", "a"):
    ...     inbox.put(ScalingDecision(deployment=name, decision_id=1, time=0.0, num_decode=3,
    ...                               source="load", reason="scale"))
    >>> [line.split()[0] for line in apply_decisions(fleet, "a", inbox, set())]
    ['skipped', 'applied']
    >>> fleet.inventory().expected_num_decode
    3
    """
    lines = []
    while not inbox.empty():
        decision = inbox.get()
        if decision.deployment != deployment:
            if decision.deployment not in skipped:
                skipped.add(decision.deployment)
                lines.append(
                    f"skipped decisions of deployment {decision.deployment!r} "
                    f"(this fleet is {deployment!r}): {decision_line(decision)}"
                )
            continue
        fleet.apply(decision)
        lines.append(f"applied {decision_line(decision)}")
    return lines


def _status(fleet: FleetSim, deployment: str) -> list[Event]:
    now = fleet.now_s
    return [
        CapabilitiesEvent(deployment=deployment, time=now, payload=fleet.capabilities()),
        InventoryEvent(deployment=deployment, time=now, payload=fleet.inventory()),
    ]


def _send(
    event: Event,
    origin: float,
    publishers: dict[str, FpmPublisher],
    producer: Producer,
    topic: str,
) -> None:
    if isinstance(event, ClockEvent):
        return
    if isinstance(event, FpmBatchEvent):
        batch = event.payload
        publisher = publishers[batch.role]
        for row in batch.rows:
            publisher.publish_row(batch.worker_id, batch.dp_rank, row)
        return
    stamped = event.model_copy(update={"time": origin + event.time})
    producer.produce(topic, key=event.deployment, value=stamped.model_dump_json().encode())


def add_to(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fleet",
        help="run the simulated fleet live: FPMs over ZMQ, events/decisions over Kafka",
        description="Run the simulated engine fleet in real time, publishing FPMs over ZMQ and "
        "events to Kafka, and applying the decisions it reads back (the compose stack's fleet).",
    )
    add_scenario_args(parser)
    parser.add_argument("--kafka", required=True, metavar="HOST:PORT", help="Kafka broker")
    parser.add_argument(
        "--events-topic",
        default="events",
        help="topic for capabilities, inventory and requests (default: %(default)s)",
    )
    parser.add_argument(
        "--decisions-topic",
        default="decisions",
        help="topic the planner's decisions are read from (default: %(default)s)",
    )
    parser.add_argument(
        "--prefill-publish",
        default="tcp://0.0.0.0:20380",
        help="ZMQ address the prefill engines' FPMs are published on (default: %(default)s)",
    )
    parser.add_argument(
        "--decode-publish",
        default="tcp://0.0.0.0:20381",
        help="ZMQ address the decode engines' FPMs are published on (default: %(default)s)",
    )
    parser.add_argument(
        "--step",
        type=positive_float,
        default=0.5,
        help="seconds between sim steps (default: %(default)s); a step's Kafka events carry "
        "their simulated times, up to a step old, while its FPMs are timed on receipt: keep it "
        "below the planner's allowed_lateness_seconds, or its requests are late",
    )
    parser.add_argument(
        "--status-interval",
        type=positive_float,
        default=5.0,
        help="seconds between re-published capabilities and inventory (default: %(default)s)",
    )
    parser.set_defaults(func=run)
