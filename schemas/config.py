"""PlannerConfig (reference spec §9): the planner's settings for one deployment.

Names and defaults follow the reference (G3 names; the G2 names ``ttft``, ``itl``,
``load_adjustment_interval`` and ``throughput_adjustment_interval`` are accepted as aliases).
Fields marked *ours* go beyond the reference. Unknown fields are rejected so a typo never falls
back to a default silently; every error names the field it is about. A config file maps
deployment names to these (:mod:`schemas.config_file`).

Values are taken strictly: a boolean field takes ``true``/``false`` only (not ``"yes"``,
``"no"``, ``1``), and a number field takes a YAML/JSON number, not a string (``"50"``) — an
integer field not even ``8.0``. YAML and JSON both carry real numbers and the loader does no
environment substitution, so a quoted number is a typo or a templating slip; taking it lax
would make ``enable_load_scaling: "no"`` or ``itl_ms: "5O"`` mean something nobody wrote.

Time settings are bounded so that no config can stall or crash a run: the tick intervals
(``load_adjustment_interval_seconds``, ``throughput_adjustment_interval_seconds``) lie between
0.1 s and one day and are whole multiples of 10 ms (:data:`INTERVAL_LIMITS`); the other periods
and windows have limits named in their docstrings.

>>> PlannerConfig(ttft=300).ttft_ms
300.0
"""

from __future__ import annotations

import logging
import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from schemas.events import (
    MAX_ENGINE_GPUS,
    MAX_GPU_BUDGET,
    MAX_GPU_POWER_W,
    MAX_REPLICAS,
    MAX_SPECULATIVE_TOKENS,
    EngineCapabilities,
    ReplicaFloor,
    Replicas,
    Role,
    WorkerCapabilities,
    capabilities_implausibility,
)
from schemas.fpm import MAX_FPM_TOKENS

log = logging.getLogger(__name__)

Mode = Literal["disagg", "agg", "prefill", "decode"]
OptimizationTarget = Literal["sla", "throughput", "latency", "load"]
PredictorName = Literal["constant", "arima", "kalman", "holt_winters", "periodic", "selector"]

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
_BOOL = TypeAdapter(Annotated[bool, Strict()])

DAY_SECONDS = 86400.0
INTERVAL_LIMITS = (0.1, DAY_SECONDS, 0.01)
"""Shortest and longest tick interval and its resolution, in seconds. A deployment's tick window
is the gcd of its intervals (``flows.planner.window_seconds``): at 10 ms resolution it
is never shorter than 10 ms (at most 100 windows per second of event time; an interval under a
millisecond made it 0 and crashed the run), and 0.1 s is already shorter than a useful tick
(an engine reports a forward pass every few to a hundred milliseconds, a load tick needs
several). Above a day the planner would not decide within a day, and the history it keeps per
tick would grow without bound."""


CAPACITY_QUANTILES = (0.5, 0.9, 0.99)
"""The ISL/OSL quantiles traffic built from request records carries (keys ``p50``, ``p90``,
``p99``): the only values ``capacity_isl_quantile`` / ``capacity_osl_quantile`` take."""


def _capacity_quantile(value: float) -> float:
    if value not in CAPACITY_QUANTILES:
        allowed = ", ".join(f"{q:g}" for q in CAPACITY_QUANTILES)
        raise ValueError(
            f"must be one of {allowed} (the length quantiles request-derived traffic carries), "
            f"got {value!r}"
        )
    return value


CapacityQuantile = Annotated[float, AfterValidator(_capacity_quantile)]
"""A length quantile to size capacity for: one of :data:`CAPACITY_QUANTILES`."""


def _on_interval_grid(value: float) -> float:
    low, high, step = INTERVAL_LIMITS
    if not low <= value <= high:
        raise ValueError(f"must be between {low:g} s and {high:g} s (one day), got {value!r}")
    steps = value / step
    if abs(steps - round(steps)) > 1e-6:
        raise ValueError(
            f"must be a whole number of {step * 1000:g} ms (the tick window is the gcd of the "
            f"intervals), got {value!r}"
        )
    return value


Interval = Annotated[float, Field(allow_inf_nan=False), AfterValidator(_on_interval_grid)]
"""A tick interval in seconds: see :data:`INTERVAL_LIMITS`."""

EngineGpus = Annotated[int, Field(ge=1, le=MAX_ENGINE_GPUS)]
"""GPUs of one replica: 1 to ``MAX_ENGINE_GPUS``, as a ``capabilities`` event's ``num_gpu``."""

MAX_MODEL_SAMPLES = 100_000
"""The most forward passes a perf model may keep, need or take from an engine a tick, and the
most points a predictor may wait for (``max_num_fpm_samples``, ``fpm_sample_bucket_size``,
``load_min_observations``, ``fpm_samples_per_engine_per_tick``, ``kalman_min_points``): far
above any useful setting (the defaults are 5–64), and a bound on the memory they hold."""

ModelSamples = Annotated[int, Field(ge=1, le=MAX_MODEL_SAMPLES)]
"""A count of samples or points: 1 to :data:`MAX_MODEL_SAMPLES`."""

ReplicaStep = Annotated[int, Field(ge=1, le=MAX_REPLICAS)]
"""The most replicas one decision may move a role (``max_load_step``,
``max_throughput_scaling_replicas``): at most ``MAX_REPLICAS``, the most any role has (an
inventory reporting more is refused)."""


