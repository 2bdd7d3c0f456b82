"""Simulator invariants, fleet dynamics, routing, prefix caching and determinism."""

from __future__ import annotations

import hashlib
import itertools
import random

import pytest

from schemas import (
    ClockEvent,
    Event,
    FpmBatch,
    FpmBatchEvent,
    InventoryEvent,
    RequestEvent,
    parse_event,
)
from schemas.profile import PerformanceProfile
from schemas.trace import TraceRequest
from sim.fleet import FleetSim, FleetSpec
from sim.workload import LengthSampler, poisson_load, scale_load
from tests.decisions import decision
from tests.sim.lockstep import fpm_batches, run


def _check_rows(events: list[Event], spec: FleetSpec, sim: FleetSim) -> dict[str, list[tuple]]:
    """Row-level invariants of every engine; returns the rows per worker."""
    cap, mbt, mseq = spec.kv_capacity, spec.max_num_batched_tokens, spec.max_num_seqs
    rows_by_worker: dict[str, list[tuple]] = {}
    for worker, batches in fpm_batches(events).items():
        for batch in batches:
            # strict validation of the whole batch, and of each row as a ForwardPassMetrics
            FpmBatch.model_validate(batch.model_dump())
            batch.fpm(0)
            batch.fpm(len(batch.rows) - 1)
            rows_by_worker.setdefault(worker, []).extend(batch.rows)
    ready = {
        rep.engine.name: rep.ready_s
        for reps in sim._replicas.values()
        for rep in reps
        if rep.engine
    }
    for worker, rows in rows_by_worker.items():
        prev_t, prev_c = ready[worker], 0
        for r in rows:
            t, counter, wall = r[0], r[1], r[2]
            assert counter == prev_c + 1, worker
            assert t >= prev_t
            if wall > 0:
                assert t - wall >= prev_t - 1e-9, "iterations never overlap"
                assert t - wall - prev_t <= spec.heartbeat_s + 1e-9, "silence longer than 1 s"
            else:
                assert r[3:10] == (0, 0, 0.0, 0, 0, 0, 0.0), "heartbeats schedule nothing"
                assert t - prev_t == pytest.approx(spec.heartbeat_s)
            assert r[8] + r[6] + r[4] <= cap, "KV capacity exceeded"
            assert r[7] <= mseq and r[3] + r[7] <= mseq
            assert r[4] + r[7] <= mbt
            prev_t, prev_c = t, counter
    return rows_by_worker


def _check_events(events: list[Event], tick_s: float) -> None:
    start = 0.0
    window: list[Event] = []
    for e in events:
        window.append(e)
        if isinstance(e, ClockEvent):
            times = [x.time for x in window]
            assert times == sorted(times)
            for x in window:
                if isinstance(x, FpmBatchEvent):
                    assert all(start <= r[0] < e.time for r in x.payload.rows)
                    assert x.time == x.payload.rows[-1][0]
            start = e.time
            window = []
        # every event survives the wire format
        assert parse_event(e.model_dump_json()) == e


def _check_requests(sim: FleetSim, events: list[Event], n: int) -> None:
    reqs = sim.requests
    assert len(reqs) == n
    assert sorted(r.idx for r in reqs) == list(range(n))
    for r in reqs:
        assert r.first_token is not None and r.finish is not None
        assert r.arrival <= r.first_token <= r.finish
    finished = sum(
        rep.engine.finished for reps in sim._replicas.values() for rep in reps if rep.engine
    )
    assert finished == n, "each request finishes exactly once"
    arrivals = [e for e in events if isinstance(e, RequestEvent)]
    assert len(arrivals) == n
    assert len({e.payload.request_id for e in arrivals}) == n


