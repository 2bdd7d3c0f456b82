"""The closed loop: the simulated fleet driven by the real planner flow on virtual time."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flows.scenario import DEFAULT_CONFIG, Scenario, fleet_spec, run_planner, run_schedule
from schemas import EngineCapabilities, PlannerConfig, WorkerCapabilities, load_config
from sim.scoring import request_latencies
from sim.workload import burst_load, poisson_load
from tests.flow.runner import flowplanner

CONFIG = load_config(DEFAULT_CONFIG)["sim"]


def attainment(outcome, start_s: float, end_s: float) -> float:
    arrival, ttft, itl, _ = request_latencies(outcome.fleet.requests)
    window = (arrival >= start_s) & (arrival < end_s)
    good = (ttft <= CONFIG.ttft_ms) & (itl <= CONFIG.itl_ms)
    return float(np.mean(good[window]))


@pytest.fixture(scope="module")
def burst():
    # 10 req/s of 3000-token prompts, tripled for 20 minutes: one prefill engine cannot keep up
    requests = burst_load(10.0, [(300.0, 1200.0, 30.0)], 1800.0, seed=7)
    return Scenario(requests, fleet_spec(CONFIG), end_s=1800.0, label="burst")


def test_a_burst_makes_the_planner_scale_up_and_attainment_recover(burst):
    planned = run_planner(burst, CONFIG)
    static = run_schedule(burst, [(0.0, 1, 1)], name="static 1+1")
    prefill = [r.ready_prefill for r in planned.records if 300 <= r.time < 1500]
    assert max(prefill) >= 2, "the burst must add prefill replicas"
    assert max(r.ready_prefill for r in planned.records if r.time < 300) == 1
    # before the new replicas are up, the burst hurts; once they are, requests meet the SLA
    early, late = attainment(planned, 300, 420), attainment(planned, 900, 1500)
    assert late > 0.95 > early
    # the static fleet never recovers during the burst
    assert attainment(static, 900, 1500) < 0.5
    # after the burst the planner gives the replicas back
    assert planned.records[-1].ready_prefill < max(prefill)
    assert planned.result.sla_attainment > static.result.sla_attainment


def test_replay_is_deterministic():
    requests = poisson_load(8.0, 600.0, seed=3)
    runs = [
        run_planner(Scenario(requests, fleet_spec(CONFIG), end_s=600.0), CONFIG) for _ in range(2)
    ]
    assert runs[0].result.to_json() == runs[1].result.to_json()
    assert [r.model_dump() for r in runs[0].records] == [r.model_dump() for r in runs[1].records]


def test_the_demo_command(tmp_path):
    report, scores = tmp_path / "demo.html", tmp_path / "demo.json"
    done = flowplanner(
        "demo", "--report", str(report), "--json", str(scores), "--quiet", timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert "SLA attainment" in done.stdout and "GPU-hours" in done.stdout
    page = report.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") >= 6
    assert "<script" not in page  # opens offline: no scripts, no external resources
    result = json.loads(scores.read_text())
    assert result["num_finished"] == result["num_requests"] > 190_000
    assert result["sla_attainment"] > 0.8


def test_a_power_limit_caps_the_burst_response(burst):
    """Three 700 W GPUs of power: the burst gets a second prefill replica, not the third the
    unlimited planner adds."""
    cap = EngineCapabilities(gpu_power_limit_w=700)
    power = {
        "enable_power_awareness": True,
        "total_gpu_power_limit": 3 * 700,
        "capabilities": WorkerCapabilities(prefill=cap, decode=cap),
    }
    limited = run_planner(burst, PlannerConfig.model_validate(CONFIG.model_dump() | power))
    unlimited = run_planner(burst, CONFIG)
    static = run_schedule(burst, [(0.0, 1, 1)], name="static 1+1")
    assert max(r.ready_prefill for r in unlimited.records) == 3
    assert max(r.ready_prefill for r in limited.records) == 2
    assert max(r.ready_prefill + r.ready_decode for r in limited.records) == 3
    projected = [r.diagnostics.power_projected_watts for r in limited.records if r.ran_load]
    assert projected and max(projected) == 2100
    reasons = {r.diagnostics.load_decision_reason_prefill for r in limited.records}
    assert "power_budget_clamp" in reasons
    # the third replica bought little: the limit keeps nearly all of the attainment
    assert limited.result.gpu_hours < unlimited.result.gpu_hours
    assert limited.result.sla_attainment > 0.9
    assert static.result.sla_attainment < 0.1
