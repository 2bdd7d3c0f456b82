"""Virtual connector over a real broker: decisions out, acknowledgements back, the AckGate hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink, TestingSource
from confluent_kafka import Consumer, TopicPartition

from connectors.kafka import KafkaDecisionSink, ensure_topic, read_decisions
from connectors.virtual import AckSource, ReadAck, newest_acks, parse_ack, send_ack
from operators.ack_gate import AckGate
from schemas import MAX_RAW_CHARS, DeadLetter, ScalingDecision
from schemas.decision import DecisionAck
from tests.flow.cluster import run_flow
from tests.kafka.samples import sample_decision, write_raw
from tests.services.process import free_port

FLOWPLANNER = str(Path(sys.executable).with_name("flowplanner"))


def flowplanner(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [FLOWPLANNER, *args], capture_output=True, text=True, timeout=60, check=False
    )


def ack_cli(bootstrap: str, topic: str, deployment: str, decision_id: int, at: float) -> None:
    result = flowplanner(
        "ack",
        *("--bootstrap", bootstrap, "--topic", topic, "--deployment", deployment),
        *("--decision-id", str(decision_id), "--time", str(at)),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"acknowledged decision {decision_id} of {deployment} on {topic}"
    )


def read_acks(bootstrap: str, topic: str, workers: int) -> list[DecisionAck | DeadLetter]:
    """What the AckSource hands on, each acknowledgement without where it was read."""
    out: list = []
    flow = Dataflow("acks_in")
    acks = op.input("acks", flow, AckSource(bootstrap, topic, until_end=True))
    op.output("out", acks, TestingSink(out))
    run_flow(flow, workers)
    return [item.ack if isinstance(item, ReadAck) else item for item in out]


def test_ack_command_reaches_the_ack_source(
    kafka_bootstrap: str, kafka_topic: str, workers: int
) -> None:
    ensure_topic(kafka_bootstrap, kafka_topic)  # as the planner does when it starts
    ack_cli(kafka_bootstrap, kafka_topic, "llama", 1, at=1000.5)
    ack_cli(kafka_bootstrap, kafka_topic, "qwen", 3, at=1001.0)
    write_raw(kafka_bootstrap, kafka_topic, [b'{"deployment": "llama", "acked_decision_id": -1}'])
    send_ack(kafka_bootstrap, kafka_topic, "llama", 2, time=1002.0)

    assert read_acks(kafka_bootstrap, kafka_topic, workers) == [
        DecisionAck(deployment="llama", acked_decision_id=1, time=1000.5),
        DecisionAck(deployment="qwen", acked_decision_id=3, time=1001.0),
        DeadLetter(
            source=f"kafka:{kafka_topic}/0",
            position=2,
            reason="invalid acknowledgement: acked_decision_id: Input should be greater than or "
            "equal to 0",
            raw='{"deployment": "llama", "acked_decision_id": -1}',
        ),
        DecisionAck(deployment="llama", acked_decision_id=2, time=1002.0),
    ]
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "unused"})
    consumer.assign([TopicPartition(kafka_topic, 0, 0)])
    keys = [consumer.poll(10).key() for _ in range(4)]
    consumer.close()
    assert keys == [b"llama", b"qwen", None, b"llama"], "acks are keyed by deployment"


def test_a_huge_bad_acknowledgement_is_dead_lettered_with_a_bounded_raw() -> None:
    """A multi-megabyte message that is not an acknowledgement: its dead letter keeps the start."""
    huge = json.dumps({"deployment": "llama", "acked_decision_id": 1, "note": "x" * 4_000_000})
    dead = parse_ack(huge.encode(), "kafka:acks/0", 5)
    assert isinstance(dead, DeadLetter)
    assert dead.reason == "invalid acknowledgement: note: Extra inputs are not permitted"
    assert len(dead.raw) <= MAX_RAW_CHARS
    assert huge.startswith(dead.raw) and dead.raw.startswith('{"deployment": "llama"')


def test_an_acknowledgement_timed_in_milliseconds_still_acknowledges() -> None:
    # its time is for the record only; refused, it held the next decision for up to 1800 s
    raw = b'{"deployment": "llama", "acked_decision_id": 1, "time": 1764490000000}'
    ack = parse_ack(raw, "kafka:acks/0", 6)
    assert ack == DecisionAck(deployment="llama", acked_decision_id=1, time=1764490000000.0)
    for bad in (b'"time": -1', b'"time": NaN'):
        dead = parse_ack(b'{"deployment": "llama", "acked_decision_id": 1, ' + bad + b"}", "a", 7)
        assert isinstance(dead, DeadLetter) and "time" in dead.reason


def test_ack_command_rejects_bad_arguments_and_unreachable_brokers(kafka_topic: str) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    base = ("ack", "--bootstrap", bootstrap, "--topic", kafka_topic, "--deployment", "llama")
    bad = flowplanner(*base, "--decision-id", "-3")
    assert bad.returncode == 2
    assert "acked_decision_id: Input should be greater than or equal to 0" in bad.stderr
    down = flowplanner(*base, "--decision-id", "3", "--timeout", "1")
    assert down.returncode == 1
    assert f"cannot reach Kafka at {bootstrap}" in down.stderr
    assert "Traceback" not in bad.stderr + down.stderr


def test_ack_command_refuses_a_missing_topic_and_a_decisions_topic(
    kafka_bootstrap: str, kafka_topic: str
) -> None:
    # both were "acknowledged" with exit status 0: a typo reached no planner, and an ack in the
    # decisions topic was read back as a foreign decision (and, compacted by deployment, could
    # replace the deployment's newest decision)
    base = ("ack", "--bootstrap", kafka_bootstrap, "--deployment", "llama", "--decision-id", "1")
    missing = flowplanner(*base, "--topic", f"{kafka_topic}-typo")
    assert missing.returncode == 1
    assert f"{kafka_topic}-typo" in missing.stderr
    assert "the planner creates its acknowledgement topic" in missing.stderr
    KafkaDecisionSink(kafka_bootstrap, kafka_topic).build("out", 0, 1).write_batch(
        [sample_decision(deployment="llama", decision_id=1, time=0.0, num_decode=5)]
    )
    decisions = flowplanner(*base, "--topic", kafka_topic)
    assert decisions.returncode == 1
    assert f"Kafka topic {kafka_topic} at {kafka_bootstrap} holds scaling decisions" in (
        decisions.stderr
    )
    assert [d.decision_id for d in read_decisions(kafka_bootstrap, kafka_topic)] == [1]
    assert "Traceback" not in missing.stderr + decisions.stderr
    # an events topic too: the acknowledgement stayed in its history, a dead letter at every
    # replay, and was reported acknowledged
    events = f"{kafka_topic}-events"
    ensure_topic(kafka_bootstrap, events)
    write_raw(kafka_bootstrap, events, [b'{"type": "clock", "deployment": "llama", "time": 5}'])
    wrong = flowplanner(*base, "--topic", events)
    assert wrong.returncode == 1
    assert f"Kafka topic {events} at {kafka_bootstrap} holds planner input events" in wrong.stderr


def test_held_decision_goes_out_when_the_orchestrator_acknowledges(
    kafka_bootstrap: str, kafka_topic: str, workers: int
) -> None:
    decisions_topic, acks_topic = f"{kafka_topic}.decisions", f"{kafka_topic}.acks"
    ensure_topic(kafka_bootstrap, acks_topic)
    sink = KafkaDecisionSink(kafka_bootstrap, decisions_topic).build("out", 0, 1)
    gate = AckGate(max_wait_seconds=1800)

    # Planner: the first decision goes out, the next one is held (1 not acknowledged yet).
    sink.write_batch(
        [gate.offer(sample_decision(deployment="llama", decision_id=1, time=0.0, num_decode=5))]
    )
    assert (
        gate.offer(sample_decision(deployment="llama", decision_id=2, time=60.0, num_decode=6))
        is None
    )
    assert read_acks(kafka_bootstrap, acks_topic, workers) == []

    # Orchestrator: reads the decision, applies it, acknowledges it.
    (applied,) = read_decisions(kafka_bootstrap, decisions_topic)
    ack_cli(kafka_bootstrap, acks_topic, applied.deployment, applied.decision_id, at=90.0)

    # Planner: the acknowledgement arrives through the AckSource and releases the held decision.
    for ack in read_acks(kafka_bootstrap, acks_topic, workers):
        assert isinstance(ack, DecisionAck) and ack.time is not None
        released = gate.acknowledge(ack.acked_decision_id, now=ack.time)
        assert released is not None
        sink.write_batch([released])

    sent = list(read_decisions(kafka_bootstrap, decisions_topic))
    assert [(d.decision_id, d.num_decode) for d in sent] == [(1, 5), (2, 6)]
    assert sent[0].note is None
    assert sent[1].note == "held 30 s until decision 1 was acknowledged"


def gate_step(gate: AckGate | None, item: ScalingDecision | float):
    gate = gate or AckGate(max_wait_seconds=1800)
    if isinstance(item, ScalingDecision):
        return gate, gate.offer(item)
    return gate, gate.advance(item)  # a float is event time passing (a tick)


def test_without_acknowledgement_the_flow_proceeds_after_the_timeout(
    kafka_bootstrap: str, kafka_topic: str, workers: int
) -> None:
    # No orchestrator answers. In a real bytewax run the gate holds decision 2, replaces it with
    # 3, and sends 3 once 1800 s of event time have passed since the hold began.
    inputs = [
        sample_decision(deployment="llama", decision_id=1, time=0.0, num_decode=5),
        sample_decision(deployment="llama", decision_id=2, time=100.0, num_decode=6),
        1000.0,
        sample_decision(deployment="llama", decision_id=3, time=200.0, num_decode=7),
        1899.0,
        1900.0,
        1960.0,
    ]
    flow = Dataflow("virtual_timeout")
    items = op.input("in", flow, TestingSource(inputs))
    keyed = op.key_on("by_deployment", items, lambda _: "llama")
    sent = op.filter_map("gate", op.stateful_map("hold", keyed, gate_step), lambda kv: kv[1])
    op.output("kafka", sent, KafkaDecisionSink(kafka_bootstrap, kafka_topic))
    run_flow(flow, workers)

    out = list(read_decisions(kafka_bootstrap, kafka_topic))
    assert [(d.decision_id, d.num_decode, d.time) for d in out] == [(1, 5, 0.0), (2, 7, 200.0)]
    assert out[1].note == (
        "proceeded without acknowledgement of decision 1 after waiting 1800 s "
        "(replaced 1 older held decision(s))"
    )
    table = flowplanner("decisions", "--bootstrap", kafka_bootstrap, "--topic", kafka_topic)
    assert table.returncode == 0, table.stderr
    last = table.stdout.splitlines()[-1]
    assert last.split()[:3] == ["200.0", "llama", "2"]
    assert "note: proceeded without acknowledgement of decision 1" in last


def test_an_acknowledgement_beyond_any_decision_id_is_a_dead_letter_not_a_crash() -> None:
    """2**64 passed the ack source and crashed the flow where it became an input event — at
    every restart again, the acknowledgement topic being read from its start."""
    dead = parse_ack(b'{"deployment": "llama", "acked_decision_id": 18446744073709551616}', "a", 1)
    assert isinstance(dead, DeadLetter) and "acked_decision_id" in dead.reason
    ack = parse_ack(b'{"deployment": "llama", "acked_decision_id": 18446744073709551615}', "a", 2)
    assert isinstance(ack, DecisionAck)  # the largest id a decision can have


def test_the_acknowledgement_topic_is_created_compacted(kafka_bootstrap: str, kafka_topic: str):
    """As the decisions topic: a deployment quiet for longer than time-based retention keeps
    its newest acknowledgement, so a restarted worker does not wait for one already given."""
    from connectors.kafka.client import topic_settings
    from flows.endpoints import wire
    from schemas import PlannerConfig

    acks = f"{kafka_topic}-acks"
    address = f"virtual+kafka://{kafka_bootstrap}/{kafka_topic}?acks={acks}"
    wire([], [address], {"llama": PlannerConfig(mode="decode")})
    assert topic_settings(kafka_bootstrap, acks)["cleanup.policy"] == "compact"


def test_the_newest_acknowledgement_of_each_deployment_is_read_at_start(
    kafka_bootstrap: str, kafka_topic: str
) -> None:
    assert newest_acks(kafka_bootstrap, kafka_topic) == {}  # no topic yet: nothing acknowledged
    ensure_topic(kafka_bootstrap, kafka_topic, partitions=2)
    for deployment, decision_id in (("a", 1), ("b", 4), ("a", 2), ("b", 3)):
        send_ack(kafka_bootstrap, kafka_topic, deployment, decision_id)
    write_raw(kafka_bootstrap, kafka_topic, [b"not an acknowledgement"])
    assert newest_acks(kafka_bootstrap, kafka_topic) == {"a": 2, "b": 4}