@pytest.mark.parametrize("mode", ["disagg", "agg"])
def test_invariants_under_pressure(h200: PerformanceProfile, mode: str) -> None:
    """Small KV and batch limits force chunking, queueing and preemption."""
    reqs = poisson_load(6.0, 120.0, LengthSampler(isl_mean=3000, osl_mean=400, cv=0.8), seed=7)
    spec = FleetSpec(
        profile=h200,
        mode=mode,
        prefill_replicas=1,
        decode_replicas=2,
        max_kv_tokens=20_000,
        max_num_batched_tokens=2048,
        max_num_seqs=16,
    )
    reqs = [r for r in reqs if r.isl + r.osl < 19_000]
    sim = FleetSim(spec, reqs, seed=3)
    events = run(sim, tick_s=5.0)
    assert sim.done
    res = sim.result()
    assert res.preemptions > 0
    assert res.num_finished == len(reqs) and res.num_unfinished == 0
    rows = _check_rows(events, spec, sim)
    _check_events(events, 5.0)
    _check_requests(sim, events, len(reqs))
    # every decode iteration makes one token per decode request, preempted or not
    decode_rows = [r for w, rs in rows.items() if not w.startswith("prefill") for r in rs]
    assert sum(r[7] for r in decode_rows) == sum(max(r.osl, 1) - 1 for r in reqs)
    # prefill computes every prompt once, plus recomputation after preemptions
    prefill_rows = [r for w, rs in rows.items() if w.startswith(("prefill", "agg")) for r in rs]
    computed = sum(r[4] for rs in rows.values() for r in rs)
    assert (
        sum(r[4] for r in prefill_rows) >= sum(r.isl for r in reqs)
        if mode == "disagg"
        else computed > sum(r.isl for r in reqs)
    )


def test_invariants_no_pressure_token_counts(
    h200: PerformanceProfile, azure_conv: list[TraceRequest]
) -> None:
    reqs = [r for r in azure_conv if r.arrival_s < 300]
    spec = FleetSpec(profile=h200, prefill_replicas=1, decode_replicas=2)
    sim = FleetSim(spec, reqs)
    events = run(sim, tick_s=5.0)
    rows = _check_rows(events, spec, sim)
    _check_requests(sim, events, len(reqs))
    assert sim.result().preemptions == 0
    prefill = [r for w, rs in rows.items() if w.startswith("prefill") for r in rs]
    decode = [r for w, rs in rows.items() if w.startswith("decode") for r in rs]
    assert sum(r[4] for r in prefill) == sum(r.isl for r in reqs)
    assert sum(r[7] for r in decode) == sum(r.osl - 1 for r in reqs)
    assert all(r[7] == 0 for r in prefill) and all(r[4] == 0 for r in decode)
    # least-loaded routing uses both decode engines
    assert sum(1 for w in rows if w.startswith("decode")) == 2
    assert all(
        sum(r[7] for r in rows[w]) > 0.3 * sum(r[7] for r in decode)
        for w in rows
        if w.startswith("decode")
    )


def test_startup_delay_drain_and_gpu_hours(h200: PerformanceProfile) -> None:
    reqs = poisson_load(4.0, 900.0, LengthSampler(isl_mean=2000, osl_mean=300), seed=11)
    spec = FleetSpec(profile=h200, prefill_replicas=1, decode_replicas=1, startup_delay_s=60.0)
    sim = FleetSim(spec, reqs)
    plan = {
        100.0: decision(deployment="sim", time=100.0, num_decode=3, reason="test"),
        400.0: decision(deployment="sim", time=400.0, num_decode=1, decision_id=2, reason="test"),
    }
    events = run(sim, tick_s=5.0, decide=lambda t, _: plan.get(t))
    inv = [
        (e.time, e.payload.ready_num_decode, e.payload.expected_num_decode)
        for e in events
        if isinstance(e, InventoryEvent)
    ]
    assert inv == [(0.0, 1, 1), (100.0, 1, 3), (160.0, 3, 3), (400.0, 1, 1)]
    reps = sim._replicas["decode"]
    assert [(r.start_s, r.ready_s) for r in reps] == [(0.0, 0.0), (100.0, 160.0), (100.0, 160.0)]
    drained = [r for r in reps if r.drain_s is not None]
    assert len(drained) == 2 and all(r.drain_s == 400.0 for r in drained)
    by_worker = fpm_batches(events)
    for r in drained:
        assert r.stop_s is not None and r.stop_s >= 400.0
        assert r.engine is not None
        rows = [row for b in by_worker[r.engine.name] for row in b.rows]
        # it stops when the drain starts or its last iteration ends, and emits nothing after
        last_busy = max(row[0] for row in rows if row[2] > 0)
        assert r.stop_s == max(400.0, last_busy)
        assert rows[-1][0] <= r.stop_s
        # after the drain started it only finishes what it had: the batch only shrinks
        after = [row[7] for row in rows if row[0] - row[2] >= 400.0]
        assert after == sorted(after, reverse=True)
    res = sim.result()
    end = sim.now_s
    survivor = [r for r in reps if r.drain_s is None]
    assert len(survivor) == 1 and survivor[0].stop_s is None
    expected = end + (end - survivor[0].start_s) + sum(r.stop_s - r.start_s for r in drained)
    assert res.gpu_hours * 3600 == pytest.approx(expected)
    assert res.scaling_actions == 2 and res.reversals_5min == 1
    assert res.num_finished == len(reqs)


