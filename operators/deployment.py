"""One deployment's planner inside the dataflow: closed tick windows in, tick records out.

:class:`DeploymentPlanner` is the state of bytewax's stateful step (one per deployment key). It
keeps what outlives a window — the latest forward pass of every live engine, the worker
inventory, capabilities, request statistics of recent windows — and runs the planner core
(:class:`operators.state_machine.PlannerStateMachine`) whenever a scheduled tick falls due. Every
closed window yields exactly one :class:`schemas.TickRecord` (``ran_load``/``ran_throughput`` say
whether a tick ran), so downstream consumers can follow the planner's progress in event time.

A forward pass the reporting engine cannot have run — beyond its role's known scheduler limits
(:func:`operators.engine_limits.engine_limit_breach`) — is refused: it reaches neither the perf
models' training nor the engine's latest state, and becomes a :class:`schemas.DeadLetter`
(:meth:`DeploymentPlanner.take_dead_letters`).

Each input is used once. Within one tick window, a forward pass identical to one already in
the window — same engine, ``counter_id``, event time and values: the same pass delivered twice
— and a request whose ``request_id`` repeats one already in the window are dead letters
(``duplicate: …``); the first copy in the window's (event-time) order is used. This is per
window, not forever: an engine that restarts counts again from its first ``counter_id`` in
later windows, and a pass whose ``counter_id`` is 0 (engines that predate it) is never taken
for a copy. A request without a ``request_id`` cannot be recognised as a copy and is always
used.
Nothing is remembered across windows, so recovery snapshots hold no extra state.

Acknowledgements are only used by the virtual connector's gate; without one (the output is
not ``virtual+kafka://``) each is a dead letter (``ignored: …``).

Decisions get consecutive ids per deployment, starting at 1. With an :class:`AckGate` (the
virtual connector), a decision is only sent once the previous one is acknowledged — or after
``scaling_max_wait_seconds`` of event time without acknowledgement — and the gate numbers them.

A planner that restarts is given what its outputs already hold (``delivered``, a
:class:`schemas.DeliveredDecision`). It rebuilds its state from whatever history its inputs
replay, making the same decisions as before, but a decision of a tick at or before the delivered
one's time is not sent again; the first one after it takes the next id after the delivered one.
Replaying the same inputs therefore sends exactly what an uninterrupted planner would have sent
after the restart point; inputs that do not replay (a live engine stream) simply continue the
ids.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from operators.ack_gate import AckGate, keeps_the_count
from operators.engine_limits import engine_limit_breach, within_scheduler_limits
from operators.length_histogram import LengthHistogram
from operators.state_machine import PlannerStateMachine
from operators.tick import FpmObservations, ScaleTarget, ScheduledTick, TickInput
from operators.window import EngineId, TickWindow, evenly_spaced, merge_capabilities, time_average
from schemas import (
    FPM_COLUMN,
    MAX_ACCEPT_LENGTH,
    AckEvent,
    DeadLetter,
    DeliveredDecision,
    EngineCapabilities,
    EngineLoad,
    ForwardPassMetrics,
    FpmRow,
    Limits,
    PlannerConfig,
    RequestRecord,
    Role,
    ScalingDecision,
    TickDiagnostics,
    TickRecord,
    TrafficObservation,
    WorkerCounts,
    describe_validation_error,
    fpm_from_row,
    mean_fpm,
)
from schemas.config import CAPACITY_QUANTILES
from schemas.events import quantile_key

QUANTILES = CAPACITY_QUANTILES
"""ISL/OSL quantiles reported with request-derived traffic, keyed ``p50``, ``p90``, ``p99``
(the values ``capacity_isl_quantile`` / ``capacity_osl_quantile`` accept)."""


@dataclass
class RequestStats:
    """Request counts and sums of one window (mergeable: :meth:`merge`).

    An accept length counts at most ``schemas.MAX_ACCEPT_LENGTH`` (input events above it are
    refused; a record built inside is capped), so its sum, and the mean, stay finite.

    >>> window = RequestStats(end_s=5.0)
    >>> window.add(RequestRecord(isl=3000, osl=150, kv_hit_rate=0.5))
    >>> window.add(RequestRecord(isl=1000, osl=50))  # no hit rate: not in the hit-rate mean
    >>> window.count, window.sum_isl / window.count, window.sum_hit / window.hits
    (2, 2000.0, 0.5)
    >>> total = RequestStats(end_s=10.0)
    >>> total.merge(window); total.merge(window)
    >>> total.end_s, total.count, total.sum_osl, total.hits
    (10.0, 4, 400.0, 2)
    """

    end_s: float
    count: int = 0
    sum_isl: float = 0.0
    sum_osl: float = 0.0
    sum_hit: float = 0.0
    hits: int = 0
    sum_accept: float = 0.0
    accepts: int = 0
    isl_lengths: LengthHistogram = field(default_factory=LengthHistogram)
    osl_lengths: LengthHistogram = field(default_factory=LengthHistogram)
    prompt_tokens_scheduled: int = 0
    """Prompt tokens the deployment's engines scheduled in the window (their forward passes):
    new requests arrived, whether or not their records came."""

    def add(self, record: RequestRecord) -> None:
        self.count += 1
        self.isl_lengths.add(record.isl)
        self.osl_lengths.add(record.osl)
        self.sum_isl += record.isl
        self.sum_osl += record.osl
        if record.kv_hit_rate is not None:
            self.sum_hit += record.kv_hit_rate
            self.hits += 1
        if record.accept_length is not None:
            self.sum_accept += min(record.accept_length, MAX_ACCEPT_LENGTH)
            self.accepts += 1

    def merge(self, other: RequestStats) -> None:
        """Add ``other``'s counts and sums to these (``end_s`` stays this window's)."""
        self.count += other.count
        self.sum_isl += other.sum_isl
        self.sum_osl += other.sum_osl
        self.sum_hit += other.sum_hit
        self.hits += other.hits
        self.sum_accept += other.sum_accept
        self.accepts += other.accepts
        self.isl_lengths.merge(other.isl_lengths)
        self.osl_lengths.merge(other.osl_lengths)
        self.prompt_tokens_scheduled += other.prompt_tokens_scheduled

    def quantiles(self, series: str) -> dict[str, float] | None:
        """The :data:`QUANTILES` of the window's ``isl`` or ``osl`` (``None`` when empty)."""
        lengths = self.isl_lengths if series == "isl" else self.osl_lengths
        if not lengths.count:
            return None
        return {quantile_key(q): lengths.quantile(q) or 0.0 for q in QUANTILES}


