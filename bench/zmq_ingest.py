"""FPM ingest over ZMQ: the planner flow fed by ZmqFpmSource vs a bare SUB socket, same run.

A publisher process (``connectors.zmq_publisher``, XPUB so nothing is lost before the subscriber
joins) pre-loads N FPM messages into the subscriber's queue, then the consumer drains them:

* **raw** — a bare SUB socket: ``recv_multipart`` + ``msgpack.unpackb`` (receive + decode, no
  validation), the baseline;
* **raw+schema** — the same with pydantic validation (``ForwardPassMetrics.from_msgpack``), for
  context;
* **flow** — ``ZmqFpmSource`` (framing checks, sequence tracking, strict decode, FpmBatchEvents)
  inside a real bytewax run of the flow under test, timed from the moment the queue is full to the
  end of the run, by which time the planner has ticked on every window holding an FPM.

Pre-loading makes the measurement the consumer's cost alone (the publisher is not racing it on
the other core). Run: ``python -m bench.zmq_ingest [--messages N] [--flow module:function]``.

The N FPMs are a decode fleet's (deployment ``bench``, :data:`BENCH_CONFIG`): E engines, each
passing :data:`PASSES_PER_SECOND` forward passes a second of event time with its own increasing
``counter_id``, so no two FPMs of a window are the same pass (a copy would be a ``duplicate:``
dead letter). Event time is data here too: the source stamps each poll with the time of the
first FPM it drains (:meth:`Fleet.time_of`, from how many FPMs came before, starting at
:data:`EVENT_START`), so every run folds the same FPMs into the same tick windows whatever the
host's speed. Around the FPMs the source yields the fleet's capabilities and worker inventory
(before the first, so the planner's ticks compute estimates) and a clock event at the end of
the last FPM's window (after the last, so that window closes and the planner ticks on it: the
end of an input closes nothing).

The flow under test is a function ``(source, outputs) -> Dataflow`` reading ``source`` and
writing its tick records (and dead letters) to ``outputs`` (a :class:`FlowOutputs`); the default
is the full planner flow (:func:`planner_flow`); ``bench.zmq_ingest:trivial_flow`` is
input → count rows → sink. A run is valid (:meth:`FlowRun.problems`) when the source handed the
flow every FPM, nothing was dead-lettered, and the planner ticked on every window holding an FPM,
each tick seeing every engine and estimating the ITL (a flow without ticks: it counted every
FPM); anything else prints ``INVALID`` and exits 1. The goal is flow ≥ 0.75 × raw and
≥ 100 k FPM/s.
"""

from __future__ import annotations

import argparse
import importlib
import math
import multiprocessing as mp
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.synchronize import Event as MpEvent

import bytewax.operators as op
import msgpack
import zmq
from bytewax.dataflow import Dataflow
from bytewax.inputs import DynamicSource, Source, StatelessSourcePartition
from bytewax.testing import TestingSink, run_main

from connectors.zmq_source import ZmqFpmSource, ZmqItem
from schemas import (
    CapabilitiesEvent,
    ClockEvent,
    DeadLetter,
    FpmBatchEvent,
    FpmEvent,
    InventoryEvent,
    PlannerConfig,
    TickRecord,
)

GOAL_RATIO = 0.75
GOAL_RATE = 100_000

DEPLOYMENT = "bench"
BENCH_CONFIG = PlannerConfig(
    mode="decode",
    optimization_target="sla",
    enable_load_scaling=True,
    enable_throughput_scaling=False,
    itl_ms=12.0,
)
"""The deployment's config: load scaling every 5 s (one tick window); the 12 ms ITL target is a
little above what the engines' passes cost (9-10 ms), so the fleet is sized right and the
planner holds (its ticks estimate the ITL and decide nothing)."""

EVENT_START = 1_700_000_000.0
"""Event time of the first FPM (a window boundary): the same windows in every run."""

PASSES_PER_SECOND = 100.0
"""Forward passes per engine per second of event time (a ~9 ms decode iteration). With the
default 1000-message polls of 4 engines a poll spans 2.5 s, inside the planner's 3 s engine
silence, so every tick sees every engine."""