def test_cancelled_start_costs_gpu_time_but_never_serves(h200: PerformanceProfile) -> None:
    reqs = poisson_load(1.0, 200.0, seed=5)
    sim = FleetSim(FleetSpec(profile=h200, mode="agg", decode_replicas=1), reqs)
    plan = {
        10.0: decision(deployment="sim", time=10.0, num_decode=3, reason="test"),
        30.0: decision(deployment="sim", time=30.0, num_decode=1, decision_id=2, reason="test"),
    }
    events = run(sim, tick_s=5.0, decide=lambda t, _: plan.get(t))
    ready = [e.payload.ready_num_decode for e in events if isinstance(e, InventoryEvent)]
    assert ready == [1, 1, 1]  # expected went 1 -> 3 -> 1, no replica ever became ready
    assert sorted(fpm_batches(events)) == ["agg-0"]
    assert sim.result().gpu_hours * 3600 == pytest.approx(sim.now_s + 2 * 20.0)


def test_max_replicas_counts_a_decision_applied_since_the_last_step(
    h200: PerformanceProfile,
) -> None:
    # protects: `flowplanner fleet` stopped right after applying a decision printed the
    # fleet before it ("max replicas prefill 1" with prefill 2 applied)
    sim = FleetSim(FleetSpec(profile=h200), poisson_load(1.0, 60.0, seed=3))
    sim.advance(5.0)
    sim.apply(decision(deployment="sim", time=5.0, num_prefill=2, reason="test"))
    assert sim.result().max_replicas == {"prefill": 2, "decode": 1}


def test_requests_wait_for_a_replica(h200: PerformanceProfile) -> None:
    reqs = [TraceRequest(arrival_s=1.0 + i, isl=500, osl=5) for i in range(5)]
    sim = FleetSim(
        FleetSpec(profile=h200, mode="agg", decode_replicas=0, startup_delay_s=30.0), reqs
    )
    events = run(
        sim,
        tick_s=5.0,
        decide=lambda t, _: (
            decision(deployment="sim", time=t, num_decode=1, reason="test") if t == 5.0 else None
        ),
    )
    assert sim.done
    ttfts = sorted(r.first_token - r.arrival for r in sim.requests)
    assert ttfts[0] >= 35.0 - 5.0 - 1e-9  # waited for the replica started at 5 s, ready at 35 s
    assert all(isinstance(e, RequestEvent) for e in events if e.time < 5.0 and e.type == "request")


def test_prefill_routing_sees_the_iteration_in_progress(h200: PerformanceProfile) -> None:
    # a long prompt keeps one prefill engine busy; the short prompts that follow go to the
    # other, idle one (the router used to see only queued tokens: both looked empty)
    reqs = [TraceRequest(arrival_s=0.0, isl=8000, osl=2)]
    reqs += [TraceRequest(arrival_s=0.01 * (i + 1), isl=500, osl=2) for i in range(6)]
    sim = FleetSim(FleetSpec(profile=h200, prefill_replicas=2, decode_replicas=1), reqs)
    run(sim)
    long_ttft = sim.requests[0].first_token - sim.requests[0].arrival
    short_ttfts = [r.first_token - r.arrival for r in sim.requests[1:]]
    assert all(t < long_ttft for t in short_ttfts)  # none waited behind the long prompt


