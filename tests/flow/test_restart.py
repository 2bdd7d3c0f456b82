"""A worker that restarts against a decisions topic resumes after what the topic already holds.

The first run sees the first part of the history and stops (a crash at a window boundary); the
second replays the whole history from the beginning of the events topic. Together they must
leave in the decisions topic exactly what one uninterrupted run sends, bit for bit: nothing
twice, nothing missing, the same ids.
"""

from __future__ import annotations

import json

import pytest
from bytewax.testing import TestingSink, TestingSource
from confluent_kafka import Producer

from connectors.kafka import read_decisions
from connectors.metrics import MetricsSink, PlannerMetrics
from flows.planner import PlannerSinks, build_flow
from operators.ack_gate import AckGate
from schemas import (
    DecisionAck,
    DeliveredDecision,
    PlannerConfig,
    ScalingDecision,
    TickRecord,
    parse_event,
)
from tests.flow.cluster import run_flow
from tests.flow.runner import flowplanner, read_jsonl, write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp, merge_streams, write_stream


def publish(bootstrap: str, topic: str, events: list[dict]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for event in events:
        producer.produce(topic, key=event["deployment"], value=json.dumps(event).encode())
    assert producer.flush(30) == 0


def run(config, source: str, output: str, workers: int = 1):
    done = flowplanner(
        "run", "--config", str(config), "--input", source, "--output", output, "-w", str(workers)
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def in_order(decision: dict) -> tuple[float, str]:
    """Decisions by time, then deployment (two workers write one time's in either order)."""
    return decision["time"], decision["deployment"]


def in_topic(bootstrap: str, topic: str) -> list[dict]:
    decisions = read_decisions(bootstrap, topic)
    return sorted((d.model_dump(mode="json") for d in decisions), key=in_order)


@pytest.mark.services
def test_a_restarted_worker_sends_what_an_uninterrupted_one_would(
    tmp_path, kafka_bootstrap, kafka_topic, workers
):
    # alpha and llama: on two workers, bytewax places them on different ones
    events = merge_streams(
        decode_ramp("alpha", engines=2, seconds=120), decode_ramp("llama", engines=3, seconds=120)
    )
    config = write_config(tmp_path / "c.yaml", {"alpha": DECODE_CONFIG, "llama": DECODE_CONFIG})
    run(config, str(write_stream(tmp_path / "all.jsonl", events)), str(tmp_path / "all.out"))
    uninterrupted = sorted(read_jsonl(tmp_path / "all.out"), key=in_order)
    # The first run's input ends inside the window that ends at crash_at: it never ticks
    crash_at = sorted({d["time"] for d in uninterrupted})[len(uninterrupted) // 4]
    before = [d for d in uninterrupted if d["time"] < crash_at]
    assert 0 < len(before) < len(uninterrupted)  # both runs have decisions to send

    events_topic, decisions = f"{kafka_topic}-events", f"{kafka_topic}-decisions"
    source, output = (
        f"kafka://{kafka_bootstrap}/{events_topic}?until=end",
        (f"kafka://{kafka_bootstrap}/{decisions}"),
    )
    publish(kafka_bootstrap, events_topic, [e for e in events if e["time"] < crash_at])
    run(config, source, output, workers)
    assert in_topic(kafka_bootstrap, decisions) == before

    publish(kafka_bootstrap, events_topic, [e for e in events if e["time"] >= crash_at])
    said = run(config, source, output, workers)
    assert in_topic(kafka_bootstrap, decisions) == uninterrupted
    for name in ("alpha", "llama"):
        last = max((d for d in before if d["deployment"] == name), key=lambda d: d["time"])
        held = f"#{last['decision_id']} at {last['time']:.1f}"
        assert f"{name}'s outputs already hold its decisions up to {held}" in said


@pytest.mark.services
def test_ids_continue_after_the_topic_when_the_history_is_not_replayed(
    tmp_path, kafka_bootstrap, kafka_topic
):
    """A worker on live inputs (here: a later recording) numbers on from the topic's last id."""
    config = write_config(tmp_path / "c.yaml", {"alpha": DECODE_CONFIG})
    first = decode_ramp("alpha", engines=2, seconds=120)
    later = [{**e, "time": e["time"] + 1000.0} for e in first]
    output = f"kafka://{kafka_bootstrap}/{kafka_topic}"
    run(config, str(write_stream(tmp_path / "first.jsonl", first)), output)
    sent_first = in_topic(kafka_bootstrap, kafka_topic)
    run(config, str(write_stream(tmp_path / "later.jsonl", later)), output)
    sent = in_topic(kafka_bootstrap, kafka_topic)
    assert sent[: len(sent_first)] == sent_first
    assert len(sent) == 2 * len(sent_first)  # the later run is the same load, shifted
    assert [d["decision_id"] for d in sent] == list(range(1, len(sent) + 1))


def run_gated(
    delivered: DeliveredDecision,
    acks: list[DecisionAck],
    workers: int,
    *,
    in_flight: bool = True,
) -> list[ScalingDecision]:
    """The planner behind the virtual connector's ack gate, in the bytewax runtime; the
    delivered decision is in the virtual connector's topic (``in_flight``) or only in another
    output."""
    events = [parse_event(json.dumps(e)) for e in decode_ramp("alpha", engines=2, seconds=120)]
    decisions: list[ScalingDecision] = []
    flow = build_flow(
        {"alpha": PlannerConfig(**DECODE_CONFIG)},
        [TestingSource(events)],
        PlannerSinks(decisions=[TestingSink(decisions)]),
        acks=TestingSource(acks),
        delivered={"alpha": delivered},
        in_flight={"alpha": delivered} if in_flight else {},
    )
    run_flow(flow, workers)
    return decisions


def test_behind_the_ack_gate_a_restarted_worker_waits_for_the_delivered_decision(workers):
    delivered = DeliveredDecision(deployment="alpha", decision_id=3, time=100.0, num_decode=4)
    # decision 3 went out before the restart and nobody acknowledged it: everything is held
    assert run_gated(delivered, acks=[], workers=workers) == []
    # acknowledged: the next decision after 100 s goes out, numbered on from 3
    ack = DecisionAck(deployment="alpha", acked_decision_id=3)
    sent = run_gated(delivered, acks=[ack], workers=workers)
    assert [(d.decision_id, d.time) for d in sent][:1] == [(4, 105.0)]


def test_a_decision_only_another_output_holds_is_not_awaited(workers):
    # an advisory run exported decision 3; the same worker, now acting, must not wait for an
    # acknowledgement of a decision the orchestrator never received
    delivered = DeliveredDecision(deployment="alpha", decision_id=3, time=100.0, num_decode=4)
    sent = run_gated(delivered, acks=[], workers=workers, in_flight=False)
    assert [(d.decision_id, d.time) for d in sent][:1] == [(4, 105.0)]


def test_a_decision_equal_to_the_one_in_flight_before_the_restart_is_not_held():
    # decision 3 (decode 3) is in flight; the restarted planner asks for decode 3 again: the
    # orchestrator is already on it, so nothing is held or sent once 3 is acknowledged — as
    # without the restart. A different target is held and released by the acknowledgement.
    def gate(num_decode: int) -> AckGate:
        sent = DeliveredDecision(
            deployment="alpha", decision_id=3, time=100.0, num_decode=num_decode
        )
        return AckGate(1800, last_emitted_id=sent.decision_id, in_flight=(None, sent.num_decode))

    again = ScalingDecision(
        deployment="alpha", decision_id=1, time=105.0, num_decode=3, source="load", reason="x"
    )
    same, other = gate(3), gate(5)
    assert same.offer(again) is None and other.offer(again) is None
    assert same.acknowledge(3, now=110.0) is None
    released = other.acknowledge(3, now=110.0)
    assert released is not None and released.decision_id == 4


def test_a_resumed_worker_records_and_exports_the_decisions_it_does_not_resend(workers):
    # the decisions the outputs held before the restart were left out of the tick records too:
    # --ticks, the reports and the predicted-replica gauges said "no decision" for them, and
    # the gauges stayed absent until the next new decision (long, on a stable fleet)
    events = [parse_event(json.dumps(e)) for e in decode_ramp("alpha", engines=2, seconds=120)]
    configs = {"alpha": PlannerConfig(**DECODE_CONFIG)}

    def replay(delivered: dict[str, DeliveredDecision]):
        ticks: list[TickRecord] = []
        decisions: list[ScalingDecision] = []
        metrics = PlannerMetrics(configs)
        sinks = PlannerSinks(
            decisions=[TestingSink(decisions)], ticks=[TestingSink(ticks), MetricsSink(metrics)]
        )
        run_flow(build_flow(configs, [TestingSource(events)], sinks, delivered=delivered), workers)
        gauges = {
            sample.name: sample.value
            for metric in metrics.registry.collect()
            for sample in metric.samples
            if "predicted_num" in sample.name
        }
        return sorted(ticks, key=lambda t: t.time), decisions, gauges

    ticks, decisions, gauges = replay({})
    assert len(decisions) >= 2 and gauges
    last = decisions[-1]
    held = DeliveredDecision(deployment="alpha", decision_id=last.decision_id, time=last.time)
    resumed_ticks, resent, resumed_gauges = replay({"alpha": held})
    assert resent == []  # the outputs hold every one
    assert [t.model_dump_json() for t in resumed_ticks] == [t.model_dump_json() for t in ticks]
    assert resumed_gauges == gauges