MAX_KV_TOKENS = 2_000_000

BenchItem = ZmqItem | CapabilitiesEvent | InventoryEvent | ClockEvent
"""What the bench's source yields: the ZMQ source's items and the fleet's state and clock."""


@dataclass
class FlowOutputs:
    """Where the flow under test writes what it produced (the bench reads it after the run).

    >>> FlowOutputs().fpm_rows
    0
    """

    ticks: list[TickRecord] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    """FPM rows counted by a flow without a planner (:func:`trivial_flow`)."""

    @property
    def fpm_rows(self) -> int:
        """FPM rows the flow counted."""
        return sum(self.rows)


FlowUnderTest = Callable[[Source[BenchItem], FlowOutputs], Dataflow]
"""Builds the dataflow being measured around the given source, writing to the outputs."""


@dataclass(frozen=True)
class Rate:
    """FPM/s of one run, by wall clock and by the consuming thread's CPU time (one core).

    >>> r = Rate(messages=300_000, wall_s=2.0, cpu_s=1.5)
    >>> r.wall, r.cpu
    (150000.0, 200000.0)
    """

    messages: int
    wall_s: float
    cpu_s: float

    @property
    def wall(self) -> float:
        """Messages per wall-clock second."""
        return self.messages / self.wall_s

    @property
    def cpu(self) -> float:
        """Messages per CPU second of the consuming thread."""
        return self.messages / self.cpu_s


# --- the fleet ----------------------------------------------------------------------------------


def _decode_wall_s(kv: int, n: int) -> float:
    """The synthetic engine's iteration time: 8 ms + 20 µs per request + 0.1 µs per KV token."""
    return round(0.008 + 2e-5 * n + 1e-7 * kv, 9)


@dataclass(frozen=True)
class Fleet:
    """The decode engines behind the publisher: their FPMs, event times and state events.

    Message ``i`` is pass ``i // engines + 1`` (its ``counter_id``) of engine ``i % engines``.

    >>> fleet = Fleet(engines=4)
    >>> fleet.time_of(0), fleet.time_of(2000)  # 4 engines x 100 passes a second
    (1700000000.0, 1700000005.0)
    >>> import msgpack
    >>> [(m["worker_id"], m["counter_id"]) for m in map(msgpack.unpackb, fleet.payloads(6))]
    [('engine-0', 1), ('engine-1', 1), ('engine-2', 1), ('engine-3', 1), ('engine-0', 2), \
('engine-1', 2)]
    """

    engines: int
    passes_per_second: float = PASSES_PER_SECOND

    @property
    def worker_ids(self) -> list[str]:
        """The engines' worker ids."""
        return [f"engine-{e}" for e in range(self.engines)]

    def time_of(self, fpms_before: int) -> float:
        """Event time of the FPM that has ``fpms_before`` FPMs of the fleet before it."""
        return EVENT_START + fpms_before / (self.engines * self.passes_per_second)

    def payloads(self, messages: int) -> list[bytes]:
        """The msgpack payloads of the fleet's first ``messages`` FPMs, in the order sent."""
        from connectors.zmq_publisher import encode_fpm
        from schemas import ForwardPassMetrics

        variants = []  # 64 load points per engine; KV and batch size vary independently
        for engine in range(self.engines):
            for v in range(64):
                n = 2 + (7 * v + engine) % 19
                kv = 5_000 + ((13 * v) % 64) * 150 + 300 * engine
                variants.append(
                    ForwardPassMetrics.model_validate(
                        {
                            "worker_id": f"engine-{engine}",
                            "wall_time": _decode_wall_s(kv, n),
                            "scheduled_requests": {
                                "num_decode_requests": n,
                                "sum_decode_kv_tokens": kv,
                                "var_decode_kv_tokens": 1234.5 + v,
                            },
                        }
                    )
                )
        out = []
        for i in range(messages):
            engine, step = i % self.engines, i // self.engines
            out.append(encode_fpm(variants[engine * 64 + step % 64], counter_id=step + 1))
        return out

    def state_events(self) -> list[BenchItem]:
        """The deployment's engine capabilities and worker inventory (every engine ready)."""
        return [
            CapabilitiesEvent.model_validate(
                {
                    "deployment": DEPLOYMENT,
                    "time": EVENT_START,
                    "payload": {"decode": {"num_gpu": 1, "max_kv_tokens": MAX_KV_TOKENS}},
                }
            ),
            InventoryEvent.model_validate(
                {
                    "deployment": DEPLOYMENT,
                    "time": EVENT_START,
                    "payload": {
                        "ready_num_decode": self.engines,
                        "expected_num_decode": self.engines,
                    },
                }
            ),
        ]


