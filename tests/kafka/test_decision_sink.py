"""KafkaDecisionSink and the decision reader against a real broker (Tansu)."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSource

from connectors.kafka import (
    KafkaConnectorError,
    KafkaDecisionSink,
    read_decision_messages,
    read_decisions,
)
from connectors.kafka.client import ensure_topic, topic_settings
from tests.flow.cluster import run_flow
from tests.flow.runner import flowplanner
from tests.kafka.samples import sample_decision, topic_partitions, write_in_background, write_raw
from tests.services.kafka import tansu_broker, tansu_process
from tests.services.process import free_port, pause, wait_until

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "examples/decode.yaml")
RECORDING = str(REPO / "examples/decode_burst.jsonl")


def test_flow_writes_decisions_that_read_back_in_order(
    kafka_bootstrap: str, kafka_topic: str, workers: int
) -> None:
    decisions = [
        sample_decision(
            deployment=deployment,
            decision_id=decision_id,
            time=10.0 * decision_id,
            num_decode=decision_id,
        )
        for decision_id in range(1, 6)
        for deployment in ("llama", "qwen", "mistral")
    ]
    flow = Dataflow("decisions_out")
    stream = op.input("decisions", flow, TestingSource(decisions))
    stream = op.redistribute("spread", stream)  # both workers' sink partitions write
    op.output("kafka", stream, KafkaDecisionSink(kafka_bootstrap, kafka_topic, partitions=3))
    run_flow(flow, workers)

    messages = list(read_decision_messages(kafka_bootstrap, kafka_topic))
    assert all(m.error is None for m in messages)
    assert sorted(m.decision.model_dump_json() for m in messages) == sorted(
        d.model_dump_json() for d in decisions
    )
    for deployment in ("llama", "qwen", "mistral"):
        mine = [m for m in messages if m.decision.deployment == deployment]
        assert {m.key for m in mine} == {deployment}, "key = deployment"
        assert len({m.partition for m in mine}) == 1, "one deployment stays on one partition"
        if workers == 1:  # one producer: the topic keeps the flow's order
            assert [m.decision.decision_id for m in mine] == [1, 2, 3, 4, 5]


def test_sink_creates_the_topic_with_the_requested_partitions(
    kafka_bootstrap: str, kafka_topic: str
) -> None:
    assert topic_partitions(kafka_bootstrap, kafka_topic) is None
    sink = KafkaDecisionSink(kafka_bootstrap, kafka_topic, partitions=4)
    first = sink.build("out", 0, 2)
    second = sink.build("out", 1, 2)  # the topic exists now: no error, still 4 partitions
    assert topic_partitions(kafka_bootstrap, kafka_topic) == 4
    first.write_batch([sample_decision(deployment="a", decision_id=1)])
    second.write_batch([sample_decision(deployment="b", decision_id=1)])
    first.close()
    second.close()
    assert sorted(d.deployment for d in read_decisions(kafka_bootstrap, kafka_topic)) == ["a", "b"]


def test_sink_config_applies_to_the_topic_check_too(kafka_bootstrap: str, kafka_topic: str) -> None:
    # Connection settings in ``config`` (security.protocol, SASL, here the broker list itself)
    # must reach every client the sink makes, not only the producer.
    unreachable = f"127.0.0.1:{free_port()}"
    sink = KafkaDecisionSink(
        unreachable, kafka_topic, config={"bootstrap.servers": kafka_bootstrap}, timeout_s=30
    )
    part = sink.build("out", 0, 1)
    part.write_batch([sample_decision()])
    part.close()
    assert [d.deployment for d in read_decisions(kafka_bootstrap, kafka_topic)] == ["llama"]


def test_sink_producer_is_idempotent(kafka_bootstrap: str, kafka_topic: str) -> None:
    # librdkafka reports the idempotence state in its statistics: an idempotent producer gets
    # a producer id from the broker (InitProducerId) before it sends anything.
    stats: list[dict] = []
    sink = KafkaDecisionSink(
        kafka_bootstrap,
        kafka_topic,
        config={"statistics.interval.ms": 100, "stats_cb": lambda s: stats.append(json.loads(s))},
    )
    part = sink.build("out", 0, 1)
    part.write_batch([sample_decision()])

    def assigned() -> list[dict]:  # (the sink's short-lived admin client reports no "eos")
        return [s["eos"] for s in stats if s.get("eos", {}).get("idemp_state") == "Assigned"]

    def polled_assigned() -> list[dict]:
        part._producer.poll(0.1)  # serves the statistics callback
        return assigned()

    producers = wait_until(polled_assigned, "an assigned producer id", timeout_s=60)
    assert producers[0]["producer_id"] >= 0
    part.close()


def test_delivery_failure_raises_instead_of_dropping(kafka_topic: str) -> None:
    # The message timeout bounds the first delivery too, which takes 0.5-1 s on one idle core
    # (connection, producer id): 5 s leave a loaded machine room, and the failure takes 5 s.
    sink = KafkaDecisionSink(
        "unused", kafka_topic, config={"message.timeout.ms": 5000}, timeout_s=10
    )
    with tansu_broker() as bootstrap:
        sink.bootstrap = bootstrap
        part = sink.build("out", 0, 1)
        part.write_batch([sample_decision(decision_id=1)])
    # The broker is gone: the next decision cannot be delivered, and the sink must say so.
    with pytest.raises(KafkaConnectorError, match=r"1 decisions could not be written"):
        part.write_batch([sample_decision(decision_id=2)])


def test_an_unreachable_broker_holds_the_decisions_until_it_answers_again(
    kafka_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A paused broker (a network partition, a long GC) must not end a live planner: the sink
    # waits, says so, and delivers everything in order once the broker is back.
    with tansu_process() as (bootstrap, broker):
        part = KafkaDecisionSink(bootstrap, kafka_topic, warn_every_s=0.5).build("out", 0, 1)
        part.write_batch([sample_decision(decision_id=1)])
        pause(broker)
        try:
            writer, outcome = write_in_background(
                part, [sample_decision(decision_id=2), sample_decision(decision_id=3)]
            )
            wait_until(
                lambda: sum("decisions wait for" in r.getMessage() for r in caplog.records) >= 3,
                "three warnings of the waiting sink",
                timeout_s=120,
            )
            assert writer.is_alive() and outcome == []  # still waiting, not failed
        finally:
            broker.send_signal(signal.SIGCONT)
        writer.join(timeout=60)
        assert outcome == [None]
        part.close()
        assert [d.decision_id for d in read_decisions(bootstrap, kafka_topic)] == [1, 2, 3]


def test_sink_rejects_items_that_are_not_decisions(kafka_bootstrap: str, kafka_topic: str) -> None:
    part = KafkaDecisionSink(kafka_bootstrap, kafka_topic).build("out", 0, 1)
    with pytest.raises(TypeError, match="takes ScalingDecision items, got dict"):
        part.write_batch([{"deployment": "llama"}])  # type: ignore[list-item]


def test_reader_reports_bad_messages_with_their_position(
    kafka_bootstrap: str, kafka_topic: str
) -> None:
    part = KafkaDecisionSink(kafka_bootstrap, kafka_topic).build("out", 0, 1)
    part.write_batch([sample_decision(decision_id=1)])
    write_raw(kafka_bootstrap, kafka_topic, [b"{not json", None, b'{"deployment": "x"}'])
    part.write_batch([sample_decision(decision_id=2)])

    messages = list(read_decision_messages(kafka_bootstrap, kafka_topic))
    assert [m.offset for m in messages] == [0, 1, 2, 3, 4]
    assert [m.decision.decision_id for m in messages if m.decision] == [1, 2]
    errors = [m.error for m in messages if m.decision is None]
    assert errors[0].startswith("not a ScalingDecision: Invalid JSON")
    assert errors[1] == "empty message"
    assert errors[2].startswith("not a ScalingDecision: decision_id: Field required")

    with pytest.raises(ValueError, match=rf"{kafka_topic}/0 offset 1: not a ScalingDecision"):
        list(read_decisions(kafka_bootstrap, kafka_topic))


def test_reader_stops_at_the_end_seen_at_start(kafka_bootstrap: str, kafka_topic: str) -> None:
    part = KafkaDecisionSink(kafka_bootstrap, kafka_topic).build("out", 0, 1)
    part.write_batch([sample_decision(decision_id=i) for i in (1, 2, 3)])
    reader = read_decisions(kafka_bootstrap, kafka_topic)
    assert next(reader).decision_id == 1  # the end (offset 3) is fixed now
    part.write_batch([sample_decision(decision_id=4)])
    assert [d.decision_id for d in reader] == [2, 3]
    assert [d.decision_id for d in read_decisions(kafka_bootstrap, kafka_topic)] == [1, 2, 3, 4]
    new_only = read_decisions(kafka_bootstrap, kafka_topic, from_beginning=False)
    assert list(new_only) == []


def test_reader_follows_new_decisions(kafka_bootstrap: str, kafka_topic: str) -> None:
    part = KafkaDecisionSink(kafka_bootstrap, kafka_topic).build("out", 0, 1)
    part.write_batch([sample_decision(decision_id=1)])
    follower = read_decisions(kafka_bootstrap, kafka_topic, follow=True, from_beginning=False)
    part.write_batch([sample_decision(decision_id=2), sample_decision(decision_id=3)])
    assert [next(follower).decision_id, next(follower).decision_id] == [2, 3]
    follower.close()


def test_missing_topic_is_a_clear_error_and_is_not_created(
    kafka_bootstrap: str, kafka_topic: str
) -> None:
    with pytest.raises(KafkaConnectorError, match=rf"topic '{kafka_topic}' does not exist"):
        list(read_decisions(kafka_bootstrap, kafka_topic))
    assert topic_partitions(kafka_bootstrap, kafka_topic) is None


def test_unreachable_broker_is_a_clear_error() -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    with pytest.raises(KafkaConnectorError, match=rf"cannot reach Kafka at {bootstrap}"):
        list(read_decisions(bootstrap, "decisions", timeout_s=1.0))


FOREIGN_DECISIONS = [  # ScalingDecisions by their schema, but no planner's: no deployment, ...
    b'{"deployment":"","decision_id":1,"time":0,"source":"load","reason":"manual"}',
    b'{"deployment":"llama","decision_id":9,"time":-1,"source":"load","reason":"x"}',
    b'{"deployment":"llama","decision_id":9,"time":1e309,"source":"load","reason":"x"}',
    b"{not json",
]


def test_delivered_passes_over_messages_that_are_no_planners_decisions(
    kafka_bootstrap: str, kafka_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    # they once parsed as a ScalingDecision, then failed as a DeliveredDecision: delivered()
    # raised, and `flowplanner run` exited 1 at every restart while the topic held one
    sink = KafkaDecisionSink(kafka_bootstrap, kafka_topic, timeout_s=5)
    sink.build("out", 0, 1).write_batch(
        [sample_decision(deployment="llama", decision_id=3, time=30.0, num_decode=2)]
    )
    write_raw(kafka_bootstrap, kafka_topic, FOREIGN_DECISIONS)
    with caplog.at_level(logging.WARNING, logger="connectors.kafka.sink"):
        held = sink.delivered()
    assert [(m.deployment, m.decision_id, m.time) for m in held] == [("llama", 3, 30.0)]
    (warning,) = [r.getMessage() for r in caplog.records if "not decisions" in r.getMessage()]
    assert warning.startswith(f"4 messages of Kafka topic {kafka_topic} are not decisions")
    assert "partition/offset 0/1: not a ScalingDecision: deployment: String should" in warning


def test_a_newer_planners_decisions_are_read_back(kafka_bootstrap: str, kafka_topic: str):
    # a newer build added fields (to the decision and to its diagnostics): a rolled-back worker
    # read none of its decisions and numbered from #1 again, reusing ids consumers hold
    newer = json.loads(
        sample_decision(deployment="llama", decision_id=7, time=70.0).model_dump_json()
    )
    newer["added_later"] = {"any": "value"}
    newer["diagnostics"]["also_added_later"] = 1.5
    write_raw(kafka_bootstrap, kafka_topic, [json.dumps(newer).encode()])
    held = KafkaDecisionSink(kafka_bootstrap, kafka_topic, timeout_s=5).delivered()
    assert [(m.deployment, m.decision_id, m.time) for m in held] == [("llama", 7, 70.0)]
    (decision,) = read_decisions(kafka_bootstrap, kafka_topic)
    assert decision.decision_id == 7 and "added_later" not in decision.model_dump()


def test_a_restart_behind_a_foreign_decision_resumes(kafka_bootstrap: str, kafka_topic: str):
    KafkaDecisionSink(kafka_bootstrap, kafka_topic).build("out", 0, 1).write_batch(
        [sample_decision(deployment="llama", decision_id=3, time=30.0, num_decode=2)]
    )
    write_raw(kafka_bootstrap, kafka_topic, FOREIGN_DECISIONS[:1])
    output = f"kafka://{kafka_bootstrap}/{kafka_topic}"
    done = flowplanner("run", "--config", CONFIG, "--input", RECORDING, "--output", output)
    assert done.returncode == 0, done.stderr
    assert "llama's outputs already hold its decisions up to #3" in done.stderr
    assert f"1 messages of Kafka topic {kafka_topic} are not decisions" in done.stderr


def test_the_sink_creates_its_topic_compacted(kafka_bootstrap: str, kafka_topic: str) -> None:
    # with the broker's default retention (7 days, delete) a deployment without a decision for
    # longer lost its newest one, and a restarted planner numbered its decisions from 1 again;
    # compacted by key (= deployment), its newest decision is kept. (Tansu keeps the setting
    # and reports it; it does not compact or expire anything, so that part is not tested.)
    sink = KafkaDecisionSink(kafka_bootstrap, kafka_topic)
    sink.build("out", 0, 1)
    assert topic_settings(kafka_bootstrap, kafka_topic)["cleanup.policy"] == "compact"


def test_a_decisions_topic_that_may_expire_decisions_is_named_in_a_warning(
    kafka_bootstrap: str, kafka_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    week = {"cleanup.policy": "delete", "retention.ms": "604800000"}
    ensure_topic(kafka_bootstrap, kafka_topic, topic_config=week)  # made by someone else
    sink = KafkaDecisionSink(kafka_bootstrap, kafka_topic)
    sink.build("out", 0, 1).write_batch(
        [sample_decision(deployment="llama", decision_id=1)]
    )  # left as it is
    assert topic_settings(kafka_bootstrap, kafka_topic)["cleanup.policy"] == "delete"
    with caplog.at_level(logging.WARNING, logger="connectors.kafka.sink"):
        assert [m.decision_id for m in sink.delivered()] == [1]
    (warning,) = [r.getMessage() for r in caplog.records if "cleanup.policy" in r.getMessage()]
    assert warning.startswith(f"Kafka topic {kafka_topic} deletes decisions after 604800000 ms")

    compacted = f"{kafka_topic}-compacted"
    KafkaDecisionSink(kafka_bootstrap, compacted).build("out", 0, 1)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="connectors.kafka.sink"):
        assert KafkaDecisionSink(kafka_bootstrap, compacted).delivered() == []
    assert not [r for r in caplog.records if "cleanup.policy" in r.getMessage()]