def _decoding_then_long_prompt() -> list[TraceRequest]:
    # a short prompt that then decodes for a while, and a long prompt 0.1 s later that goes to
    # the other engine: it computes its 8 000 tokens in one iteration (0.1-0.26 s), with no
    # KV in the batch and nothing queued yet
    return [
        TraceRequest(arrival_s=0.0, isl=100, osl=1000),
        TraceRequest(arrival_s=0.1, isl=8000, osl=2),
    ]


def test_agg_routing_sees_the_prefill_in_progress(h200: PerformanceProfile) -> None:
    # a request arriving during the long prompt's iteration goes to the engine that decodes
    # the short one, not behind the long prompt (which used to count neither as queued nor
    # as in the batch: load 0, below the decoding engine's). Same for every seed.
    for seed in range(3):
        reqs = [*_decoding_then_long_prompt(), TraceRequest(arrival_s=0.11, isl=500, osl=2)]
        sim = FleetSim(FleetSpec(profile=h200, mode="agg", decode_replicas=2), reqs, seed=seed)
        run(sim)
        long, short = sim.requests[1], sim.requests[2]
        assert long.first_token is not None and short.first_token is not None
        assert short.first_token < long.first_token, seed


def test_scale_down_drains_the_least_loaded_counting_the_prefill_in_progress(
    h200: PerformanceProfile,
) -> None:
    # scaling to one engine while the long prompt is computed drains the engine decoding the
    # short request, not the one busy with the long prompt (which used to count as load 0)
    for seed in range(3):
        spec = FleetSpec(profile=h200, mode="agg", decode_replicas=2)
        sim = FleetSim(spec, _decoding_then_long_prompt(), seed=seed)
        sim.advance(0.15)
        sim.apply(decision(deployment="sim", time=0.15, num_decode=1, reason="test"))
        reps = sim._replicas["agg"]
        drained = [r for r in reps if r.drain_s is not None]
        kept = [r for r in reps if r.drain_s is None]
        assert len(drained) == len(kept) == 1
        assert kept[0].engine is not None and drained[0].engine is not None
        assert kept[0].engine.B == 0 and kept[0].engine.busy  # computing the long prompt
        assert drained[0].engine.B == 1, seed  # decoding the short request
        run(sim)
        assert sim.result().num_finished == 2


def test_scale_down_keeps_the_prefill_engine_computing_a_prompt(
    h200: PerformanceProfile,
) -> None:
    # a prefill engine computing a long prompt has nothing queued: it counted as idle as the
    # one beside it, and a tie drained whichever came last - the busy one on some seeds
    placed = set()
    for seed in range(6):
        spec = FleetSpec(profile=h200, prefill_replicas=2, decode_replicas=1)
        sim = FleetSim(spec, [TraceRequest(arrival_s=0.0, isl=8000, osl=2)], seed=seed)
        sim.advance(0.05)
        reps = sim._replicas["prefill"]
        placed |= {i for i, r in enumerate(reps) if r.engine is not None and r.engine.busy}
        sim.apply(decision(deployment="sim", time=0.05, num_prefill=1, reason="test"))
        kept = [r for r in reps if r.drain_s is None]
        assert len(kept) == 1 and kept[0].engine is not None
        assert kept[0].engine.busy, seed  # computing the prompt
        run(sim)
        assert sim.result().num_finished == 1
    assert placed == {0, 1}  # the prompt went to either engine across the seeds


