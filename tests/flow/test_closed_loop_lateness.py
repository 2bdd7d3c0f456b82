"""The closed loop runs with any ``allowed_lateness_seconds``: the simulator's events are in
order, so the loop's planner uses none (a lateness held the window the source waits on open:
the replay hung)."""

from __future__ import annotations

import json

import yaml

from flows.scenario import DEFAULT_CONFIG
from tests.flow.runner import flowplanner


def test_replay_with_lateness_finishes_and_decides_as_without(tmp_path):
    scores = {}
    for lateness in (0, 2, 30):
        config = yaml.safe_load(DEFAULT_CONFIG.read_text())
        config["deployments"]["sim"]["allowed_lateness_seconds"] = lateness
        path = tmp_path / f"late_{lateness}.yaml"
        path.write_text(yaml.safe_dump(config))
        out = tmp_path / f"late_{lateness}.json"
        done = flowplanner(
            *("replay", "--config", str(path), "--synthetic", "poisson"),
            *("--duration", "40", "--quiet", "--json", str(out)),
            timeout=90,
        )
        assert done.returncode == 0, done.stderr
        scores[lateness] = json.loads(out.read_text())
    assert scores[2] == scores[0] == scores[30]
