"""An external orchestrator acknowledging with ``flowplanner ack`` as the README shows it.

The acknowledgement goes through a real broker and the real bytewax runtime: what the command
writes by default must not move the planner's event time (an acknowledgement stamped with the
host clock jumped the watermark of a stream whose event time is not Unix time, and every later
measurement was dead-lettered as late).
"""

from __future__ import annotations

import json

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink, TestingSource
from confluent_kafka import Consumer, TopicPartition

from connectors.kafka import ensure_topic
from connectors.virtual import AckSource, ReadAck
from flows.planner import PlannerSinks, build_flow
from schemas import PlannerConfig, parse_event
from schemas.decision import DeliveredDecision
from tests.flow.cluster import run_flow
from tests.flow.runner import flowplanner
from tests.flow.streams import DECODE_CONFIG, decode_ramp


def acks_on(bootstrap: str, topic: str, workers: int) -> list:
    out: list = []
    flow = Dataflow("acks_in")
    op.output(
        "out", op.input("acks", flow, AckSource(bootstrap, topic, until_end=True)), TestingSink(out)
    )
    run_flow(flow, workers)
    return out


def raw_values(bootstrap: str, topic: str, count: int) -> list[dict]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        return [json.loads(consumer.poll(10).value()) for _ in range(count)]
    finally:
        consumer.close()


def test_default_cli_ack_leaves_event_time_to_the_data(
    tmp_path, kafka_bootstrap, kafka_topic, workers
):
    acks = f"{kafka_topic}-acks"
    ensure_topic(kafka_bootstrap, acks)  # as the planner does when it starts
    done = flowplanner(
        "ack",
        *("--bootstrap", kafka_bootstrap, "--topic", acks),
        *("--deployment", "alpha", "--decision-id", "1"),
    )
    assert done.returncode == 0, done.stderr
    (message,) = raw_values(kafka_bootstrap, acks, 1)
    assert message.get("time") is None, "no time given: the planner applies it from its next tick"
    (ack,) = acks_on(kafka_bootstrap, acks, workers)
    assert isinstance(ack, ReadAck) and ack.position == 0

    # a recorded stream on its own event time (0 .. 60 s, as in the README), then a clock event
    events = decode_ramp("alpha", engines=2, seconds=60)
    events.append({"type": "clock", "deployment": "alpha", "time": 65.0, "payload": {}})
    decisions, ticks, dead = [], [], []
    flow = build_flow(
        {"alpha": PlannerConfig(**DECODE_CONFIG)},
        [TestingSource([parse_event(json.dumps(e)) for e in events])],
        PlannerSinks([TestingSink(decisions)], [TestingSink(ticks)], [TestingSink(dead)]),
        acks=TestingSource([ack]),
        # decision 1 went out before (the virtual connector's topic holds it): an
        # acknowledgement of a decision never issued is refused
        in_flight={"alpha": DeliveredDecision(deployment="alpha", decision_id=1, time=0.0)},
    )
    run_flow(flow, workers)

    assert [d.reason for d in dead] == []
    assert [t.time for t in ticks] == [5.0 * k for k in range(1, 14)]
    assert decisions


def test_explicit_time_is_still_sent(kafka_bootstrap, kafka_topic):
    ensure_topic(kafka_bootstrap, kafka_topic)
    done = flowplanner(
        "ack",
        *("--bootstrap", kafka_bootstrap, "--topic", kafka_topic),
        *("--deployment", "alpha", "--decision-id", "2", "--time", "42.5"),
    )
    assert done.returncode == 0, done.stderr
    assert raw_values(kafka_bootstrap, kafka_topic, 1)[0]["time"] == 42.5
