"""Run the planner dataflow in process (the real bytewax runtime, one worker) over JSON lines,
collecting its tick records, decisions and dead letters, and how much the dead-letter counter
grew by kind."""

from __future__ import annotations

import json
from dataclasses import dataclass

from bytewax.testing import TestingSink, TestingSource, run_main
from prometheus_client import REGISTRY

from connectors.pipeline_metrics import DEAD_LETTER_KINDS
from flows.planner import PlannerSinks, build_flow
from schemas import DeadLetter, PlannerConfig, RawEvent, TickRecord


@dataclass
class FlowOutputs:
    ticks: list[TickRecord]
    dead: list[DeadLetter]
    counted: dict[str, float]
    """Growth of ``flowplanner_dead_letters`` during the run, by kind (kinds that grew)."""

    @property
    def decisions(self) -> list[dict]:
        """The decisions as plain data, without the diagnostics."""
        return [
            r.decision.model_dump(mode="json", exclude={"diagnostics"})
            for r in self.ticks
            if r.decision is not None
        ]


def _dead_letter_counts() -> dict[str, float]:
    kinds = [*DEAD_LETTER_KINDS, "other"]
    return {
        kind: REGISTRY.get_sample_value("flowplanner_dead_letters_total", {"kind": kind}) or 0.0
        for kind in kinds
    }


def run_lines(configs: dict[str, PlannerConfig], lines: list[str | dict]) -> FlowOutputs:
    """The flow's outputs for these input lines (dicts are written as JSON)."""
    raw = [
        RawEvent("in.jsonl", i + 1, line if isinstance(line, str) else json.dumps(line))
        for i, line in enumerate(lines)
    ]
    ticks: list[TickRecord] = []
    dead: list[DeadLetter] = []
    sinks = PlannerSinks(ticks=[TestingSink(ticks)], dead_letters=[TestingSink(dead)])
    before = _dead_letter_counts()
    run_main(build_flow(configs, [TestingSource(raw)], sinks))
    after = _dead_letter_counts()
    counted = {k: after[k] - before[k] for k in after if after[k] != before[k]}
    return FlowOutputs(ticks, dead, counted)
