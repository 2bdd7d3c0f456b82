"""Simulated engines: one scheduler for prefill, decode and aggregated engines.

An engine runs iterations (forward passes) back to back while it has work, like vLLM's V1
scheduler: running decode requests first (one token each), then the waiting queue in FCFS order
within the token budget ``max_num_batched_tokens``, ``max_num_seqs`` and the KV capacity
``max_kv_tokens``. Waiting requests either need prefill (fresh prompts; recomputation after a
preemption) or are ready to decode (KV transferred from a prefill engine). A prompt larger than
the remaining budget is prefilled in chunks over several iterations. When the running requests'
KV no longer fits, the most recently admitted one is preempted: it goes back to the front of
the queue and recomputes its context later.

* a **prefill** engine (disaggregated) only prefills; a request whose prompt is complete leaves
  (its first token is produced then) and is handed to a decode engine;
* a **decode** engine receives requests whose KV was transferred;
* an **agg** engine prefills and decodes in the same iterations (chunked prefill piggy-backed on
  decode steps).

Every iteration produces one FPM row (:data:`schemas.FPM_BATCH_COLUMNS`); an idle engine
produces a heartbeat row (``wall_time == 0``) every ``heartbeat_s`` of idleness.

Speed: the only per-iteration work is building the row tuple. Between events that change the
batch (an admission, a finish, a preemption) a decode-only stretch is one *segment* of
``n`` identical-composition iterations whose KV grows by ``B`` tokens per step; its iteration
times follow a linear model (exact at its ends) so the end of the segment, and the iteration in
progress at any time, are closed-form. Running KV sums are kept as ``sum(base) + B * step``
with per-request ``base`` offsets, finishes come from a heap keyed by decode step. Routing
brings an engine to the request's time by counting the segment's iterations done by then (the
rows themselves are built later, at the next flush or at the segment's end).
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Literal

from schemas import FpmRow
from sim.timing import EngineTiming

EngineRole = Literal["prefill", "decode", "agg"]

_IDLE, _STEP, _SEG = 0, 1, 2

_Queued = tuple[int, int, float, int, int, float]
"""The waiting queue as an FPM row's last six columns: prefill requests, their prompt tokens and
the variance of those; decode requests, their tokens and the variance."""

_NO_QUEUE: _Queued = (0, 0, 0.0, 0, 0, 0.0)
_NO_ROW: FpmRow = (0.0, 0, 0.0, 0, 0, 0.0, 0, 0, 0, 0.0, *_NO_QUEUE)


@dataclass(frozen=True, slots=True)
class EngineCaps:
    """Scheduler limits of one engine.

    >>> EngineCaps(max_kv_tokens=945_029).max_num_batched_tokens
    8192
    """

    max_kv_tokens: int
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256


class SimRequest:
    """A request's mutable state inside the simulator (one object per trace request).

    ``need`` is the number of tokens whose KV must be computed before the request can decode
    (its prompt, plus generated tokens after a preemption); ``done`` how many of them are;
    ``gen`` the tokens generated so far; ``rejected`` is set when the fleet refused it at
    arrival (it never reaches an engine).

    >>> r = SimRequest(0, 1.5, 3000, 150)
    >>> (r.need, r.done, r.gen, r.first_token, r.finish)
    (3000, 0, 0, None, None)
    """

    __slots__ = (
        "arrival",
        "base",
        "block_size",
        "done",
        "epoch",
        "finish",
        "first_token",
        "gen",
        "hash_ids",
        "hit",
        "idx",
        "isl",
        "need",
        "osl",
        "rejected",
        "started",
    )

    def __init__(
        self,
        idx: int,
        arrival: float,
        isl: int,
        osl: int,
        hash_ids: tuple[int, ...] = (),
        block_size: int | None = None,
    ) -> None:
        self.idx = idx
        self.arrival = arrival
        self.isl = isl
        self.osl = max(osl, 1)
        self.hash_ids = hash_ids
        self.block_size = block_size
        self.hit = 0
        self.done = 0
        self.need = isl
        self.gen = 0
        self.base = 0
        self.epoch = 0
        self.started = False
        self.rejected = False
        self.first_token: float | None = None
        self.finish: float | None = None


def _var(n: int, s: int, sq: int) -> float:
    """Population variance from count, sum and sum of squares (exact integer arithmetic)."""
    if n <= 1:
        return 0.0
    v = (n * sq - s * s) / (n * n)
    return v if v > 0.0 else 0.0


class Engine:
    """One simulated engine (replica). Driven by the fleet: :meth:`submit`, :meth:`sync`,
    :meth:`flush`; finished prefills of a prefill engine appear in :attr:`handoffs`.

    >>> from schemas.profile import DecodeProfile, PerformanceProfile, PrefillProfile
    >>> prof = PerformanceProfile(
    ...     prefill=PrefillProfile(prefill_isl=[100, 1100], prefill_ttft=[20, 40],
    ...                            prefill_thpt_per_gpu=[5000, 27500]),
    ...     decode=DecodeProfile(x_kv_usage=[0.001, 0.5], y_context_length=[1000, 1000],
    ...                          z_itl=[5, 25], z_thpt_per_gpu=[200, 9000],
    ...                          max_kv_tokens=1_000_000))
    >>> eng = Engine("agg-0", "agg", EngineCaps(1_000_000), EngineTiming.from_profile(prof))
    >>> req = SimRequest(0, 0.0, 1100, 3)
    >>> eng.submit(req, 0.0)
    >>> rows = eng.flush(10.0)
    >>> [round(r[2] * 1000, 1) for r in rows if r[2] > 0]  # prefill 40 ms, two 5 ms decodes
    [40.0, 5.0, 5.0]
    >>> round(req.first_token, 3), round(req.finish, 3), len(rows)  # + 9 idle heartbeats
    (0.04, 0.05, 12)
    """

    def __init__(
        self,
        name: str,
        role: EngineRole,
        caps: EngineCaps,
        timing: EngineTiming,
        start_s: float = 0.0,
        heartbeat_s: float = 1.0,
    ) -> None:
        self.name = name
        self.role: EngineRole = role
        self.fpm_role: Literal["prefill", "decode"] = "prefill" if role == "prefill" else "decode"
        self.caps = caps
        self.timing = timing
        self._pt = timing.prefill
        self._dt = timing.decode
        self._hb = heartbeat_s
        self._cap = caps.max_kv_tokens
        self._mbt = caps.max_num_batched_tokens
        self._mseq = caps.max_num_seqs
        self.draining = False
        self.stopped = False
        # emitted rows (not yet taken by flush) and heartbeat clock
        self.rows: list[FpmRow] = []
        self.counter = 0
        self.last_row_t = start_s
        # waiting queue and its running sums
        self.waiting: deque[SimRequest] = deque()
        self._pf_n = self._pf_sum = self._pf_sq = 0  # fresh prompts (gen == 0): prompt tokens
        self._dq_n = self._dq_sum = self._dq_sq = 0  # gen >= 1 (transferred / preempted): need
        self.pending_tokens = 0  # prefill tokens still to compute over the waiting queue
        self.waiting_need = 0  # KV the waiting requests will need
        self.held = 0  # KV held by a partially prefilled request (the queue head)
        self.inflight_need = 0  # KV of the requests whose prefill the running iteration ends
        # running decode batch
        self.running: dict[int, SimRequest] = {}
        self._heap: list[tuple[int, int, int, SimRequest]] = []
        self.B = 0
        self.sum_base = 0  # sum of per-request KV offsets: batch KV at step s = sum_base + B*s
        self.sum_base_sq = 0  # sum of squared bases
        self.S = 0  # completed iterations
        # activity
        self._act = _IDLE
        self.act_end = math.inf
        self.clock = start_s  # end of the last completed activity / idle since
        self._step_row = _NO_ROW  # the running iteration (read while _act == _STEP)
        self._completing: list[SimRequest] = []
        self._seg: list[float] = [0.0, 0.0, 0.0]  # t0, w1, slope
        self._seg_n = 0
        self._seg_done = 0  # iterations of the segment already counted in S
        self._seg_rows = 0  # iterations of the segment already emitted as rows (<= _seg_done)
        self._seg_kb = 0
        self._seg_var = 0.0
        self._seg_q = _NO_QUEUE
        # outputs for the fleet
        self.handoffs: list[SimRequest] = []
        self.finished = 0
        self.preemptions = 0
        # prefix cache (prefill-capable engines): hash -> block size, LRU order
        self._cache: OrderedDict[int, int] = OrderedDict()
        self._cache_tokens = 0

    # --- queries -------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """An iteration is in progress (or planned back to back)."""
        return self._act != _IDLE

    @property
    def empty(self) -> bool:
        """No request queued, prefilling or decoding here."""
        return self._act == _IDLE and not self.waiting and self.B == 0

    @property
    def load(self) -> int:
        """Routing load in tokens of a decode or agg engine: KV in use plus the KV the queue
        will need, counting the requests whose prefill the running iteration ends (out of the
        queue, not yet in the batch: an engine busy with the last chunk of a long prompt would
        look idle). A prefill engine's is :meth:`prefill_tokens_at` (see :meth:`load_at`)."""
        return self.sum_base + self.B * self.S + self.waiting_need + self.inflight_need

    def load_at(self, t: float) -> int:
        """Routing load at ``t``: :meth:`prefill_tokens_at` of a prefill engine, else
        :attr:`load` (brought to ``t`` by the caller)."""
        return self.prefill_tokens_at(t) if self.role == "prefill" else self.load

    def prefill_tokens_at(self, t: float) -> int:
        """Prompt tokens not computed yet at ``t``: the queue's and the running iteration's (a
        router that saw only the queue would take an engine busy with a long prompt for idle)."""
        running = self._step_row[4] if self._act == _STEP and self.act_end > t else 0
        return self.pending_tokens + running

    @property
    def kv_in_use(self) -> int:
        """KV tokens of the running batch (at the last completed iteration) plus held prefill."""
        return (self.sum_base + self.B * self.S if self.B else 0) + self.held

    @property
    def queued_prefill_tokens(self) -> int:
        """Prompt tokens waiting to be prefilled (not counting the partial head's done part)."""
        return self.pending_tokens

    @property
    def queued_decode_kv_tokens(self) -> int:
        """KV tokens of requests waiting to (re)join the decode batch."""
        return self._dq_sum

    def prefix_hit(self, hash_ids: tuple[int, ...], block_size: int | None) -> int:
        """Tokens of the longest cached prefix of ``hash_ids`` (no LRU update)."""
        if not hash_ids or not block_size:
            return 0
        cache = self._cache
        n = 0
        for h in hash_ids:
            if h in cache:
                n += 1
            else:
                break
        return n * block_size

    def _touch(self, hash_ids: tuple[int, ...], block_size: int) -> None:
        cache = self._cache
        for h in hash_ids:
            if h in cache:
                cache.move_to_end(h)
            else:
                cache[h] = block_size
                self._cache_tokens += block_size
        while self._cache_tokens > self._cap and cache:
            _, size = cache.popitem(last=False)
            self._cache_tokens -= size

    # --- driving -------------------------------------------------------------------------------

    def submit(self, req: SimRequest, t: float) -> None:
        """A request arrives at time ``t`` (fresh prompt, or transferred KV on a decode engine).

        Fresh prompts on prefill-capable engines look up (and then fill) the prefix cache."""
        self.sync(t)
        if req.gen == 0 and self.role != "decode":
            if req.hash_ids and req.block_size:
                hit = self.prefix_hit(req.hash_ids, req.block_size)
                req.hit = min(hit, req.isl - 1)
                self._touch(req.hash_ids, req.block_size)
            else:
                req.hit = 0
            req.done = req.hit
            req.need = req.isl
        elif req.gen == 0:  # decode engine: prefill happened elsewhere
            req.done = req.need
        self._enqueue(req, front=False)
        if self._act == _IDLE:
            self._heartbeats(t)
            self._plan(t)
        elif self._act == _SEG:
            self._truncate(t)

    def sync(self, t: float) -> None:
        """Complete every activity that ends before ``t`` and plan the next ones."""
        while self.act_end < t:
            self._complete()

    def catch_up(self, t: float) -> None:
        """Bring the engine's counters to time ``t``: what it reports then does not depend on
        when the simulation was last advanced (routing looks at it between events)."""
        while self.act_end < t:
            self._complete()
        if self._act != _SEG:
            return
        # routing calls this every few iterations: step from the first iteration not yet
        # counted (segment times rise, and the last one ends at act_end >= t), and fall back
        # to the closed form after a long stretch
        t0, w1, slope = self._seg
        h = 0.5 * slope
        done = self._seg_done
        j = done + 1
        stop = j + 8
        while t0 + j * (w1 + h * (j - 1)) < t:
            j += 1
            if j == stop:
                j = self._first_ending_at_or_after(t)
                break
        if j > done + 1:  # iterations done..j-1 ended before t; rows follow at the next flush
            self.S += j - 1 - done
            self._seg_done = j - 1

    def complete_due(self, t: float) -> None:
        """Complete every activity that ends at or before ``t`` (event-driven engines)."""
        while self.act_end <= t:
            self._complete()

    def flush(self, until: float) -> list[FpmRow]:
        """Advance to ``until`` and take the rows with event time ``< until``."""
        self.sync(until)
        if self._act == _SEG:
            self._materialize_before(until)
        elif self._act == _IDLE and not self.stopped:
            self._heartbeats(until)
        rows = self.rows
        if rows and rows[-1][0] >= until:
            k = len(rows)
            while k and rows[k - 1][0] >= until:
                k -= 1
            out, self.rows = rows[:k], rows[k:]
            return out
        self.rows = []
        return rows

    # --- queue bookkeeping ---------------------------------------------------------------------

    def _enqueue(self, req: SimRequest, front: bool) -> None:
        if front:
            self.waiting.appendleft(req)
        else:
            self.waiting.append(req)
        self._count_in(req)

    def _count_in(self, req: SimRequest) -> None:
        if req.gen == 0:
            self._pf_n += 1
            self._pf_sum += req.isl
            self._pf_sq += req.isl * req.isl
        else:
            self._dq_n += 1
            self._dq_sum += req.need
            self._dq_sq += req.need * req.need
        self.pending_tokens += req.need - req.done
        self.waiting_need += req.need

    def _count_out(self, req: SimRequest) -> None:
        if req.gen == 0:
            self._pf_n -= 1
            self._pf_sum -= req.isl
            self._pf_sq -= req.isl * req.isl
        else:
            self._dq_n -= 1
            self._dq_sum -= req.need
            self._dq_sq -= req.need * req.need
        self.pending_tokens -= req.need - req.done
        self.waiting_need -= req.need

    def _queued(self) -> _Queued:
        return (
            self._pf_n,
            self._pf_sum,
            _var(self._pf_n, self._pf_sum, self._pf_sq),
            self._dq_n,
            self._dq_sum,
            _var(self._dq_n, self._dq_sum, self._dq_sq),
        )

    # --- running batch -------------------------------------------------------------------------

    def _join(self, req: SimRequest, first_step: int) -> None:
        """``req`` decodes from iteration ``first_step`` with KV ``need + 1`` there."""
        base = req.need + 1 - first_step
        req.base = base
        self.running[req.idx] = req
        self.B += 1
        self.sum_base += base
        self.sum_base_sq += base * base
        heapq.heappush(self._heap, (first_step - 1 + req.osl - req.gen, req.idx, req.epoch, req))

    def _leave(self, req: SimRequest) -> None:
        del self.running[req.idx]
        self.B -= 1
        self.sum_base -= req.base
        self.sum_base_sq -= req.base * req.base
        req.epoch += 1

    def _finish_due(self, t: float) -> None:
        heap = self._heap
        S = self.S
        while heap and heap[0][0] <= S:
            _, _, epoch, req = heapq.heappop(heap)
            if epoch != req.epoch:
                continue
            self._leave(req)
            req.gen = req.osl
            req.finish = t
            self.finished += 1

    def _preempt_to_fit(self) -> None:
        """Make room for the next decode step: first release the KV of the partially
        prefilled request (the newest scheduled one), then preempt running requests LIFO."""
        cap = self._cap
        if self.sum_base + self.B * (self.S + 1) + self.held <= cap:
            return
        if self.held:
            head = self.waiting[0]  # at most one request is partially prefilled: the head
            self._count_out(head)
            head.done = head.hit if head.gen == 0 else 0
            head.started = False
            self._count_in(head)
            self.held = 0
            self.preemptions += 1
        while self.B and self.sum_base + self.B * (self.S + 1) > cap:
            victim = self.running[next(reversed(self.running))]
            gen_now = victim.base + self.S - victim.isl + 1
            self._leave(victim)
            victim.gen = gen_now
            victim.need = victim.isl + gen_now - 1
            victim.done = 0
            victim.hit = 0
            victim.started = False
            self.preemptions += 1
            self._enqueue(victim, front=True)

    # --- planning ------------------------------------------------------------------------------

    def _plan(self, t0: float) -> None:
        """Start the next activity at ``t0`` (an iteration boundary), or go idle."""
        self.clock = t0
        if self.B:
            self._preempt_to_fit()
        waiting = self.waiting
        if waiting and self.role != "prefill" and waiting[0].done >= waiting[0].need:
            self._admit_ready()
        if waiting and waiting[0].done < waiting[0].need and self._try_step(t0):
            return
        if self.B:
            self._plan_segment(t0)
            return
        self._act = _IDLE
        self.act_end = math.inf

    def _admit_ready(self) -> None:
        """Admit queued requests whose KV is ready (transferred) into the next decode step, in
        FCFS order while sequence slots, token budget and KV allow. A pure-decode iteration
        follows, so no separate scheduling step is needed."""
        waiting = self.waiting
        S1 = self.S + 1
        B = self.B
        slots = min(self._mseq, self._mbt) - B
        room = self._cap - (self.sum_base + B * S1) - self.held
        while waiting and slots > 0:
            req = waiting[0]
            if req.done < req.need:
                break
            kv = req.need + 1
            if kv > room:
                break
            waiting.popleft()
            self._count_out(req)
            self._join(req, S1)
            room -= kv
            slots -= 1

    def _try_step(self, t0: float) -> bool:
        """Schedule waiting work into one iteration; False if none can be scheduled."""
        B = self.B
        S1 = self.S + 1
        budget = self._mbt - B
        seqs = self._mseq - B
        room = self._cap - (self.sum_base + B * S1) - self.held
        waiting = self.waiting
        decoding = self.role != "prefill"
        chunks: list[tuple[SimRequest, int, int]] = []
        admitted = 0
        partial: SimRequest | None = None
        while waiting and budget > 0 and seqs > 0:
            req = waiting[0]
            rem = req.need - req.done
            if rem > 0:
                reserve = 0 if req.started else req.done
                take = min(rem, budget, room - reserve)
                if take <= 0:
                    break
                waiting.popleft()
                self._count_out(req)
                chunks.append((req, req.done, take))
                budget -= take
                room -= take + reserve
                seqs -= 1
                if take < rem:
                    partial = req
                    break
            else:
                kv = req.need + 1
                if not decoding or kv > room:
                    break
                waiting.popleft()
                self._count_out(req)
                self._join(req, S1)
                admitted += 1
                room -= kv
                budget -= 1
                seqs -= 1
        if not chunks and not admitted:
            return False
        queued = self._queued()
        completing: list[SimRequest] = []
        n_pf = len(chunks)
        sum_pf = kv_read = isl_sum = isl_sq = 0
        work = 0.0
        pt = self._pt
        held = self.held
        inflight = 0
        for req, before, take in chunks:
            sum_pf += take
            kv_read += before
            isl_sum += req.isl
            isl_sq += req.isl * req.isl
            work += pt.work_s(before + take) - pt.work_s(before)
            if not req.started:
                held += before
                req.started = True
            held += take
            req.done = before + take
            if req.done >= req.need:
                held -= req.done
                inflight += req.need
                completing.append(req)
        self.held = held
        self.inflight_need = inflight
        if partial is not None:
            self._enqueue(partial, front=True)
        B = self.B
        K = self.sum_base + B * S1 if B else 0
        if not decoding:
            wall = pt.overhead_s + work
        elif n_pf:
            wall = self.timing.mixed_s(work, B, K)
        else:
            wall = self._dt.itl_s(B, K)
        end = t0 + wall
        self.counter += 1
        self._step_row = (
            end,
            self.counter,
            wall,
            n_pf,
            sum_pf,
            _var(n_pf, isl_sum, isl_sq),
            kv_read,
            B,
            K,
            _var(B, self.sum_base, self.sum_base_sq),
            *queued,
        )
        self._completing = completing
        self._act = _STEP
        self.act_end = end
        return True

    def _plan_segment(self, t0: float) -> None:
        """A stretch of pure decode iterations until the next finish or KV exhaustion."""
        heap = self._heap
        while heap[0][2] != heap[0][3].epoch:
            heapq.heappop(heap)
        S, B = self.S, self.B
        n = heap[0][0] - S
        n_full = (self._cap - self.held - self.sum_base) // B - S
        if n_full < n:
            n = n_full
        kb = self.sum_base + B * (S + 1)
        itl = self._dt.itl_s
        w1 = itl(B, kb)
        slope = (itl(B, kb + B * (n - 1)) - w1) / (n - 1) if n > 1 else 0.0
        seg = self._seg
        seg[0] = t0
        seg[1] = w1
        seg[2] = slope
        self._seg_n = n
        self._seg_done = 0
        self._seg_rows = 0
        self._seg_kb = kb
        self._seg_var = _var(B, self.sum_base, self.sum_base_sq)
        self._seg_q = self._queued()
        self._act = _SEG
        self.act_end = t0 + n * (w1 + 0.5 * slope * (n - 1))

    # --- completing ----------------------------------------------------------------------------

    def _complete(self) -> None:
        end = self.act_end
        if self._act == _STEP:
            row = self._step_row
            self.rows.append(row)
            self.last_row_t = end
            self.S += 1
            for req in self._completing:
                if req.gen == 0:
                    req.gen = 1
                    req.first_token = end
                    if req.osl <= 1:
                        req.finish = end
                        self.finished += 1
                        continue
                if self.role == "prefill":
                    self.handoffs.append(req)
                else:
                    self._join(req, self.S + 1)
            self._completing = []
            self.inflight_need = 0
        else:
            n = self._seg_n
            self.S += n - self._seg_done
            self._seg_done = n
            self._emit_segment(n)
            end = self.last_row_t
        self._finish_due(end)
        self._plan(end)

    def _seg_time(self, j: int) -> float:
        t0, w1, slope = self._seg
        return t0 + j * (w1 + 0.5 * slope * (j - 1))

    def _emit_segment(self, m: int) -> None:
        """Append rows for the segment's iterations up to the ``m``-th (those not yet emitted).

        Times always come from the segment's own origin, so where a replay's ``advance`` calls
        cut a segment never changes a single bit of the result."""
        t0, w1, slope = self._seg
        h = 0.5 * slope
        B = self.B
        kb = self._seg_kb - B  # K of iteration j is kb + B*j
        var = self._seg_var
        qn, qs, qv, dn, ds, dv = self._seg_q
        c = self.counter - self._seg_rows  # counter of iteration j is c + j
        first = self._seg_rows + 1
        self.rows.extend(
            [
                (
                    t0 + j * (w1 + h * (j - 1)),
                    c + j,
                    w1 + slope * (j - 1),
                    0,
                    0,
                    0.0,
                    0,
                    B,
                    kb + B * j,
                    var,
                    qn,
                    qs,
                    qv,
                    dn,
                    ds,
                    dv,
                )
                for j in range(first, m + 1)
            ]
        )
        self.counter = c + m
        self._seg_rows = m
        self.last_row_t = self.rows[-1][0]

    def _first_ending_at_or_after(self, t: float) -> int:
        """Smallest ``j`` (1-based) whose iteration ends at or after ``t`` (capped at ``n``)."""
        t0, w1, slope = self._seg
        n = self._seg_n
        d = t - t0
        if d <= 0:
            return 1
        h = 0.5 * slope
        if h == 0.0:
            j = math.ceil(d / w1)
        else:
            b = w1 - h
            disc = b * b + 4.0 * h * d
            j = math.ceil((-b + math.sqrt(disc if disc > 0 else 0.0)) / (2.0 * h))
        j = min(max(j, 1), n)
        # the iteration ends _seg_time(j), inlined (a hot path)
        while j > 1 and t0 + (j - 1) * (w1 + h * (j - 2)) >= t:
            j -= 1
        while j < n and t0 + j * (w1 + h * (j - 1)) < t:
            j += 1
        return j

    def _truncate(self, t: float) -> None:
        """New work arrived at ``t``: end the segment with the iteration in progress at ``t``."""
        m = self._first_ending_at_or_after(t)
        if m < self._seg_n:
            self._seg_n = m
            self.act_end = self._seg_time(m)

    def _materialize_before(self, until: float) -> None:
        """Emit the segment's iterations that end before ``until`` (the rest stay planned)."""
        m = self._first_ending_at_or_after(until) - 1
        if m > self._seg_done:
            self.S += m - self._seg_done
            self._seg_done = m
        if m > self._seg_rows:
            self._emit_segment(m)

    def _heartbeats(self, upto: float) -> None:
        """Idle: one heartbeat row per ``heartbeat_s`` of silence before ``upto``."""
        hb = self._hb
        t = self.last_row_t + hb
        if t >= upto:
            return
        q = self._queued()
        rows = self.rows
        c = self.counter
        while t < upto:
            c += 1
            rows.append((t, c, 0.0, 0, 0, 0.0, 0, 0, 0, 0.0, *q))
            self.last_row_t = t
            t += hb
        self.counter = c