def test_rejected_requests_are_counted_not_lost(h200: PerformanceProfile) -> None:
    reqs = [
        TraceRequest(arrival_s=0.0, isl=500, osl=5),
        TraceRequest(arrival_s=0.1, isl=200_000, osl=5),
    ]
    sim = FleetSim(FleetSpec(profile=h200, mode="agg", context_length=32_768), reqs)
    run(sim)
    res = sim.result()
    assert (res.num_arrived, res.num_finished, res.num_rejected) == (2, 1, 1)
    assert res.sla_attainment == 0.5


def test_prefix_cache_hits_reduce_prefill(
    h200: PerformanceProfile, mooncake: list[TraceRequest]
) -> None:
    reqs = [r for r in mooncake if r.arrival_s < 60]
    spec = FleetSpec(profile=h200, prefill_replicas=3, decode_replicas=4)
    sim = FleetSim(spec, reqs)
    events = run(sim)
    hits = [e.payload.kv_hit_rate for e in events if isinstance(e, RequestEvent)]
    assert all(h is not None and 0 <= h < 1 for h in hits)
    rows = [
        r
        for w, bs in fpm_batches(events).items()
        if w.startswith("prefill")
        for b in bs
        for r in b.rows
    ]
    cached = sum(round(h * r.isl) for h, r in zip(hits, reqs, strict=True))
    assert cached > 0.3 * sum(r.isl for r in reqs)  # Mooncake prompts share prefixes
    assert sum(r[4] for r in rows) == sum(r.isl for r in reqs) - cached
    assert sum(r[6] for r in rows) >= cached  # cached tokens are read as KV


def test_prefix_aware_routing_keeps_prefixes_together(h200: PerformanceProfile) -> None:
    """30 shared 4k-token prefixes, caches that hold a third of them: least-loaded routing
    spreads every prefix over all engines and thrashes, prefix-aware routing pins them."""
    rng = random.Random(1)
    reqs = []
    for i in range(600):
        g = rng.randrange(30)
        hashes = (*range(g * 100, g * 100 + 8), 10_000 + i)
        reqs.append(
            TraceRequest(
                arrival_s=i * 0.5, isl=8 * 512 + 300, osl=50, hash_ids=hashes, block_size=512
            )
        )
    out = {}
    for routing in ("least_loaded", "prefix_aware"):
        spec = FleetSpec(
            profile=h200,
            prefill_replicas=3,
            decode_replicas=2,
            routing=routing,
            max_kv_tokens=45_000,
        )
        sim = FleetSim(spec, reqs)
        events = run(sim)
        hits = [e.payload.kv_hit_rate for e in events if isinstance(e, RequestEvent)]
        res = sim.result()
        assert res.num_finished == len(reqs)
        out[routing] = (sum(hits) / len(hits), res.ttft_ms_p50)
    assert out["prefix_aware"][0] > 2 * out["least_loaded"][0]
    assert out["prefix_aware"][1] < out["least_loaded"][1]


def _digest(events: list[Event]) -> str:
    h = hashlib.sha256()
    for e in events:
        h.update(e.model_dump_json().encode())
    return h.hexdigest()


def test_same_inputs_and_seed_give_identical_results(
    h200: PerformanceProfile, azure_conv: list[TraceRequest]
) -> None:
    base = [r for r in azure_conv if r.arrival_s < 120]
    outs = []
    for _ in range(2):
        reqs = scale_load(base, 3, seed=42)
        sim = FleetSim(FleetSpec(profile=h200, prefill_replicas=2, decode_replicas=2), reqs, seed=9)
        events = run(
            sim,
            tick_s=5.0,
            decide=lambda t, _: (
                decision(deployment="sim", time=t, num_prefill=1, reason="test")
                if t == 60.0
                else None
            ),
        )
        outs.append((sim.result().to_json(), _digest(events), sim.timeline()))
    assert outs[0][0] == outs[1][0]
    assert outs[0][1] == outs[1][1]
    assert str(outs[0][2]) == str(outs[1][2])


