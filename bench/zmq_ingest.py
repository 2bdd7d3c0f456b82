"""FPM ingest over ZMQ: bytewax flow with ZmqFpmSource vs a bare SUB socket, same run.

A publisher process (``connectors.zmq_publisher``, XPUB so nothing is lost before the subscriber
joins) pre-loads N FPM messages into the subscriber's queue, then the consumer drains them:

* **raw** — a bare SUB socket: ``recv_multipart`` + ``msgpack.unpackb`` (receive + decode, no
  validation), the baseline;
* **raw+schema** — the same with pydantic validation (``ForwardPassMetrics.from_msgpack``), for
  context;
* **flow** — ``ZmqFpmSource`` (framing checks, sequence tracking, strict decode, FpmBatchEvents)
  inside a real bytewax run of the flow under test, timed from the moment the queue is full to the
  end of the run.

Pre-loading makes the measurement the consumer's cost alone (the publisher is not racing it on
the other core). Run: ``python -m bench.zmq_ingest [--messages N] [--flow module:function]``.
The flow under test is a function ``(source) -> Dataflow`` that reads ``source`` (a bytewax
Source of ZmqFpmSource items, deployment ``bench``, role ``decode``) and ends in any sink; the
default is the full planner flow (:func:`planner_flow`); ``bench.zmq_ingest:trivial_flow`` is
input → count rows → sink. The goal is flow ≥ 0.75 × raw and ≥ 100 k FPM/s.
"""

from __future__ import annotations

import argparse
import importlib
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
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.testing import run_main

from connectors.zmq_source import ZmqFpmSource, ZmqItem
from schemas import FpmBatchEvent, FpmEvent

FlowUnderTest = Callable[[Source[ZmqItem]], Dataflow]
"""Builds the dataflow being measured around the given source."""

GOAL_RATIO = 0.75
GOAL_RATE = 100_000


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


# --- the publisher process ----------------------------------------------------------------------


def _payloads(engines: int, distinct: int) -> list[bytes]:
    from connectors.zmq_publisher import encode_fpm
    from schemas import ForwardPassMetrics

    out = []
    for i in range(distinct):
        for engine in range(engines):
            fpm = ForwardPassMetrics.model_validate(
                {
                    "worker_id": f"worker-{engine}",
                    "wall_time": 0.02 + i * 1e-4,
                    "scheduled_requests": {
                        "num_decode_requests": 32 + i,
                        "sum_decode_kv_tokens": 90_000 + 37 * i,
                        "var_decode_kv_tokens": 1234.5 + i,
                        "num_prefill_requests": i % 2,
                        "sum_prefill_tokens": 512 * (i % 2),
                    },
                    "queued_requests": {"num_prefill_requests": i % 5, "sum_prefill_tokens": 900},
                }
            )
            out.append(encode_fpm(fpm, counter_id=i))
    return out


def _publish(url: str, messages: int, engines: int, warm: MpEvent, done: MpEvent) -> None:
    from connectors.zmq_publisher import FpmPublisher

    pool = _payloads(engines, 64)
    with FpmPublisher(url, send_buffer=0, context=zmq.Context()) as publisher:
        if not publisher.wait_for_subscribers(1, 30.0):
            raise SystemExit("no subscriber")
        publisher.publish_payload(pool[0])  # warm-up: the consumer is attached and polling
        if not warm.wait(60.0):
            raise SystemExit("consumer never saw the warm-up message")
        size = len(pool)
        for i in range(messages):
            publisher.publish_payload(pool[i % size])
        time.sleep(0.5)  # let ZMQ move the queue to the subscriber
        done.set()
        time.sleep(1.0)