# --- the publisher process ----------------------------------------------------------------------


def _publish(
    url: str, messages: int, fleet: Fleet, warm: MpEvent, done: MpEvent, warm_up: bytes
) -> None:
    from connectors.zmq_publisher import FpmPublisher

    payloads = fleet.payloads(messages)
    with FpmPublisher(url, send_buffer=0, context=zmq.Context()) as publisher:
        if not publisher.wait_for_subscribers(1, 30.0):
            raise SystemExit("no subscriber")
        publisher.publish_payload(warm_up)  # the consumer is attached and polling
        if not warm.wait(60.0):
            raise SystemExit("consumer never saw the warm-up message")
        for payload in payloads:
            publisher.publish_payload(payload)
        time.sleep(0.5)  # let ZMQ move the queue to the subscriber
        done.set()
        time.sleep(1.0)


def _warm_up_payload() -> bytes:
    """An idle heartbeat of the first engine: received first, not measured, not handed on."""
    from connectors.zmq_publisher import encode_fpm
    from schemas import ForwardPassMetrics

    return encode_fpm(ForwardPassMetrics(worker_id="engine-0", wall_time=0.0))


@dataclass
class _Run:
    url: str
    messages: int
    fleet: Fleet
    ctx: mp.context.SpawnContext = field(default_factory=lambda: mp.get_context("spawn"))

    def __post_init__(self) -> None:
        self.warm = self.ctx.Event()
        self.done = self.ctx.Event()
        self.process = self.ctx.Process(
            target=_publish,
            args=(self.url, self.messages, self.fleet, self.warm, self.done, _warm_up_payload()),
            daemon=True,
        )

    def __enter__(self) -> _Run:
        self.process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()


def _free_url() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


# --- the baselines ------------------------------------------------------------------------------


def measure_raw(messages: int, engines: int, *, validate: bool = False) -> Rate:
    """FPM/s of a bare SUB socket (recv_multipart + msgpack decode, or + pydantic validation)."""
    from schemas import ForwardPassMetrics

    url = _free_url()
    socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB)
    socket.setsockopt(zmq.RCVHWM, 0)
    socket.setsockopt(zmq.SUBSCRIBE, b"")
    socket.connect(url)
    decode = ForwardPassMetrics.from_msgpack if validate else msgpack.unpackb
    try:
        with _Run(url, messages, Fleet(engines)) as run:
            socket.recv_multipart()  # warm-up
            run.warm.set()
            if not run.done.wait(120):
                raise RuntimeError("publisher did not finish")
            recv = socket.recv_multipart
            start, cpu = time.perf_counter(), time.thread_time()
            for _ in range(messages):
                decode(recv()[2])
            rate = Rate(messages, time.perf_counter() - start, time.thread_time() - cpu)
    finally:
        socket.close(linger=0)
    return rate


# --- the flow -----------------------------------------------------------------------------------


