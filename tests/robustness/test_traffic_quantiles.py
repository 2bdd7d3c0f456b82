"""A traffic observation's length quantiles must fit its mean.

For non-negative lengths a q-quantile is at most ``mean / (1 - q)`` (Markov). A traffic event
with ``isl = 1e-300`` and a p99 of 2**27 sized capacity for an infinite prompt (the run stopped
on a Rust panic, "isl must be a finite number, got inf"); with ``isl = 5`` it scaled prefill and
decode from 1 to 9. Such an event is now a dead letter naming the quantile, the ratio capacity
is sized by is capped at ``1 / (1 - q)``, and a sized length at ``MAX_REQUEST_TOKENS``; the
planner's own windows (request records through the length histogram) never trip the check.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from pydantic import ValidationError

from operators.deployment import DeploymentPlanner
from operators.throughput_scaling import sizing_lengths
from operators.window import TickWindow
from schemas import PlannerConfig, RequestRecord, TrafficObservation, parse_event
from schemas.events import (
    MAX_REQUEST_TOKENS,
    QUANTILE_TOLERANCE,
    key_quantile,
    quantile_ceiling,
    traffic_implausibility,
)
from tests.flow.runner import flowplanner

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "tests/data/profiles/h200_llama3.1-8b-fp8_tp1"


def traffic(**payload: object) -> str:
    body = {"duration_s": 60, "num_req": 600, "isl": 1000, "osl": 100, **payload}
    return json.dumps({"type": "traffic", "deployment": "d", "time": 60.0, "payload": body})


def refusal(line: str) -> str:
    with pytest.raises(ValidationError) as caught:
        parse_event(line)
    return str(caught.value)


# --- the event check ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ({"isl": 1e-300, "isl_quantiles": {"p99": 2**27}}, "isl_quantiles.p99 = 134217728"),
        ({"isl": 5.0, "isl_quantiles": {"p99": 2**27}}, "isl_quantiles.p99 = 134217728"),
        ({"osl": 100, "osl_quantiles": {"p50": 300}}, "osl_quantiles.p50 = 300"),
        ({"osl": 0, "osl_quantiles": {"p90": 1}}, "osl_quantiles.p90 = 1"),
    ],
)
def test_a_quantile_its_mean_cannot_have_is_refused_naming_it(payload, needle):
    message = refusal(traffic(**payload))
    assert needle in message and "is implausible for" in message
    assert "the most a" in message  # says why: the Markov ceiling


@pytest.mark.parametrize(
    "quantiles",
    [
        {"p99": 100_000},  # exactly mean / (1 - 0.99) for a mean of 1000
        {"p99": 100_000 * (1 + QUANTILE_TOLERANCE * 0.9)},  # within the tolerance
        {"p50": 2000, "p90": 10_000},
        {"p0": 1000},
        {"max": 10**6, "p999": 10**6},  # keys no sizing reads are carried, not checked
    ],
)
def test_quantiles_within_the_ceiling_are_taken(quantiles):
    event = parse_event(traffic(isl_quantiles=quantiles))
    assert event.payload.isl_quantiles == quantiles


def test_the_ceiling_is_markovs():
    assert key_quantile("p99") == 0.99 and key_quantile("p50") == 0.5
    assert round(quantile_ceiling(1000.0, 0.99)) == 100_000
    assert quantile_ceiling(1000.0, 0.5) == 2000.0


# --- the planner's own windows never trip it ----------------------------------------------


def _length_sets() -> list[list[int]]:
    rng = random.Random(20240601)
    sets: list[list[int]] = [
        [1],
        [0],
        [7, 7],
        [0, 2**27],
        [1] * 5 + [2**27],  # one huge outlier among tiny prompts
        [3000] * 250,  # all equal
        [0] * 99 + [MAX_REQUEST_TOKENS],
        [511, 512, 513, 1023, 1024, 1025],  # bucket edges
    ]
    for _ in range(300):
        n = rng.choice((1, 2, 3, 5, 10, 101, 600))
        kind = rng.randrange(4)
        if kind == 0:
            sets.append([int(rng.lognormvariate(7, 1.5)) for _ in range(n)])
        elif kind == 1:
            sets.append([rng.randint(0, 2**27) for _ in range(n)])
        elif kind == 2:
            sets.append([rng.randint(0, 3) for _ in range(n)])
        else:
            base = rng.randint(1, 5000)
            sets.append([base] * (n - 1) + [rng.randint(base, 2**27)])
    return sets


def _planner_traffic(isls: list[int], osls: list[int]) -> TrafficObservation:
    """The traffic the planner builds from these request records (one 5 s tick window)."""
    config = PlannerConfig(
        mode="prefill",
        optimization_target="sla",
        enable_load_scaling=False,
        throughput_adjustment_interval_seconds=60,
    )
    planner = DeploymentPlanner("d", config, window_s=5.0)
    records = [RequestRecord(isl=i, osl=o) for i, o in zip(isls, osls, strict=True)]
    planner.on_window(5.0, TickWindow(requests=records))
    observed = planner.traffic_over(5.0, 5.0)
    assert observed is not None and observed.isl_quantiles is not None
    return observed


def test_the_planners_own_windows_never_trip_the_check():
    for lengths in _length_sets():
        obs = _planner_traffic(lengths, lengths[::-1])
        assert traffic_implausibility(obs) is None, lengths[:8]
        # not even by the tolerance: the histogram's quantiles are those of lengths with the
        # window's exact mean (each read as its bucket's mean), so Markov holds to rounding
        for mean, quantiles in ((obs.isl, obs.isl_quantiles), (obs.osl, obs.osl_quantiles)):
            for key, value in (quantiles or {}).items():
                q = key_quantile(key)
                assert q is not None
                assert value <= quantile_ceiling(mean, q) * (1 + 1e-9), (key, value, mean)


# --- sizing: the second line of defence ---------------------------------------------------


def test_the_sizing_ratio_is_capped_at_the_ceiling():
    # built inside (not an event): the check does not run, the cap does
    shape = TrafficObservation(
        duration_s=60, num_req=600, isl=1e-300, osl=5.0, isl_quantiles={"p99": 2.0**27}
    )
    isl, osl = sizing_lengths(1000.0, 100.0, shape, isl_quantile=0.99, osl_quantile=None)
    assert isl == pytest.approx(1000.0 / (1 - 0.99)) and osl == 100.0


def test_a_sized_length_is_at_most_the_longest_request():
    shape = TrafficObservation(
        duration_s=60, num_req=600, isl=1000, osl=100, isl_quantiles={"p99": 90_000}
    )
    assert sizing_lengths(1e12, 1e300, shape, isl_quantile=0.99, osl_quantile=None) == (
        MAX_REQUEST_TOKENS,
        MAX_REQUEST_TOKENS,
    )
    assert sizing_lengths(1e12, 5.0, None, isl_quantile=None, osl_quantile=None) == (
        MAX_REQUEST_TOKENS,
        5.0,
    )


# --- end to end ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad_isl", [1e-300, 5.0])
def test_a_run_dead_letters_the_event_and_decides_nothing_from_it(tmp_path, bad_isl):
    config = tmp_path / "planner.yaml"
    config.write_text(
        "deployments:\n  d:\n    mode: disagg\n    optimization_target: sla\n"
        "    enable_throughput_scaling: true\n    enable_load_scaling: false\n"
        "    throughput_adjustment_interval_seconds: 60\n"
        f"    profile_results_dir: {PROFILE}\n    load_predictor: constant\n"
        "    capacity_isl_quantile: 0.99\n    max_gpu_budget: -1\n"
    )
    lines = [
        '{"type": "capabilities", "deployment": "d", "time": 0.0, "payload": {"prefill": '
        '{"num_gpu": 1, "max_num_batched_tokens": 8192}, "decode": {"num_gpu": 1, '
        '"max_kv_tokens": 2000000, "max_num_seqs": 256}}}',
        '{"type": "inventory", "deployment": "d", "time": 0.0, "payload": {"ready_num_prefill": '
        '1, "ready_num_decode": 1, "expected_num_prefill": 1, "expected_num_decode": 1}}',
        traffic(isl_quantiles={"p99": 3000}),
        traffic(isl=bad_isl, isl_quantiles={"p99": 2**27}).replace('"time": 60.0', '"time": 120'),
        '{"type": "clock", "deployment": "d", "time": 181.0}',
    ]
    recording = tmp_path / "in.jsonl"
    recording.write_text("\n".join(lines) + "\n")
    decisions, letters = tmp_path / "out.jsonl", tmp_path / "dead.jsonl"
    done = flowplanner(
        "run", "--config", str(config), "--input", str(recording),
        "--output", str(decisions), "--dead-letters", str(letters),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    dead = [json.loads(line) for line in letters.read_text().splitlines()]
    assert len(dead) == 1 and "isl_quantiles.p99" in dead[0]["reason"]
    assert decisions.read_text() == ""  # 1 → 9 replicas from the bad window before the fix
