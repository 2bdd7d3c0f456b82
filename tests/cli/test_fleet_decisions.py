"""``flowplanner fleet`` applies only its own deployment's decisions from the decisions topic."""

from __future__ import annotations

import queue

from flows.commands.fleet import apply_decisions
from flows.scenario import Scenario, fleet_spec
from schemas import PlannerConfig, ScalingDecision
from schemas.trace import TraceRequest
from tests.decisions import decision


def test_decisions_of_another_deployment_are_passed_over_and_said_once() -> None:
    # a shared decisions topic holds every planner deployment's decisions; the fleet used to
    # apply all of them, so another deployment's targets resized this fleet
    requests = [TraceRequest(arrival_s=1.0, isl=500, osl=5)]
    fleet = Scenario(requests, fleet_spec(PlannerConfig(mode="agg")), deployment="llama").fleet()
    inbox: queue.Queue[ScalingDecision] = queue.Queue()
    for sent in (
        decision(deployment="qwen", decision_id=1, time=0.0, num_decode=9, reason="scale"),
        decision(deployment="llama", decision_id=1, time=0.0, num_decode=3, reason="scale"),
        decision(deployment="qwen", decision_id=2, time=0.0, num_decode=7, reason="scale"),
    ):
        inbox.put(sent)
    skipped: set[str] = set()
    lines = apply_decisions(fleet, "llama", inbox, skipped)
    assert fleet.inventory().expected_num_decode == 3
    assert [line.split()[0] for line in lines] == ["skipped", "applied"]
    assert "'qwen'" in lines[0] and skipped == {"qwen"}
    inbox.put(decision(deployment="qwen", decision_id=3, time=0.0, num_decode=5, reason="scale"))
    assert apply_decisions(fleet, "llama", inbox, skipped) == []  # said once
    assert fleet.inventory().expected_num_decode == 3


def test_a_message_that_is_no_decision_is_passed_over_and_the_next_applied(
    kafka_bootstrap: str, kafka_topic: str, capsys
) -> None:
    # the fleet's decision thread read with read_decisions, which raises on the first message
    # that is not a decision: the thread died and the fleet applied nothing after it
    from connectors.kafka import ensure_topic, read_decision_messages
    from flows.commands.fleet import follow_decisions
    from tests.kafka.samples import write_raw

    ensure_topic(kafka_bootstrap, kafka_topic)
    good = decision(deployment="llama", decision_id=1, time=0.0, num_decode=3, reason="scale")
    write_raw(
        kafka_bootstrap, kafka_topic, [b'{"not": "a decision"}', good.model_dump_json().encode()]
    )
    inbox: queue.Queue[ScalingDecision] = queue.Queue()
    follow_decisions(read_decision_messages(kafka_bootstrap, kafka_topic), inbox)
    assert inbox.get_nowait() == good and inbox.empty()
    assert "passed over the message at partition 0 offset 0" in capsys.readouterr().err
