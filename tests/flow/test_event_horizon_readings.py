"""Live, a Prometheus reading is taken on this host's clock: one that forward passes stamped on
receipt overtook while it was read (or crossed workers) is placed at the watermark, not
dropped as late, and one ahead of them moves event time. A traffic event read from Kafka or a
recording is data and stays late."""

from __future__ import annotations

import time
from datetime import timedelta

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink, TestingSource

from connectors.prometheus import PrometheusReading
from flows.clock import PlannerClock
from flows.horizon import EventHorizon, event_time, is_host_reading
from schemas import ClockEvent, DeadLetter, Event, TrafficEvent, TrafficObservation
from tests.flow.cluster import run_flow

OBSERVATION = TrafficObservation(duration_s=60, num_req=120, isl=3000, osl=150)


def test_live_a_reading_behind_the_watermark_is_placed_at_it(workers):
    # on 2 workers the source's worker is not "d"'s: the reading crosses workers (pickled)
    now = time.time()
    reading = PrometheusReading(deployment="d", time=now - 9.5, payload=OBSERVATION)
    from_kafka = TrafficEvent(deployment="d", time=now - 9.5, payload=OBSERVATION)
    events: list[Event] = [
        *(ClockEvent(deployment="d", time=now - 10 + k) for k in (0, 1)),
        reading,  # read on this host, overtaken by the pass at now - 9 while it was read
        from_kafka,  # the same observation as data
        reading.model_copy(update={"time": now - 8}),  # ahead: moves event time
        ClockEvent(deployment="d", time=now - 8.5),
    ]
    flow = Dataflow("live_readings")
    keyed = op.key_on("key", op.input("in", flow, TestingSource(events)), lambda e: e.deployment)
    clock = PlannerClock(  # no allowed lateness; the planner's rule for host readings
        event_time, timedelta(0), timedelta(seconds=5), is_host_reading=is_host_reading
    )
    out: list = []
    op.output("out", EventHorizon(clock, live=True).apply("horizon", keyed), TestingSink(out))

    run_flow(flow, workers)

    late = "late: event time {} is behind the planner's watermark"
    assert [
        (type(e).__name__, e.reason if isinstance(e, DeadLetter) else e.time) for _key, e in out
    ] == [
        ("ClockEvent", now - 10),
        ("ClockEvent", now - 9),
        ("PrometheusReading", pytest.approx(now - 9, abs=1e-6)),  # at the watermark (in µs)
        ("DeadLetter", late.format(now - 9.5)),  # Kafka's is data: late as before
        ("PrometheusReading", now - 8),
        ("DeadLetter", late.format(now - 8.5)),  # the reading moved event time on
    ]
    assert out[2][1].payload == OBSERVATION


def test_the_window_clock_places_a_late_reading_at_its_watermark():
    """The tick windows' clock runs on the host clock while the inputs are quiet: a reading
    stamped a moment before the watermark it moved is placed at it, a pass stays late."""
    from flows.clock import EPOCH

    def at(seconds: float):
        return EPOCH + timedelta(seconds=seconds)

    host = [at(100.0)]
    clock = PlannerClock(
        event_time,
        timedelta(0),
        timedelta(seconds=5),
        now_getter=lambda: host[0],
        is_host_reading=is_host_reading,
    )
    logic = clock.build(None)
    logic.on_item(ClockEvent(deployment="d", time=100.0))
    host[0] = at(110.0)  # quiet for 10 s: the watermark follows the host to 105
    logic.before_batch()
    reading = PrometheusReading(deployment="d", time=104.5, payload=OBSERVATION)
    placed, watermark = logic.on_item(reading)
    assert watermark == at(105.0) and placed == watermark
    as_data = TrafficEvent(deployment="d", time=104.5, payload=OBSERVATION)
    assert logic.on_item(as_data)[0] == at(104.5)  # behind the watermark: late