def _plausible_capabilities(caps: WorkerCapabilities) -> WorkerCapabilities:
    """The capabilities a ``capabilities`` event could carry (``capabilities_implausibility``):
    the config's stand in for the engines' until they report, so the same ceilings hold."""
    problem = capabilities_implausibility(caps)
    if problem is not None:
        raise ValueError(problem)
    return caps


REFERENCE_BEHAVIOUR: dict[str, Any] = {
    "scale_down_rule": "flat",
    "queue_aware_estimates": False,
    "agg_scale_down_needs_both": False,
    "bootstrap_within_engine_limits": False,
    "in_progress_guard": "deployment",
    "max_load_step": 1,
    "scale_down_stabilization_seconds": 0.0,
    "prefill_capacity_batching": False,
    "load_rate_window_seconds": 0.0,
    "perf_model_basis": "linear",
    "fpm_samples_per_engine_per_tick": 1,
    "perf_model_suspect_factor": None,
    "load_hold_applies_floors": False,
    "forecast_plausibility_factor": None,
    "arima_refits": False,
    "length_forecast_floor_windows": None,
    "gpu_budget_rule": "pair_clamp",
    "zero_demand_to_min_endpoint": False,
    "capacity_isl_quantile": None,
    "capacity_osl_quantile": None,
}
"""The reference planner's value of every behavioural field marked *ours* (flat sensitivity
scale-down of spec §4.5 — what the reference documents — and its estimates)."""


