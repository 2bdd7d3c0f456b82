"""Load-based scaling: reactive ±1 proposals from the engines' latest FPMs (reference spec §4).

Pure functions, one per decision step; the state machine strings them together:

1. guards (:func:`fpm_covers_workers`; in-progress and no-FPM checks live with the inventory),
2. a *rule* proposes a replica count for one role — threshold rules for the easy and ``load``
   targets (§4.3: :func:`threshold_rules` picks the :class:`Thresholds`,
   :func:`prefill_queue_proposal` and :func:`decode_kv_proposal` apply them) or SLA rules on
   the perf models (§4.4–§4.6: :func:`sla_prefill_proposal`, :func:`sla_decode_proposal`,
   :func:`sla_agg_proposals` + :func:`combine_agg`),
3. floors and budget (§4.7, done by the caller), then :func:`settle_reason` names the outcome.

Two scale-down rules for the SLA target (``PlannerConfig.scale_down_rule``): ``"flat"`` (§4.5,
every engine below ``SLA × sensitivity``) and ``"consolidation"`` (§4.6, default: predict the
survivors after N → N−1 and refuse when they would break the SLA margin).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from operators.perf import AggPerfModel, DecodePerfModel, PrefillPerfModel
from operators.tick import EngineKey
from schemas import ForwardPassMetrics, LoadReason, PlannerConfig

Fpms = Mapping[EngineKey, ForwardPassMetrics]
ScaleDownRule = Literal["consolidation", "flat"]

# Easy-mode thresholds (spec §4.3). Prefill: queued prefill tokens / context_length.
PREFILL_THROUGHPUT_SCALE_UP = 1.0
PREFILL_THROUGHPUT_SCALE_DOWN = 0.1
PREFILL_LATENCY_SCALE_UP = 0.1
PREFILL_LATENCY_SCALE_DOWN = 0.0
# Decode / agg: KV utilisation (scheduled + queued [+ queued prefill for agg]) / max_kv_tokens.
DECODE_THROUGHPUT_SCALE_UP = 1.0
DECODE_THROUGHPUT_SCALE_DOWN = 0.6
DECODE_LATENCY_SCALE_UP = 0.4
DECODE_LATENCY_SCALE_DOWN = 0.1

REASON_PRIORITY: dict[str, int] = {
    "scale_up": 4,
    "scale_down_capped_by_throughput": 3,
    "scale_down": 2,
    "no_change": 1,
}
"""Which per-role reason names a disagg decision (spec §4.7)."""

_INFORMATIVE: frozenset[str] = frozenset(
    {
        "insufficient_data",
        "scale_down_refused_consolidation",
        "scale_down_refused_rate",
        "scale_down_stabilizing",
        "no_fpm_data",
    }
)
"""Rule reasons worth reporting when the final count does not change."""


@dataclass(frozen=True)
class LoadProposal:
    """What a load rule wants for one role.

    ``desired`` is the proposed replica count (``None`` = no opinion, keep the current count);
    ``reason`` is the rule's own view (``scale_up``, ``scale_down``, ``no_change``,
    ``insufficient_data`` or ``scale_down_refused_consolidation``), or the rate guard's
    (:class:`operators.rate_guard.RateGuard`: ``scale_down_refused_rate``,
    ``scale_down_stabilizing``), or ``no_fpm_data`` from the state machine when a role has no
    forward passes; ``estimate_ms`` is the largest per-engine latency estimate, for diagnostics.

    >>> LoadProposal(3, "scale_up", estimate_ms=612.0).desired
    3
    """

    desired: int | None
    reason: LoadReason
    estimate_ms: float | None = None


def fpm_covers_workers(fpms: Fpms, ready: int | None) -> bool:
    """Guard 3 of spec §4.2: FPMs come from exactly ``ready`` workers, each with the same
    number of dp ranks. An unknown ready count cannot be reconciled.

    >>> fpm = ForwardPassMetrics()
    >>> fpm_covers_workers({("w1", 0): fpm, ("w2", 0): fpm}, 2)
    True
    >>> fpm_covers_workers({("w1", 0): fpm, ("w2", 0): fpm}, 3)
    False
    >>> fpm_covers_workers({("w1", 0): fpm, ("w1", 1): fpm, ("w2", 0): fpm}, 2)
    False
    """
    if ready is None:
        return False
    ranks: dict[str, set[int]] = {}
    for worker_id, dp_rank in fpms:
        ranks.setdefault(worker_id, set()).add(dp_rank)
    if len(ranks) != ready:
        return False
    dp_sizes = {len(r) for r in ranks.values()}
    if len(dp_sizes) > 1:
        return False
    return len(fpms) == ready * (dp_sizes.pop() if dp_sizes else 0)


# ---------------------------------------------------------------------------------------------
# Easy targets (§4.3)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Thresholds:
    """A threshold rule on a per-engine load signal (spec §4.3): ANY engine at ``up`` → +1,
    ALL engines at ``down`` (and at least two replicas) → −1. "At" means ``>=`` / ``<=`` when
    the bound is inclusive, ``>`` / ``<`` when not (the easy targets mix both; the ``load``
    target's user thresholds are inclusive).

    >>> Thresholds(0.9, 0.5).step([0.95, 0.2], n=2, min_endpoint=1)
    LoadProposal(desired=3, reason='scale_up', estimate_ms=None)
    >>> Thresholds(0.9, 0.5).step([0.5, 0.5], n=2, min_endpoint=1)
    LoadProposal(desired=1, reason='scale_down', estimate_ms=None)
    """

    up: float
    down: float
    up_inclusive: bool = True
    down_inclusive: bool = True

    def hot(self, value: float) -> bool:
        return value >= self.up if self.up_inclusive else value > self.up

    def cool(self, value: float) -> bool:
        return value <= self.down if self.down_inclusive else value < self.down

    def step(self, values: list[float], n: int, min_endpoint: int) -> LoadProposal:
        """The proposal for ``n`` replicas whose engines show ``values``."""
        if not values:
            return LoadProposal(None, "insufficient_data")
        if any(self.hot(v) for v in values):
            return LoadProposal(n + 1, "scale_up")
        if n > 1 and all(self.cool(v) for v in values):
            return LoadProposal(max(n - 1, min_endpoint), "scale_down")
        return LoadProposal(None, "no_change")


# The easy targets' fixed rules (spec §4.3 constants, with their exact comparisons).
PREFILL_EASY_THRESHOLDS: dict[str, Thresholds] = {
    "throughput": Thresholds(
        PREFILL_THROUGHPUT_SCALE_UP, PREFILL_THROUGHPUT_SCALE_DOWN, down_inclusive=False
    ),
    "latency": Thresholds(PREFILL_LATENCY_SCALE_UP, PREFILL_LATENCY_SCALE_DOWN),
}
DECODE_EASY_THRESHOLDS: dict[str, Thresholds] = {
    "throughput": Thresholds(
        DECODE_THROUGHPUT_SCALE_UP, DECODE_THROUGHPUT_SCALE_DOWN, False, False
    ),
    "latency": Thresholds(DECODE_LATENCY_SCALE_UP, DECODE_LATENCY_SCALE_DOWN, False, False),
}


@dataclass(frozen=True)
class ThresholdRules:
    """What the threshold targets compare, per role.

    ``prefill_unit`` divides an engine's queued prompt tokens into the prefill signal: the
    engines' ``context_length`` for the easy targets (``None`` here: read from the
    capabilities), 1 for the ``load`` target (raw tokens). The decode/agg signal is always the
    KV utilisation of :func:`decode_kv_load` over ``max_kv_tokens``.

    >>> rules = threshold_rules(PlannerConfig(mode="decode", optimization_target="latency"))
    >>> rules.decode, rules.prefill_unit
    (Thresholds(up=0.4, down=0.1, up_inclusive=False, down_inclusive=False), None)
    """

    prefill: Thresholds | None
    decode: Thresholds | None
    prefill_unit: int | None


def threshold_rules(config: PlannerConfig) -> ThresholdRules:
    """The rules of a threshold target (``throughput``, ``latency`` or ``load``); a role the
    config has no thresholds for gets ``None``.

    >>> cfg = PlannerConfig(mode="agg", optimization_target="load",
    ...                     decode_scale_up_kv_rate=80, decode_scale_down_kv_rate=30)
    >>> rules = threshold_rules(cfg)
    >>> rules.prefill, rules.decode.up, rules.decode.down, rules.prefill_unit
    (None, 0.8, 0.3, 1)
    """
    target = config.optimization_target
    if target == "sla":
        raise ValueError("optimization_target 'sla' scales on the perf models, not thresholds")
    if target != "load":
        return ThresholdRules(PREFILL_EASY_THRESHOLDS[target], DECODE_EASY_THRESHOLDS[target], None)
    prefill = decode = None
    up, down = config.prefill_scale_up_queue_tokens, config.prefill_scale_down_queue_tokens
    if up is not None and down is not None:
        prefill = Thresholds(float(up), float(down))
    up_rate, down_rate = config.decode_scale_up_kv_rate, config.decode_scale_down_kv_rate
    if up_rate is not None and down_rate is not None:
        decode = Thresholds(up_rate / 100, down_rate / 100)
    return ThresholdRules(prefill, decode, 1)


def prefill_queue_proposal(
    fpms: Fpms, n: int, thresholds: Thresholds | None, unit: int | None, min_endpoint: int
) -> LoadProposal:
    """Queued prompt tokens per ``unit`` (the context length, or 1 for raw tokens) against
    ``thresholds``: ANY engine hot → +1, ALL engines cool → −1.

    >>> from schemas import QueuedRequestMetrics
    >>> hot = ForwardPassMetrics(queued_requests=QueuedRequestMetrics(sum_prefill_tokens=4096))
    >>> prefill_queue_proposal({("w1", 0): hot}, 1, PREFILL_EASY_THRESHOLDS["throughput"], 4096, 1)
    LoadProposal(desired=2, reason='scale_up', estimate_ms=None)
    >>> prefill_queue_proposal({("w1", 0): hot}, 1, Thresholds(5000, 100), 1, 1)
    LoadProposal(desired=None, reason='no_change', estimate_ms=None)
    """
    if thresholds is None or not unit or n == 0:
        return LoadProposal(None, "insufficient_data")
    signals = [f.queued_requests.sum_prefill_tokens / unit for f in fpms.values()]
    return thresholds.step(signals, n, min_endpoint)


def decode_kv_load(fpm: ForwardPassMetrics, include_queued_prefill: bool) -> int:
    """KV tokens an engine holds or will hold: scheduled + queued decode KV (agg: + queued
    prefill tokens, which become KV once admitted)."""
    kv = fpm.scheduled_requests.sum_decode_kv_tokens + fpm.queued_requests.sum_decode_kv_tokens
    if include_queued_prefill:
        kv += fpm.queued_requests.sum_prefill_tokens
    return kv


def queue_wait_factor(fpm: ForwardPassMetrics) -> float:
    """How much a request queued behind a full batch stretches its mean inter-token latency.

    Ours (``queue_aware_estimates``): the reference estimates the next iteration's time only,
    so requests waiting for a batch slot are invisible to it (a known failure under bursts).
    A new request behind ``Q`` queued ones waits for ``Q + 1`` of the ``B`` running requests to
    finish; with completions spread evenly over a request's ``osl`` iterations that is about
    ``(Q + 1) · osl / B`` iterations, which spread over its own ``osl`` tokens multiply its
    ITL by ``1 + (Q + 1) / B``. Without a queue the factor is 1.

    >>> from schemas import ForwardPassMetrics, QueuedRequestMetrics, ScheduledRequestMetrics
    >>> full = ForwardPassMetrics(wall_time=0.03,
    ...     scheduled_requests=ScheduledRequestMetrics(num_decode_requests=256),
    ...     queued_requests=QueuedRequestMetrics(num_decode_requests=127))
    >>> queue_wait_factor(full)
    1.5
    """
    queued = fpm.queued_requests.num_decode_requests
    running = fpm.scheduled_requests.num_decode_requests
    if queued <= 0 or running <= 0:
        return 1.0
    return 1.0 + (queued + 1) / running


def steady_state_itl_after_consolidation(itl_now_s: float, intercept_s: float, c: float) -> float:
    """Iteration time after one of ``N`` engines goes, with ``c = N / (N − 1)``.

    Ours (``queue_aware_estimates``): the reference inflates only the KV tokens by ``c`` and
    keeps the batch size, but a decode batch is in equilibrium with its arrival rate: by
    Little's law ``B = λ · osl · itl``, so more load per engine means longer iterations, which
    means more requests in flight, which means longer iterations. With ``itl = a + s·B`` (``a``
    the intercept, ``s`` the cost per request in flight) the fixed point after the rate grows
    by ``c`` is ``a · itl / (c·a − (c−1)·itl)``; ``inf`` when the denominator is not positive
    (the survivors could not keep up at any batch size).

    >>> round(steady_state_itl_after_consolidation(0.020, 0.005, 2.0), 6)  # 2 → 1 engines
    inf
    >>> round(steady_state_itl_after_consolidation(0.008, 0.005, 1.5), 6)   # 3 → 2 engines
    0.011429
    """
    denominator = c * intercept_s - (c - 1.0) * itl_now_s
    if denominator <= 0:
        return math.inf
    return intercept_s * itl_now_s / denominator


def _steady_state_check(
    model: DecodePerfModel,
    fpm: ForwardPassMetrics,
    c: float,
    itl_sla_ms: float,
    sensitivity: float,
    accept_length: float,
    max_kv_tokens: int | None,
    max_num_seqs: int | None,
) -> ScaleDownCheck | None:
    """Consolidation check at the post-scale-down equilibrium; ``None`` when it cannot tell."""
    coefficients = model.coefficients
    running = fpm.scheduled_requests.num_decode_requests
    kv = fpm.scheduled_requests.sum_decode_kv_tokens
    if coefficients is None or coefficients["intercept"] <= 0 or running <= 0:
        return None
    itl_now = model.predict_one({"num_decode_requests": running, "sum_decode_kv_tokens": kv})
    itl_post = steady_state_itl_after_consolidation(itl_now, coefficients["intercept"], c)
    if not math.isfinite(itl_post):
        return ScaleDownCheck(False, True)
    growth = c * itl_post / itl_now  # requests (and their KV) in flight on a survivor
    post_kv = int((kv + fpm.queued_requests.sum_decode_kv_tokens) * growth)
    post_seqs = math.ceil(decode_requests(fpm) * growth)
    post_ms = itl_post * 1000.0 / accept_length
    return _itl_check(
        post_kv, post_ms, itl_sla_ms, sensitivity, max_kv_tokens, post_seqs, max_num_seqs
    )


def decode_requests(fpm: ForwardPassMetrics) -> int:
    """Decode requests an engine holds, running or queued."""
    return fpm.scheduled_requests.num_decode_requests + fpm.queued_requests.num_decode_requests


def decode_kv_proposal(
    fpms: Fpms,
    n: int,
    thresholds: Thresholds | None,
    max_kv_tokens: int | None,
    min_endpoint: int,
    *,
    agg: bool = False,
) -> LoadProposal:
    """KV utilisation (decode, or agg with ``agg=True``) against ``thresholds``.

    >>> from schemas import ScheduledRequestMetrics
    >>> cool = ForwardPassMetrics(scheduled_requests=ScheduledRequestMetrics(
    ...     sum_decode_kv_tokens=40_000))
    >>> easy = DECODE_EASY_THRESHOLDS["throughput"]
    >>> decode_kv_proposal({("w1", 0): cool, ("w2", 0): cool}, 2, easy, 100_000, 1)
    LoadProposal(desired=1, reason='scale_down', estimate_ms=None)
    """
    if thresholds is None or not max_kv_tokens or n == 0:
        return LoadProposal(None, "insufficient_data")
    utils = [decode_kv_load(f, agg) / max_kv_tokens for f in fpms.values()]
    return thresholds.step(utils, n, min_endpoint)


# ---------------------------------------------------------------------------------------------
# SLA target (§4.4–§4.6)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScaleDownCheck:
    """Outcome of a consolidation check: may we drop one replica, and did a check refuse?

    >>> check = flat_scale_down([70.0, 75.0], 100.0, 0.8)  # all below 100 ms × 0.8
    >>> check.allowed, check.refused
    (True, False)
    >>> sla_step([70.0, 75.0], 100.0, 2, 1, check)
    LoadProposal(desired=1, reason='scale_down', estimate_ms=75.0)
    """

    allowed: bool
    refused: bool


def flat_scale_down(estimates: list[float], sla_ms: float, sensitivity: float) -> ScaleDownCheck:
    """§4.5: every engine's estimate is below ``SLA × sensitivity``.

    >>> flat_scale_down([70.0, 75.0], 100.0, 0.8)
    ScaleDownCheck(allowed=True, refused=False)
    """
    return ScaleDownCheck(all(e < sla_ms * sensitivity for e in estimates), False)


def scale_up_step(estimates: list[float], sla_ms: float, n: int, max_step: int) -> int:
    """Replicas to add when every engine is above the SLA: ``1`` in the reference.

    Ours (``max_load_step > 1``): proportional, like a Kubernetes HPA — the least loaded
    engine's estimate over the SLA says how many times the present replicas the load needs,
    ``ceil(n · min(estimate) / SLA) − n``, at least 1 and at most ``max_step``. A replica takes
    about a minute to start and no further step is taken while it does, so a ±1 controller
    facing a load several times its fleet climbs one replica a minute while the queues grow.

    >>> scale_up_step([900.0, 1200.0], 500.0, 2, max_step=1)
    1
    >>> scale_up_step([900.0, 1200.0], 500.0, 2, max_step=4)  # ceil(2 × 1.8) − 2
    2
    >>> scale_up_step([80_000.0], 500.0, 1, max_step=3)
    3
    >>> scale_up_step([510.0, 520.0], 500.0, 4, max_step=3)  # ceil(4.08) − 4
    1
    """
    if max_step <= 1 or not estimates:
        return 1
    wanted = math.ceil(n * min(estimates) / sla_ms) - n
    return max(1, min(max_step, wanted))


def sla_step(
    estimates: list[float],
    sla_ms: float,
    n: int,
    min_endpoint: int,
    scale_down: ScaleDownCheck,
    max_step: int = 1,
) -> LoadProposal:
    """The SLA rule: ALL engines above the SLA → scale up (N+1 in the reference, see
    :func:`scale_up_step`); else N−1 if the scale-down check passed.

    >>> sla_step([120.0, 130.0], 100.0, 2, 1, ScaleDownCheck(False, False))
    LoadProposal(desired=3, reason='scale_up', estimate_ms=130.0)
    >>> sla_step([50.0, 60.0], 100.0, 2, 1, ScaleDownCheck(False, True)).reason
    'scale_down_refused_consolidation'
    """
    if not estimates:
        return LoadProposal(None, "insufficient_data")
    peak = max(estimates)
    if all(e > sla_ms for e in estimates):
        return LoadProposal(n + scale_up_step(estimates, sla_ms, n, max_step), "scale_up", peak)
    if n > 1 and scale_down.allowed:
        return LoadProposal(max(n - 1, min_endpoint), "scale_down", peak)
    reason: LoadReason = "scale_down_refused_consolidation" if scale_down.refused else "no_change"
    return LoadProposal(None, reason, peak)


def _ms(seconds: float | None, divisor: float = 1.0) -> float | None:
    return None if seconds is None else seconds * 1000.0 / divisor


def _combine_checks(checks: Iterable[ScaleDownCheck]) -> ScaleDownCheck:
    checks = list(checks)
    return ScaleDownCheck(
        allowed=bool(checks) and all(c.allowed for c in checks),
        refused=any(c.refused for c in checks),
    )


def _itl_check(
    post_kv: int,
    post_itl_ms: float | None,
    itl_sla_ms: float,
    sensitivity: float,
    max_kv_tokens: int | None,
    post_seqs: int = 0,
    max_num_seqs: int | None = None,
) -> ScaleDownCheck:
    # (1) the survivor's KV must fit the cache (the perf model cannot model eviction),
    # (1b) ours, queue-aware mode: its requests must fit its batch slots (``max_num_seqs``) —
    #      past that they queue, which the iteration-time model cannot see,
    # (2) its predicted ITL must stay within SLA × sensitivity.
    if max_kv_tokens and post_kv >= max_kv_tokens:
        return ScaleDownCheck(False, True)
    if max_num_seqs and post_seqs > max_num_seqs:
        return ScaleDownCheck(False, True)
    if post_itl_ms is None:
        return ScaleDownCheck(False, False)
    if post_itl_ms >= itl_sla_ms * sensitivity:
        return ScaleDownCheck(False, True)
    return ScaleDownCheck(True, False)


def _ttft_check(
    post_ms: float | None, own_ms: float | None, ttft_sla_ms: float, sensitivity: float
) -> ScaleDownCheck:
    # Sensitivity applies to the queue-induced part only: the new request's own compute
    # (``own_ms``) does not shrink with more replicas.
    if own_ms is None or post_ms is None:
        return ScaleDownCheck(False, False)
    budget = (ttft_sla_ms - own_ms) * sensitivity
    if budget <= 0 or post_ms - own_ms >= budget:
        return ScaleDownCheck(False, True)
    return ScaleDownCheck(True, False)


def _sla_proposal(
    estimates: list[float],
    consolidation: Callable[[float], ScaleDownCheck],
    n: int,
    sla_ms: float,
    sensitivity: float,
    rule: ScaleDownRule,
    min_endpoint: int,
    max_step: int,
) -> LoadProposal:
    """The SLA rule on per-engine ``estimates`` (:func:`sla_step`), its scale-down checked by
    the flat rule (§4.5) or by ``consolidation(c)`` with ``c = n / (n − 1)`` (§4.6), asked only
    when there are estimates and a replica to remove."""
    check = ScaleDownCheck(False, False)
    if n > 1 and estimates:
        if rule == "flat":
            check = flat_scale_down(estimates, sla_ms, sensitivity)
        else:
            check = consolidation(n / (n - 1))
    return sla_step(estimates, sla_ms, n, min_endpoint, check, max_step)


def _itl_estimates(
    model: DecodePerfModel | AggPerfModel,
    engines: list[ForwardPassMetrics],
    accept_length: float,
    queue_aware: bool,
) -> list[float]:
    """Per-engine ITL estimates (ms per token), with ``queue_aware`` the batch-slot wait too."""
    estimates = []
    for f in engines:
        sched, queued = f.scheduled_requests, f.queued_requests
        itl = model.estimate_next_itl(sched.sum_decode_kv_tokens, queued.sum_decode_kv_tokens)
        e = _ms(itl, accept_length)
        if e is not None:
            estimates.append(e * (queue_wait_factor(f) if queue_aware else 1.0))
    return estimates


def _itl_consolidation_check(
    model: DecodePerfModel | AggPerfModel,
    fpm: ForwardPassMetrics,
    kv_load: int,
    c: float,
    itl_sla_ms: float,
    sensitivity: float,
    accept_length: float,
    max_kv_tokens: int | None,
    max_num_seqs: int | None,
) -> ScaleDownCheck:
    """§4.6 for one engine: its ``kv_load`` and decode requests grow by ``c``."""
    post_kv = int(kv_load * c)
    post = _ms(model.estimate_next_itl(post_kv, 0), accept_length)
    post_seqs = math.ceil(decode_requests(fpm) * c)
    return _itl_check(
        post_kv, post, itl_sla_ms, sensitivity, max_kv_tokens, post_seqs, max_num_seqs
    )


def sla_prefill_proposal(
    model: PrefillPerfModel,
    fpms: Fpms,
    n: int,
    *,
    max_num_batched_tokens: int | None,
    ttft_sla_ms: float,
    sensitivity: float,
    rule: ScaleDownRule,
    kv_hit_rate: float | None,
    min_endpoint: int,
    max_step: int = 1,
) -> LoadProposal:
    """Prefill TTFT rule (§4.4 estimate, §4.5/§4.6 scale-down)."""
    if not model.has_sufficient_data() or n == 0 or not max_num_batched_tokens:
        return LoadProposal(None, "insufficient_data")
    mbt = max_num_batched_tokens
    queues = [f.queued_requests.sum_prefill_tokens for f in fpms.values()]
    estimates = [
        e for q in queues if (e := _ms(model.estimate_next_ttft(q, mbt, kv_hit_rate))) is not None
    ]

    def consolidation(c: float) -> ScaleDownCheck:
        own = _ms(model.estimate_next_ttft(0, mbt, kv_hit_rate))
        return _combine_checks(
            _ttft_check(
                _ms(model.estimate_next_ttft(int(q * c), mbt, kv_hit_rate)),
                own,
                ttft_sla_ms,
                sensitivity,
            )
            for q in queues
        )

    return _sla_proposal(
        estimates, consolidation, n, ttft_sla_ms, sensitivity, rule, min_endpoint, max_step
    )


def sla_decode_proposal(
    model: DecodePerfModel,
    fpms: Fpms,
    n: int,
    *,
    itl_sla_ms: float,
    sensitivity: float,
    rule: ScaleDownRule,
    max_kv_tokens: int | None,
    accept_length: float,
    min_endpoint: int,
    max_num_seqs: int | None = None,
    queue_aware: bool = False,
    max_step: int = 1,
) -> LoadProposal:
    """Decode ITL rule; an iteration emits ``accept_length`` tokens (§5.5).

    With ``queue_aware`` (ours) the estimate includes the wait for a batch slot
    (:func:`queue_wait_factor`), and the consolidation check predicts each survivor at its new
    equilibrium (:func:`steady_state_itl_after_consolidation`), within its ``max_num_seqs``
    slots and its KV cache.
    """
    if not model.has_sufficient_data() or n == 0:
        return LoadProposal(None, "insufficient_data")
    engines = list(fpms.values())
    estimates = _itl_estimates(model, engines, accept_length, queue_aware)

    def engine_check(f: ForwardPassMetrics, c: float) -> ScaleDownCheck:
        if queue_aware:
            steady = _steady_state_check(
                model, f, c, itl_sla_ms, sensitivity, accept_length, max_kv_tokens, max_num_seqs
            )
            if steady is not None:
                return steady
        kv = f.scheduled_requests.sum_decode_kv_tokens + f.queued_requests.sum_decode_kv_tokens
        seq_cap = max_num_seqs if queue_aware else None
        return _itl_consolidation_check(
            model, f, kv, c, itl_sla_ms, sensitivity, accept_length, max_kv_tokens, seq_cap
        )

    return _sla_proposal(
        estimates,
        lambda c: _combine_checks(engine_check(f, c) for f in engines),
        n,
        itl_sla_ms,
        sensitivity,
        rule,
        min_endpoint,
        max_step,
    )


def sla_agg_proposals(
    model: AggPerfModel,
    fpms: Fpms,
    n: int,
    *,
    max_num_batched_tokens: int | None,
    ttft_sla_ms: float,
    itl_sla_ms: float,
    sensitivity: float,
    rule: ScaleDownRule,
    max_kv_tokens: int | None,
    kv_hit_rate: float | None,
    accept_length: float,
    min_endpoint: int,
    max_num_seqs: int | None = None,
    queue_aware: bool = False,
    max_step: int = 1,
    needs_both: bool = True,
) -> tuple[LoadProposal | None, LoadProposal]:
    """Agg TTFT and ITL sub-proposals (the TTFT one is ``None`` without
    ``max_num_batched_tokens``). A consolidation refusal proposes ``n`` (not ``None``) so
    :func:`combine_agg` never mistakes a veto for a missing signal; with ``needs_both`` (ours)
    so does any hold with estimates — a TTFT between ``sens × SLA`` and the SLA — so decode
    alone cannot scale down (§4.7: down only if BOTH agree). With ``queue_aware``
    (ours) the TTFT consolidation check also hands the survivors the queued decode KV."""
    if not model.has_sufficient_data() or n == 0:
        return None, LoadProposal(None, "insufficient_data")
    engines = list(fpms.values())

    prefill: LoadProposal | None = None
    if max_num_batched_tokens:
        mbt = max_num_batched_tokens
        estimates = []
        for f in engines:
            q, dkv = f.queued_requests.sum_prefill_tokens, f.scheduled_requests.sum_decode_kv_tokens
            e = _ms(model.estimate_next_ttft(q, mbt, dkv, kv_hit_rate))
            if e is not None:
                estimates.append(e)

        def ttft_check(f: ForwardPassMetrics, c: float) -> ScaleDownCheck:
            post_q = int(f.queued_requests.sum_prefill_tokens * c)
            # Spec §4.6: the scheduled decode KV grows by c. Ours (queue_aware): the survivor
            # also inherits the removed engine's queued decode KV.
            queued_dkv = f.queued_requests.sum_decode_kv_tokens if queue_aware else 0
            post_dkv = int((f.scheduled_requests.sum_decode_kv_tokens + queued_dkv) * c)
            own = _ms(model.estimate_next_ttft(0, mbt, post_dkv, kv_hit_rate))
            post = _ms(model.estimate_next_ttft(post_q, mbt, post_dkv, kv_hit_rate))
            return _ttft_check(post, own, ttft_sla_ms, sensitivity)

        proposal = _sla_proposal(
            estimates,
            lambda c: _combine_checks(ttft_check(f, c) for f in engines),
            n,
            ttft_sla_ms,
            sensitivity,
            rule,
            min_endpoint,
            max_step,
        )
        prefill = _hold_as_n(proposal, n, needs_both)

    # The ITL consolidation check has no steady-state (Little's law) variant here, unlike
    # decode's: that check needs a cost per request in flight (``itl = a + s·B``), and the agg
    # model fits wall time on prefill tokens and decode KV only (no ``num_decode_requests``).
    # So queue-aware agg checks the survivors' KV (queued prefill included) and batch slots.
    seq_cap = max_num_seqs if queue_aware else None

    def itl_check(f: ForwardPassMetrics, c: float) -> ScaleDownCheck:
        kv = decode_kv_load(f, include_queued_prefill=True)
        return _itl_consolidation_check(
            model, f, kv, c, itl_sla_ms, sensitivity, accept_length, max_kv_tokens, seq_cap
        )

    proposal = _sla_proposal(
        _itl_estimates(model, engines, accept_length, queue_aware),
        lambda c: _combine_checks(itl_check(f, c) for f in engines),
        n,
        itl_sla_ms,
        sensitivity,
        rule,
        min_endpoint,
        max_step,
    )
    return prefill, _hold_as_n(proposal, n, needs_both)


def _hold_as_n(proposal: LoadProposal, n: int, every_hold: bool) -> LoadProposal:
    """``proposal`` with a hold proposing ``n``: a consolidation refusal always, any hold
    with estimates when ``every_hold``."""
    refused = proposal.reason == "scale_down_refused_consolidation"
    held = every_hold and proposal.reason != "insufficient_data"
    if proposal.desired is None and (refused or held):
        return LoadProposal(n, proposal.reason, proposal.estimate_ms)
    return proposal


def combine_agg(prefill: LoadProposal | None, decode: LoadProposal, n: int) -> LoadProposal:
    """One agg count from the TTFT and ITL sub-proposals (§4.7): up if EITHER wants more,
    down only if BOTH agree (or decode alone when the prefill signal is unavailable).

    When both rules scale up, the larger step wins: with proportional steps
    (``max_load_step`` > 1, ours) the rule that is further over its target sets it. §4.7 reads
    "p if p > N, elif d": with the reference's +1 steps both are ``N + 1``, the same count.

    >>> up, down = LoadProposal(3, "scale_up"), LoadProposal(1, "scale_down")
    >>> combine_agg(down, up, 2).desired, combine_agg(down, down, 2).desired
    (3, 1)
    >>> combine_agg(up, LoadProposal(5, "scale_up"), 2).desired  # TTFT +1, ITL +3
    5
    >>> combine_agg(None, down, 2).desired
    1
    >>> hold = LoadProposal(2, "scale_down_refused_consolidation")
    >>> combine_agg(hold, down, 2)
    LoadProposal(desired=None, reason='scale_down_refused_consolidation', estimate_ms=None)
    """
    p = prefill.desired if prefill is not None else None
    d = decode.desired
    ups = [x for x in (p, d) if x is not None and x > n]
    if ups:
        return LoadProposal(max(ups), "scale_up")
    if p is None and d is not None and d < n:
        return LoadProposal(d, "scale_down")
    if p is not None and d is not None and p < n and d < n:
        return LoadProposal(max(p, d), "scale_down")
    reasons = [x.reason for x in (prefill, decode) if x is not None]
    if "scale_down_refused_consolidation" in reasons:
        return LoadProposal(None, "scale_down_refused_consolidation")
    if all(r == "insufficient_data" for r in reasons):
        return LoadProposal(None, "insufficient_data")
    return LoadProposal(None, "no_change")


# ---------------------------------------------------------------------------------------------
# Reasons (§4.7, §4.8)
# ---------------------------------------------------------------------------------------------


def settle_reason(
    *, current: int, proposal: LoadProposal, post_floor: int, final: int
) -> LoadReason:
    """Name the outcome for one role.

    ``proposal.desired`` (or ``current`` when it has no opinion) is what the rule wanted,
    ``post_floor`` that after the throughput lower bound, ``final`` after min endpoints and the
    GPU budget. Only a lift by the throughput floor counts as ``scale_down_capped_by_throughput``;
    when nothing changes, an informative rule reason (``insufficient_data``, a consolidation
    refusal, no FPM data) is kept instead of ``no_change``.

    >>> settle_reason(current=3, proposal=LoadProposal(2, "scale_down"), post_floor=3, final=3)
    'scale_down_capped_by_throughput'
    >>> settle_reason(current=2, proposal=LoadProposal(None, "insufficient_data"),
    ...               post_floor=2, final=2)
    'insufficient_data'
    """
    original = current if proposal.desired is None else proposal.desired
    floor_capped = post_floor > original and original < current
    if final > current:
        return "scale_up"
    if final < current:
        return "scale_down_capped_by_throughput" if floor_capped else "scale_down"
    if floor_capped:
        return "scale_down_capped_by_throughput"
    if proposal.reason in _INFORMATIVE:
        return proposal.reason
    return "no_change"


def aggregate_reason(reasons: Iterable[LoadReason], changed: bool) -> LoadReason:
    """The deployment-level reason from per-role reasons: by priority when something changes,
    else the first informative one (spec §4.7).

    >>> aggregate_reason(["no_change", "scale_up"], changed=True)
    'scale_up'
    >>> aggregate_reason(["no_change", "insufficient_data"], changed=False)
    'insufficient_data'
    """
    reasons = list(reasons)
    if not changed:
        for r in reasons:
            if r not in REASON_PRIORITY:
                return r
    return max(reasons, key=lambda r: REASON_PRIORITY.get(r, 0))