class _FleetClock:
    """The source's clock: the event time of the next FPM, from how many came before."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.fpms = 0

    def __call__(self) -> float:
        return self.fleet.time_of(self.fpms)


class _GatePartition(StatelessSourcePartition[BenchItem]):
    """Delegates to the ZMQ partition: swallows the warm-up message and waits there until the
    queue is pre-loaded; puts the fleet's state before the first FPM and a clock event closing
    the last FPM's window after the last."""

    def __init__(self, inner: StatelessSourcePartition[ZmqItem], gate: _Gate) -> None:
        self.inner = inner
        self.gate = gate

    def next_batch(self) -> list[BenchItem]:
        gate = self.gate
        if gate.ended:
            raise StopIteration
        try:
            items: list[BenchItem] = list(self.inner.next_batch())
        except StopIteration:
            gate.ended = True
            return gate.closing()
        if not items:
            return items
        if gate.started is None:
            if _rows(items) != 1 or len(items) != 1:
                raise RuntimeError(f"expected the warm-up message alone, got {items!r:.300}")
            gate.warm.set()
            if not gate.done.wait(120):
                raise RuntimeError("publisher did not finish")
            gate.started = (time.perf_counter(), time.thread_time())
            return []
        if not gate.stated:
            items = gate.clock.fleet.state_events() + items
            gate.stated = True
        rows = _rows(items)
        if rows:
            gate.last_time = gate.clock()  # the time the source stamped them with
            gate.clock.fpms += rows
        return items

    def next_awake(self) -> datetime | None:
        return None if self.gate.ended else self.inner.next_awake()

    def close(self) -> None:
        self.inner.close()


@dataclass
class _Gate(DynamicSource[BenchItem]):
    inner: ZmqFpmSource
    clock: _FleetClock
    window_s: float
    warm: MpEvent
    done: MpEvent
    started: tuple[float, float] | None = None
    last_time: float | None = None
    """Event time of the last poll that delivered FPMs."""
    stated: bool = False
    """The fleet's state events went out (before the first FPMs)."""
    ended: bool = False

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _GatePartition:
        return _GatePartition(self.inner.build(step_id, worker_index, worker_count), self)

    def closing(self) -> list[BenchItem]:
        """A clock event at the end of the last FPM's window (none if no FPM came)."""
        if self.last_time is None:
            return []
        end = (math.floor(self.last_time / self.window_s) + 1) * self.window_s
        lateness = BENCH_CONFIG.allowed_lateness_seconds
        return [ClockEvent(deployment=DEPLOYMENT, time=end + lateness)]


def _rows(items: list[BenchItem]) -> int:
    return sum(_item_rows(item) for item in items)


def _item_rows(item: BenchItem) -> int:
    if isinstance(item, FpmBatchEvent):
        return len(item.payload.rows)
    return 1 if isinstance(item, FpmEvent) else 0


def trivial_flow(source: Source[BenchItem], outputs: FlowOutputs) -> Dataflow:
    """input → count FPM rows → sink: the ingest path and nothing else."""
    flow = Dataflow("zmq_ingest_trivial")
    stream = op.input("zmq", flow, source)
    op.output("count", op.map("rows", stream, _item_rows), TestingSink(outputs.rows))
    return flow


def planner_flow(source: Source[BenchItem], outputs: FlowOutputs) -> Dataflow:
    """The full planner flow (``flows.planner.build_flow``) of the bench deployment, live."""
    from flows.planner import PlannerSinks, build_flow

    sinks = PlannerSinks(
        ticks=[TestingSink(outputs.ticks)], dead_letters=[TestingSink(outputs.dead_letters)]
    )
    return build_flow({DEPLOYMENT: BENCH_CONFIG}, [source], sinks, live=True, name="zmq_bench")


