"""The closed-loop benchmark: one workload, several policies, one table (``flowplanner bench``).

Every row replays the same requests on the same simulated fleet (same seed):

* **static peak** / **static mean** — a fixed fleet sized, per role, for the busiest minute /
  the average minute of the hindsight schedule below;
* **reference** — the planner with the reference algorithm's behaviour (flat-sensitivity
  scale-down, spec §4.5; reference estimates), same loops as ours;
* **ours: load** — our default with the reactive load loop alone;
* **ours: throughput+load** — our default with the predictive loop setting floors;
* **ours: throughput+load p90** — the same, sizing capacity for the p90 ISL/OSL instead of the
  mean (the distribution-aware option, off by default);
* **hindsight** — the fewest replicas per minute that the perf model (bootstrapped from the
  profile) says meet the SLA for that minute's actual load, switched on one start-up delay
  ahead: a lower bound of what prediction could achieve, not a real policy.

GPU-hours are reported relative to the static-peak fleet; replay speed is simulated seconds per
wall-clock second, measured in this run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from flows.scenario import Outcome, Scenario, run_planner, run_schedule
from operators.bootstrap import profile_to_fpms
from operators.perf import DecodePerfModel, PrefillPerfModel
from operators.throughput_scaling import decode_capacity, prefill_capacity
from schemas import PlannerConfig

MINUTE = 60.0


def minute_loads(scenario: Scenario) -> list[tuple[float, float, float]]:
    """Per minute of the replay: (requests per second, mean ISL, mean OSL)."""
    minutes = math.ceil(scenario.end_s / MINUTE)
    count = [0] * minutes
    isl = [0.0] * minutes
    osl = [0.0] * minutes
    for request in scenario.requests:
        m = min(int(request.arrival_s // MINUTE), minutes - 1)
        count[m] += 1
        isl[m] += request.isl
        osl[m] += request.osl
    return [
        (n / MINUTE, i / n if n else 0.0, o / n if n else 0.0)
        for n, i, o in zip(count, isl, osl, strict=True)
    ]


def hindsight_replicas(scenario: Scenario, config: PlannerConfig) -> list[tuple[int, int]]:
    """Per minute, the (prefill, decode) replicas the profile-bootstrapped perf model says
    meet the SLA for that minute's actual load (agg fleets: decode only)."""
    spec = scenario.spec
    fpms = profile_to_fpms(spec.profile)
    prefill = PrefillPerfModel(max_num_fpm_samples=1024, min_observations=2)
    prefill.load_benchmark_fpms(fpms["prefill"])
    decode = DecodePerfModel(max_num_fpm_samples=1024, min_observations=2)
    decode.load_benchmark_fpms(fpms["decode"])
    plan = []
    for rps, isl, osl in minute_loads(scenario):
        if rps == 0:
            plan.append((config.min_endpoint_for("prefill"), config.min_endpoint_for("decode")))
            continue
        p = prefill_capacity(
            prefill,
            rps,
            isl,
            kv_hit_rate=None,
            ttft_sla_ms=config.ttft_ms,
            max_num_batched_tokens=spec.max_num_batched_tokens,
            min_endpoint=config.min_endpoint_for("prefill"),
        )
        d = decode_capacity(
            decode,
            rps,
            isl,
            osl,
            itl_sla_ms=config.itl_ms,
            max_kv_tokens=spec.kv_capacity,
            max_num_seqs=spec.max_num_seqs,
            accept_length=1.0,
            min_endpoint=config.min_endpoint_for("decode"),
        )
        plan.append((p.replicas or 1, d.replicas or 1))
    return plan


def hindsight_schedule(
    plan: Sequence[tuple[int, int]], startup_delay_s: float
) -> list[tuple[float, int, int]]:
    """Replica changes that make each minute's plan ready when that minute starts."""
    schedule = [(0.0, *plan[0])]
    for minute in range(1, len(plan)):
        if plan[minute] != plan[minute - 1]:
            schedule.append((max(0.0, minute * MINUTE - startup_delay_s), *plan[minute]))
    return schedule


def ours(config: PlannerConfig, **changes: object) -> PlannerConfig:
    """Our default behaviour on the given config's targets, with some loops switched."""
    return config.model_copy(update={"optimization_target": "sla", **changes})


def run_bench(
    scenario: Scenario,
    config: PlannerConfig,
    on_row: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Every row of the table, in order."""
    plan = hindsight_replicas(scenario, config)
    peak = tuple(max(row[i] for row in plan) for i in (0, 1))
    mean = tuple(math.ceil(sum(row[i] for row in plan) / len(plan)) for i in (0, 1))
    both = {"enable_load_scaling": True, "enable_throughput_scaling": True}
    rows: list[tuple[str, Callable[[], Outcome]]] = [
        ("static peak", lambda: run_schedule(scenario, [(0.0, *peak)], name="static peak")),
        ("static mean", lambda: run_schedule(scenario, [(0.0, *mean)], name="static mean")),
        ("reference", lambda: run_planner(scenario, config.reference_variant(), name="reference")),
        (
            "ours: load",
            lambda: run_planner(
                scenario,
                ours(config, enable_load_scaling=True, enable_throughput_scaling=False),
                name="ours: load",
            ),
        ),
        (
            "ours: throughput+load",
            lambda: run_planner(scenario, ours(config, **both), name="ours: throughput+load"),
        ),
        (
            "ours: throughput+load p90",
            lambda: run_planner(
                scenario,
                ours(config, **both, capacity_isl_quantile=0.9, capacity_osl_quantile=0.9),
                name="ours: throughput+load p90",
            ),
        ),
        (
            "hindsight",
            lambda: run_schedule(
                scenario,
                hindsight_schedule(plan, scenario.spec.startup_delay_s),
                name="hindsight",
            ),
        ),
    ]
    outcomes = []
    for _name, run in rows:
        outcome = run()
        outcomes.append(outcome)
        if on_row is not None:
            on_row(outcome)
    return outcomes


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def bench_table(outcomes: Sequence[Outcome]) -> str:
    """One fixed-width table; GPU-hours relative to the static-peak row when present."""
    base = next((o for o in outcomes if o.name == "static peak"), outcomes[0])
    header = (
        "policy",
        "SLA attain",
        "GPU-h",
        "GPU-h vs peak",
        "actions",
        "reversals",
        "TTFT p90 ms",
        "ITL p90 ms",
        "replay x",
    )
    rows = [header]
    for o in outcomes:
        r = o.result
        rows.append(
            (
                o.name,
                _pct(r.sla_attainment),
                f"{r.gpu_hours:.2f}",
                f"{r.gpu_hours / base.result.gpu_hours:.2f}" if base.result.gpu_hours else "-",
                str(r.scaling_actions),
                str(r.reversals_5min),
                _num(r.ttft_ms_p90),
                _num(r.itl_ms_p90, 1),
                _num(o.speed),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    )
