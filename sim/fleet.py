"""The simulated fleet: replicas per role, routing, scaling with start-up and drain, lock-step API.

:class:`FleetSim` replays a list of :class:`schemas.trace.TraceRequest` against simulated
engines (:mod:`sim.engines`) and is driven in lock step by a planner loop::

    sim = FleetSim(spec, requests)
    while not sim.done:
        events = sim.advance(sim.now_s + 5.0)   # what the planner receives for [now, now+5)
        for decision in planner(events):
            sim.apply(decision)                  # takes effect at sim.now_s
    print(sim.result().table())

Fleet dynamics: a replica asked for at ``t`` is ready at ``t + startup_delay_s`` (model load);
removing replicas first cancels ones still starting (newest first), then drains the
least-loaded ready ones: a draining replica takes no new work, finishes what it has, and stops
when empty. GPU-hours count every replica from its start request to its stop, start-up
included. Routing sends each request to the ready, non-draining engine of the role with the
least load in tokens (pending prefill work for prefill engines, KV in use plus queued KV for
decode and aggregated engines); ``prefix_aware`` routing adds the prompt tokens the engine would
have to compute after its prefix-cache hit. Ties are broken by a seeded random choice.
Requests whose prompt plus output cannot fit an engine's context or KV are rejected at arrival
(counted, never lost). Disaggregated requests move prefill → decode after
``kv_transfer_delay_s``.

Events returned by :meth:`FleetSim.advance` (sorted by event time): a CapabilitiesEvent at 0
(first call only), an InventoryEvent whenever ready/expected counts change (at most one per
instant), one RequestEvent per arrival (ISL, OSL, prefix hit rate at the routed engine; ``None``
while no engine of the entry role is ready), one FpmBatchEvent per engine that produced rows in
the span (one row per iteration, heartbeat rows every ``heartbeat_s`` of idleness), and a
ClockEvent at ``until_s`` last.

Determinism: the same spec, requests, seed and sequence of ``advance``/``apply`` calls give the
same events and results, bit for bit, in any process (no hash-order dependence).
"""

from __future__ import annotations

import gc
import heapq
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas import (
    CapabilitiesEvent,
    ClockEvent,
    EngineCapabilities,
    Event,
    FpmBatch,
    FpmBatchEvent,
    InventoryEvent,
    RequestEvent,
    RequestRecord,
    ScalingDecision,
    WorkerCapabilities,
    WorkerCounts,
)
from schemas.profile import PerformanceProfile
from schemas.trace import TraceRequest
from sim.engines import Engine, EngineCaps, EngineRole, SimRequest
from sim.scoring import RunResult, ScalingAction, score
from sim.timing import EngineTiming

_READY, _HANDOFF, _PREFILL_END = 0, 1, 2  # global event kinds, in processing order at equal time