@dataclass
class FlowRun:
    """One measured run of the flow under test, with what it produced.

    :meth:`problems` says why the run does not measure what it claims (empty: it does).

    >>> run = FlowRun(Rate(4000, 1.0, 1.0), Fleet(4), first_time=EVENT_START,
    ...               last_time=EVENT_START + 7.5, window_s=5.0)
    >>> run.problems()
    ['the planner ticked on 0 of the 2 windows holding FPMs']
    >>> run.outputs.ticks = [TickRecord(deployment="bench", time=EVENT_START + t,
    ...                                 engines=[{"role": "decode", "worker_id": "engine-0"}])
    ...                      for t in (5.0, 10.0)]
    >>> for problem in run.problems():
    ...     print(problem)
    engines in the tick records: ['engine-0'], sent: 4
    2 ticks saw fewer engines than sent, the first at 1700000005.0
    2 of 2 ticks without estimates
    """

    rate: Rate
    fleet: Fleet
    first_time: float | None
    last_time: float | None
    window_s: float
    outputs: FlowOutputs = field(default_factory=FlowOutputs)
    delivered: int | None = None
    """FPMs the source handed to the flow (``None``: as many as measured)."""

    @property
    def engines_seen(self) -> set[str]:
        """Worker ids in the tick records."""
        return {engine.worker_id for tick in self.outputs.ticks for engine in tick.engines}

    @property
    def estimated_ticks(self) -> int:
        """Ticks that estimated the ITL (load scaling had what it needs)."""
        return sum(t.diagnostics.estimated_itl_ms is not None for t in self.outputs.ticks)

    def windows(self) -> list[float]:
        """End times of the tick windows holding FPMs."""
        if self.first_time is None or self.last_time is None:
            return []
        first = math.floor(self.first_time / self.window_s)
        last = math.floor(self.last_time / self.window_s)
        return [(k + 1) * self.window_s for k in range(first, last + 1)]

    def problems(self) -> list[str]:
        """Why this run is invalid: dead letters, FPMs the flow did not process, ..."""
        out = []
        messages = self.rate.messages
        if self.delivered is not None and self.delivered != messages:
            out.append(f"the source handed {self.delivered} of {messages} FPMs to the flow")
        dead = self.outputs.dead_letters
        if dead:
            out.append(f"{len(dead)} dead letters, the first: {dead[0].reason[:200]}")
        if self.outputs.rows and not self.outputs.ticks:  # a flow that counts rows only
            if self.outputs.fpm_rows != messages:
                out.append(f"the flow counted {self.outputs.fpm_rows} of {messages} FPMs")
            return out
        expected = self.windows()
        ticked = sorted(t.time for t in self.outputs.ticks)
        if ticked != expected or not expected:
            covered = len(set(ticked) & set(expected))
            extra = sorted(set(ticked) - set(expected))
            out.append(
                f"the planner ticked on {covered} of the {len(expected)} windows holding FPMs"
                + (f" (and at {extra[:3]}, holding none)" if extra else "")
            )
            return out
        sent = set(self.fleet.worker_ids)
        if self.engines_seen != sent:
            out.append(
                f"engines in the tick records: {sorted(self.engines_seen)}, sent: {len(sent)}"
            )
        partial = [t.time for t in self.outputs.ticks if len(t.engines) != len(sent)]
        if partial:
            out.append(
                f"{len(partial)} ticks saw fewer engines than sent, the first at {partial[0]}"
            )
        missing = len(self.outputs.ticks) - self.estimated_ticks
        if missing:
            out.append(f"{missing} of {len(self.outputs.ticks)} ticks without estimates")
        return out

    def summary(self) -> str:
        """Ticks, engines seen and dead letters of the run, one line."""
        if self.outputs.rows and not self.outputs.ticks:
            dead = len(self.outputs.dead_letters)
            return f"{self.outputs.fpm_rows} FPM rows counted, {dead} dead letters"
        decisions = sum(t.decision is not None for t in self.outputs.ticks)
        return (
            f"{len(self.outputs.ticks)} ticks ({self.estimated_ticks} with estimates, "
            f"{decisions} decisions), {len(self.engines_seen)} engines seen, "
            f"{len(self.outputs.dead_letters)} dead letters"
        )


