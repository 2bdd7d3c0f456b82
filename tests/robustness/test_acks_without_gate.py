"""An acknowledgement only means something to the virtual connector's gate: in a run whose
output is not ``virtual+kafka://`` each ``ack`` event is a dead letter (``ignored: …``),
counted, and changes nothing (they were dropped without a trace). It names the line it was read
from, as written (it said source ``acks``, no position, and the planner's copy of it)."""

from __future__ import annotations

import json

from schemas import PlannerConfig
from tests.flow.streams import DECODE_CONFIG, decode_ramp
from tests.robustness.inline_flow import run_lines

CONFIG = PlannerConfig(**DECODE_CONFIG)


def test_acks_without_an_acknowledgement_gate_are_dead_letters():
    ramp = decode_ramp("llama", engines=2, seconds=60)
    acks = [
        {"type": "ack", "deployment": "llama", "time": t, "payload": {"acked_decision_id": i}}
        for i, t in enumerate((12.0, 31.0, 47.5), start=1)
    ]
    clean = run_lines({"llama": CONFIG}, ramp)
    lines = sorted(ramp + acks, key=lambda e: e["time"])
    mixed = run_lines({"llama": CONFIG}, lines)

    assert [(d.reason, d.deployment, d.source, d.position, d.raw) for d in mixed.dead] == [
        (
            "ignored: no acknowledgement gate: only the decisions a virtual+kafka:// output "
            "sends (not an advisory deployment's) await one",
            "llama",
            "in.jsonl",
            lines.index(ack) + 1,
            json.dumps(ack),
        )
        for ack in acks
    ]
    assert mixed.counted == {"ignored": 3}
    assert clean.decisions
    assert mixed.decisions == clean.decisions
