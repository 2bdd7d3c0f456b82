"""How the planner flow scales with deployments × engines × seconds, and where its time goes.

A synthetic decode fleet is recorded as JSON lines (``schemas.RawEvent``, as ``flowplanner run
--input FILE`` hands them to the flow): ``D`` deployments of ``E`` engines each; every engine
sends ``--fpm-hz`` forward passes a second (default 10) plus one idle heartbeat a second, each
deployment's frontend ``--req-hz`` request records a second. Every deployment runs the load
loop (5 s) and the throughput loop (``--throughput-interval``, default 60 s) with the
``selector`` predictor (all five forecasters on the count, ISL and OSL series).

Four measurements, all CPU time of this process (``time.process_time``; wall time beside it):

1. **flow** — the real dataflow (:func:`flows.planner.build_flow`, bytewax ``run_main``, one
   worker), tick records to an in-memory sink: events per CPU second per scale, and its ratio
   to the first (smallest) scale of the same run. A ratio near 1 is linear scaling; below 1,
   each event costs more as the fleet grows — at equal seconds of event time. Scales of
   different length compare different forecaster phases: 300 s is 5 throughput ticks, before
   ARIMA has its 5 points and fits, and such a tick costs ~3 ms per deployment; from 1 200 s
   on ARIMA fits and a tick costs 60-80 ms, 11-14 µs an event at 8 engines, so 1x8x1200 and
   1x8x2400 run at ~0.6x of 1x8x300 (``--scales 1x8x300,1x8x1200,1x8x2400,1x8x300``).
2. **steps** — the same events through the same operators without bytewax, one step at a
   time: decode/admission (:class:`operators.admission.Admission`), the fold into tick windows
   (:func:`operators.window.fold_event`), the planner's window intake, perf-model training and
   the load rules, the throughput tick (predictors + capacity), tick-record building, and the
   sink's JSON encoding. Printed as µs per event and share of the steps' total, with the cost
   of one load tick and one throughput tick per deployment as ratios to the first scale.
3. **history** — one deployment's throughput tick (``TrafficForecaster``, ``selector``) on a
   seeded series of ``--history`` ticks: mean CPU ms per tick in blocks, and the share of it
   spent in each forecaster. The 300 s flow runs above end before the forecasters warm up;
   this shows what a throughput tick costs as history grows.
4. **BLAS threads** — the same throughput ticks in two fresh processes, with OpenBLAS's
   default threads and with ``OPENBLAS_NUM_THREADS=1`` (what ``flows/cli.py`` sets, and this
   bench too unless the variable is already set): CPU and wall ratio, and whether the
   forecasts are identical (they are: the fits' matrices are tiny, threads only add spinning).

A tiny fleet runs through the flow and the steps first, untimed (first-run costs). The default
scale list ends with the first scale again: the spread between the two is the run's noise
(0.88-0.97x in three runs on a shared 2-core machine). Run: ``python -m bench.scale
[--scales 1x8x300,8x8x300,...] [--history N] [--blas-ticks N] [--no-flow] [--quick]``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# As the flowplanner CLI runs (flows/cli.py): single-threaded OpenBLAS, set before numpy loads.
# Section 4 measures what it saves.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from bytewax.testing import TestingSink, TestingSource, run_main

from flows.planner import PlannerSinks, build_flow, window_seconds
from operators.admission import Admission
from operators.deployment import DeploymentPlanner
from operators.predictors import SelectorPredictor
from operators.traffic_intake import TrafficForecaster
from operators.window import TickWindow, fold_event
from schemas import (
    DeadLetter,
    PlannerConfig,
    RawEvent,
    TickRecord,
    TrafficObservation,
)

DEFAULT_SCALES = "1x8x300,8x8x300,96x2x60,1x32x300,1x64x300,2x32x300,1x8x1200,1x8x300"
"""The last scale repeats the first: how far apart two identical runs land is the noise."""
QUICK_SCALES = "1x4x60,2x4x60"


@dataclass(frozen=True)
class Scale:
    """``deployments`` × ``engines`` × ``seconds`` of event time.

    >>> Scale.parse("4x32x300")
    Scale(deployments=4, engines=32, seconds=300)
    >>> Scale.parse("4x32x300").label
    '4 dep x 32 eng x 300 s'
    """

    deployments: int
    engines: int
    seconds: int

    @classmethod
    def parse(cls, text: str) -> Scale:
        """``DxExS``; each part a positive integer."""
        parts = text.lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"a scale is DEPLOYMENTSxENGINESxSECONDS, got {text!r}")
        return cls(*(int(p) for p in parts))

    @property
    def label(self) -> str:
        """Human-readable form."""
        return f"{self.deployments} dep x {self.engines} eng x {self.seconds} s"


def fleet_config(throughput_interval_s: float) -> PlannerConfig:
    """A decode deployment with both loops and the selector predictor.

    >>> fleet_config(60).load_predictor, fleet_config(60).enable_throughput_scaling
    ('selector', True)
    """
    return PlannerConfig(
        mode="decode",
        optimization_target="sla",
        enable_load_scaling=True,
        enable_throughput_scaling=True,
        throughput_adjustment_interval_seconds=throughput_interval_s,
        load_predictor="selector",
        itl_ms=60.0,
        max_gpu_budget=1024,
    )


_FPM = (
    '{{"type":"fpm","deployment":"{dep}","time":{t},"payload":{{"role":"decode","fpm":'
    '{{"worker_id":"w{e}","counter_id":{c},"wall_time":{wall},"scheduled_requests":'
    '{{"num_decode_requests":{n},"sum_decode_kv_tokens":{kv}}},'
    '"queued_requests":{{"sum_decode_kv_tokens":{q}}}}}}}}}'
)
_REQUEST = (
    '{{"type":"request","deployment":"{dep}","time":{t},"payload":{{"isl":{isl},"osl":{osl}}}}}'
)


def fleet_lines(scale: Scale, fpm_hz: int = 10, req_hz: int = 10, seed: int = 0) -> list[bytes]:
    """The recorded stream of ``scale`` as JSON lines in event-time order.

    Each engine's decode KV load follows a 10-minute sine plus seeded noise; its wall time is
    ``8 ms + 20 µs·n + 0.1 µs·kv`` (the decode shape of ``tests/flow/streams.py``).

    >>> lines = fleet_lines(Scale(1, 2, 1), fpm_hz=2, req_hz=0)
    >>> len(lines)  # capabilities + inventory, 2 engines x (2 passes + 1 heartbeat)
    8
    >>> from schemas import parse_event
    >>> [parse_event(line).type for line in lines][:3]
    ['capabilities', 'inventory', 'fpm']
    """
    rnd = random.Random(seed)
    lines: list[str] = []
    deps = [f"dep{d}" for d in range(scale.deployments)]
    for dep in deps:
        lines.append(
            f'{{"type":"capabilities","deployment":"{dep}","time":0.0,"payload":{{"decode":'
            f'{{"num_gpu":1,"max_kv_tokens":2000000,"max_num_seqs":256}}}}}}'
        )
        lines.append(
            f'{{"type":"inventory","deployment":"{dep}","time":0.0,"payload":'
            f'{{"ready_num_decode":{scale.engines},"expected_num_decode":{scale.engines}}}}}'
        )
    for step in range(1, scale.seconds * fpm_hz + 1):
        t = round(step / fpm_hz, 6)
        load = 0.5 + 0.4 * math.sin(2 * math.pi * t / 600)
        beat = step % fpm_hz == 0
        for d, dep in enumerate(deps):
            for e in range(scale.engines):
                kv = int(200_000 * load + 3700 * e + 1000 * d + rnd.randrange(20_000))
                n = max(1, kv // 2000)
                wall = round(0.008 + 2e-5 * n + 1e-7 * kv, 9)
                q = rnd.randrange(4000) if load > 0.8 else 0
                lines.append(_FPM.format(dep=dep, t=t, e=e, c=step, wall=wall, n=n, kv=kv, q=q))
                if beat:
                    lines.append(_FPM.format(dep=dep, t=t, e=e, c=step, wall=0.0, n=0, kv=0, q=0))
            if beat and req_hz:
                for _ in range(rnd.randrange(max(1, round(2 * req_hz * load)) + 1)):
                    isl, osl = rnd.randrange(500, 4000), rnd.randrange(50, 400)
                    lines.append(_REQUEST.format(dep=dep, t=t, isl=isl, osl=osl))
    return [line.encode() for line in lines]


# --- 1. the real flow -------------------------------------------------------------------------


@dataclass(frozen=True)
class FlowRun:
    """One run of the dataflow.

    >>> FlowRun(events=1000, cpu_s=0.5, wall_s=1.0, ticks=10, throughput_ticks=1).rate
    2000.0
    """

    events: int
    cpu_s: float
    wall_s: float
    ticks: int
    throughput_ticks: int

    @property
    def rate(self) -> float:
        """Events per CPU second."""
        return self.events / self.cpu_s


def run_flow(raws: list[RawEvent], configs: dict[str, PlannerConfig]) -> FlowRun:
    """The planner dataflow over ``raws``; tick records collected in memory."""
    ticks: list[TickRecord] = []
    flow = build_flow(
        configs, [TestingSource(raws, batch_size=1000)], PlannerSinks(ticks=[TestingSink(ticks)])
    )
    cpu0, wall0 = time.process_time(), time.perf_counter()
    run_main(flow)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return FlowRun(len(raws), cpu, wall, len(ticks), sum(r.ran_throughput for r in ticks))


# --- 2. step by step --------------------------------------------------------------------------

STEPS = (
    "decode+admit",
    "fold into window",
    "window intake",
    "perf model train",
    "load rules (+fit)",
    "throughput tick",
    "record building",
    "sink encode",
)
"""The steps timed by :func:`run_steps`, in flow order."""


@dataclass
class StepTimes:
    """CPU seconds per step, and the ticks the planner ran.

    >>> s = StepTimes(events=10)
    >>> s.seconds["decode+admit"] += 1e-4
    >>> round(s.per_event_us("decode+admit"), 3), s.total
    (10.0, 0.0001)
    """

    events: int
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STEPS, 0.0))
    load_ticks: list[float] = field(default_factory=list)
    throughput_ticks: list[float] = field(default_factory=list)

    @property
    def total(self) -> float:
        """CPU seconds of all steps."""
        return sum(self.seconds.values())

    def per_event_us(self, step: str) -> float:
        """CPU µs of ``step`` per input event."""
        return 1e6 * self.seconds[step] / self.events

    @property
    def load_tick_ms(self) -> float:
        """Mean CPU ms of a window with a load tick only (intake, training, rules, record)."""
        return 1000 * statistics.mean(self.load_ticks) if self.load_ticks else math.nan

    @property
    def throughput_tick_ms(self) -> float:
        """Mean CPU ms of the throughput loop itself (predictors + capacity) per tick."""
        if not self.throughput_ticks:
            return math.nan
        return 1000 * self.seconds["throughput tick"] / len(self.throughput_ticks)


def _timed(totals: dict[str, float], key: str, function: Callable) -> Callable:
    """``function``, its CPU seconds added to ``totals[key]`` on every call."""

    def wrapper(*args: object, **kwargs: object) -> object:
        start = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            totals[key] += time.process_time() - start

    return wrapper


def _instrument(planner: DeploymentPlanner, times: StepTimes) -> None:
    # Instance attributes shadow the methods: each sub-step's CPU time is accumulated, the
    # planner's own code runs unchanged.
    machine = planner.machine
    planner._absorb = _timed(times.seconds, "window intake", planner._absorb)  # type: ignore[method-assign]
    machine._train = _timed(times.seconds, "perf model train", machine._train)  # type: ignore[method-assign]
    machine._load_tick = _timed(times.seconds, "load rules (+fit)", machine._load_tick)  # type: ignore[method-assign]
    machine._throughput_tick = _timed(times.seconds, "throughput tick", machine._throughput_tick)  # type: ignore[method-assign]


def run_steps(
    raws: list[RawEvent], configs: dict[str, PlannerConfig], chunk: int = 1000
) -> StepTimes:
    """The flow's operators over ``raws`` without bytewax, each step timed.

    Events go through in chunks of ``chunk`` (as the source's batches do), and nothing decoded
    outlives its chunk, so the garbage collector sees the live set a running flow has. A
    deployment's window closes when its first event of a later window arrives (the flow's
    watermark with no allowed lateness); windows without events are not emitted, as
    ``fold_window`` does not emit them.
    """
    times = StepTimes(len(raws))
    windows_of = {name: window_seconds({name: config}) for name, config in configs.items()}
    admit = Admission(configs).admit  # as the flow admits: batches' refused rows split off
    open_windows: dict[str, tuple[int, TickWindow]] = {}
    planners: dict[str, DeploymentPlanner] = {}
    for first in range(0, len(raws), chunk):
        start = time.process_time()
        admitted = [item for raw in raws[first : first + chunk] for item in admit(raw)]
        times.seconds["decode+admit"] += time.process_time() - start
        events = [e for e in admitted if not isinstance(e, DeadLetter)]
        assert len(events) == len(admitted), "the bench stream is valid"

        start = time.process_time()
        closed: list[tuple[str, float, TickWindow]] = []
        for event in events:
            window_s = windows_of[event.deployment]
            index = int(event.time // window_s)
            current = open_windows.get(event.deployment)
            if current is None or current[0] < index:
                if current is not None:
                    closed.append((event.deployment, (current[0] + 1) * window_s, current[1]))
                current = (index, TickWindow())
                open_windows[event.deployment] = current
            fold_event(current[1], event)
        times.seconds["fold into window"] += time.process_time() - start
        # Both lists: a chunk still alive while the next one decodes (its 1 000 events'
        # objects) made decoding look ~1.8 us an event dearer than in the flow.
        del events, admitted

        for deployment, end_s, window in closed:
            planner = planners.get(deployment)
            if planner is None:
                planner = DeploymentPlanner(deployment, configs[deployment], windows_of[deployment])
                _instrument(planner, times)
                planners[deployment] = planner
            inner = sum(times.seconds[s] for s in STEPS[2:6])
            start = time.process_time()
            record = planner.on_window(end_s, window)
            elapsed = time.process_time() - start
            times.seconds["record building"] += elapsed - (
                sum(times.seconds[s] for s in STEPS[2:6]) - inner
            )
            if record.ran_throughput:
                times.throughput_ticks.append(elapsed)
            else:
                times.load_ticks.append(elapsed)
            start = time.process_time()
            record.model_dump_json()
            times.seconds["sink encode"] += time.process_time() - start
    return times


# --- 3. throughput tick vs history ------------------------------------------------------------


def history_costs(
    ticks: int,
    throughput_interval_s: float,
    seed: int = 0,
    forecasts: list[tuple[float, float, float]] | None = None,
) -> tuple[list[float], dict[str, float]]:
    """CPU seconds of each of ``ticks`` throughput ticks of one deployment's forecaster, and
    CPU seconds per forecaster (summed over the three series); each tick's forecast is
    appended to ``forecasts`` when given."""
    forecaster = TrafficForecaster.from_config(fleet_config(throughput_interval_s))
    series = (forecaster.num_req, forecaster.isl, forecaster.osl)
    selectors = [p for p in series if isinstance(p, SelectorPredictor)]
    assert len(selectors) == len(series), "fleet_config asks for the selector predictor"
    per_model: dict[str, float] = dict.fromkeys(selectors[0].names, 0.0)
    for predictor in selectors:
        for name, candidate in zip(predictor.names, predictor.candidates, strict=True):
            candidate.forecast = _timed(per_model, name, candidate.forecast)  # type: ignore[method-assign]
    rnd = random.Random(seed)
    costs = []
    for i in range(ticks):
        rate = 1000 + 400 * math.sin(2 * math.pi * i / 60) + rnd.gauss(0, 60)
        obs = TrafficObservation(
            duration_s=throughput_interval_s,
            num_req=max(0, round(rate)),
            isl=2000 + rnd.gauss(0, 100),
            osl=200 + rnd.gauss(0, 20),
        )
        start = time.process_time()
        forecaster.observe(obs)
        forecast = forecaster.forecast()
        costs.append(time.process_time() - start)
        if forecasts is not None:
            forecasts.append((forecast.num_req, forecast.isl, forecast.osl))
    return costs, per_model


# --- 4. BLAS threads -------------------------------------------------------------------------

BLAS_ENV = "OPENBLAS_NUM_THREADS"


def forecast_probe(ticks: int, throughput_interval_s: float) -> dict[str, object]:
    """CPU and wall seconds of ``ticks`` throughput ticks, and a digest of their forecasts."""
    history_costs(12, throughput_interval_s)  # imports and first fits, outside the timing
    forecasts: list[tuple[float, float, float]] = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    history_costs(ticks, throughput_interval_s, forecasts=forecasts)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    digest = hashlib.sha256(repr(forecasts).encode()).hexdigest()[:16]
    return {"cpu": cpu, "wall": wall, "digest": digest}


def blas_threads_ab(ticks: int, throughput_interval_s: float) -> list[tuple[str, dict]]:
    """:func:`forecast_probe` in two fresh processes: OpenBLAS's default threads (what a
    library user who does not go through the CLI gets), and 1 (the CLI's)."""
    runs = []
    # An empty value is OpenBLAS's default (one thread per core) and, being set, survives the
    # child's own setdefault above.
    for label, value in (("OpenBLAS default threads", ""), ("1 thread, as the CLI", "1")):
        env = {**os.environ, BLAS_ENV: value}
        out = subprocess.run(
            [
                *(sys.executable, "-m", "bench.scale", "--probe", str(ticks)),
                *("--throughput-interval", str(throughput_interval_s)),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        runs.append((f"{label} ({BLAS_ENV}={value!r})", json.loads(out.stdout)))
    return runs


# --- report -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Run every scale (flow, then steps), then the history and OpenBLAS runs; print a table
    of each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default=None, help=f"comma-separated DxExS ({DEFAULT_SCALES})")
    parser.add_argument("--fpm-hz", type=int, default=10, help="forward passes per engine per s")
    parser.add_argument("--req-hz", type=int, default=10, help="requests per deployment per s")
    parser.add_argument("--throughput-interval", type=float, default=60.0)
    parser.add_argument("--history", type=int, default=150, help="throughput ticks (0: skip)")
    parser.add_argument("--no-flow", action="store_true", help="skip the bytewax runs")
    parser.add_argument("--blas-ticks", type=int, default=60, help="ticks per BLAS run (0: skip)")
    parser.add_argument("--quick", action="store_true", help="tiny scales (a smoke run)")
    parser.add_argument("--probe", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        print(json.dumps(forecast_probe(args.probe, args.throughput_interval)))
        return 0
    text = args.scales or (QUICK_SCALES if args.quick else DEFAULT_SCALES)
    scales = [Scale.parse(s) for s in text.split(",")]
    history = min(args.history, 6) if args.quick else args.history
    blas_ticks = min(args.blas_ticks, 6) if args.quick else args.blas_ticks

    print(
        f"decode fleet: {args.fpm_hz} FPM/s + 1 heartbeat/s per engine, {args.req_hz} req/s per "
        f"deployment; load tick 5 s, throughput tick {args.throughput_interval:g} s (selector)"
    )
    flows, steps = _measure_scales(scales, args)
    _print_flows(scales, flows)
    _print_steps(scales, steps)
    if history > 0:
        _print_history(history, args.throughput_interval)
    if blas_ticks > 0:
        _print_blas(blas_ticks, args.throughput_interval)
    return 0


def _measure_scales(
    scales: list[Scale], args: argparse.Namespace
) -> tuple[list[FlowRun | None], list[StepTimes]]:
    """Each scale through the dataflow (unless ``--no-flow``) and through the bare steps,
    after an untimed warm-up of both."""
    # statsmodels loads lazily on the first fit: pay the import outside the measurements
    history_costs(12, args.throughput_interval)
    # so do the first dataflow and the first decodes: a tiny fleet through both, untimed
    warm = {"dep0": fleet_config(args.throughput_interval)}
    warm_raws = [
        RawEvent("warm-up", i, line) for i, line in enumerate(fleet_lines(Scale(1, 2, 10)))
    ]
    if not args.no_flow:
        run_flow(warm_raws, warm)
    run_steps(warm_raws, warm)
    flows: list[FlowRun | None] = []
    steps: list[StepTimes] = []
    for scale in scales:
        configs = {
            f"dep{d}": fleet_config(args.throughput_interval) for d in range(scale.deployments)
        }
        lines = fleet_lines(scale, args.fpm_hz, args.req_hz)
        raws = [RawEvent("bench", i, line) for i, line in enumerate(lines)]
        del lines
        # The pre-built input is the harness's, not the flow's: a file source holds one batch.
        # Left to the collector, scanning it made every event look 1.5-5x dearer at scale.
        gc.collect()
        gc.freeze()
        flows.append(None if args.no_flow else run_flow(raws, configs))
        steps.append(run_steps(raws, configs))
        del raws
        gc.unfreeze()
    return flows, steps


def _print_flows(scales: list[Scale], flows: list[FlowRun | None]) -> None:
    print("\n1. flow (bytewax, 1 worker): events per CPU second, ratio to the first scale")
    print(
        f"{'scale':<28} {'events':>9} {'cpu s':>7} {'wall s':>7} {'events/s':>9} {'ratio':>6} "
        f"{'µs/event':>8} {'ticks':>6}"
    )
    base_flow = flows[0]
    for scale, run in zip(scales, flows, strict=True):
        if run is None or base_flow is None:
            continue
        print(
            f"{scale.label:<28} {run.events:>9} {run.cpu_s:>7.2f} {run.wall_s:>7.2f} "
            f"{run.rate:>9.0f} {run.rate / base_flow.rate:>6.2f} {1e6 / run.rate:>8.1f} "
            f"{run.ticks:>6}"
        )


def _print_steps(scales: list[Scale], steps: list[StepTimes]) -> None:
    print(
        "\n2. steps (same operators, no bytewax): CPU µs per event; tick costs per deployment, "
        "ratio to the first scale"
    )
    print(
        f"{'scale':<28} "
        + " ".join(f"{s[:10]:>10}" for s in STEPS)
        + f" {'load ms':>8} {'x':>5} {'thru ms':>8} {'x':>5}"
    )
    base = steps[0]
    for scale, s in zip(scales, steps, strict=True):
        print(
            f"{scale.label:<28} "
            + " ".join(f"{s.per_event_us(step):>10.2f}" for step in STEPS)
            + f" {s.load_tick_ms:>8.2f} {s.load_tick_ms / base.load_tick_ms:>5.2f}"
            f" {s.throughput_tick_ms:>8.1f} {s.throughput_tick_ms / base.throughput_tick_ms:>5.2f}"
        )
    print("share of the steps' CPU time:")
    for scale, s in zip(scales, steps, strict=True):
        shares = sorted(((v / s.total, k) for k, v in s.seconds.items()), reverse=True)
        print(f"  {scale.label:<26} " + ", ".join(f"{k} {100 * f:.0f}%" for f, k in shares[:5]))


def _print_history(history: int, throughput_interval: float) -> None:
    costs, per_model = history_costs(history, throughput_interval)
    block = max(1, history // 6)
    print(
        f"\n3. one deployment's throughput tick (3 series x 5 forecasters) over {history} "
        "ticks: mean / max CPU ms per block"
    )
    for a in range(0, history, block):
        seg = costs[a : a + block]
        print(
            f"  ticks {a + 1:>4}-{a + len(seg):<4} mean {1000 * statistics.mean(seg):>8.1f}"
            f"  max {1000 * max(seg):>8.1f}"
        )
    total = sum(per_model.values())
    print(
        "  share by forecaster: "
        + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in per_model.items())
    )


def _print_blas(blas_ticks: int, throughput_interval: float) -> None:
    runs = blas_threads_ab(blas_ticks, throughput_interval)
    print(
        f"\n4. the same {blas_ticks} throughput ticks in fresh processes, by OpenBLAS "
        "threads (statsmodels' fits): CPU and wall ratio to 1 thread (sections 1-3 ran "
        f"with {BLAS_ENV}={os.environ.get(BLAS_ENV)})"
    )
    one = runs[-1][1]
    for label, probe in runs:
        print(
            f"  {label:<54} cpu {probe['cpu']:>6.2f} s ({probe['cpu'] / one['cpu']:.2f}x)  "
            f"wall {probe['wall']:>6.2f} s ({probe['wall'] / one['wall']:.2f}x)  "
            f"forecasts {probe['digest']}"
        )
    same = len({probe["digest"] for _, probe in runs}) == 1
    print(f"  forecasts identical: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    raise SystemExit(main())