def measure_flow(
    messages: int,
    engines: int,
    flow_under_test: FlowUnderTest,
    *,
    batch_size: int = 1000,
    passes_per_second: float = PASSES_PER_SECOND,
) -> FlowRun:
    """FPM/s through ``flow_under_test`` fed by a ZmqFpmSource (one bytewax worker), and what
    the flow produced (see :meth:`FlowRun.problems`)."""
    from flows.planner import window_seconds

    url = _free_url()
    fleet = Fleet(engines, passes_per_second)
    clock = _FleetClock(fleet)
    outputs = FlowOutputs()
    with _Run(url, messages, fleet) as run:
        source = ZmqFpmSource(
            {url: (DEPLOYMENT, "decode")},
            batch_size=batch_size,
            receive_buffer=0,
            stop_after=messages + 1,  # and the warm-up message
            clock=clock,
        )
        window_s = window_seconds({DEPLOYMENT: BENCH_CONFIG})
        gate = _Gate(source, clock, window_s, run.warm, run.done)
        run_main(flow_under_test(gate, outputs))  # bytewax runs a single worker on this thread
        end = (time.perf_counter(), time.thread_time())
    if gate.started is None:
        raise RuntimeError("the flow never started")
    rate = Rate(messages, end[0] - gate.started[0], end[1] - gate.started[1])
    first = EVENT_START if clock.fpms else None
    return FlowRun(rate, fleet, first, gate.last_time, window_s, outputs, clock.fpms)


def load_flow(spec: str) -> FlowUnderTest:
    """``module:function`` → the flow builder."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--engines", type=int, default=4, help="engines on the one publisher")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; medians compared")
    parser.add_argument("--flow", default=None, help="module:function building the flow")
    args = parser.parse_args(argv)
    flow = load_flow(args.flow) if args.flow else planner_flow

    runs: dict[str, list[Rate]] = {"raw": [], "strict": [], "flow": []}
    flow_runs: list[FlowRun] = []
    for _ in range(args.repeat):  # interleaved, so a noisy neighbour hits all three alike
        runs["raw"].append(measure_raw(args.messages, args.engines))
        runs["strict"].append(measure_raw(args.messages, args.engines, validate=True))
        flow_run = measure_flow(args.messages, args.engines, flow, batch_size=args.batch_size)
        flow_runs.append(flow_run)
        runs["flow"].append(flow_run.rate)
    span_s = args.messages / args.engines / PASSES_PER_SECOND
    print(
        f"{args.messages} FPMs per run from {args.engines} engines on one publisher process "
        f"({PASSES_PER_SECOND:g} passes/s each: {span_s:g} s of event time), "
        f"{args.repeat} interleaved runs; k FPM/s, median [runs]"
    )
    print(f"flow under test: {args.flow or 'the planner flow (flows.planner.build_flow)'}")
    for i, flow_run in enumerate(flow_runs, 1):
        print(f"  flow run {i}: {flow_run.summary()}")
    print(f"{'':34} {'per CPU-second':>22} {'wall clock':>22}")
    for key, label in (
        ("raw", "raw SUB: recv_multipart+msgpack"),
        ("strict", "raw SUB + pydantic validation"),
        ("flow", "ZmqFpmSource in the flow"),
    ):
        print(
            f"{label:34} {_summary([r.cpu for r in runs[key]]):>22} "
            f"{_summary([r.wall for r in runs[key]]):>22}"
        )
    for basis in ("cpu", "wall"):
        raws = [getattr(r, basis) for r in runs["raw"]]
        throughs = [getattr(r, basis) for r in runs["flow"]]
        raw, through = statistics.median(raws), statistics.median(throughs)
        per_run = ", ".join(f"{t / r:.2f}" for t, r in zip(throughs, raws, strict=True))
        ok = through / raw >= GOAL_RATIO and through >= GOAL_RATE
        print(
            f"flow / raw ({basis:4})  {through / raw:5.2f} x [runs: {per_run}]   "
            f"goal >= {GOAL_RATIO} x and >= {GOAL_RATE // 1000} k/s: "
            f"{'met' if ok else 'NOT met'}"
        )
    invalid = [(i, p) for i, r in enumerate(flow_runs, 1) for p in r.problems()]
    for i, problem in invalid:
        print(f"INVALID: flow run {i}: {problem}")
    return 1 if invalid else 0


def _summary(values: list[float]) -> str:
    runs = ", ".join(f"{v / 1000:.0f}" for v in values)
    return f"{statistics.median(values) / 1000:6.1f} [{runs}]"


if __name__ == "__main__":
    sys.exit(main())