@dataclass
class _Run:
    url: str
    messages: int
    engines: int
    ctx: mp.context.SpawnContext = field(default_factory=lambda: mp.get_context("spawn"))

    def __post_init__(self) -> None:
        self.warm = self.ctx.Event()
        self.done = self.ctx.Event()
        self.process = self.ctx.Process(
            target=_publish,
            args=(self.url, self.messages, self.engines, self.warm, self.done),
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
        with _Run(url, messages, engines) as run:
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


class _GatePartition(StatelessSourcePartition[ZmqItem]):
    """Delegates to the ZMQ partition; on its first items waits until the queue is pre-loaded."""

    def __init__(self, inner: StatelessSourcePartition[ZmqItem], gate: _Gate) -> None:
        self.inner = inner
        self.gate = gate

    def next_batch(self) -> list[ZmqItem]:
        items = list(self.inner.next_batch())
        if items and self.gate.started is None:
            self.gate.warm.set()
            if not self.gate.done.wait(120):
                raise RuntimeError("publisher did not finish")
            self.gate.started = (time.perf_counter(), time.thread_time())
        return items

    def next_awake(self) -> datetime | None:
        return self.inner.next_awake()

    def close(self) -> None:
        self.inner.close()


@dataclass
class _Gate(DynamicSource[ZmqItem]):
    inner: ZmqFpmSource
    warm: MpEvent
    done: MpEvent
    started: tuple[float, float] | None = None

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _GatePartition:
        return _GatePartition(self.inner.build(step_id, worker_index, worker_count), self)


class _CountingSink(DynamicSink[int]):
    def __init__(self) -> None:
        self.total = 0

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _CountPartition:
        return _CountPartition(self)


class _CountPartition(StatelessSinkPartition[int]):
    def __init__(self, sink: _CountingSink) -> None:
        self.sink = sink

    def write_batch(self, items: list[int]) -> None:
        self.sink.total += sum(items)


def _rows(item: ZmqItem) -> int:
    if isinstance(item, FpmBatchEvent):
        return len(item.payload.rows)
    return 1 if isinstance(item, FpmEvent) else 0


def trivial_flow(source: Source[ZmqItem]) -> Dataflow:
    """input → count FPM rows → sink: the ingest path and nothing else."""
    flow = Dataflow("zmq_ingest_trivial")
    stream = op.input("zmq", flow, source)
    op.output("count", op.map("rows", stream, _rows), _CountingSink())
    return flow


def planner_flow(source: Source[ZmqItem]) -> Dataflow:
    """The full planner flow (``flows.planner.build_flow``) of one decode deployment, live."""
    from flows.planner import PlannerSinks, build_flow
    from schemas import PlannerConfig

    config = PlannerConfig(
        mode="decode",
        optimization_target="sla",
        enable_load_scaling=True,
        enable_throughput_scaling=False,
    )
    sinks = PlannerSinks(ticks=[_Discard()], dead_letters=[_Discard()])
    return build_flow({"bench": config}, [source], sinks, live=True, name="zmq_bench")


class _DiscardPartition(StatelessSinkPartition[object]):
    def write_batch(self, items: list[object]) -> None:
        pass


class _Discard(DynamicSink[object]):
    """Takes the planner's tick records (or dead letters) and keeps nothing."""

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _DiscardPartition:
        return _DiscardPartition()


def measure_flow(
    messages: int, engines: int, flow_under_test: FlowUnderTest, *, batch_size: int = 1000
) -> Rate:
    """FPM/s through ``flow_under_test`` fed by a ZmqFpmSource (one bytewax worker)."""
    url = _free_url()
    with _Run(url, messages, engines) as run:
        source = ZmqFpmSource(
            {url: ("bench", "decode")},
            batch_size=batch_size,
            receive_buffer=0,
            stop_after=messages + 1,
        )
        gate = _Gate(source, run.warm, run.done)
        run_main(flow_under_test(gate))  # bytewax runs a single worker on this thread
        end = (time.perf_counter(), time.thread_time())
    if gate.started is None:
        raise RuntimeError("the flow never started")
    return Rate(messages, end[0] - gate.started[0], end[1] - gate.started[1])


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
    for _ in range(args.repeat):  # interleaved, so a noisy neighbour hits all three alike
        runs["raw"].append(measure_raw(args.messages, args.engines))
        runs["strict"].append(measure_raw(args.messages, args.engines, validate=True))
        runs["flow"].append(
            measure_flow(args.messages, args.engines, flow, batch_size=args.batch_size)
        )
    print(
        f"{args.messages} FPMs per run from {args.engines} engines on one publisher process, "
        f"{args.repeat} interleaved runs; k FPM/s, median [runs]"
    )
    print(f"flow under test: {args.flow or 'the planner flow (flows.planner.build_flow)'}")
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
        raw = statistics.median(getattr(r, basis) for r in runs["raw"])
        through = statistics.median(getattr(r, basis) for r in runs["flow"])
        ok = through / raw >= GOAL_RATIO and through >= GOAL_RATE
        print(
            f"flow / raw ({basis:4})  {through / raw:5.2f} x   "
            f"goal >= {GOAL_RATIO} x and >= {GOAL_RATE // 1000} k/s: "
            f"{'met' if ok else 'NOT met'}"
        )
    return 0


def _summary(values: list[float]) -> str:
    runs = ", ".join(f"{v / 1000:.0f}" for v in values)
    return f"{statistics.median(values) / 1000:6.1f} [{runs}]"


if __name__ == "__main__":
    sys.exit(main())
