"""The closed-loop commands' fleet options do what their help says, or are not offered.

``flowplanner bench`` picks every row's starting fleet itself (static peak/mean, the first
minute's need, the hindsight plan), so it must refuse ``--prefill``/``--decode`` rather than
accept and ignore them; ``replay`` must start its fleet where they say.
"""

from __future__ import annotations

import json

from flows.cli import build_parser
from flows.commands.replay import scenario_from_args
from tests.flow.runner import flowplanner

TINY = ("--synthetic", "poisson", "--duration", "30", "--rate", "2")


def test_bench_refuses_initial_fleet_options_it_would_ignore():
    done = flowplanner("bench", *TINY, "--prefill", "3")
    assert done.returncode == 2, done.stderr
    assert "unrecognized arguments: --prefill 3" in done.stderr, done.stderr
    assert "bench on" not in done.stderr  # refused before any row ran
    assert "--prefill PREFILL" not in flowplanner("bench", "--help").stdout


def test_bench_builds_its_scenario_without_initial_fleet_options():
    args = build_parser().parse_args(["bench", *TINY])
    scenario, config = scenario_from_args(args)
    assert (scenario.spec.prefill_replicas, scenario.spec.decode_replicas) == (1, 1)
    assert config.mode == "disagg"


def test_replay_starts_the_fleet_it_is_given(tmp_path):
    scores = tmp_path / "scores.json"
    done = flowplanner(
        "replay", *TINY, "--quiet", "--prefill", "3", "--decode", "2", "--json", str(scores)
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(scores.read_text())
    assert result["max_replicas"] == {"prefill": 3, "decode": 2}, result["max_replicas"]