def _alias_properties(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """The config's JSON Schema takes what :func:`load_config` takes: each alias of a field
    (``ttft``, ``itl``, ``load_adjustment_interval``, ``throughput_adjustment_interval``) is a
    property with the field's type and bounds, and a field named both ways is refused (the
    loader refuses the alias then, as an unknown field), so a config editor offers and accepts
    both names."""
    properties, exclusive = schema["properties"], []
    for name, field in model.model_fields.items():
        choices = field.validation_alias
        aliases = choices.choices if isinstance(choices, AliasChoices) else []
        for alias in (a for a in aliases if isinstance(a, str) and a != name):
            shape = {k: v for k, v in properties[name].items() if k not in ("default", "title")}
            properties[alias] = shape | {"description": f"alias of {name}"}
            exclusive.append({"not": {"required": [name, alias]}})
    if exclusive:
        schema["allOf"] = exclusive


class PlannerConfig(BaseModel):
    """Planner settings of one deployment.

    >>> cfg = PlannerConfig(mode="decode", optimization_target="sla", enable_load_scaling=True,
    ...                     enable_throughput_scaling=False, itl_ms=25)
    >>> cfg.min_endpoint_for("decode"), cfg.load_adjustment_interval_seconds
    (1, 5.0)
    """

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        strict=True,
        json_schema_extra=_alias_properties,
    )

    # --- core (§9.1) ---
    mode: Mode = "disagg"
    """Engines the deployment runs (spec §9.1): ``disagg`` (prefill and decode engines),
    ``agg`` (engines doing both), ``prefill`` or ``decode`` (one role planned alone)."""
    optimization_target: OptimizationTarget = "throughput"
    """How the load loop judges engines (spec §4.1): ``sla`` (estimated TTFT/ITL from the learned
    perf models against ``ttft_ms``/``itl_ms``), ``throughput``/``latency`` (fixed thresholds,
    no regression), ``load`` (the queue and KV thresholds below). The last three force the load
    loop on and the throughput loop off."""
    enable_throughput_scaling: bool = True
    """The predictive loop: forecast demand every throughput interval and size for it (alone it
    decides; with the load loop it sets floors, reason ``set_lower_bound``)."""
    enable_load_scaling: bool = False
    """The reactive loop: every load interval, step replicas from the engines' queues and the
    latencies their forward passes imply."""
    ttft_ms: Positive = Field(500.0, validation_alias=AliasChoices("ttft_ms", "ttft"))
    """Time-to-first-token target, ms."""
    itl_ms: Positive = Field(50.0, validation_alias=AliasChoices("itl_ms", "itl"))
    """Inter-token latency target, ms."""
    advisory: bool = False
    """Compute, log and export this deployment's decisions (``-``, files, ``kafka://``, the
    metrics) but never apply them: a ``dgd://`` or ``virtual+kafka://`` output does not get
    them (spec §9.1). The closed-loop simulator applies them all the same."""

    # --- perf model / profiling (§9.2) ---
    profile_results_dir: str | None = None
    """A pre-deployment profile (``raw_data.npz`` or its JSON form) that bootstraps the perf
    models (spec §6). The reference defaults to ``"profiling_results"``; ours is ``None`` (no
    profile unless one is named), so a run never depends on what its working directory holds."""
    self_benchmark_file: str | None = None
    """*ours*: a JSON file of a worker's self-benchmark (its ``get_perf_metrics`` answer, spec
    §6.3 priority 1); when set, it bootstraps the perf models instead of
    ``profile_results_dir``. The reference asks the live worker; a file can be recorded once
    per engine configuration and reviewed."""
    prefill_engine_num_gpu: EngineGpus | None = None
    """GPUs of one prefill replica (for the GPU budget and GPU-hours) where the workers'
    capabilities do not say; ``None``: unknown. At most ``MAX_ENGINE_GPUS`` (4096), as in a
    ``capabilities`` event."""
    decode_engine_num_gpu: EngineGpus | None = None
    """GPUs of one decode (or agg) replica, as for prefill."""
    capabilities: Annotated[WorkerCapabilities, AfterValidator(_plausible_capabilities)] | None = (
        None
    )
    """*ours*: the engines' limits per role (``max_num_batched_tokens``, ``max_kv_tokens``,
    ``max_num_seqs``, ...) until a ``capabilities`` event says otherwise (a field it names
    replaces the configured one; the fields it leaves out stay as configured). The reference
    reads them from each worker's model card; a live run on ZMQ inputs alone has no such card,
    and without ``max_num_batched_tokens`` the prefill load rule reports ``insufficient_data``
    (spec §4.2). Held to the ceilings of a ``capabilities`` event
    (``schemas.events.capabilities_implausibility``)."""
    perf_model_basis: Literal["linear", "piecewise"] = "linear"
    """*ours*: shape of the SLA perf models' fit. ``linear``: one least-squares slope per
    feature (the reference). ``piecewise``: the prefill model fits TTFT as a continuous,
    non-decreasing piecewise-linear function of the tokens (knots at evenly spaced order
    statistics of the retained samples, up to ``fpm_sample_bucket_size`` segments; exact
    least squares under monotonicity), which reproduces a profile's ~20 ms floor and
    super-linear growth; decode and agg models stay linear. Reference: ``linear``. Default
    ``linear`` by measurement: in closed-loop replays (azure conv / code traces ×20, shipped
    H200 profile) our planner's attainment and GPU-hours were unchanged within 0.1 pp / 0.4 %
    (the load and rate signals decide there, not the fitted prefill curve)."""
    perf_model_suspect_factor: Annotated[float, Field(gt=1, allow_inf_nan=False)] | None = 4.0
    """*ours*: a forward pass whose wall time is more than this many times what the perf model
    predicts for it (or less than its inverse) is learned only once a second such pass, on the
    same side, confirms it within ``max_num_fpm_samples`` passes; unconfirmed ones are set
    aside and counted (``flowplanner_perf_samples_set_aside_total``). A lone stall or wrong unit
    then cannot reject or bend the fit (two within that window are learned, as a change of
    speed would be), while a real change of engine speed still comes through. Reference:
    ``None`` (every forward pass is learned)."""

    # --- throughput scaling (§9.3) ---
    throughput_adjustment_interval_seconds: Interval = Field(
        180.0,
        validation_alias=AliasChoices(
            "throughput_adjustment_interval_seconds", "throughput_adjustment_interval"
        ),
    )
    """Seconds between throughput ticks (spec §9.3): 0.1 s to one day, a whole number of 10 ms
    (:data:`INTERVAL_LIMITS`)."""
    max_throughput_scaling_replicas: ReplicaStep = 8
    """Spec §5.4: one throughput observation moves a role at most this many replicas from its
    ready count (the endpoint floor may exceed it); at most ``MAX_REPLICAS``."""
    throughput_metrics_source: Literal["frontend", "router"] = "frontend"
    """Which metric names the Prometheus traffic input queries (spec §10.2): the frontend's
    ``dynamo_frontend_*`` or the router's."""
    load_predictor: PredictorName = "arima"
    """Spec §7; ``periodic`` (a short cycle found in the series' autocorrelation) is *ours*, and
    ``selector`` mixes every other kind (:mod:`operators.predictors.selector`)."""
    load_predictor_log1p: bool = False
    """Forecast ``log1p`` of the load and transform back (spec §7): ``arima``, ``kalman`` and
    ``holt_winters`` (Prophet's stand-in, as the reference's Prophet does), also inside the
    ``selector``; ``periodic`` (ours) models the raw load either way."""
    load_predictor_warmup_trace: str | None = None
    """A trace file, a glob or a directory of ``*.jsonl``/``*.jsonl.gz`` traces (spec §7.6)
    whose requests warm the load predictors before live data."""
    kalman_q_level: NonNegative = 1.0
    """Kalman process variance of the level (spec §7.4)."""
    kalman_q_trend: NonNegative = 0.1
    """Kalman process variance of the trend."""
    kalman_r: NonNegative = 10.0
    """The Kalman variances; 0 is allowed, as in the reference, which floors them at 1e-12
    (``q_level``, ``q_trend``) and 1e-9 (``r``) (spec §7.4)."""
    kalman_min_points: ModelSamples = 5
    """Points the Kalman predictor needs before it forecasts (until then: the last value)."""
    arima_refits: bool = True
    """*ours*: the ARIMA predictor searches its order again from time to time (each time its
    history doubles while it fills, every 48 points, and when its standardised one-step errors
    since the last fit have a mean square above 4: twice their expected size), on its last 200
    points. Reference: ``False`` (spec §7.3: one order search, once five points are in, then
    each new point only updates that model's parameters, a few optimiser steps as pmdarima's
    ``update``)."""
    length_forecast_floor_windows: Annotated[int, Field(ge=1, le=10_000)] | None = 10
    """*ours*: when requests are forecast, an ISL or OSL forecast is at least the shortest of
    the last this many observed (a trend model overshooting a fall in prompt length forecast
    16 tokens, then 0: prefill sized for 16-token prompts, then a tick held as
    ``model_not_ready``). Reference: ``None`` (the forecast as it is, clamped at 0)."""
    forecast_plausibility_factor: Annotated[float, Field(gt=1, allow_inf_nan=False)] | None = 3.0
    """*ours*: a load predictor's forecast above this many times the largest of its last 48
    values is taken for a model failure (an exploding fit) and the last value is forecast
    instead. Reference: ``None`` (the model's forecast is used as it is, clamped at 0)."""
    seasonal_period_seconds: Annotated[
        float, Field(gt=0, le=31 * DAY_SECONDS, allow_inf_nan=False)
    ] = 86400.0
    """*ours*: season length of the Holt-Winters predictor (replaces Prophet), at most 31 days:
    the predictor keeps four seasons of throughput ticks and needs two before it uses one, so a
    longer season would never be used and its history would grow without bound."""
    capacity_isl_quantile: CapacityQuantile | None = None
    """*ours*: size capacity for this ISL quantile instead of the mean (off by default): the
    forecast mean ISL times the quantile-to-mean ratio of the latest window that carried
    requests. One of 0.5, 0.9, 0.99 (:data:`CAPACITY_QUANTILES`), the quantiles the planner
    computes from request records; any other value is refused. Traffic read from Prometheus
    (or a traffic event without ``isl_quantiles``) carries no quantiles, and capacity is then
    sized for the mean, as with this option off."""
    capacity_osl_quantile: CapacityQuantile | None = None
    """*ours*: size capacity for this OSL quantile instead of the mean (off by default); as
    ``capacity_isl_quantile`` (0.5, 0.9 or 0.99; the mean for traffic without quantiles)."""
    zero_demand_to_min_endpoint: bool = True
    """*ours*: a throughput tick whose forecast is zero requests sizes every role at its
    minimum endpoint count whatever the perf models answer (reason ``scale``, or the lower
    bounds with load scaling on). Reference: ``False`` — a deployment idle since it started
    has no ISL/OSL to forecast (spec §7.1: leading idle windows seed nothing, so the forecast
    lengths are 0), the capacity query answers 0 for a zero length (§3.3, §3.4), and the tick
    holds the current counts as ``model_not_ready`` (§5.3, §5.4) even with trained models: a
    fleet idle from the start never scales down (§17, pain point 3)."""

    # --- load scaling (§9.4) ---
    load_adjustment_interval_seconds: Interval = Field(
        5.0,
        validation_alias=AliasChoices(
            "load_adjustment_interval_seconds", "load_adjustment_interval"
        ),
    )
    """Seconds between load ticks (spec §9.4): 0.1 s to one day, a whole number of 10 ms
    (:data:`INTERVAL_LIMITS`)."""
    max_num_fpm_samples: ModelSamples = 64
    """Forward passes each perf model keeps (spec §3.1), spread over its buckets."""
    fpm_sample_bucket_size: ModelSamples = 16
    """Buckets the perf model spreads its samples over; a perfect square (spec §3.1)."""
    load_scaling_down_sensitivity: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = 80
    """A scale-down needs the latency estimates under this percent of the SLA: every engine's
    now (``flat``, spec §4.5) or each survivor's after it (``consolidation``, §4.6; for TTFT its
    queueing part, under this percent of what the SLA leaves after the request's own prefill);
    0 never scales down."""
    load_min_observations: ModelSamples = 5
    """Forward passes a perf model needs before the load loop uses it (else
    ``insufficient_data``); at most ``max_num_fpm_samples``, which is all a model keeps."""
    prefill_scale_up_queue_tokens: Annotated[int, Field(ge=0, le=MAX_FPM_TOKENS)] | None = None
    """``optimization_target: load`` (spec §4.3): a prefill replica is added when ANY engine
    has at least this many prompt tokens queued. Required with that target when the mode has
    a prefill role; must be above ``prefill_scale_down_queue_tokens``."""
    prefill_scale_down_queue_tokens: Annotated[int, Field(ge=0, le=MAX_FPM_TOKENS)] | None = None
    """``optimization_target: load``: a prefill replica is removed when ALL engines have at
    most this many prompt tokens queued (and there are at least two)."""
    decode_scale_up_kv_rate: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] | None = (
        None
    )
    """``optimization_target: load``: percent (0–100) of ``max_kv_tokens`` at which ANY decode
    (or agg) engine's KV load — scheduled + queued decode KV, agg also queued prompt tokens —
    adds a replica. Required with that target in decode, agg and disagg mode; must be above
    ``decode_scale_down_kv_rate``."""
    decode_scale_down_kv_rate: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] | None = (
        None
    )
    """``optimization_target: load``: percent (0–100) at or below which ALL decode (or agg)
    engines' KV load removes a replica (when there are at least two)."""
    speculative_nextn: Annotated[int, Field(ge=0, le=MAX_SPECULATIVE_TOKENS)] = 0
    """Speculative tokens per decode step when the engines do not say (spec §5.5); at most
    ``MAX_SPECULATIVE_TOKENS`` (1024), as in a ``capabilities`` event."""
    scale_down_rule: Literal["consolidation", "flat"] = "consolidation"
    """*ours* (as a switch): ``consolidation`` = spec §4.6 (default), ``flat`` = spec §4.5."""
    queue_aware_estimates: bool = True
    """*ours*: decode/agg ITL estimates include the wait for a batch slot, and a scale-down
    must leave every survivor within its ``max_num_seqs`` (the reference sees neither)."""
    agg_scale_down_needs_both: bool = True
    """*ours*: an aggregated deployment scales down only when both its TTFT and its ITL rule
    agree (the design's rule, spec §4.7). The reference treats a TTFT rule that holds without
    a consolidation refusal — a TTFT between ``sens × SLA`` and the SLA — as a missing signal
    and lets the ITL rule scale down alone, into a TTFT over its target."""
    fpm_samples_per_engine_per_tick: ModelSamples = 8
    """*ours*: how many of an engine's forward passes in a tick window train the perf model
    (evenly spaced; an aggregated engine trains on the window's mean pass instead). Reference:
    ``1``, which means what the reference does: each load tick trains on every engine's latest
    FPM, once, whatever it is (an idle heartbeat only moves the moving averages)."""
    bootstrap_within_engine_limits: bool = True
    """*ours*: once the engines' ``max_num_seqs`` / ``max_num_batched_tokens`` /
    ``max_kv_tokens`` are known, drop the profile (bootstrap) samples no forward pass of these
    engines can have, e.g. decode batches beyond ``max_num_seqs`` (a self-benchmark pass, one
    the engine ran, is held to the scheduler limits only, as live passes are). Never below
    ``load_min_observations`` samples: the dropped points nearest the limits stay, as few as
    make up the minimum, with a warning. Reference: ``False`` (every profile point stays in the
    perf model)."""
    in_progress_guard: Literal["deployment", "role"] = "role"
    """*ours*: what a scale still in flight (expected != ready) blocks. ``role``: that role
    takes no new load step until it lands, the other role of a disagg deployment still moves.
    Reference: ``deployment`` (either role in flight blocks both, spec §4.2)."""
    max_load_step: ReplicaStep = 3
    """*ours*: most replicas the SLA load rule may add to a role in one tick (the throughput
    lower bound and the minimum endpoints may lift it further); above 1 the step is
    proportional to how far the least loaded engine is above the SLA (and to the recent
    request rate, see ``load_rate_window_seconds``); in agg mode, when both the TTFT and the
    ITL rule scale up, the larger step is taken. Reference: 1."""
    scale_down_stabilization_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 300.0
    """*ours*: an SLA load scale-down of a role needs this long in which every load tick wanted
    it and nothing changed the role (the window starts at the run's first load tick); the
    recent-rate floor is the highest of this window. A throughput-only deployment scales a role
    down no lower than the highest sizing of the throughput ticks within this window. 300 s is
    Kubernetes HPA's default downscale stabilization; against 120 s it cost 1–5 % more
    GPU-hours on smooth traffic and bought 4–13 points of SLA attainment on bursty traffic, with
    a fifth of the reversals (README, closed-loop benchmark). Reference: 0."""
    prefill_capacity_batching: bool = True
    """*ours*: a prefill engine's capacity counts the prompts it packs into one forward pass
    (up to ``max_num_batched_tokens`` / ``max_num_seqs``, within the TTFT SLA), as the
    reference's newer capacity search does; ``False`` (the G2 reference): one prompt per pass."""
    load_rate_window_seconds: Annotated[float, Field(ge=0, le=DAY_SECONDS, allow_inf_nan=False)] = (
        30.0
    )
    """*ours*: SLA load ticks also read the request rate of the last this-many seconds and size
    each role for it with the throughput loop's capacity model: a role that cannot carry it
    even at full capacity scales up now (at most ``max_load_step``), before its queues show
    it; a role that can carry it answers a latency spike (a burst's queue) with one replica
    (or, up to ``max_load_step``, as many as keep it within ``load_rate_utilization``), not a
    proportional step; a scale-down must leave every survivor within
    ``load_rate_utilization`` of its capacity. Reference: 0 (off; load ticks see only the
    engines' forward passes). At most one day: the planner keeps this much request history
    per tick window (a longer window crashed the run allocating it)."""
    load_rate_utilization: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.9
    """*ours*: the highest share of its capacity a load scale-down may leave each surviving
    engine at the recent request rate, and the share a latency spike's scale-up sizes for (used
    when ``load_rate_window_seconds > 0``)."""
    load_hold_applies_floors: bool = True
    """*ours*: in prefill-only and decode-only modes, a load tick whose rule keeps the count
    (no change, insufficient data, a refused scale-down) still lifts the role to its
    throughput lower bound and minimum endpoint, as the reference does in disagg and agg mode.
    In every mode, a role with no replicas ready or starting (so no forward passes) is held
    at zero and lifted to its floors too, even when no role has forward passes. Reference:
    ``False`` (spec §4.7: in prefill-only and decode-only modes such a tick makes no decision,
    so the throughput floor acts only on ticks where the load rule proposes a count. Without
    forward passes the reference decides nothing, so a prefill-only, decode-only or agg role
    at zero replicas stays there, as do both roles of a disagg pair when neither has any; a
    disagg role at zero whose other role has forward passes keeps its count and is lifted to
    its floors, as here)."""

    # --- budget / endpoints (§9.5) ---
    max_gpu_budget: Annotated[int, Field(ge=-1, le=MAX_GPU_BUDGET)] = 8
    """Most GPUs the deployment may use (replicas × GPUs per replica over its roles); -1 is
    off. A hard ceiling under either ``gpu_budget_rule``. At most
    ``MAX_GPU_BUDGET`` (every replica at its most GPUs), as in a ``limits`` event."""
    min_gpu_budget: Annotated[int, Field(ge=-1, le=MAX_GPU_BUDGET)] = -1
    """Fewest GPUs the deployment should keep (spec §8.2, the current reference tree); -1
    (the default) is off. Only ``gpu_budget_rule="band"`` reads it: it holds
    load scale-downs at the floor and reconciles a fleet below it, relaxed by the largest GPUs
    per replica while ``max_gpu_budget`` is on too (whole replicas cannot always land on it; with
    no ceiling the floor is exact); it never raises a throughput lower bound."""
    gpu_budget_rule: Literal["band", "pair_clamp"] = "band"
    """*ours* (as a switch): how targets are fitted to the GPU budget. ``band`` (default) is the
    current reference tree's budget band (spec §8.2, ``operators.budget_band``): a budget may
    shrink a scaling move but never reverse it — a scale-up at a full budget is held
    (``gpu_budget_guard_hold``) unless it is an opposing rebalance whose both legs fit, the
    clamp never grows a role nobody asked to grow, and a fleet already out of band is
    reconciled (``gpu_budget_reconcile``, may pick a donor). A role below its minimum endpoint
    is lifted to it with the rest of the proposed move, so a budget that does not bind changes
    nothing; such a move the band cannot fund is clamped into it (``gpu_budget_reconcile``),
    never below what reconciling the fleet gives. Throughput targets keep only the funded part
    of a move. A budget the engines' reported GPUs per replica make unable to fund the minimum
    endpoints (the config is refused at start only for the GPUs it names) scales the deployment
    to 0 in the spec (§8.1, §8.2); the band instead takes what the minimum endpoints need as
    its ceiling, so the fleet keeps its minimum endpoints and no more, and a warning names the
    deployment, the budget and that need. ``pair_clamp`` is spec §8.1 (G2): scale
    the pair proportionally under ``max_gpu_budget`` (decode may grow into what prefill
    leaves), no floor, and 0 replicas when the budget cannot fund the minimum endpoints.
    Reference: ``pair_clamp`` — the reference algorithm this project is measured
    against is the older generation (flat scale-down §4.5, §8.1 budget). The band is our
    default because with ``min_gpu_budget`` off it differs only when the ceiling binds, where it
    refuses the reversals and invented donors the pair clamp makes. In the test suite the one
    decision it moves is a throughput-only pair sized (2, 3) from (1, 1) under 4 GPUs: (2, 2)
    instead of (1, 3), so a fleet limited by its slower role serves 2/3 of the demand, not 1/2;
    a scale-up the ceiling refuses is now reported as ``gpu_budget_guard_hold``, not
    ``no_change``."""
    enable_power_awareness: bool = False
    """Keep the deployment's projected GPU power (replicas × GPUs per replica × each GPU's
    ``gpu_power_limit_w`` capability, which a DGD's ``dynamo.nvidia.com/gpu-power-limit`` pod
    annotation supplies) within ``total_gpu_power_limit`` (spec §8.2): scale-ups are cut to
    what the limit leaves (reason ``power_budget_clamp``), scale-downs always pass
    (:mod:`operators.power_budget`). The reference accepts it only on Kubernetes and not in
    agg mode; ours takes the caps from any capabilities source (the DGD, a recorded stream,
    ``capabilities`` in this config) and works in every mode."""
    total_gpu_power_limit: (
        Annotated[int, Field(ge=1, le=MAX_GPU_BUDGET * MAX_GPU_POWER_W)] | None
    ) = None
    """Watts the deployment's GPUs may draw at their caps; required by, and only read with,
    ``enable_power_awareness``. At most what ``MAX_GPU_BUDGET`` GPUs draw at
    ``MAX_GPU_POWER_W``."""
    min_endpoint: ReplicaFloor = 1
    """Fewest replicas of each role any decision leaves (spec §9.5); at most ``MAX_REPLICAS``
    (65 536), the most an inventory may report (a higher floor would be decided every tick and
    never seen reached), as in a ``limits`` event. So are the role floors below."""
    prefill_min_endpoint: Replicas | None = None
    """Fewest prefill replicas, in place of ``min_endpoint``."""
    decode_min_endpoint: Replicas | None = None
    """Fewest decode replicas, in place of ``min_endpoint`` (disagg and decode modes; agg
    engines take ``min_endpoint`` only, and a config that sets this in agg mode is refused,
    spec §8.3)."""

    # --- event time (ours) ---
    allowed_lateness_seconds: Annotated[float, Field(ge=0, le=DAY_SECONDS, allow_inf_nan=False)] = (
        0.0
    )
    """*ours*: how far behind the newest event an input may arrive and still be used; at most
    one day (the windows stay open that long; far beyond it the run crashed)."""

    engine_silence_seconds: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 3.0
    """*ours*: an engine silent this long (heartbeats come every second) is gone; its last
    forward pass no longer counts. At least 1 s: a shorter silence would declare every idle
    engine gone between two of its heartbeats."""

    # --- actuation (§9.10) ---
    scaling_max_wait_seconds: Positive = 1800.0
    """Virtual connector: proceed without an acknowledgement after this long."""

    # --- exporter and diagnostics (§9.6, §9.7) ---
    control_api_port: Annotated[int, Field(ge=0, le=65535)] = 0
    """Port of the control API of a live ``flowplanner run`` (127.0.0.1 only; change replica
    floors and GPU budgets while it runs: :mod:`connectors.control_api`). *Ours*: 0, off — the
    reference serves 9086 unless told 0; here ``--control-port`` or this field asks for it."""
    metric_reporting_prometheus_port: Annotated[int, Field(ge=0, le=65535)] = 0
    """Port of the Prometheus exporter of ``flowplanner run`` (0: off unless
    ``--metrics-port`` or ``PLANNER_PROMETHEUS_PORT`` says; spec §9.6)."""
    report_interval_hours: Annotated[float, Field(ge=0.01, allow_inf_nan=False)] | None = 24.0
    """Hours of tick time per diagnostics report page (spec §9.7), at least 0.01 h (36 s): a
    shorter one wrote a page for every tick or two; ``None`` writes one page at the end."""
    report_output_dir: str = "./planner_reports"
    """Where ``--reports`` writes its pages (created if missing)."""

    @model_validator(mode="before")
    @classmethod
    def _easy_targets_force_flags(cls, data: Any) -> Any:
        # throughput/latency/load targets are threshold modes: load on, throughput off (§4.1).
        # The reference warns when that changes a flag the config set; so do we.
        if isinstance(data, dict) and data.get("optimization_target", "throughput") != "sla":
            forced = {"enable_load_scaling": True, "enable_throughput_scaling": False}
            ignored = []
            for flag, value in forced.items():
                if flag in data:  # forced below, but a wrong type is still the user's mistake
                    try:
                        given = _BOOL.validate_python(data[flag])
                    except ValidationError:
                        raise ValueError(
                            f"{flag} should be a boolean, got {data[flag]!r}"
                        ) from None
                    if given != value:
                        ignored.append(f"{flag}: {str(given).lower()}")
            if ignored:
                log.warning(
                    "optimization_target %s ignores %s (it scales on load thresholds only; "
                    "optimization_target: sla runs the SLA loops)",
                    data.get("optimization_target", "throughput"),
                    ", ".join(ignored),
                )
            data = {**data, **forced}
        return data

    @model_validator(mode="after")
    def _check(self) -> PlannerConfig:
        buckets = self.fpm_sample_bucket_size
        if math.isqrt(buckets) ** 2 != buckets:
            raise ValueError(f"fpm_sample_bucket_size must be a perfect square, got {buckets}")
        if self.load_min_observations > self.max_num_fpm_samples:
            # A perf model keeps at most max_num_fpm_samples: it could never be ready.
            raise ValueError(
                f"load_min_observations {self.load_min_observations} is above "
                f"max_num_fpm_samples {self.max_num_fpm_samples}: a perf model keeps at most "
                "max_num_fpm_samples forward passes, so it could never have enough to fit"
            )
        if not (self.enable_load_scaling or self.enable_throughput_scaling):
            raise ValueError(
                "enable_load_scaling and enable_throughput_scaling are both false: "
                "at least one scaling loop must be on"
            )
        if (
            self.enable_load_scaling
            and self.enable_throughput_scaling
            and self.load_adjustment_interval_seconds >= self.throughput_adjustment_interval_seconds
        ):
            raise ValueError(
                "load_adjustment_interval_seconds must be < throughput_adjustment_interval_seconds "
                "when both loops are on"
            )
        roles = self.roles
        for field, role in (("prefill_min_endpoint", "prefill"), ("decode_min_endpoint", "decode")):
            if getattr(self, field) is not None and (self.mode == "agg" or role not in roles):
                raise ValueError(f"{field} is set but mode {self.mode!r} has no {role} role")
        self._check_load_thresholds()
        # Below the minimum endpoints' GPUs the budget clamp scales the deployment to zero
        # (spec §8.1/§8.2); a replica has at least one GPU (or the capabilities' or
        # *_engine_num_gpu's count), so such a budget is never feasible.
        floor = sum(
            self.min_endpoint_for(role) * (self.configured_gpus_per_replica(role) or 1)
            for role in roles
        )
        if 0 <= self.max_gpu_budget < floor:
            raise ValueError(
                f"max_gpu_budget {self.max_gpu_budget} is below the {floor} GPUs the minimum "
                "endpoints need (min_endpoint/prefill_min_endpoint/decode_min_endpoint × GPUs "
                "per replica); raise it, lower the minimums, or set -1 for no budget"
            )
        if 0 <= self.max_gpu_budget < self.min_gpu_budget:
            raise ValueError(
                f"min_gpu_budget {self.min_gpu_budget} is above max_gpu_budget "
                f"{self.max_gpu_budget}: the band would be empty"
            )
        self._check_power()
        if self.min_gpu_budget >= 0 and self.gpu_budget_rule != "band":
            raise ValueError(
                f"min_gpu_budget {self.min_gpu_budget} needs gpu_budget_rule 'band' "
                f"(the {self.gpu_budget_rule!r} rule has no floor); set -1 or use 'band'"
            )
        return self

    def _check_power(self) -> None:
        """The power budget needs its limit, and the limit must fund the minimum endpoints and
        the GPU floor when the config itself names their GPUs and caps."""
        limit = self.total_gpu_power_limit
        if not self.enable_power_awareness:
            if limit is not None:
                raise ValueError(
                    "total_gpu_power_limit is set but enable_power_awareness is false: "
                    "enable it, or remove the limit"
                )
            return
        if limit is None:
            raise ValueError("enable_power_awareness needs total_gpu_power_limit (watts, >= 1)")
        endpoints_w, caps_w, gpus_per_replica = 0, [], []
        for role in self.roles:
            caps = getattr(self.capabilities, role, None) or EngineCapabilities()
            gpus = self.configured_gpus_per_replica(role)
            if gpus is None or caps.gpu_power_limit_w is None:
                return
            endpoints_w += self.min_endpoint_for(role) * gpus * caps.gpu_power_limit_w
            caps_w.append(caps.gpu_power_limit_w)
            gpus_per_replica.append(gpus)
        if limit < endpoints_w:
            raise ValueError(
                f"total_gpu_power_limit {limit} W is below the {endpoints_w} W the minimum "
                "endpoints draw at their configured caps; raise it or lower the minimums"
            )
        if self.min_gpu_budget >= 0:  # the band's floor, relaxed as the band relaxes it
            slack = max(gpus_per_replica) if self.max_gpu_budget >= 0 else 0
            floor_w = (self.min_gpu_budget - slack) * min(caps_w)
            if limit < floor_w:
                raise ValueError(
                    f"total_gpu_power_limit {limit} W is below the {floor_w} W the GPUs of "
                    f"min_gpu_budget {self.min_gpu_budget} draw at the lowest configured cap; "
                    "raise it or lower min_gpu_budget"
                )

    def _check_load_thresholds(self) -> None:
        """The ``load`` target's thresholds (spec §4.3, §9.4): each pair is required for a role
        the mode has, refused for one it lacks or under another target, and up > down."""
        pairs = {
            "prefill": ("prefill_scale_up_queue_tokens", "prefill_scale_down_queue_tokens"),
            "decode": ("decode_scale_up_kv_rate", "decode_scale_down_kv_rate"),
        }
        for role, (up_field, down_field) in pairs.items():
            up, down = getattr(self, up_field), getattr(self, down_field)
            given = [f for f in (up_field, down_field) if getattr(self, f) is not None]
            if self.optimization_target != "load":
                if given:
                    raise ValueError(
                        f"{given[0]} is set but optimization_target is "
                        f"{self.optimization_target!r}: it applies to optimization_target 'load' "
                        "only"
                    )
                continue
            if role not in self.roles:
                if given:
                    raise ValueError(f"{given[0]} is set but mode {self.mode!r} has no {role} role")
                continue
            missing = [f for f in (up_field, down_field) if getattr(self, f) is None]
            if missing:
                raise ValueError(
                    f"optimization_target 'load' in mode {self.mode!r} needs "
                    f"{' and '.join(missing)} (the {role} role scales on them)"
                )
            if not up > down:
                raise ValueError(
                    f"{up_field} ({up:g}) must be greater than {down_field} ({down:g})"
                )

    def reference_variant(self) -> PlannerConfig:
        """This config with every behaviour of ours set back to the reference planner's
        (:data:`REFERENCE_BEHAVIOUR`). Our predictors (``periodic``, ``selector``) become the
        reference default ``arima`` (``holt_winters`` stays: it stands in for Prophet), and
        ``min_gpu_budget`` is turned off, since the reference's pair clamp (§8.1) has no floor.
        The result is validated like any config.

        >>> ours = PlannerConfig(load_predictor="selector", max_gpu_budget=16, min_gpu_budget=4)
        >>> ref = ours.reference_variant()
        >>> ref.scale_down_rule, ref.load_predictor, ref.min_gpu_budget
        ('flat', 'arima', -1)
        """
        update: dict[str, Any] = {**REFERENCE_BEHAVIOUR, "min_gpu_budget": -1}
        if self.load_predictor in ("periodic", "selector"):
            update["load_predictor"] = "arima"
        return PlannerConfig.model_validate({**self.model_dump(), **update})

    @property
    def roles(self) -> tuple[Role, ...]:
        """Roles this deployment scales (agg engines are carried as ``decode``)."""
        roles: dict[str, tuple[Role, ...]] = {
            "disagg": ("prefill", "decode"),
            "prefill": ("prefill",),
        }
        return roles.get(self.mode, ("decode",))

    @property
    def sla_mode(self) -> bool:
        """True for the regression-based SLA target; False for the threshold (easy) targets."""
        return self.optimization_target == "sla"

    def configured_gpus_per_replica(self, role: Role) -> int | None:
        """GPUs of one ``role`` replica as this config gives them: ``capabilities.<role>.num_gpu``,
        else ``<role>_engine_num_gpu``, else ``None`` (unknown until the engines report it).

        >>> caps = WorkerCapabilities(decode=EngineCapabilities(num_gpu=4))
        >>> PlannerConfig(decode_engine_num_gpu=2, capabilities=caps,
        ...               max_gpu_budget=-1).configured_gpus_per_replica("decode")
        4
        """
        caps = getattr(self.capabilities, role, None) or EngineCapabilities()
        configured = (
            self.prefill_engine_num_gpu if role == "prefill" else self.decode_engine_num_gpu
        )
        return caps.num_gpu or configured

    def min_endpoint_for(self, role: Role) -> int:
        """Effective minimum replicas of a role (role-specific override, else ``min_endpoint``)."""
        override = self.prefill_min_endpoint if role == "prefill" else self.decode_min_endpoint
        return self.min_endpoint if override is None else override
