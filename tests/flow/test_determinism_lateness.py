"""Each deployment keeps its own ``allowed_lateness_seconds``: what one deployment decides, and
which of its inputs are late, does not depend on which other deployments share the flow."""

from __future__ import annotations

import json

import pytest
from bytewax.testing import TestingSink, TestingSource

from flows.planner import PlannerSinks, build_flow
from schemas import PlannerConfig, parse_event
from tests.flow.cluster import run_flow
from tests.flow.streams import DECODE_CONFIG, decode_ramp, merge_streams


def with_late_pass(events: list[dict]) -> list[dict]:
    """``events`` with one forward pass of alpha that arrives 10 s late, ended by a clock."""
    late = json.loads(json.dumps(next(e for e in events if e["type"] == "fpm" and e["time"] > 20)))
    assert late["deployment"] == "alpha"
    late["time"] = 20.0
    at = next(i for i, e in enumerate(events) if e["time"] > 30.0)
    clock = {"type": "clock", "deployment": "alpha", "time": 61.0, "payload": {}}
    return [*events[:at], late, *events[at:], clock]


def run(configs: dict[str, dict], events: list[dict], workers: int):
    decisions, ticks, dead = [], [], []
    flow = build_flow(
        {name: PlannerConfig(**config) for name, config in configs.items()},
        [TestingSource([parse_event(json.dumps(e)) for e in events])],
        PlannerSinks([TestingSink(decisions)], [TestingSink(ticks)], [TestingSink(dead)]),
    )
    run_flow(flow, workers)
    return decisions, ticks, dead


def only(records: list, deployment: str) -> list:
    return [r for r in records if r.deployment == deployment]


@pytest.mark.parametrize("llama_lateness", [30.0, 0.0])
def test_a_deployment_is_late_and_ticks_by_its_own_lateness(llama_lateness, workers):
    alpha = decode_ramp("alpha", engines=2, seconds=60)
    alpha_alone = run({"alpha": DECODE_CONFIG}, with_late_pass(alpha), workers)
    llama = DECODE_CONFIG | {"allowed_lateness_seconds": llama_lateness}
    both = run(
        {"alpha": DECODE_CONFIG, "llama": llama},
        with_late_pass(merge_streams(alpha, decode_ramp("llama", engines=3, seconds=60))),
        workers,
    )

    # alone, with no lateness allowed: the late pass is dead-lettered, every window ticks
    [late] = alpha_alone[2]
    assert late.reason.startswith("late: event time 20.0")
    assert [t.time for t in alpha_alone[1]] == [5.0 * k for k in range(1, 13)]
    assert alpha_alone[0], "the ramp must decide something"
    # beside another deployment, whatever its lateness: the same
    assert only(both[2], "alpha") == alpha_alone[2]
    assert only(both[1], "alpha") == alpha_alone[1]
    assert only(both[0], "alpha") == alpha_alone[0]
