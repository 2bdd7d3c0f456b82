"""Advisory deployments (spec §9.1): their decisions are computed, logged and exported, and
never reach an output that changes a fleet (a DGD, the virtual connector)."""

from __future__ import annotations

import json

from bytewax.testing import TestingSink, TestingSource

from connectors.dgd_dataflow import DgdSink
from connectors.kafka import KafkaDecisionSink
from flows.endpoints import wire
from flows.planner import PlannerSinks, build_flow
from schemas import PlannerConfig, ScalingDecision, parse_event
from tests.flow.cluster import run_flow
from tests.flow.streams import DECODE_CONFIG, decode_ramp, merge_streams


def test_only_the_decisions_of_active_deployments_reach_the_actuators(workers):
    events = merge_streams(
        decode_ramp("active", engines=2, seconds=60), decode_ramp("advised", engines=2, seconds=60)
    )
    configs = {
        "active": PlannerConfig(**DECODE_CONFIG),
        "advised": PlannerConfig(**DECODE_CONFIG, advisory=True),
    }
    exported: list[ScalingDecision] = []
    applied: list[ScalingDecision] = []
    flow = build_flow(
        configs,
        [TestingSource([parse_event(json.dumps(e)) for e in events])],
        PlannerSinks(decisions=[TestingSink(exported)], actuators=[TestingSink(applied)]),
        acks=TestingSource([]),  # behind the virtual connector: advice is never held
    )
    run_flow(flow, workers)
    assert {d.deployment for d in exported} == {"active", "advised"}
    assert applied == [d for d in exported if d.deployment == "active"]
    # the active deployment waits for an acknowledgement after its first decision; the
    # advisory one is not gated, so every decision it makes is exported
    advised = [d for d in exported if d.deployment == "advised"]
    assert len(advised) > len(applied)


def test_outputs_that_change_a_fleet_are_the_actuators():
    dgd = "dgd://ns/graph?deployment=llama&host=http://127.0.0.1:1"
    wiring = wire([], [dgd, "kafka://127.0.0.1:1/x"], {"llama": PlannerConfig(mode="decode")})
    assert [type(s) for s in wiring.actuators] == [DgdSink]
    assert [type(s) for s in wiring.decision_sinks] == [KafkaDecisionSink]