def test_tick_length_does_not_change_the_simulation(
    h200: PerformanceProfile, azure_conv: list[TraceRequest]
) -> None:
    """Requests see the same latencies whether the planner ticks every 1 s or every 7 s."""
    reqs = [r for r in azure_conv if r.arrival_s < 60]
    lat = []
    for tick in (1.0, 7.0):
        sim = FleetSim(FleetSpec(profile=h200, mode="agg", decode_replicas=2), reqs)
        run(sim, tick_s=tick)
        lat.append([(r.first_token, r.finish) for r in sim.requests])
    for (a1, b1), (a2, b2) in zip(*lat, strict=True):
        assert a1 == pytest.approx(a2, abs=1e-9) and b1 == pytest.approx(b2, abs=1e-6)


def test_timeline_columns(h200: PerformanceProfile, azure_conv: list[TraceRequest]) -> None:
    reqs = [r for r in azure_conv if r.arrival_s < 100]
    sim = FleetSim(FleetSpec(profile=h200, timeline_interval_s=10.0), reqs)
    run(sim, tick_s=5.0, until_s=100.0)
    cols = sim.timeline()
    assert cols["time"] == [10.0 * (k + 1) for k in range(10)]
    assert sum(cols["arrival_rps"]) * 10.0 == len(reqs)
    assert cols["ready_prefill"] == [1.0] * 10 and cols["ready_decode"] == [1.0] * 10
    assert all(len(v) == 10 for v in cols.values())
    assert cols["ttft_sla_ms"][0] == 500.0


def test_advance_validates_time(h200: PerformanceProfile) -> None:
    sim = FleetSim(FleetSpec(profile=h200), [])
    sim.advance(5.0)
    with pytest.raises(ValueError):
        sim.advance(4.0)
    with pytest.raises(ValueError):
        FleetSim(
            FleetSpec(profile=h200),
            [TraceRequest(arrival_s=2.0, isl=1, osl=1), TraceRequest(arrival_s=1.0, isl=1, osl=1)],
        )
    events = sim.advance(7.0)
    assert [e.type for e in events] == ["fpm_batch", "fpm_batch", "clock"]  # heartbeats
    assert list(
        itertools.chain.from_iterable(
            [r[0] for r in e.payload.rows] for e in events if isinstance(e, FpmBatchEvent)
        )
    ) == [5.0, 6.0, 5.0, 6.0]


@pytest.mark.parametrize("mode", ["agg", "disagg"])
def test_a_backlog_is_spread_over_every_replica_ready_at_that_instant(
    h200: PerformanceProfile, mode: str
) -> None:
    # scale from zero: 40 requests wait (agg: for an engine; disagg: the decode hand-off queue)
    # until one decision's 4 replicas are ready together. The first ready event used to route
    # the whole backlog before the other three counted as ready: {40, 0, 0, 0}.
    reqs = [TraceRequest(arrival_s=0.1 * i, isl=2000, osl=200) for i in range(40)]
    spec = FleetSpec(
        profile=h200, mode=mode, prefill_replicas=1 if mode == "disagg" else 0, decode_replicas=0
    )
    sim = FleetSim(spec, reqs)
    run(
        sim,
        decide=lambda t, _: (
            decision(deployment="sim", time=t, num_decode=4, reason="test") if t == 5.0 else None
        ),
    )
    assert sim.done
    role = "agg" if mode == "agg" else "decode"
    finished = [rep.engine.finished for rep in sim._replicas[role] if rep.engine]
    assert finished == [10, 10, 10, 10]


def test_gpu_hours_and_capabilities_count_each_roles_gpus(h200: PerformanceProfile) -> None:
    from flows.scenario import fleet_spec
    from schemas import CapabilitiesEvent, PlannerConfig

    config = PlannerConfig(mode="disagg", prefill_engine_num_gpu=4, decode_engine_num_gpu=1)
    sim = FleetSim(fleet_spec(config, h200), [TraceRequest(arrival_s=1.0, isl=500, osl=5)])
    [caps] = [e for e in sim.advance(3600.0) if isinstance(e, CapabilitiesEvent)]
    assert (caps.payload.prefill.num_gpu, caps.payload.decode.num_gpu) == (4, 1)
    assert sim.result().gpu_hours_by_role == pytest.approx({"prefill": 4.0, "decode": 1.0})