def _beyond_limits(breach: str, fpm: str, _row: FpmRow) -> str:
    return f"invalid {fpm}: {breach}"


NO_GATE = (
    "no acknowledgement gate: only the decisions a virtual+kafka:// output sends (not an "
    "advisory deployment's) await one"
)
"""Why an acknowledgement is refused by a planner without the virtual connector's gate."""

_PROMPT_TOKENS = FPM_COLUMN["scheduled.sum_prefill_tokens"]

log = logging.getLogger(__name__)

GRID_SLACK_S = 1e-6
"""Float error allowed between a tick's time and the window end on which it falls (windows
are the gcd of the intervals on a 10 ms grid, so a tick time is always some window's end)."""


class DeploymentPlanner:
    """The planner of one deployment, driven by closed tick windows.

    >>> from schemas import PlannerConfig
    >>> planner = DeploymentPlanner("llama", PlannerConfig(mode="decode"), window_s=5.0)
    >>> record = planner.on_window(5.0, TickWindow())
    >>> record.time, record.ran_load, record.diagnostics.load_decision_reason
    (5.0, True, 'no_fpm_data')

    A forward pass beyond the engine's scheduler limits is refused and dead-lettered:

    >>> from schemas import ForwardPassMetrics as F, ScheduledRequestMetrics as S, fpm_to_row
    >>> from schemas import EngineCapabilities, WorkerCapabilities
    >>> too_big = F(worker_id="w0", wall_time=0.03,
    ...             scheduled_requests=S(num_decode_requests=9, sum_decode_kv_tokens=5000))
    >>> caps = WorkerCapabilities(decode=EngineCapabilities(max_num_seqs=8))
    >>> rows = {("decode", "w0", 0): [fpm_to_row(7.0, too_big)]}
    >>> record = planner.on_window(10.0, TickWindow(capabilities=caps, rows=rows))
    >>> planner.latest, planner.tick_rows
    ({}, {})
    >>> [letter.reason.split(" is ")[1] for letter in planner.take_dead_letters()]
    ["above the engine's max_num_seqs = 8"]
    """

    unfunded: tuple[int, int] | None = None
    """The budget and the GPUs its minimum endpoints need, while it cannot fund them (warned
    once per pair)."""
    lengthless_demand = False
    """Requests are forecast with no length while the perf models are ready (warned once until
    a throughput tick sizes again)."""

    def __init__(
        self,
        deployment: str,
        config: PlannerConfig,
        window_s: float,
        bootstrap: dict[Role, list[ForwardPassMetrics]] | None = None,
        gate: AckGate | None = None,
        warmup: list[TrafficObservation] | None = None,
        delivered: DeliveredDecision | None = None,
    ) -> None:
        self.deployment = deployment
        self.gate = gate
        self.delivered = delivered
        self._released: ScalingDecision | None = None
        self.config = config
        self.window_s = window_s
        self.machine = PlannerStateMachine(config, capabilities=config.capabilities)
        for role, fpms in (bootstrap or {}).items():
            self.machine.load_benchmark_fpms(role, fpms)
        self.machine.warm_up_predictors(warmup or [])
        self.next_tick: ScheduledTick | None = None
        self.latest: dict[EngineId, FpmRow] = {}
        self.inventory: WorkerCounts | None = None
        self.tick_rows: dict[EngineId, list[FpmRow]] = {}  # each engine's since the load tick
        longest = max(
            config.throughput_adjustment_interval_seconds,
            config.load_rate_window_seconds,  # the load tick's rate window
            window_s,
        )
        keep = math.ceil(longest / window_s) + 1
        self.request_windows: deque[RequestStats] = deque(maxlen=keep)
        self.requests_seen = False
        self.traffic_events: deque[tuple[float, TrafficObservation]] = deque(maxlen=16)
        self.decisions = 0
        self.dead_letters: list[DeadLetter] = []

    # --- window intake -------------------------------------------------------------------
    def _training(self) -> dict[Role, list[ForwardPassMetrics]]:
        """The forward passes a load tick trains the perf models on: per engine, up to
        ``fpm_samples_per_engine_per_tick`` evenly spaced over what it sent since the last
        load tick (agg: their time-weighted mean pass) — over the tick, not over each tick
        window, which is shorter when the throughput interval is not a multiple of the load
        interval (5 s and 12 s make 1 s windows: 40 passes a tick were trained on).
        Engine order, not arrival order: the samples' order decides which the perf models drop
        first when full, and engines reporting at the same event time through different input
        partitions arrive in either order."""
        per_engine = self.config.fpm_samples_per_engine_per_tick
        training: dict[Role, list[ForwardPassMetrics]] = {}
        for (role, worker_id, dp_rank), rows in sorted(self.tick_rows.items()):
            if self.config.mode == "agg":  # the mean pass (counts fractional: time_average)
                average = time_average(rows)
                picked = [] if average is None else [mean_fpm(worker_id, dp_rank, average)]
            else:
                spaced = evenly_spaced(rows, per_engine)
                picked = [fpm_from_row(worker_id, dp_rank, row) for row in spaced]
            if not picked:  # an idle engine: its heartbeat still feeds the moving averages
                picked = [fpm_from_row(worker_id, dp_rank, rows[-1])]
            training.setdefault(role, []).extend(picked)
        return training

    def take_dead_letters(self) -> list[DeadLetter]:
        """The inputs refused since the last call (forward passes beyond the engine's limits)."""
        letters, self.dead_letters = self.dead_letters, []
        return letters

    def on_window(self, end_s: float, window: TickWindow) -> TickRecord:
        """Absorb one closed window ending at ``end_s``; run the tick if one is due."""
        if self.next_tick is None:
            self.next_tick = self.machine.initial_tick(end_s - self.window_s)
        self._absorb(end_s, window)
        record = TickRecord(deployment=self.deployment, time=end_s)
        if self.next_tick.at_s <= end_s + GRID_SLACK_S:
            # One tick per window, at the window end that reaches it: every interval is a whole
            # number of windows, so that end is the tick's time (within float error), never a
            # window before it. After a gap in the input several loops can be overdue: they run
            # together, as loops due at the same time do (ticks run one after the other would
            # each take a decision id and only the last record would be sent).
            record = self._tick(self.machine.cadence.next_tick(self.config, end_s), end_s)
        if self.gate is not None:
            released = self._released or self.gate.advance(end_s)
            self._released = None
            if released is not None and (record.decision is None or record.delivered_before):
                record = record.model_copy(update={"decision": released, "delivered_before": False})
        return record

    def _absorb(self, end_s: float, window: TickWindow) -> None:
        """Take in one window: its control events (inventory, acknowledgements, capabilities,
        limits), then its forward passes and requests."""
        self._absorb_control(end_s, window)
        stats_ = RequestStats(end_s)
        stats_.prompt_tokens_scheduled = self._absorb_passes(end_s, window)
        for request in self._first_requests(end_s, window.requests):
            stats_.add(request)
        self.requests_seen = self.requests_seen or bool(window.requests)
        self.request_windows.append(stats_)
        self.traffic_events.extend(window.traffic)

    def _absorb_control(self, end_s: float, window: TickWindow) -> None:
        """The window's inventory, acknowledgements (to the gate), capabilities and limits."""
        if window.inventory is not None:
            self.inventory = window.inventory
        if self.gate is None:
            for ack in window.acks:
                self._refuse_ack(ack, f"ignored: {NO_GATE}")
        else:
            for ack in window.acks:
                acked = ack.payload.acked_decision_id
                self._released = self.gate.acknowledge(acked, now=end_s) or self._released
                for reason in self.gate.take_refused():  # an id never issued
                    self._refuse_ack(ack, reason)
        if window.capabilities is not None:
            merged = merge_capabilities(self.machine.capabilities, window.capabilities)
            self.machine.set_capabilities(merged)
        for limits in window.limits:
            self._set_limits(limits)
        if window.capabilities is not None or window.limits:
            self._warn_unfunded_minimum()

    def _absorb_passes(self, end_s: float, window: TickWindow) -> int:
        """Keep each engine's first-seen forward passes of the window that fit its scheduler
        limits (the latest, and all of them when several samples per tick are asked for), forget
        engines silent for ``engine_silence_seconds``; the prompt tokens the kept passes
        scheduled."""
        prompt_tokens = 0
        for key, rows in sorted(window.rows.items()):
            rows = self._first_copies(key, rows)
            caps: EngineCapabilities | None = getattr(self.machine.capabilities, key[0])
            if caps is not None and not within_scheduler_limits(rows, caps):
                rows = self._within_limits(key, rows, caps)
                if not rows:
                    continue
            self.latest[key] = rows[-1]
            prompt_tokens += sum(int(row[_PROMPT_TOKENS]) for row in rows)
            if self.config.fpm_samples_per_engine_per_tick > 1:  # else the latest (reference)
                self.tick_rows.setdefault(key, []).extend(rows)
        silent_since = end_s - self.config.engine_silence_seconds
        for key in [k for k, row in self.latest.items() if row[FPM_COLUMN["time"]] < silent_since]:
            del self.latest[key]
        return prompt_tokens

    def _set_limits(self, limits: Limits) -> None:
        """Plan within ``limits`` from this tick on, unless the config they make is refused —
        as it would be at start, or at what the engines report (their GPUs per replica and
        power caps, which the floors and budgets must fit as well): then a dead letter says
        why, and the limits stay."""
        changed = self.config.model_dump() | limits.changes()
        try:
            config = PlannerConfig.model_validate(changed)
        except ValidationError as error:
            self._refuse_limits(limits, describe_validation_error(error))
            return
        reported: dict[str, Any] = {"capabilities": self.machine.capabilities.model_dump()}
        for role in config.roles:
            gpus = self.machine.gpus_per_replica(role)
            if gpus is not None:
                reported[f"{role}_engine_num_gpu"] = gpus
        try:
            PlannerConfig.model_validate(changed | reported)
        except ValidationError as error:
            why = describe_validation_error(error).removeprefix("Value error, ")
            self._refuse_limits(limits, f"at what the engines report, {why}")
            return
        self.config = config
        self.machine.set_config(config)

    def _warn_unfunded_minimum(self) -> None:
        """Say once when the engines' reported GPUs per replica leave the budget unable to fund
        the minimum endpoints (the config, refused at start for it, could not know them)."""
        budget = self.machine.fleet.budget()
        need = budget.unfunded_minimum()
        unfunded = None if need is None else (self.config.max_gpu_budget, need)
        if unfunded is not None and unfunded != self.unfunded:
            outcome = (
                "keeps the minimum endpoints and no more"
                if self.config.gpu_budget_rule == "band"
                else "scales the deployment to 0 (gpu_budget_rule pair_clamp, spec §8.1)"
            )
            log.warning(
                "%s: max_gpu_budget %d cannot fund the minimum endpoints, which need %d GPUs at "
                "the GPUs per replica the engines report; the planner %s",
                self.deployment,
                *unfunded,
                outcome,
            )
        self.unfunded = unfunded

    def _warn_of_lengthless_demand(self, diag: TickDiagnostics) -> None:
        """Say once when a throughput tick holds the roles as ``model_not_ready`` (spec §5.3:
        no engine rate) for requests forecast with no length, the perf models being ready: the
        reason alone points at the models, not at the traffic."""
        lengths = [diag.predicted_isl]
        if "decode" in self.config.roles:  # decode and agg engines are sized by the OSL too
            lengths.append(diag.predicted_osl)
        lengthless = (
            diag.throughput_decision_reason == "model_not_ready"
            and (diag.predicted_num_req or 0) > 0
            and any(length is not None and length <= 0 for length in lengths)
            and all(model.is_ready for model in self.machine.fleet.models.values())
        )
        if lengthless and not self.lengthless_demand:
            log.warning(
                "%s: %.4g requests forecast in %g s with a mean ISL of %.4g and OSL of %.4g "
                "tokens: there is no engine rate for requests of no length, so the throughput "
                "loop holds the roles (model_not_ready, though the perf models are ready); "
                "does the traffic source count tokens? (length_forecast_floor_windows keeps a "
                "trend forecast from falling to 0)",
                self.deployment,
                diag.predicted_num_req,
                self.config.throughput_adjustment_interval_seconds,
                diag.predicted_isl,
                diag.predicted_osl,
            )
        self.lengthless_demand = lengthless

    def _refuse_limits(self, limits: Limits, why: str) -> None:
        self.dead_letters.append(
            DeadLetter(
                source="limits",
                reason=f"limits refused: {why}",
                raw=json.dumps(limits.changes()),
                deployment=self.deployment,
            )
        )

    def _refuse_ack(self, ack: AckEvent, reason: str) -> None:
        """Dead-letter ``ack``, naming the message it was read from if it was read."""
        acked = ack.payload.acked_decision_id
        source, position, raw = ack.origin or (
            "acks",
            None,
            json.dumps({"deployment": self.deployment, "acked_decision_id": acked}),
        )
        self.dead_letters.append(
            DeadLetter(
                source=source,
                position=position,
                reason=reason,
                raw=raw,
                deployment=self.deployment,
            )
        )

    def _refuse_rows(
        self, engine: EngineId, rows: list[FpmRow], why: Callable[[str, FpmRow], str]
    ) -> None:
        """Dead-letter ``rows`` of ``engine``; ``why(name, row)`` is the reason (``name``
        names the forward pass: role, worker, rank and event time)."""
        role, worker_id, dp_rank = engine
        for row in rows:
            time = row[FPM_COLUMN["time"]]
            fpm = fpm_from_row(worker_id, dp_rank, row).model_dump(exclude_defaults=True)
            event = {"type": "fpm", "deployment": self.deployment, "time": time}
            self.dead_letters.append(
                DeadLetter(
                    source="planner",
                    reason=why(
                        f"fpm of {role} engine {worker_id!r} (dp_rank {dp_rank}) at {time!r}", row
                    ),
                    raw=json.dumps(
                        event | {"payload": {"role": role, "fpm": fpm}}, separators=(",", ":")
                    ),
                    deployment=self.deployment,
                )
            )

    def _first_copies(self, engine: EngineId, rows: list[FpmRow]) -> list[FpmRow]:
        """``rows`` without the copies of a pass (an identical row: same ``counter_id``, event
        time and values) already among them; each copy is dead-lettered. A pass whose
        ``counter_id`` is 0 (a producer that does not count) is never taken for a copy: a live
        source stamps the passes it drains in one poll with one time, so two idle heartbeats of
        such an engine are identical rows."""
        time, counter = FPM_COLUMN["time"], FPM_COLUMN["counter_id"]
        if all(a[time] < b[time] for a, b in itertools.pairwise(rows)):
            return rows  # the usual case: no two passes at one time, so no copy
        seen: set[FpmRow] = set()
        kept: list[FpmRow] = []
        copies: list[FpmRow] = []
        for row in rows:
            (copies if row in seen and row[counter] != 0 else kept).append(row)
            seen.add(row)
        self._refuse_rows(
            engine,
            copies,
            lambda fpm, row: (
                f"duplicate: {fpm} (counter_id {row[counter]}) repeats a pass already used in "
                "this window"
            ),
        )
        return kept

    def _first_requests(self, end_s: float, requests: list[RequestRecord]) -> list[RequestRecord]:
        """``requests`` without the repeats of a ``request_id`` already among them; each repeat
        is dead-lettered. Requests without an id are all kept."""
        seen: set[str] = set()
        kept = []
        for request in requests:
            request_id = request.request_id
            if request_id is None or request_id not in seen:
                kept.append(request)
                if request_id is not None:
                    seen.add(request_id)
                continue
            event = {"type": "request", "deployment": self.deployment}
            self.dead_letters.append(
                DeadLetter(
                    source="planner",
                    reason=f"duplicate: request {request_id!r} repeats one already used in the "
                    f"window ending at {end_s!r}",
                    raw=json.dumps(
                        event | {"payload": request.model_dump(exclude_none=True)},
                        separators=(",", ":"),
                    ),
                    deployment=self.deployment,
                )
            )
        return kept

    def _within_limits(
        self, engine: EngineId, rows: list[FpmRow], caps: EngineCapabilities
    ) -> list[FpmRow]:
        """``rows`` without the passes beyond ``caps``, each of which is dead-lettered."""
        kept = []
        for row in rows:
            breach = engine_limit_breach(row, caps, kv=False)  # prefix caching: see its docs
            if breach is None:
                kept.append(row)
            else:
                self._refuse_rows(engine, [row], functools.partial(_beyond_limits, breach))
        return kept

    # --- ticks ---------------------------------------------------------------------------
    def _tick(self, tick: ScheduledTick, now_s: float) -> TickRecord:
        tick_input = self._tick_input(tick, now_s)
        effects = self.machine.on_tick(tick, tick_input)
        if tick.run_throughput_scaling:
            self._warn_of_lengthless_demand(effects.diagnostics)
        if tick.need_worker_fpm:
            self.tick_rows = {}
        assert effects.next_tick is not None
        self.next_tick = effects.next_tick
        decision = None
        delivered = False
        if effects.scale_to is not None:
            decision, delivered = self._decision(effects.scale_to, effects.diagnostics, now_s)
        elif self.gate is not None:
            diagnostics = effects.diagnostics
            ran = [
                *([diagnostics.load_decision_reason] if tick.run_load_scaling else []),
                *([diagnostics.throughput_decision_reason] if tick.run_throughput_scaling else []),
            ]
            if keeps_the_count(ran):
                self.gate.withdraw()
        return TickRecord(
            deployment=self.deployment,
            time=now_s,
            ready_prefill=self.inventory.ready_num_prefill if self.inventory else None,
            ready_decode=self.inventory.ready_num_decode if self.inventory else None,
            ran_load=tick.run_load_scaling,
            ran_throughput=tick.run_throughput_scaling,
            decision=decision,
            delivered_before=delivered,
            diagnostics=effects.diagnostics,
            engines=self._engine_loads(),
            observed_traffic=tick_input.traffic,
            gpus_per_prefill=self.machine.gpus_per_replica("prefill"),
            gpus_per_decode=self.machine.gpus_per_replica("decode"),
            perf_samples_set_aside=self.machine.perf_samples_set_aside,
        )

    def _tick_input(self, tick: ScheduledTick, now_s: float) -> TickInput:
        """What the core sees at this tick: the traffic of its window (and of the load loop's
        rate window, when that spans another duration), the inventory, the engines' passes."""
        traffic = rate_traffic = None
        rate_unknown = False
        if tick.need_traffic_metrics:
            traffic = self.traffic_over(tick.traffic_metrics_duration_s, now_s)
        window = self.config.load_rate_window_seconds
        if tick.run_load_scaling and 0 < window != tick.traffic_metrics_duration_s:
            # the tick's own traffic read spans another duration: read the rate window apart
            rate_traffic = self.traffic_over(window, now_s, readings_stand=True)
            rate_unknown = rate_traffic is None  # not the interval's traffic: unknown
        return TickInput(
            now_s=now_s,
            traffic=traffic,
            rate_traffic=rate_traffic,
            rate_traffic_unknown=rate_unknown,
            worker_counts=self.inventory,
            fpm_observations=self._observations() if tick.need_worker_fpm else None,
            # None: the core trains on the latest FPM of each engine, heartbeats too (the
            # reference, ``fpm_samples_per_engine_per_tick = 1``)
            training_fpms=(
                self._training()
                if tick.need_worker_fpm and self.config.fpm_samples_per_engine_per_tick > 1
                else None
            ),
        )

    def _decision(
        self, target: ScaleTarget, diagnostics: TickDiagnostics, now_s: float
    ) -> tuple[ScalingDecision | None, bool]:
        """The decision of a tick that scales to ``target`` (``None`` when the ack gate holds
        it back), and whether it reached the outputs before a restart."""
        self.decisions += 1  # a decision delivered before a restart keeps its id
        delivered = self._delivered_before(now_s)
        if not delivered:
            self.decisions = max(self.decisions, self._first_new_id)
        inventory = self.inventory
        decision = ScalingDecision(
            deployment=self.deployment,
            decision_id=self.decisions,
            time=now_s,
            num_prefill=target.num_prefill,
            num_decode=target.num_decode,
            current_prefill=inventory.ready_num_prefill if inventory else None,
            current_decode=inventory.ready_num_decode if inventory else None,
            expected_prefill=inventory.expected_num_prefill if inventory else None,
            expected_decode=inventory.expected_num_decode if inventory else None,
            source=target.source,
            reason=target.reason,
            prefill_reason=target.prefill_reason,
            decode_reason=target.decode_reason,
            diagnostics=diagnostics,
        )
        if self.gate is not None and not delivered:
            return self.gate.offer(decision), delivered
        return decision, delivered

    def _delivered_before(self, now_s: float) -> bool:
        """Whether a decision at ``now_s`` reached the outputs before a restart."""
        return self.delivered is not None and now_s <= self.delivered.time

    @property
    def _first_new_id(self) -> int:
        """The lowest id a decision not delivered before a restart may take."""
        return 1 if self.delivered is None else self.delivered.decision_id + 1

    def _observations(self) -> FpmObservations:
        by_role: dict[Role, dict[tuple[str, int], ForwardPassMetrics]] = {}
        for (role, worker_id, dp_rank), row in sorted(self.latest.items()):
            by_role.setdefault(role, {})[(worker_id, dp_rank)] = fpm_from_row(
                worker_id, dp_rank, row
            )
        return FpmObservations(prefill=by_role.get("prefill"), decode=by_role.get("decode"))

    def _engine_loads(self) -> list[EngineLoad]:
        return [
            EngineLoad(
                role=role,
                worker_id=worker_id,
                dp_rank=dp_rank,
                queued_prefill_tokens=int(row[FPM_COLUMN["queued.sum_prefill_tokens"]]),
                queued_decode_kv_tokens=int(row[FPM_COLUMN["queued.sum_decode_kv_tokens"]]),
                inflight_decode_kv_tokens=int(row[FPM_COLUMN["scheduled.sum_decode_kv_tokens"]]),
            )
            for (role, worker_id, dp_rank), row in sorted(self.latest.items())
        ]

    # --- traffic -------------------------------------------------------------------------
    def traffic_over(
        self, duration_s: float, now_s: float, *, readings_stand: bool = False
    ) -> TrafficObservation | None:
        """Traffic of the last ``duration_s`` seconds, ``None`` when unknown.

        An explicit traffic observation (e.g. from Prometheus) wins: the newest one stamped in
        ``[now_s − duration_s, now_s)`` — a reading joins the tick window that holds it, which
        closes at the first tick after it, so each throughput tick reads the readings of its own
        interval, one on its start included. With ``readings_stand`` (the load tick's rate
        window, shorter than the readings Prometheus takes once a throughput interval) a
        reading stands for as long as it covers: the newest one within
        ``max(duration_s, its duration_s)``.

        Otherwise the request records of the tick windows that end in ``(now_s − duration_s,
        now_s]`` are aggregated — counts, means and length quantiles over the same requests —
        and ``duration_s`` of the result is the span those windows cover: a whole number of
        tick windows, so a rate window of 30 s on 7 s windows counts 35 s of requests and says
        so. A deployment that never sent request records and no traffic observation has
        *unknown* traffic, never zero demand; so has a span without a request record while the
        engines scheduled prompt tokens in it (requests arrived: the request feed stopped or
        lags — a silent feed must not read as idle, as a failed Prometheus read does not).
        """
        for t, obs in reversed(self.traffic_events):
            span = max(duration_s, obs.duration_s) if readings_stand else duration_s
            if now_s - span - GRID_SLACK_S <= t < now_s + GRID_SLACK_S:
                return obs
        if not self.requests_seen:
            return None
        since = now_s - duration_s
        total = RequestStats(now_s)
        for window in self.request_windows:
            if since < window.end_s <= now_s + GRID_SLACK_S:
                total.merge(window)
        n = total.count
        if n == 0 and total.prompt_tokens_scheduled > 0:
            return None
        return TrafficObservation(
            duration_s=math.ceil(duration_s / self.window_s - GRID_SLACK_S) * self.window_s,
            num_req=n,
            isl=total.sum_isl / n if n else 0.0,
            osl=total.sum_osl / n if n else 0.0,
            kv_hit_rate=total.sum_hit / total.hits if total.hits else None,
            accept_length=total.sum_accept / total.accepts if total.accepts else None,
            isl_quantiles=total.quantiles("isl"),
            osl_quantiles=total.quantiles("osl"),
        )