class FleetSpec(BaseModel):
    """What is simulated: engine profile and limits, fleet shape, dynamics and SLA targets.

    ``decode_replicas`` is the engine count of an aggregated fleet (``mode="agg"``);
    ``max_kv_tokens`` defaults to the profile's. ``gpus_per_replica`` is a decode (or
    aggregated) replica's GPU count, ``prefill_gpus_per_replica`` a prefill replica's (default:
    the same); they weigh GPU-hours and are the ``num_gpu`` of the published capabilities.

    >>> from schemas.profile import DecodeProfile, PerformanceProfile, PrefillProfile
    >>> prof = PerformanceProfile(
    ...     prefill=PrefillProfile(prefill_isl=[100, 1100], prefill_ttft=[20, 40],
    ...                            prefill_thpt_per_gpu=[5000, 27500]),
    ...     decode=DecodeProfile(x_kv_usage=[0.001, 0.5], y_context_length=[1000, 1000],
    ...                          z_itl=[5, 25], z_thpt_per_gpu=[200, 9000],
    ...                          max_kv_tokens=1_000_000))
    >>> spec = FleetSpec(profile=prof, prefill_replicas=1, decode_replicas=2)
    >>> spec.kv_capacity, spec.startup_delay_s
    (1000000, 60.0)
    >>> spec = FleetSpec(profile=prof, gpus_per_replica=1, prefill_gpus_per_replica=4)
    >>> spec.gpus("prefill"), spec.gpus("decode")
    (4, 1)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    profile: PerformanceProfile
    mode: Literal["disagg", "agg"] = "disagg"
    prefill_replicas: int = Field(1, ge=0)
    decode_replicas: int = Field(1, ge=0)
    startup_delay_s: float = Field(60.0, ge=0, allow_inf_nan=False)
    kv_transfer_delay_s: float = Field(0.0, ge=0, allow_inf_nan=False)
    routing: Literal["least_loaded", "prefix_aware"] = "least_loaded"
    max_num_batched_tokens: int = Field(8192, ge=1)
    max_num_seqs: int = Field(256, ge=1)
    max_kv_tokens: int | None = Field(None, ge=1)
    context_length: int = Field(131072, ge=1)
    kv_block_size: int = Field(16, ge=1)
    gpus_per_replica: int = Field(1, ge=1)
    prefill_gpus_per_replica: int | None = Field(None, ge=1)
    ttft_ms: float = Field(500.0, gt=0, allow_inf_nan=False)
    itl_ms: float = Field(50.0, gt=0, allow_inf_nan=False)
    heartbeat_s: float = Field(1.0, gt=0, allow_inf_nan=False)
    timeline_interval_s: float = Field(10.0, gt=0, allow_inf_nan=False)

    @property
    def kv_capacity(self) -> int:
        """KV tokens per engine (``max_kv_tokens`` or the profile's)."""
        if self.max_kv_tokens is not None:
            return self.max_kv_tokens
        if self.profile.decode is None:
            raise ValueError("profile has no decode sweep: set max_kv_tokens")
        return self.profile.decode.max_kv_tokens

    def gpus(self, role: str) -> int:
        """GPUs of one replica of ``role`` (prefill, decode or agg)."""
        if role == "prefill" and self.prefill_gpus_per_replica is not None:
            return self.prefill_gpus_per_replica
        return self.gpus_per_replica

    @property
    def roles(self) -> tuple[EngineRole, ...]:
        """Engine roles of the fleet."""
        return ("prefill", "decode") if self.mode == "disagg" else ("agg",)


@dataclass(slots=True)
class Replica:
    """One replica's life: asked for at ``start_s``, ready at ``ready_s``, stopped at ``stop_s``.

    >>> Replica("decode", None, 0.0, 60.0).state
    'starting'
    """

    role: EngineRole
    engine: Engine | None
    start_s: float
    ready_s: float
    state: Literal["starting", "ready", "draining", "stopped"] = "starting"
    drain_s: float | None = None
    stop_s: float | None = None


_HeapPayload = Replica | SimRequest | Engine
"""What a timed event carries, one type per kind: the replica a ``_READY`` event makes ready, the
request a ``_HANDOFF`` hands to decode, the prefill engine whose iteration ``_PREFILL_END``s."""


class FleetSim:
    """Closed-loop fleet simulator with a lock-step API (see the module docstring).

    >>> from schemas.profile import DecodeProfile, PerformanceProfile, PrefillProfile
    >>> prof = PerformanceProfile(
    ...     prefill=PrefillProfile(prefill_isl=[100, 1100], prefill_ttft=[20, 40],
    ...                            prefill_thpt_per_gpu=[5000, 27500]),
    ...     decode=DecodeProfile(x_kv_usage=[0.001, 0.5], y_context_length=[1000, 1000],
    ...                          z_itl=[5, 25], z_thpt_per_gpu=[200, 9000],
    ...                          max_kv_tokens=1_000_000))
    >>> reqs = [TraceRequest(arrival_s=0.5 * i, isl=1100, osl=20) for i in range(4)]
    >>> sim = FleetSim(FleetSpec(profile=prof), reqs)
    >>> [e.type for e in sim.advance(1.0)][:4]
    ['capabilities', 'inventory', 'request', 'request']
    >>> _ = sim.advance(10.0)
    >>> res = sim.result()
    >>> res.num_finished, res.sla_attainment, round(res.ttft_ms_p50, 1)
    (4, 1.0, 40.0)
    """

    def __init__(
        self,
        spec: FleetSpec,
        requests: Sequence[TraceRequest],
        deployment: str = "sim",
        seed: int = 0,
    ) -> None:
        self.spec = spec
        self.deployment = deployment
        self.seed = seed
        self.now_s = 0.0
        self._timing = EngineTiming.from_profile(spec.profile)
        self._caps = EngineCaps(
            max_kv_tokens=spec.kv_capacity,
            max_num_batched_tokens=spec.max_num_batched_tokens,
            max_num_seqs=spec.max_num_seqs,
        )
        self._max_tokens = min(spec.context_length, spec.kv_capacity - 1)
        self._trace = requests
        self._arrivals = [r.arrival_s for r in requests]
        if any(b < a for a, b in zip(self._arrivals, self._arrivals[1:], strict=False)):
            raise ValueError("requests must be sorted by arrival_s")
        if self._arrivals and (self._arrivals[0] < 0 or not math.isfinite(self._arrivals[-1])):
            raise ValueError("arrival times must be finite and >= 0")
        self._next = 0
        self.requests: list[SimRequest] = []
        self.rejected = 0
        self._rng = random.Random(seed)
        self._heap: list[tuple[float, int, int, _HeapPayload]] = []
        self._seq = 0
        self._replicas: dict[str, list[Replica]] = {role: [] for role in spec.roles}
        self._active: dict[str, list[Engine]] = {role: [] for role in spec.roles}
        self._pending: dict[str, deque[SimRequest]] = {role: deque() for role in spec.roles}
        self._target: dict[str, int] = {}
        self._names = 0
        self._prefill_sched: dict[str, float] = {}
        self._events: list[Event] = []
        self._last_counts: WorkerCounts | None = None
        self.actions: list[ScalingAction] = []
        self.samples: list[dict[str, float]] = []
        self._emitted_caps = False
        initial: dict[EngineRole, int] = (
            {"prefill": spec.prefill_replicas, "decode": spec.decode_replicas}
            if spec.mode == "disagg"
            else {"agg": spec.decode_replicas}
        )
        for role, n in initial.items():
            self._target[role] = n
            for _ in range(n):
                self._start_replica(role, 0.0, ready_now=True)
        self._emit_inventory(0.0)

    # --- public API ----------------------------------------------------------------------------

    def capabilities(self) -> WorkerCapabilities:
        """Engine capabilities per role (aggregated fleets fill ``decode`` only)."""
        spec = self.spec

        def caps(role: str) -> EngineCapabilities:
            return EngineCapabilities(
                num_gpu=spec.gpus(role),
                max_num_batched_tokens=spec.max_num_batched_tokens,
                max_num_seqs=spec.max_num_seqs,
                context_length=spec.context_length,
                max_kv_tokens=spec.kv_capacity,
                kv_cache_block_size=spec.kv_block_size,
            )

        if spec.mode == "disagg":
            return WorkerCapabilities(prefill=caps("prefill"), decode=caps("decode"))
        return WorkerCapabilities(decode=caps("agg"))

    @property
    def done(self) -> bool:
        """Every request has arrived and finished (or was rejected)."""
        if self._next < len(self._arrivals):
            return False
        finished = sum(
            rep.engine.finished for reps in self._replicas.values() for rep in reps if rep.engine
        )
        return finished + self.rejected >= len(self._arrivals)

    def advance(self, until_s: float) -> list[Event]:
        """Simulate ``[now_s, until_s)`` and return the planner's events in event-time order.

        One FpmBatchEvent per engine that produced rows (iterations and 1 s idle heartbeats),
        an InventoryEvent whenever ready/expected counts change, one RequestEvent per arrival,
        a CapabilitiesEvent first (on the first call), and a ClockEvent at ``until_s`` last.
        """
        if not until_s >= self.now_s or not math.isfinite(until_s):
            raise ValueError(f"until_s must be finite and >= now_s ({self.now_s}), got {until_s}")
        # Millions of short-lived row tuples would trigger the cyclic GC over and over; the
        # simulator makes no reference cycles, so collection is paused during the call.
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            return self._advance(until_s)
        finally:
            if paused:
                gc.enable()

    def _advance(self, until_s: float) -> list[Event]:
        if not self._emitted_caps:
            self._emitted_caps = True
            self._events.insert(
                0,
                CapabilitiesEvent(
                    deployment=self.deployment, time=0.0, payload=self.capabilities()
                ),
            )
        arrivals = self._arrivals
        n_arr = len(arrivals)
        heap = self._heap
        while True:
            t_arr = arrivals[self._next] if self._next < n_arr else math.inf
            t_heap = heap[0][0] if heap else math.inf
            if t_heap <= t_arr:
                if t_heap >= until_s:
                    break
                payload = heapq.heappop(heap)[3]
                if isinstance(payload, Engine):  # _PREFILL_END
                    self._on_prefill_end(payload, t_heap)
                elif isinstance(payload, SimRequest):  # _HANDOFF
                    self._route("decode", payload, t_heap)
                else:  # _READY
                    self._on_ready(payload, t_heap)
            else:
                if t_arr >= until_s:
                    break
                self._on_arrival(t_arr)
        events = self._events
        self._events = []
        self._flush(until_s, events)
        self.now_s = until_s
        self._sample(until_s)
        events.sort(key=_event_time)
        events.append(ClockEvent(deployment=self.deployment, time=until_s))
        return events

    def apply(self, decision: ScalingDecision) -> None:
        """Apply target replica counts at ``now_s`` (``None`` keeps a role's target).

        Aggregated fleets take their engine count from ``num_decode``."""
        t = self.now_s
        wanted: dict[EngineRole, int | None]
        if self.spec.mode == "disagg":
            wanted = {"prefill": decision.num_prefill, "decode": decision.num_decode}
        else:
            wanted = {"agg": decision.num_decode}
        for role, target in wanted.items():
            if target is not None:
                self._set_target(role, int(target), t)
        self._emit_inventory(t)

    def result(self) -> RunResult:
        """Scores of the run so far (requests not finished by ``now_s`` miss the SLA)."""
        return score(
            spec_ttft_ms=self.spec.ttft_ms,
            spec_itl_ms=self.spec.itl_ms,
            requests=self.requests,
            num_trace_requests=len(self._arrivals),
            rejected=self.rejected,
            actions=self.actions,
            gpu_seconds=self._gpu_seconds(),
            duration_s=self.now_s,
            deployment=self.deployment,
            seed=self.seed,
            preemptions=sum(
                rep.engine.preemptions
                for reps in self._replicas.values()
                for rep in reps
                if rep.engine
            ),
            max_replicas={  # the fleet now too: a decision applied since the last sample
                role: int(max([*(s[f"total_{role}"] for s in self.samples), _live(reps)]))
                for role, reps in self._replicas.items()
            },
        )

    def timeline(self, interval_s: float | None = None) -> dict[str, list[float]]:
        """Per-interval series for reports: columns keyed by name, one value per interval.

        Request-based columns (``arrival_rps``, ``ttft_ms_mean``/``_p90``, ``itl_ms_mean``/
        ``_p90``, by arrival time; ``nan`` where no request) and gauges sampled at the end of
        each ``advance`` call (``ready_<role>``, ``total_<role>``, ``queued_prefill_tokens``,
        ``queued_decode_kv_tokens``, ``kv_in_use``), plus the SLA targets.
        """
        from sim.scoring import timeline_columns

        return timeline_columns(
            requests=self.requests,
            samples=self.samples,
            end_s=self.now_s,
            interval_s=interval_s or self.spec.timeline_interval_s,
            ttft_ms=self.spec.ttft_ms,
            itl_ms=self.spec.itl_ms,
        )

    # --- replicas ------------------------------------------------------------------------------

    def _start_replica(self, role: EngineRole, t: float, ready_now: bool = False) -> Replica:
        ready = t if ready_now else t + self.spec.startup_delay_s
        rep = Replica(role, None, t, ready)
        self._replicas[role].append(rep)
        if ready_now:
            self._make_ready(rep, t)
        else:
            self._push(ready, _READY, rep)
        return rep

    def _make_ready(self, rep: Replica, t: float) -> None:
        name = f"{rep.role}-{self._names}"
        self._names += 1
        rep.engine = Engine(name, rep.role, self._caps, self._timing, t, self.spec.heartbeat_s)
        rep.state = "ready"
        self._active[rep.role].append(rep.engine)

    def _on_ready(self, rep: Replica, t: float) -> None:
        """Make ``rep`` and every other replica due at ``t`` ready, then route what waited.

        Replicas asked for together are ready at the same instant; all of them count before
        the backlog is routed, so least-load routing spreads it over them (routing on the
        first ready event alone would give one engine the whole backlog). Ready events sort
        first at equal time, so they are all at the top of the heap, in start order.
        """
        due = [rep]
        heap = self._heap
        while heap and heap[0][0] == t and heap[0][1] == _READY:
            payload = heapq.heappop(heap)[3]
            assert isinstance(payload, Replica)  # only ready events are _READY
            due.append(payload)
        roles = []
        for replica in due:
            if replica.state != "starting":
                continue  # cancelled while starting
            self._make_ready(replica, t)
            if replica.role not in roles:
                roles.append(replica.role)
        if not roles:
            return
        self._emit_inventory(t)
        for role in self.spec.roles:
            if role in roles:
                pending = self._pending[role]
                while pending:
                    self._route(role, pending.popleft(), t)

    def _set_target(self, role: EngineRole, target: int, t: float) -> None:
        if target < 0:
            raise ValueError(f"negative replica target for {role}: {target}")
        old = self._target[role]
        if target != old:
            self.actions.append(ScalingAction(time_s=t, role=role, old=old, new=target))
        self._target[role] = target
        live = [r for r in self._replicas[role] if r.state in ("starting", "ready")]
        for _ in range(target - len(live)):
            self._start_replica(role, t)
        excess = len(live) - target
        if excess <= 0:
            return
        for rep in reversed([r for r in live if r.state == "starting"]):
            if excess == 0:
                break
            rep.state = "stopped"
            rep.stop_s = t
            excess -= 1
        if excess == 0:
            return
        ready = [r for r in live if r.state == "ready"]
        for rep in ready:
            if rep.engine is not None and rep.role != "prefill":
                rep.engine.sync(t)

        def drain_order(i: int) -> tuple[int, int]:
            """The least loaded first, as the router counts load (a prefill engine's running
            chunk included: one busy with a long prompt is not idle)."""
            engine = ready[i].engine
            if engine is None:
                return (0, -i)
            return (engine.load_at(t), -i)

        order = sorted(range(len(ready)), key=drain_order)
        for i in order[:excess]:
            rep = ready[i]
            eng = rep.engine
            assert eng is not None
            rep.state = "draining"
            rep.drain_s = t
            eng.draining = True
            self._active[role].remove(eng)
            self._stop_if_drained(rep, t)

    def _stop_if_drained(self, rep: Replica, t: float) -> None:
        eng = rep.engine
        if rep.state == "draining" and eng is not None and eng.empty:
            rep.state = "stopped"
            rep.stop_s = max(eng.clock, rep.drain_s or 0.0)
            if rep.stop_s > t:
                rep.stop_s = t
            eng.stopped = True

    def _gpu_seconds(self) -> dict[str, float]:
        out = {}
        for role, reps in self._replicas.items():
            total = 0.0
            for rep in reps:
                end = rep.stop_s if rep.stop_s is not None else self.now_s
                total += max(0.0, end - rep.start_s)
            out[role] = total * self.spec.gpus(role)
        return out

    # --- requests ------------------------------------------------------------------------------

    def _push(self, t: float, kind: int, payload: _HeapPayload) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, payload))

    def _on_arrival(self, t: float) -> None:
        i = self._next
        self._next = i + 1
        tr = self._trace[i]
        req = SimRequest(i, t, max(tr.isl, 1), tr.osl, tr.hash_ids, tr.block_size)
        self.requests.append(req)
        if req.isl + req.osl > self._max_tokens:
            self.rejected += 1
            req.rejected = True
            hit_rate = None
        else:
            role = "prefill" if self.spec.mode == "disagg" else "agg"
            hit_rate = self._route(role, req, t)
        self._events.append(
            RequestEvent(
                deployment=self.deployment,
                time=t,
                payload=RequestRecord(
                    request_id=tr.request_id if tr.request_id is not None else f"r{i}",
                    isl=tr.isl,
                    osl=tr.osl,
                    kv_hit_rate=hit_rate,
                ),
            )
        )

    def _route(self, role: str, req: SimRequest, t: float) -> float | None:
        """Send ``req`` to the least-loaded engine of ``role``; returns the prefix hit rate."""
        engines = self._active[role]
        if not engines:
            self._pending[role].append(req)
            return None
        prefix = self.spec.routing == "prefix_aware" and role != "decode" and req.hash_ids
        best: list[Engine] = []
        best_cost = math.inf
        prefill = role == "prefill"
        for eng in engines:
            extra = req.isl - eng.prefix_hit(req.hash_ids, req.block_size) if prefix else 0
            if prefill:
                cost = eng.load_at(t) + extra
            else:
                if eng.act_end >= t and eng.load + extra > best_cost:
                    # nothing completes before t, so its load can only have grown (S rises):
                    # not the least loaded, no need to bring it to t
                    continue
                eng.catch_up(t)
                cost = eng.load + extra
            if cost < best_cost:
                best_cost = cost
                best = [eng]
            elif cost == best_cost:
                best.append(eng)
        eng = best[0] if len(best) == 1 else best[self._rng.randrange(len(best))]
        hit = 0
        if role != "decode" and req.hash_ids:
            hit = min(eng.prefix_hit(req.hash_ids, req.block_size), req.isl - 1)
        eng.submit(req, t)
        if role == "prefill":
            self._after_prefill_activity(eng)
        return hit / req.isl if role != "decode" else None

    def _after_prefill_activity(self, eng: Engine) -> None:
        if eng.busy and self._prefill_sched.get(eng.name) != eng.act_end:
            self._prefill_sched[eng.name] = eng.act_end
            self._push(eng.act_end, _PREFILL_END, eng)

    def _on_prefill_end(self, eng: Engine, t: float) -> None:
        if self._prefill_sched.get(eng.name) != t:
            return  # stale
        del self._prefill_sched[eng.name]
        eng.complete_due(t)
        handoffs = eng.handoffs
        if handoffs:
            eng.handoffs = []
            delay = self.spec.kv_transfer_delay_s
            for req in handoffs:
                if delay > 0:
                    self._push(t + delay, _HANDOFF, req)
                else:
                    self._route("decode", req, t)
        self._after_prefill_activity(eng)

    # --- output --------------------------------------------------------------------------------

    def _flush(self, until: float, events: list[Event]) -> None:
        deployment = self.deployment
        for reps in self._replicas.values():
            for rep in reps:
                eng = rep.engine
                if eng is None or (eng.stopped and not eng.rows):
                    continue
                if rep.state == "draining":
                    if rep.role != "prefill":  # prefill engines advance by their own events
                        eng.sync(until)
                    self._stop_if_drained(rep, until)
                rows = eng.flush(until)
                if rows:
                    events.append(
                        FpmBatchEvent.model_construct(
                            deployment=deployment,
                            time=rows[-1][0],
                            type="fpm_batch",
                            payload=FpmBatch.model_construct(
                                role=eng.fpm_role, worker_id=eng.name, dp_rank=0, rows=rows
                            ),
                        )
                    )

    def inventory(self) -> WorkerCounts:
        """Ready and expected replicas per role now (what a DGD's status would say)."""
        return self._counts()

    def _counts(self) -> WorkerCounts:
        ready = {
            role: sum(1 for r in reps if r.state == "ready")
            for role, reps in self._replicas.items()
        }
        if self.spec.mode == "disagg":
            return WorkerCounts(
                ready_num_prefill=ready["prefill"],
                ready_num_decode=ready["decode"],
                expected_num_prefill=self._target["prefill"],
                expected_num_decode=self._target["decode"],
            )
        return WorkerCounts(ready_num_decode=ready["agg"], expected_num_decode=self._target["agg"])

    def _emit_inventory(self, t: float) -> None:
        counts = self._counts()
        if counts == self._last_counts:
            return
        self._last_counts = counts
        event = InventoryEvent(deployment=self.deployment, time=t, payload=counts)
        events = self._events
        for i in range(len(events) - 1, -1, -1):  # one inventory event per instant
            if events[i].time != t:
                break
            if isinstance(events[i], InventoryEvent):
                events[i] = event
                return
        events.append(event)

    def _sample(self, t: float) -> None:
        s: dict[str, float] = {"time": t, "arrived": float(self._next)}
        qp = qd = kv = 0
        for role, reps in self._replicas.items():
            s[f"ready_{role}"] = sum(1 for r in reps if r.state == "ready")
            s[f"total_{role}"] = _live(reps)
            for rep in reps:
                eng = rep.engine
                if eng is not None and not eng.stopped:
                    qp += eng.queued_prefill_tokens
                    qd += eng.queued_decode_kv_tokens
                    kv += eng.kv_in_use
            for req in self._pending[role]:
                qp += req.need - req.done if role != "decode" else 0
                qd += req.need if role == "decode" else 0
        s["queued_prefill_tokens"] = qp
        s["queued_decode_kv_tokens"] = qd
        s["kv_in_use"] = kv
        self.samples.append(s)


def _live(replicas: list[Replica]) -> int:
    """Replicas not stopped: starting, ready or draining."""
    return sum(1 for r in replicas if r.state != "stopped")


def _event_time(event: Event) -> float:
    return event.time
