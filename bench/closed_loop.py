"""The closed-loop benchmark: one workload, several policies, one table (``flowplanner bench``).

Every row replays the same requests on the same simulated fleet (same seed):

* **static peak** / **static mean** — a fixed fleet sized, per role, for the busiest minute /
  the average minute (rounded to the nearest replica) of the hindsight schedule below;
* **reference** — the planner with the reference algorithm's behaviour (flat-sensitivity
  scale-down, spec §4.5; reference estimates), both loops on, like "ours: throughput+load";
* **ours: load** — our default with the reactive load loop alone;
* **ours: throughput+load** — our default with the predictive loop setting floors;
* **ours: throughput+load p90** — the same, sizing capacity for the p90 ISL/OSL instead of the
  mean (the distribution-aware option, off by default);
* **hindsight** — the fewest replicas per minute that the engines' perf model (the
  simulator's profile-calibrated timing) says sustain that minute's actual load within the
  targets, added one start-up delay ahead and removed when the busier minute is over: close
  to a lower bound of what prediction could achieve (it ignores bursts inside a minute), not a
  real policy.

GPU-hours are reported relative to the static-peak fleet; replay speed is simulated seconds per
wall-clock second, measured in this run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from flows.scenario import Outcome, Scenario, run_planner, run_schedule
from operators.predictors.warmup import trace_observations
from schemas import PlannerConfig
from sim.fleet import FleetSpec
from sim.timing import EngineTiming

MINUTE = 60.0


def minute_loads(scenario: Scenario) -> list[tuple[float, float, float]]:
    """Per minute of the replay (whole minutes from 0 up to ``end_s``): (requests per second,
    mean ISL, mean OSL), bucketed as the predictors' warm start buckets a trace."""
    minutes = math.ceil(scenario.end_s / MINUTE)
    observed = trace_observations(scenario.requests, MINUTE, origin_s=0.0)
    loads = [(o.num_req / MINUTE, o.isl, o.osl) for o in observed[:minutes]]
    return loads + [(0.0, 0.0, 0.0)] * (minutes - len(loads))


def engine_rates(spec: FleetSpec, isl: float, osl: float, itl_ms: float) -> tuple[float, float]:
    """Requests per second one prefill and one decode engine sustain, from the simulator's
    own (profile-calibrated) timing: prefill packs as many prompts as fit one batch; decode
    runs the largest batch whose iteration time meets the ITL target and whose KV fits."""
    timing = EngineTiming.from_profile(spec.profile)
    prompt = max(1, round(isl))
    if prompt <= spec.max_num_batched_tokens:
        per_batch = min(spec.max_num_batched_tokens // prompt, spec.max_num_seqs)
        prefill_rps = per_batch / timing.prefill.iteration_s([(0, prompt)] * per_batch)
    else:
        chunks, done = [], 0
        while done < prompt:
            size = min(spec.max_num_batched_tokens, prompt - done)
            chunks.append(timing.prefill.iteration_s([(done, size)]))
            done += size
        prefill_rps = 1.0 / sum(chunks)
    context = isl + osl / 2
    best = 0.0
    for batch in range(1, spec.max_num_seqs + 1):
        if batch * context > spec.kv_capacity:
            break
        itl = timing.decode.itl_s(batch, batch * context)
        if itl * 1000.0 > itl_ms:
            break
        best = max(best, batch / (max(osl, 1.0) * itl))
    return prefill_rps, best


def hindsight_replicas(scenario: Scenario, config: PlannerConfig) -> list[tuple[int, int]]:
    """Per minute, the fewest (prefill, decode) replicas whose engines, at the simulator's own
    timing, sustain that minute's actual request rate and lengths within the targets (agg
    fleets: the larger of the two needs, as decode replicas)."""
    spec = scenario.spec
    plan = []
    for rps, isl, osl in minute_loads(scenario):
        floor_p = config.min_endpoint_for("prefill")
        floor_d = config.min_endpoint_for("decode")
        if rps == 0:
            plan.append((floor_p, floor_d))
            continue
        prefill_rps, decode_rps = engine_rates(spec, isl, osl, config.itl_ms)
        p = max(floor_p, math.ceil(rps / prefill_rps)) if prefill_rps > 0 else floor_p
        d = max(floor_d, math.ceil(rps / decode_rps)) if decode_rps > 0 else floor_d
        plan.append((p, d) if spec.mode == "disagg" else (0, max(p, d)))
    return plan


def hindsight_schedule(
    plan: Sequence[tuple[int, int]], startup_delay_s: float
) -> list[tuple[float, int, int]]:
    """Replica changes that make each minute's plan ready when that minute starts.

    At time ``t`` each role runs what the current minute needs and what the minute one
    start-up ahead needs, whichever is more: replicas are added one start-up early and removed
    only when the busier minute is over.

    >>> hindsight_schedule([(1, 1), (3, 1), (1, 2), (1, 2)], startup_delay_s=60)
    [(0.0, 3, 1), (60.0, 3, 2), (120.0, 1, 2)]
    >>> hindsight_schedule([(1, 1), (1, 1), (2, 1)], startup_delay_s=30)
    [(0.0, 1, 1), (90.0, 2, 1)]
    """

    def need(t: float) -> tuple[int, int]:
        now = plan[min(int(t // MINUTE), len(plan) - 1)]
        ahead = plan[min(int((t + startup_delay_s) // MINUTE), len(plan) - 1)]
        return (max(now[0], ahead[0]), max(now[1], ahead[1]))

    changes = {minute * MINUTE for minute in range(len(plan))}
    changes |= {max(0.0, minute * MINUTE - startup_delay_s) for minute in range(len(plan))}
    schedule: list[tuple[float, int, int]] = []
    for t in sorted(changes):
        if not schedule or schedule[-1][1:] != need(t):
            schedule.append((t, *need(t)))
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
    prefill, decode = [row[0] for row in plan], [row[1] for row in plan]
    peak = (max(prefill), max(decode))
    # the average minute's fleet, rounded to the nearest replica (rounding up made it the
    # peak fleet on both Azure traces)
    mean = (max(1, round(sum(prefill) / len(plan))), max(1, round(sum(decode) / len(plan))))
    both = {"enable_load_scaling": True, "enable_throughput_scaling": True}
    start = plan[0]  # planners start where a sensible operator would: the first minute's need

    def planner(name: str, variant: PlannerConfig) -> Callable[[], Outcome]:
        return lambda: run_planner(scenario, variant, name=name, initial=start)

    rows: list[tuple[str, Callable[[], Outcome]]] = [
        ("static peak", lambda: run_schedule(scenario, [(0.0, *peak)], name="static peak")),
        ("static mean", lambda: run_schedule(scenario, [(0.0, *mean)], name="static mean")),
        ("reference", planner("reference", config.reference_variant())),
        (
            "ours: load",
            planner(
                "ours: load",
                ours(config, enable_load_scaling=True, enable_throughput_scaling=False),
            ),
        ),
        ("ours: throughput+load", planner("ours: throughput+load", ours(config, **both))),
        (
            "ours: throughput+load p90",
            planner(
                "ours: throughput+load p90",
                ours(config, **both, capacity_isl_quantile=0.9, capacity_osl_quantile=0.9),
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
