"""The closed-loop benchmark: one workload, several policies, one table (``flowplanner bench``).

Every row replays the same requests on the same simulated fleet (same seed); ``--seeds N``
repeats every row for N seeds (time shifts of the trace copies and the simulator) and the table
shows the mean over them, with the range of SLA attainment (:func:`summarize`):

* **static peak** / **static mean** — a fixed fleet sized, per role, for the busiest minute /
  the average minute the trace covers (rounded to the nearest replica; the idle drain margin
  after the trace does not count) of the hindsight schedule below;
* **reference** — the planner with the reference algorithm's behaviour (flat-sensitivity
  scale-down, spec §4.5; reference estimates), both loops on, like "ours: throughput+load",
  with the config's load predictor (the same as ours: apples to apples);
* **reference, spec defaults** — the same with the spec's defaults where the config differs:
  the ``arima`` load predictor (spec §7, §9.3) and the consolidation-aware scale-down (§4.6);
* **ours: load** — our default with the reactive load loop alone;
* **ours: throughput+load** — our default with the predictive loop setting floors;
* **ours: throughput+load p90** — the same, sizing capacity for the p90 ISL/OSL instead of the
  mean (the distribution-aware option, off by default);
* **hindsight** — the fewest replicas per minute that the engines' perf model (the
  simulator's profile-calibrated timing) says sustain that minute's actual load within the
  targets (an aggregated engine both prefills and decodes: :func:`agg_engine_rate`), added
  one start-up delay ahead and removed when the busier minute is over: close to a lower bound
  of what prediction could achieve (it ignores bursts inside a minute), not a real policy.

GPU-hours are reported relative to the static-peak fleet; replay speed is simulated seconds per
wall-clock second, measured in this run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from flows.scenario import Outcome, Scenario, run_planner, run_schedule
from operators.predictors.warmup import trace_observations
from schemas import PlannerConfig
from sim.fleet import FleetSpec
from sim.scoring import RunResult
from sim.timing import EngineTiming
from sim.workload import trace_span

MINUTE = 60.0


def minute_loads(scenario: Scenario) -> list[tuple[float, float, float]]:
    """Per minute of the replay (whole minutes from 0 up to ``end_s``): (requests per second,
    mean ISL, mean OSL), bucketed as the predictors' warm start buckets a trace.

    The trace's last minute is usually cut short by its span (:func:`sim.workload.trace_span`):
    its rate is its requests over the part of the minute the trace covers, not over 60 s.
    """
    minutes = math.ceil(scenario.end_s / MINUTE)
    observed = trace_observations(scenario.requests, MINUTE, origin_s=0.0)
    seconds = [MINUTE] * len(observed)
    if observed:
        covered = trace_span(scenario.requests) - (len(observed) - 1) * MINUTE
        seconds[-1] = min(MINUTE, covered) if covered > 0 else MINUTE
    loads = [(o.num_req / s, o.isl, o.osl) for o, s in zip(observed, seconds, strict=True)]
    loads = loads[:minutes]
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


def agg_engine_rate(spec: FleetSpec, isl: float, osl: float, itl_ms: float) -> float:
    """Requests per second one aggregated engine sustains within the ITL target, from the
    simulator's own timing of its mixed iterations (:meth:`sim.timing.EngineTiming.mixed_s`).

    The engine prefills new prompts inside its decode iterations. With ``B`` requests decoding,
    ``B / osl`` prompts arrive per iteration (Little's law), so a request's mean ITL is the
    decode iteration, plus those prompts' prefill work, plus the overhead of an iteration that
    carries prefill (once per chunk of a prompt longer than the iteration's token budget, at
    most once per iteration). The rate is the highest over the batches whose mean ITL meets the
    target, whose KV fits, and whose prompt tokens fit the iterations' token budget. Prefill
    throughput (the TTFT side) is part of the same time budget: it is what the prefill work
    takes from the decode iterations.

    >>> from flows.scenario import fleet_spec
    >>> spec = fleet_spec(PlannerConfig(mode="agg"))
    >>> prefill, decode = engine_rates(spec, 3000, 150, 50.0)
    >>> agg = agg_engine_rate(spec, 3000, 150, 50.0)
    >>> round(agg, 1), agg < 1 / (1 / prefill + 1 / decode)  # below the two jobs' shares summed
    (12.3, True)
    """
    timing = EngineTiming.from_profile(spec.profile)
    prompt = max(1, round(isl))
    work = timing.prefill.work_s(prompt)
    out = max(osl, 1.0)
    context = isl + osl / 2
    best = 0.0
    for batch in range(1, spec.max_num_seqs + 1):
        kv = batch * context
        budget = spec.max_num_batched_tokens - batch
        if kv > spec.kv_capacity or budget <= 0 or batch * prompt / out > budget:
            break
        itl = timing.decode.itl_s(batch, kv)
        overhead = timing.mixed_s(0.0, batch, kv) - itl  # a prefill-carrying iteration's extra
        prompts = batch / out  # prompts arriving per iteration
        chunks = math.ceil(prompt / budget)
        mean_itl = itl + prompts * work + min(prompts * chunks, 1.0) * overhead
        if mean_itl * 1000.0 > itl_ms:
            break
        best = max(best, batch / (out * mean_itl))
    return best


def hindsight_replicas(scenario: Scenario, config: PlannerConfig) -> list[tuple[int, int]]:
    """Per minute, the fewest (prefill, decode) replicas whose engines, at the simulator's own
    timing, sustain that minute's actual request rate and lengths within the targets (agg
    fleets: engines that each carry both jobs, :func:`agg_engine_rate`, as decode replicas)."""
    spec = scenario.spec
    plan = []
    for rps, isl, osl in minute_loads(scenario):
        floor_p = config.min_endpoint_for("prefill")
        floor_d = config.min_endpoint_for("decode")
        if rps == 0:
            plan.append((floor_p, floor_d))
            continue
        if spec.mode != "disagg":
            agg_rps = agg_engine_rate(spec, isl, osl, config.itl_ms)
            plan.append((0, max(floor_d, math.ceil(rps / agg_rps)) if agg_rps > 0 else floor_d))
            continue
        prefill_rps, decode_rps = engine_rates(spec, isl, osl, config.itl_ms)
        p = max(floor_p, math.ceil(rps / prefill_rps)) if prefill_rps > 0 else floor_p
        d = max(floor_d, math.ceil(rps / decode_rps)) if decode_rps > 0 else floor_d
        plan.append((p, d))
    return plan


def trace_minutes(scenario: Scenario) -> int:
    """How many minutes of :func:`minute_loads` the trace covers: from 0 to the minute of its
    last arrival (the rest is the replay's idle drain margin).

    >>> from flows.scenario import fleet_spec
    >>> from schemas.trace import TraceRequest
    >>> requests = [TraceRequest(arrival_s=t, isl=500, osl=20) for t in (0.0, 45.0, 90.0)]
    >>> scenario = Scenario(requests, fleet_spec(PlannerConfig(mode="agg")))
    >>> trace_minutes(scenario), len(minute_loads(scenario))
    (2, 4)
    """
    if not scenario.requests:
        return 0
    last = max(request.arrival_s for request in scenario.requests)
    return min(int(last // MINUTE) + 1, math.ceil(scenario.end_s / MINUTE))


def static_fleets(
    plan: Sequence[tuple[int, int]], covered: int
) -> tuple[tuple[int, int], tuple[int, int]]:
    """The static peak and static mean (prefill, decode) fleets of a hindsight plan: the
    busiest minute, and the average of the first ``covered`` minutes (those the trace covers;
    all of them if none) rounded to the nearest replica, at least one.

    >>> static_fleets([(2, 1), (4, 2), (3, 1), (1, 1), (1, 1)], covered=3)
    ((4, 2), (3, 1))
    """
    peak = (max(p for p, _ in plan), max(d for _, d in plan))
    minutes = plan[:covered] or plan
    # rounded to the nearest replica (rounding up made it the peak fleet on both Azure traces)
    mean = (
        max(1, round(sum(p for p, _ in minutes) / len(minutes))),
        max(1, round(sum(d for _, d in minutes) / len(minutes))),
    )
    return peak, mean


def hindsight_schedule(
    plan: Sequence[tuple[int, int]], startup_delay_s: float
) -> list[tuple[float, int, int]]:
    """Replica changes that make each minute's plan ready when that minute starts.

    At time ``t`` each role runs the most that any minute from the current one to the one a
    start-up ahead needs: replicas are added one start-up early and removed only when the
    busier minute is over (with a start-up longer than a minute, every minute in between
    counts too).

    >>> hindsight_schedule([(1, 1), (3, 1), (1, 2), (1, 2)], startup_delay_s=60)
    [(0.0, 3, 1), (60.0, 3, 2), (120.0, 1, 2)]
    >>> hindsight_schedule([(1, 1), (1, 1), (2, 1)], startup_delay_s=30)
    [(0.0, 1, 1), (90.0, 2, 1)]
    >>> hindsight_schedule([(1, 1), (1, 1), (1, 1), (1, 5), (1, 1)], startup_delay_s=150)
    [(0.0, 1, 1), (30.0, 1, 5), (240.0, 1, 1)]
    """
    last = len(plan) - 1

    def minute(t: float) -> int:
        return min(int(t // MINUTE), last)

    def need(t: float) -> tuple[int, int]:
        window = plan[minute(t) : minute(t + startup_delay_s) + 1]
        return (max(p for p, _ in window), max(d for _, d in window))

    changes = {m * MINUTE for m in range(len(plan))}
    changes |= {max(0.0, m * MINUTE - startup_delay_s) for m in range(len(plan))}
    schedule: list[tuple[float, int, int]] = []
    for t in sorted(changes):
        if not schedule or schedule[-1][1:] != need(t):
            schedule.append((t, *need(t)))
    return schedule


def ours(config: PlannerConfig, **changes: object) -> PlannerConfig:
    """Our default behaviour on the given config's targets, with some loops switched."""
    return config.model_copy(update={"optimization_target": "sla", **changes})


def reference_spec_defaults(config: PlannerConfig) -> PlannerConfig:
    """The reference planner with the spec's defaults where a config may differ: the ARIMA
    load predictor (spec §7, §9.3) and the consolidation-aware scale-down (spec §4.6)."""
    return config.reference_variant().model_copy(
        update={"load_predictor": "arima", "scale_down_rule": "consolidation"}
    )


def run_bench(
    scenario: Scenario,
    config: PlannerConfig,
    on_row: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Every row of the table, in order."""
    plan = hindsight_replicas(scenario, config)
    peak, mean = static_fleets(plan, trace_minutes(scenario))
    both = {"enable_load_scaling": True, "enable_throughput_scaling": True}
    start = plan[0]  # planners start where a sensible operator would: the first minute's need

    def planner(name: str, variant: PlannerConfig) -> Callable[[], Outcome]:
        return lambda: run_planner(scenario, variant, name=name, initial=start)

    rows: list[tuple[str, Callable[[], Outcome]]] = [
        ("static peak", lambda: run_schedule(scenario, [(0.0, *peak)], name="static peak")),
        ("static mean", lambda: run_schedule(scenario, [(0.0, *mean)], name="static mean")),
        ("reference", planner("reference", config.reference_variant())),
        (
            "reference, spec defaults",
            planner("reference, spec defaults", reference_spec_defaults(config)),
        ),
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


@dataclass(frozen=True)
class Score:
    """What the table keeps of one row's run (not its fleet, which holds every request).

    >>> from sim.scoring import score
    >>> Score("static peak", score(500, 50, [], 0, 0, [], {"decode": 3600.0}, 3600.0), 900.0)
    ... # doctest: +ELLIPSIS
    Score(name='static peak', result=RunResult(...), speed=900.0)
    """

    name: str
    result: RunResult
    speed: float

    @classmethod
    def of(cls, outcome: Outcome) -> Score:
        return cls(outcome.name, outcome.result, outcome.speed)


@dataclass(frozen=True)
class RowSummary:
    """One row of the table over one or more seeds: means, and SLA attainment's range.

    ``sla_attainment`` and the latency percentiles average the seeds that have one (a run
    with no finished request has none); ``None`` when no seed has.

    >>> RowSummary("hindsight", 1, 0.99, (0.99, 0.99), 6.0, 4.0, 0.0, 258.0, 11.9, 351.0).seeds
    1
    """

    name: str
    seeds: int
    sla_attainment: float | None
    sla_range: tuple[float, float] | None
    gpu_hours: float
    scaling_actions: float
    reversals_5min: float
    ttft_ms_p90: float | None
    itl_ms_p90: float | None
    speed: float


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def summarize(runs: Sequence[Sequence[Score]]) -> list[RowSummary]:
    """Per row, the mean over seeds of every column and the min–max of SLA attainment;
    ``runs`` holds one run of the bench per seed, every run's rows in the same order.

    >>> from dataclasses import replace
    >>> from sim.scoring import score
    >>> idle = score(500, 50, [], 0, 0, [], {"decode": 3600.0}, 3600.0)  # 1 GPU, one hour
    >>> runs = [[Score("ours", replace(idle, sla_attainment=a), 100.0)] for a in (0.25, 0.75)]
    >>> row = summarize(runs)[0]
    >>> row.seeds, row.sla_attainment, row.sla_range, row.gpu_hours
    (2, 0.5, (0.25, 0.75), 1.0)
    """
    if not runs:
        raise ValueError("no run to summarize")
    names = [score.name for score in runs[0]]
    for seed, run in enumerate(runs):
        if [score.name for score in run] != names:
            raise ValueError(f"run {seed} has rows {[s.name for s in run]}, run 0 has {names}")
    rows = []
    for scores in zip(*runs, strict=True):
        results = [score.result for score in scores]
        slas = [r.sla_attainment for r in results if r.sla_attainment is not None]
        rows.append(
            RowSummary(
                name=scores[0].name,
                seeds=len(scores),
                sla_attainment=_mean(slas),
                sla_range=(min(slas), max(slas)) if slas else None,
                gpu_hours=sum(r.gpu_hours for r in results) / len(results),
                scaling_actions=sum(r.scaling_actions for r in results) / len(results),
                reversals_5min=sum(r.reversals_5min for r in results) / len(results),
                ttft_ms_p90=_mean(r.ttft_ms_p90 for r in results),
                itl_ms_p90=_mean(r.itl_ms_p90 for r in results),
                speed=sum(score.speed for score in scores) / len(scores),
            )
        )
    return rows


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _sla(row: RowSummary) -> str:
    if row.seeds == 1 or row.sla_range is None:
        return _pct(row.sla_attainment)
    low, high = row.sla_range
    return f"{_pct(row.sla_attainment)} ({100 * low:.1f}–{100 * high:.1f})"


def bench_table(rows: Sequence[RowSummary]) -> str:
    """One fixed-width table; GPU-hours relative to the static-peak row when present.

    Over several seeds every cell is the mean, SLA attainment followed by its range and the
    counts with one decimal.

    >>> from dataclasses import replace
    >>> from sim.scoring import score
    >>> idle = score(500, 50, [], 0, 0, [], {"decode": 3600.0}, 3600.0)
    >>> runs = [[Score("ours", replace(idle, sla_attainment=a), 100.0)] for a in (0.25, 0.75)]
    >>> print(bench_table(summarize(runs)))  # doctest: +NORMALIZE_WHITESPACE
    policy  SLA attain  GPU-h  GPU-h vs peak  actions  reversals  TTFT p90 ms  ITL p90 ms  replay x
    ours    50.0% (25.0–75.0)   1.00  1.00  0.0  0.0  -  -  100
    """
    base = next((row for row in rows if row.name == "static peak"), rows[0])
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
    table = [header]
    for row in rows:
        counts = 0 if row.seeds == 1 else 1
        table.append(
            (
                row.name,
                _sla(row),
                f"{row.gpu_hours:.2f}",
                f"{row.gpu_hours / base.gpu_hours:.2f}" if base.gpu_hours else "-",
                f"{row.scaling_actions:.{counts}f}",
                f"{row.reversals_5min:.{counts}f}",
                _num(row.ttft_ms_p90),
                _num(row.itl_ms_p90, 1),
                _num(row.speed),
            )
        )
    widths = [max(len(cells[i]) for cells in table) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        )
        for cells in table
    )
