"""The event envelope of recorded and Kafka streams, and the payloads it carries.

Every input of the planner is one JSON object per line::

    {"type": "fpm", "deployment": "llama", "time": 12.5,
     "payload": {"role": "decode", "fpm": {"worker_id": "w1", "wall_time": 0.021, ...}}}

``time`` is the event time in seconds (Unix time live, any origin in a recording). The planner's
clock is the event time of its inputs, which is what makes a replay reproduce its decisions.

Every payload that comes from outside is also checked for plausibility where its event is
built: FPMs against ``schemas.fpm.FPM_CEILINGS``, inventories, capabilities, traffic and request
records against the ceilings below (:func:`inventory_implausibility` and its siblings). A
well-typed but absurd value (4.6e18 replicas, a 1e300-token prompt) fails validation, so the
event is dead-lettered instead of steering a decision. Payload models built inside (the
simulator, the planner's own traffic windows) are not held to them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    field_validator,
    model_serializer,
    model_validator,
)

from schemas.fpm import (
    MAX_FPM_REQUESTS,
    MAX_FPM_TOKENS,
    Ceiling,
    Count,
    ForwardPassMetrics,
    NonNegativeFinite,
    WorkerId,
    implausibility,
)
from schemas.fpm_rows import (
    FpmRow,
    fpm_from_row,
    row_problem,
    value_ok,
)

Role = Literal["prefill", "decode"]
"""Engine role. Aggregated engines report as ``decode`` (reference spec §1.2)."""

Fraction = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]

MAX_EVENT_TIME_S = 1e11
"""Event times are seconds (Unix time live): 1e11 s is the year 5138, far past any real clock
and far below what a ``datetime`` holds. It rejects the common producer mistake of Unix time in
milliseconds (1.7e12), which would otherwise leave the planner's clock millennia ahead."""

EventTime = Annotated[float, Field(ge=0.0, le=MAX_EVENT_TIME_S, allow_inf_nan=False)]
"""An event time in seconds, 0 to :data:`MAX_EVENT_TIME_S`."""

InputEventTime = Annotated[EventTime, Field(strict=True)]
"""An input's event time: a JSON number, never a string or a bool (``"30"`` is refused, as
FPM payloads refuse strings), so a producer's type bug is a dead letter, not a guess."""

_PAYLOAD_CONFIG = ConfigDict(frozen=True, extra="forbid", strict=True)
"""Payload models take values strictly, as FPM payloads, event times and the config do: a
count is a JSON integer, a length or rate a JSON number (an integer is a number), a flag
``true``/``false`` — never a string (``"12"``), nor a boolean for a number (``true`` is not 1),
so a producer's type bug is a dead letter, not a guess. (In Python, rows of an
:class:`FpmBatch` are tuples.)"""

MAX_REQUEST_TOKENS = 2**27
"""*ours*: the longest prompt (ISL) or output (OSL) one request may report, and the largest
mean or quantile length of a traffic observation: 134 M tokens, over 10x the longest context
window of any released model (10 M). A longer one is a broken counter (one request with
``isl=2**62`` from a trace topic, or a Prometheus mean of 1e299, steered the throughput loop)."""

MAX_REQUEST_RATE = 2**24
"""*ours*: the most requests per second a traffic observation may report for one deployment
(16.8 M/s, about a thousand times the largest public LLM services' peak); also refuses a count
over a zero-second window."""

MAX_TRAFFIC_WINDOW_S = 7 * 86_400.0
"""*ours*: the longest window a traffic observation may cover (a week): a count over 1e300 s
would read as no demand at all."""

MAX_REQUEST_ID = 512
"""*ours*: the longest ``request_id`` a request may carry (as ``worker_id``,
``schemas.fpm.MAX_WORKER_ID``): real ids are UUIDs or short keys; the planner remembers recent
ids to drop repeats, and a 1 MB id was echoed whole in a dead letter's reason."""

MIN_TRAFFIC_WINDOW_S = 0.01
"""*ours*: the shortest window a traffic observation may cover, unless it covers none (0 s: no
traffic data): the resolution of tick intervals. The throughput loop divides the forecast count
by the window, and a count over 1e-306 s was an infinite demand that crashed the run."""

MAX_REPLICAS = 2**16
"""*ours*: the most replicas (ready or expected) of one role an inventory may report: 65 536
engines, far beyond any one deployment. (``ready_num_decode=2**62`` froze the load loop.)"""

MAX_ENGINE_GPUS = 2**12
"""*ours*: the most GPUs one engine may span (4096, beyond a multi-rack wide-EP engine)."""

MAX_GPU_POWER_W = 10_000
"""*ours*: the highest per-GPU power cap, in watts, a capability may name (an H200 draws at
most 700 W, a GB200 GPU 1 200 W)."""

MAX_SPECULATIVE_TOKENS = 2**10
"""*ours*: the most speculative (draft) tokens per step an engine may report."""

MAX_ACCEPT_LENGTH = MAX_SPECULATIVE_TOKENS + 1
"""*ours*: the longest mean speculative accept length a request or traffic observation may
report. One decode step emits at most its draft tokens plus the target model's own token, so
an accept length is at most ``speculative_nextn + 1`` (the reference clamps it there, spec
§5.5) and ``nextn`` is at most :data:`MAX_SPECULATIVE_TOKENS`. (Two requests with
``accept_length=1e308`` overflowed the window's mean to ``inf`` and stopped the flow.)"""

QUANTILE_TOLERANCE = 0.01
"""*ours*: how far (relative) a traffic observation's length quantile may lie above its
Markov ceiling (:func:`quantile_ceiling`) and still be taken. The planner's own quantiles
never exceed the ceiling at all (its histogram reads each length as the mean of its bucket, so
its quantile is that of lengths with the window's exact mean); a producer's may be read from a
histogram (exact to 0.2 % here, coarser in Prometheus) while its mean is computed separately,
so 1 % is allowed for that. The ratio sizing uses is capped at the ceiling itself."""


def quantile_key(q: float) -> str:
    """Key of quantile ``q`` in ``TrafficObservation.isl_quantiles`` / ``osl_quantiles``.

    >>> quantile_key(0.9), quantile_key(0.99), quantile_key(0.5)
    ('p90', 'p99', 'p50')
    """
    return f"p{round(q * 100)}"


_QUANTILE_KEY = re.compile(r"p([0-9]{1,2})")


def key_quantile(key: str) -> float | None:
    """The quantile a key written by :func:`quantile_key` names (``p99`` → 0.99), or ``None``
    for any other key (a producer's own name: carried, never read, so never checked).

    >>> key_quantile("p99"), key_quantile("p5"), key_quantile("max"), key_quantile("p100")
    (0.99, 0.05, None, None)
    """
    match = _QUANTILE_KEY.fullmatch(key)
    return int(match.group(1)) / 100 if match else None


def quantile_ceiling(mean: float, q: float) -> float:
    """The largest ``q``-quantile lengths of this ``mean`` can have: ``mean / (1 - q)``.

    Lengths are non-negative, so by Markov's inequality at least a ``1 - q`` share of them
    at or above the q-quantile ``Q`` make the mean at least ``(1 - q)·Q`` (also for numpy's
    interpolated quantile): a p99 above 100× the mean, a p50 above twice it, cannot be.

    >>> round(quantile_ceiling(1000.0, 0.99)), quantile_ceiling(1000.0, 0.5)
    (100000, 2000.0)
    """
    return mean / (1.0 - q)


def _first_above(values: Iterable[tuple[str, float | None, Ceiling]]) -> str | None:
    """The reason the first value above its ceiling is refused, or ``None``."""
    for name, value, ceiling in values:
        if value is not None and value > ceiling.limit:
            return f"{name} = {value!r} is implausible (above {ceiling.name} = {ceiling.limit!r})"
    return None


_REQUEST_TOKENS = Ceiling(MAX_REQUEST_TOKENS, "MAX_REQUEST_TOKENS")
_WINDOW = Ceiling(MAX_TRAFFIC_WINDOW_S, "MAX_TRAFFIC_WINDOW_S")
_REPLICAS = Ceiling(MAX_REPLICAS, "MAX_REPLICAS")
_ENGINE_TOKENS = Ceiling(MAX_FPM_TOKENS, "MAX_FPM_TOKENS")
_ENGINE_SEQS = Ceiling(MAX_FPM_REQUESTS, "MAX_FPM_REQUESTS")
_ACCEPT = Ceiling(MAX_ACCEPT_LENGTH, "MAX_ACCEPT_LENGTH")


class EngineFpm(BaseModel):
    """An FPM together with the role of the engine that produced it.

    The FPM must be plausible (within ``schemas.fpm.FPM_CEILINGS``): a well-typed but absurd
    pass is refused here, so the event path dead-letters it.

    >>> EngineFpm(role="prefill", fpm=ForwardPassMetrics(worker_id="p0")).fpm.worker_id
    'p0'
    >>> from pydantic import ValidationError
    >>> try:
    ...     EngineFpm(role="decode", fpm=ForwardPassMetrics(wall_time=1e300))
    ... except ValidationError as err:
    ...     print(err.errors()[0]["loc"], err.errors()[0]["msg"][:46])
    ('fpm',) Value error, wall_time = 1e+300 is implausible
    """

    model_config = _PAYLOAD_CONFIG

    role: Role
    fpm: ForwardPassMetrics

    @field_validator("fpm")
    @classmethod
    def _fpm_is_plausible(cls, fpm: ForwardPassMetrics) -> ForwardPassMetrics:
        problem = implausibility(fpm)
        if problem is not None:
            raise ValueError(problem)
        return fpm


class WorkerCounts(BaseModel):
    """Worker inventory of a deployment: ready and expected (desired) replicas per role.

    ``None`` means unknown. A role whose expected count differs from its ready count, or whose
    scaling flag is set, is *scaling in progress* and gets no new load decision (spec §4.2).

    >>> WorkerCounts(ready_num_decode=2, expected_num_decode=3).expected_num_decode
    3
    """

    model_config = _PAYLOAD_CONFIG

    ready_num_prefill: Count | None = None
    ready_num_decode: Count | None = None
    expected_num_prefill: Count | None = None
    expected_num_decode: Count | None = None
    prefill_scaling_in_progress: bool = False
    decode_scaling_in_progress: bool = False


class EngineCapabilities(BaseModel):
    """Static limits of one engine type (from the worker's model card or the config).

    >>> EngineCapabilities(num_gpu=1, max_num_batched_tokens=8192).max_num_batched_tokens
    8192
    """

    model_config = _PAYLOAD_CONFIG

    num_gpu: Annotated[int, Field(ge=1)] | None = None
    max_num_batched_tokens: Annotated[int, Field(ge=1)] | None = None
    max_num_seqs: Annotated[int, Field(ge=1)] | None = None
    context_length: Annotated[int, Field(ge=1)] | None = None
    max_kv_tokens: Annotated[int, Field(ge=1)] | None = None
    kv_cache_block_size: Annotated[int, Field(ge=1)] | None = None
    speculative_nextn: Count | None = None
    gpu_power_limit_w: Annotated[int, Field(ge=1)] | None = None
    """Power cap of each of the engine's GPUs, in watts (the DGD service's
    ``dynamo.nvidia.com/gpu-power-limit`` pod annotation); read by ``enable_power_awareness``."""


class WorkerCapabilities(BaseModel):
    """Capabilities per role; aggregated deployments fill only ``decode``.

    >>> WorkerCapabilities(decode=EngineCapabilities(max_kv_tokens=100_000)).prefill is None
    True
    """

    model_config = _PAYLOAD_CONFIG

    prefill: EngineCapabilities | None = None
    decode: EngineCapabilities | None = None


class TrafficObservation(BaseModel):
    """Traffic over a window: ``num_req`` is a COUNT over ``duration_s``, ISL/OSL are means.

    ``None`` for KV hit rate / accept length means *unknown* (never "zero"). The quantile fields
    are filled when the observation is built from request records.

    >>> TrafficObservation(duration_s=60, num_req=120, isl=3000, osl=150).num_req / 60
    2.0
    """

    model_config = _PAYLOAD_CONFIG

    duration_s: NonNegativeFinite
    num_req: NonNegativeFinite
    isl: NonNegativeFinite
    osl: NonNegativeFinite
    kv_hit_rate: Fraction | None = None
    accept_length: Annotated[float, Field(ge=1.0, allow_inf_nan=False)] | None = None
    isl_quantiles: dict[str, NonNegativeFinite] | None = None
    osl_quantiles: dict[str, NonNegativeFinite] | None = None


class RequestRecord(BaseModel):
    """One finished request, as seen by the frontend (e.g. ``dynamo.request.trace.v1``).

    ``request_id`` names the request for the duplicate check (a repeat within a window is a dead
    letter); an empty one is no id — what a producer sends for a field it left unset — so such
    requests are all kept, as requests without one are.

    >>> RequestRecord(isl=3000, osl=150, kv_hit_rate=0.25).osl
    150
    >>> print(RequestRecord(request_id="", isl=3000, osl=150).request_id)
    None
    """

    model_config = _PAYLOAD_CONFIG

    request_id: Annotated[str, Field(max_length=MAX_REQUEST_ID)] | None = None
    isl: Count
    osl: Count
    kv_hit_rate: Fraction | None = None
    accept_length: Annotated[float, Field(ge=1.0, allow_inf_nan=False)] | None = None

    @field_validator("request_id")
    @classmethod
    def _empty_id_is_none(cls, request_id: str | None) -> str | None:
        return request_id or None


def inventory_implausibility(counts: WorkerCounts) -> str | None:
    """Why a worker inventory cannot be real (a count above :data:`MAX_REPLICAS`), or ``None``.

    >>> print(inventory_implausibility(WorkerCounts(ready_num_decode=2**62)))
    ready_num_decode = 4611686018427387904 is implausible (above MAX_REPLICAS = 65536)
    """
    return _first_above(
        (name, getattr(counts, name), _REPLICAS)
        for name in (
            "ready_num_prefill",
            "ready_num_decode",
            "expected_num_prefill",
            "expected_num_decode",
        )
    )


def capabilities_implausibility(caps: WorkerCapabilities) -> str | None:
    """Why engine capabilities cannot be real, or ``None``: GPUs above :data:`MAX_ENGINE_GPUS`,
    per-GPU power above :data:`MAX_GPU_POWER_W`,
    token limits above ``MAX_FPM_TOKENS``, sequences above ``MAX_FPM_REQUESTS``, draft tokens
    above :data:`MAX_SPECULATIVE_TOKENS`.

    >>> print(capabilities_implausibility(WorkerCapabilities(
    ...     prefill=EngineCapabilities(num_gpu=2**62))))
    prefill.num_gpu = 4611686018427387904 is implausible (above MAX_ENGINE_GPUS = 4096)
    """
    checks: list[tuple[str, float | None, Ceiling]] = []
    for role, engine in (("prefill", caps.prefill), ("decode", caps.decode)):
        if engine is None:
            continue
        checks += [
            (f"{role}.num_gpu", engine.num_gpu, Ceiling(MAX_ENGINE_GPUS, "MAX_ENGINE_GPUS")),
            (
                f"{role}.gpu_power_limit_w",
                engine.gpu_power_limit_w,
                Ceiling(MAX_GPU_POWER_W, "MAX_GPU_POWER_W"),
            ),
            (f"{role}.max_num_batched_tokens", engine.max_num_batched_tokens, _ENGINE_TOKENS),
            (f"{role}.max_num_seqs", engine.max_num_seqs, _ENGINE_SEQS),
            (f"{role}.context_length", engine.context_length, _ENGINE_TOKENS),
            (f"{role}.max_kv_tokens", engine.max_kv_tokens, _ENGINE_TOKENS),
            (f"{role}.kv_cache_block_size", engine.kv_cache_block_size, _ENGINE_TOKENS),
            (
                f"{role}.speculative_nextn",
                engine.speculative_nextn,
                Ceiling(MAX_SPECULATIVE_TOKENS, "MAX_SPECULATIVE_TOKENS"),
            ),
        ]
    return _first_above(checks)


def request_implausibility(record: RequestRecord) -> str | None:
    """Why a request record cannot be real (a length above :data:`MAX_REQUEST_TOKENS`, an
    accept length above :data:`MAX_ACCEPT_LENGTH`), or ``None``.

    >>> print(request_implausibility(RequestRecord(isl=2**62, osl=10)))
    isl = 4611686018427387904 is implausible (above MAX_REQUEST_TOKENS = 134217728)
    >>> print(request_implausibility(RequestRecord(isl=10, osl=10, accept_length=1e308)))
    accept_length = 1e+308 is implausible (above MAX_ACCEPT_LENGTH = 1025)
    """
    accept = record.accept_length
    if (  # the common case without building the checks (this runs for every request event)
        record.isl <= MAX_REQUEST_TOKENS
        and record.osl <= MAX_REQUEST_TOKENS
        and (accept is None or accept <= MAX_ACCEPT_LENGTH)
    ):
        return None
    return _first_above(
        (
            ("isl", record.isl, _REQUEST_TOKENS),
            ("osl", record.osl, _REQUEST_TOKENS),
            ("accept_length", record.accept_length, _ACCEPT),
        )
    )


def _quantile_above_mean(
    series: str, mean: float, quantiles: dict[str, float] | None
) -> str | None:
    """Why a length quantile of ``series`` cannot go with its ``mean`` (above
    :func:`quantile_ceiling` by more than :data:`QUANTILE_TOLERANCE`), or ``None``."""
    for key, value in (quantiles or {}).items():
        q = key_quantile(key)
        if q is None:
            continue
        ceiling = quantile_ceiling(mean, q)
        if value > ceiling * (1.0 + QUANTILE_TOLERANCE):
            return (
                f"{series}_quantiles.{key} = {value!r} is implausible for {series} = {mean!r} "
                f"(above {series} / (1 - {q:g}) = {ceiling:.6g}, the most a {q:g}-quantile "
                "of non-negative lengths with that mean can be)"
            )
    return None


def traffic_implausibility(obs: TrafficObservation) -> str | None:
    """Why a traffic observation cannot be real, or ``None``: a window above
    :data:`MAX_TRAFFIC_WINDOW_S` or below :data:`MIN_TRAFFIC_WINDOW_S` (but not 0 s), a mean or
    quantile length above :data:`MAX_REQUEST_TOKENS`, an accept length above
    :data:`MAX_ACCEPT_LENGTH`, a length quantile that its mean cannot have (above
    ``mean / (1 - q)``, :func:`quantile_ceiling`; capacity sized for it multiplied the forecast
    by an unbounded ratio), or more than :data:`MAX_REQUEST_RATE` requests per second (any
    request in a 0 s window).

    >>> print(traffic_implausibility(TrafficObservation(duration_s=60, num_req=1e300, isl=1,
    ...                                                 osl=1)))  # doctest: +NORMALIZE_WHITESPACE
    num_req = 1e+300 over duration_s = 60.0 is implausible (above MAX_REQUEST_RATE =
    16777216 requests/s)
    >>> print(traffic_implausibility(TrafficObservation(duration_s=60, num_req=600, isl=5,
    ...     osl=1, isl_quantiles={"p99": 2**27})))  # doctest: +NORMALIZE_WHITESPACE
    isl_quantiles.p99 = 134217728.0 is implausible for isl = 5.0 (above isl / (1 - 0.99) =
    500, the most a 0.99-quantile of non-negative lengths with that mean can be)
    """
    lengths = [("isl", obs.isl), ("osl", obs.osl)]
    for name, quantiles in (
        ("isl_quantiles", obs.isl_quantiles),
        ("osl_quantiles", obs.osl_quantiles),
    ):
        lengths += [(f"{name}.{q}", v) for q, v in (quantiles or {}).items()]
    problem = _first_above(
        [("duration_s", obs.duration_s, _WINDOW)]
        + [(name, value, _REQUEST_TOKENS) for name, value in lengths]
        + [("accept_length", obs.accept_length, _ACCEPT)]
    )
    if problem is None and 0 < obs.duration_s < MIN_TRAFFIC_WINDOW_S:
        problem = (
            f"duration_s = {obs.duration_s!r} is implausible (below MIN_TRAFFIC_WINDOW_S = "
            f"{MIN_TRAFFIC_WINDOW_S} s, the tick intervals' resolution)"
        )
    problem = problem or _quantile_above_mean("isl", obs.isl, obs.isl_quantiles)
    problem = problem or _quantile_above_mean("osl", obs.osl, obs.osl_quantiles)
    if problem is None and obs.num_req > MAX_REQUEST_RATE * obs.duration_s:
        problem = (
            f"num_req = {obs.num_req!r} over duration_s = {obs.duration_s!r} is implausible "
            f"(above MAX_REQUEST_RATE = {MAX_REQUEST_RATE} requests/s)"
        )
    return problem


def _refuse(problem: str | None) -> None:
    if problem is not None:
        raise ValueError(problem)


class FpmBatch(BaseModel):
    """Consecutive forward passes of ONE engine, one row per iteration (columnar, compact).

    High-rate producers (the simulator, batched receivers) send these instead of one event per
    iteration; every row is a complete ForwardPassMetrics (see :meth:`fpm`). Rows are in event
    time order, and there is at least one (an empty batch is refused: it is no forward pass,
    and its time would move event time on nothing's evidence). Rows may span several planner
    tick windows: the planner splits such a batch into one per window (``flows.horizon``), and
    rows behind its watermark are late, as single forward passes would be.

    A row of the right shape that no forward pass can have (:func:`row_problem`) does not
    refuse the batch: :meth:`refused_rows` names it, and admission dead-letters it (one letter
    for all of a batch's refused rows) and keeps the other rows (``operators.admission``).

    >>> row = (1.0, 7, 0.02) + (0, 0, 0.0, 0, 4, 4000, 0.0) + (0, 0, 0.0, 0, 0, 0.0)
    >>> batch = FpmBatch(role="decode", worker_id="w1", rows=[row, row[:2] + (61.0,) + row[3:]])
    >>> batch.fpm(0).scheduled_requests.sum_decode_kv_tokens
    4000
    >>> batch.refused_rows()  # doctest: +NORMALIZE_WHITESPACE
    [(1, 'wall_time = 61.0 is implausible for one forward pass
          (above MAX_FORWARD_PASS_SECONDS = 60.0)')]
    """

    model_config = _PAYLOAD_CONFIG

    role: Role
    worker_id: WorkerId = ""
    dp_rank: Count = 0
    rows: list[FpmRow]

    @model_validator(mode="after")
    def _rows_are_valid(self) -> FpmBatch:
        if not self.rows:
            raise ValueError("no rows: a batch of forward passes needs at least one")
        last = -math.inf
        for i, row in enumerate(self.rows):
            if not value_ok(row[0]):  # a refused row (refused_rows), not the batch's order
                continue
            if row[0] < last:
                raise ValueError(f"row {i}: rows must be in event-time order")
            last = row[0]
        return self

    def fpm(self, index: int) -> ForwardPassMetrics:
        """Row ``index`` as a ForwardPassMetrics."""
        return fpm_from_row(self.worker_id, self.dp_rank, self.rows[index])

    def refused_rows(self) -> list[tuple[int, str]]:
        """The index of each row no forward pass can have, with why (:func:`row_problem`), in
        row order."""
        return [(i, problem) for i, row in enumerate(self.rows) if (problem := row_problem(row))]


class Acknowledgement(BaseModel):
    """The environment applied this deployment's decisions up to ``acked_decision_id``.

    >>> Acknowledgement(acked_decision_id=3).acked_decision_id
    3
    """

    model_config = _PAYLOAD_CONFIG

    acked_decision_id: Count


MAX_GPU_BUDGET = MAX_REPLICAS * MAX_ENGINE_GPUS
"""*ours*: the largest GPU budget (or floor) a limit may name: every replica at its most GPUs."""

Replicas = Annotated[int, Field(ge=1, le=MAX_REPLICAS)]
"""A role's replica floor: 1 to :data:`MAX_REPLICAS`."""
ReplicaFloor = Annotated[int, Field(ge=0, le=MAX_REPLICAS)]
"""``min_endpoint``: 0 to :data:`MAX_REPLICAS`."""
GpuBudget = Annotated[int, Field(ge=-1, le=MAX_GPU_BUDGET)]
"""A GPU budget: -1 is off, as in the config."""


_NOT_NULL_LIMITS = ("min_endpoint", "max_gpu_budget", "min_gpu_budget")
"""Limits that take no ``null`` (a role's floor does: it falls back to ``min_endpoint``)."""


def _limits_schema(schema: dict[str, Any]) -> None:
    """The JSON Schema says what the validator checks: at least one limit, and no ``null``
    where none is taken (the annotations alone allowed both: a producer validating against
    the schema sent limits the planner refused)."""
    schema["minProperties"] = 1
    for name in _NOT_NULL_LIMITS:
        field = schema["properties"][name]
        field.update(next(s for s in field.pop("anyOf") if s.get("type") != "null"))
        field.pop("default", None)


class Limits(BaseModel):
    """Replica floors and GPU budgets changed while the planner runs (the control API's, or
    any input's ``limits`` event): each field given replaces the config's from the next tick,
    the others keep theirs; a role's floor given as ``null`` falls back to ``min_endpoint``.
    The deployment's config is checked again with them (a ceiling below what the floors need
    is refused, as at start).

    Only the fields given are serialised (a ``null`` for one not given would read back as a
    reset, or be refused), so every dump — a dead letter's ``raw`` included — parses back to
    the same limits.

    >>> Limits.model_validate({"decode_min_endpoint": 4, "max_gpu_budget": 16}).changes()
    {'decode_min_endpoint': 4, 'max_gpu_budget': 16}
    >>> Limits(decode_min_endpoint=4).merged(Limits(decode_min_endpoint=None)).changes()
    {'decode_min_endpoint': None}
    >>> Limits(decode_min_endpoint=3).model_dump_json()
    '{"decode_min_endpoint":3}'
    """

    model_config = _PAYLOAD_CONFIG | ConfigDict(json_schema_extra=_limits_schema)

    min_endpoint: ReplicaFloor | None = None
    prefill_min_endpoint: Replicas | None = None
    decode_min_endpoint: Replicas | None = None
    max_gpu_budget: GpuBudget | None = None
    min_gpu_budget: GpuBudget | None = None

    @model_validator(mode="after")
    def _changes_something(self) -> Limits:
        if not self.model_fields_set:
            raise ValueError(f"give at least one of {', '.join(Limits.model_fields)}")
        for name in _NOT_NULL_LIMITS:
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null (-1 turns a budget off)")
        return self

    @model_serializer(mode="wrap")
    def _only_given(self, dump: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        # No return annotation on purpose: pydantic would make it the dump's JSON Schema (an
        # untyped object); without one, the dump's schema stays this model's.
        return {name: value for name, value in dump(self).items() if name in self.model_fields_set}

    def changes(self) -> dict[str, int | None]:
        """The fields given, by name."""
        return self.model_dump()

    def merged(self, later: Limits) -> Limits:
        """These limits with ``later``'s fields over them."""
        return Limits.model_validate(self.changes() | later.changes())


MAX_DEPLOYMENT_NAME = 253
"""The longest deployment name an event may carry (a Kubernetes object name's limit): a longer
one is no deployment's, and would be echoed whole in the "unknown deployment" dead letter."""


class _Envelope(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    deployment: Annotated[str, Field(min_length=1, max_length=MAX_DEPLOYMENT_NAME)]
    time: InputEventTime


class FpmEvent(_Envelope):
    """An engine's forward pass.

    >>> e = parse_event('{"type": "fpm", "deployment": "llama", "time": 12.5, "payload": '
    ...                 '{"role": "decode", "fpm": {"worker_id": "w1", "wall_time": 0.021}}}')
    >>> type(e).__name__, e.payload.role, e.payload.fpm.worker_id, e.payload.fpm.wall_time
    ('FpmEvent', 'decode', 'w1', 0.021)
    """

    type: Literal["fpm"] = "fpm"
    payload: EngineFpm


class FpmBatchEvent(_Envelope):
    """Many forward passes of one engine; ``time`` is the event time of the last row.

    Every row's time must be at most the event's ``time`` (a refused row's too, unless its
    time is what it is refused for): a row from the future would keep its engine alive (engines
    expire by the time of their last pass) long after it went away.

    >>> from pydantic import ValidationError
    >>> row = (9.0, 7, 0.02) + (0, 0, 0.0, 0, 4, 4000, 0.0) + (0, 0, 0.0, 0, 0, 0.0)
    >>> try:
    ...     FpmBatchEvent(deployment="d", time=5.0, payload=FpmBatch(role="decode", rows=[row]))
    ... except ValidationError as err:
    ...     print(err.errors()[0]["msg"])
    Value error, row 0: time 9 is after the event's time 5
    """

    type: Literal["fpm_batch"] = "fpm_batch"
    payload: FpmBatch

    @model_validator(mode="after")
    def _rows_not_after_the_event(self) -> FpmBatchEvent:
        rows = self.payload.rows
        # every row: the last is the latest only if it is not refused (a NaN time)
        after = next(
            (i for i, row in enumerate(rows) if value_ok(row[0]) and row[0] > self.time), None
        )
        if after is not None:
            raise ValueError(
                f"row {after}: time {rows[after][0]:g} is after the event's time {self.time:g}"
            )
        return self


class InventoryEvent(_Envelope):
    """The deployment's worker counts changed or were re-read.

    >>> e = parse_event('{"type": "inventory", "deployment": "d", "time": 1, '
    ...                 '"payload": {"ready_num_decode": 2, "expected_num_decode": 3}}')
    >>> type(e).__name__, e.payload.ready_num_decode, e.payload.expected_num_decode
    ('InventoryEvent', 2, 3)
    """

    type: Literal["inventory"] = "inventory"
    payload: WorkerCounts

    @field_validator("payload")
    @classmethod
    def _payload_is_plausible(cls, payload: WorkerCounts) -> WorkerCounts:
        _refuse(inventory_implausibility(payload))
        return payload


class CapabilitiesEvent(_Envelope):
    """Engine capabilities were discovered.

    >>> e = parse_event('{"type": "capabilities", "deployment": "d", "time": 1, '
    ...                 '"payload": {"decode": {"max_kv_tokens": 100000}}}')
    >>> type(e).__name__, e.payload.decode.max_kv_tokens, e.payload.prefill
    ('CapabilitiesEvent', 100000, None)
    """

    type: Literal["capabilities"] = "capabilities"
    payload: WorkerCapabilities

    @field_validator("payload")
    @classmethod
    def _payload_is_plausible(cls, payload: WorkerCapabilities) -> WorkerCapabilities:
        _refuse(capabilities_implausibility(payload))
        return payload


class TrafficEvent(_Envelope):
    """A traffic observation (e.g. from Prometheus).

    >>> e = parse_event('{"type": "traffic", "deployment": "d", "time": 60, "payload": '
    ...                 '{"duration_s": 60, "num_req": 120, "isl": 3000, "osl": 150}}')
    >>> type(e).__name__, e.payload.num_req / e.payload.duration_s, e.payload.kv_hit_rate
    ('TrafficEvent', 2.0, None)
    """

    type: Literal["traffic"] = "traffic"
    payload: TrafficObservation

    @field_validator("payload")
    @classmethod
    def _payload_is_plausible(cls, payload: TrafficObservation) -> TrafficObservation:
        _refuse(traffic_implausibility(payload))
        return payload


class RequestEvent(_Envelope):
    """A finished request (for traffic windows built inside the dataflow).

    >>> e = parse_event('{"type": "request", "deployment": "d", "time": 3.5, '
    ...                 '"payload": {"isl": 3000, "osl": 150}}')
    >>> type(e).__name__, e.time, e.payload.isl, e.payload.osl
    ('RequestEvent', 3.5, 3000, 150)
    """

    type: Literal["request"] = "request"
    payload: RequestRecord

    @field_validator("payload")
    @classmethod
    def _payload_is_plausible(cls, payload: RequestRecord) -> RequestRecord:
        _refuse(request_implausibility(payload))
        return payload


class AckEvent(_Envelope):
    """An acknowledgement from the virtual connector's orchestrator (releases held decisions).

    >>> e = parse_event('{"type": "ack", "deployment": "d", "time": 1, '
    ...                 '"payload": {"acked_decision_id": 3}}')
    >>> type(e).__name__, e.payload.acked_decision_id
    ('AckEvent', 3)
    """

    type: Literal["ack"] = "ack"
    payload: Acknowledgement
    _origin: tuple[str, int | None, str] | None = PrivateAttr(default=None)

    def read_at(self, source: str, position: int | None, raw: str) -> AckEvent:
        """This acknowledgement, remembering where it was read (``source``, ``position``) and
        as what: a dead letter refusing it names that message, not the planner's copy of it.

        >>> e = AckEvent(deployment="d", time=0, payload={"acked_decision_id": 3})
        >>> e.read_at("kafka:acks/0", 41, '{"deployment": "d", "acked_decision_id": 3}').origin
        ('kafka:acks/0', 41, '{"deployment": "d", "acked_decision_id": 3}')
        """
        self._origin = (source, position, raw)
        return self

    @property
    def origin(self) -> tuple[str, int | None, str] | None:
        """Where it was read (source, position, the message as text), if it was read."""
        return self._origin


class LimitsEvent(_Envelope):
    """The deployment's replica floors or GPU budgets were changed (see :class:`Limits`).

    >>> e = parse_event('{"type": "limits", "deployment": "d", "time": 0, '
    ...                 '"payload": {"decode_min_endpoint": 3}}')
    >>> type(e).__name__, e.payload.changes()
    ('LimitsEvent', {'decode_min_endpoint': 3})
    """

    type: Literal["limits"] = "limits"
    payload: Limits


class ClockEvent(_Envelope):
    """Nothing happened except that event time reached ``time`` (advances the planner's clock).

    >>> e = parse_event('{"type": "clock", "deployment": "d", "time": 30}')
    >>> type(e).__name__, e.time, e.payload
    ('ClockEvent', 30.0, {})
    >>> from pydantic import ValidationError
    >>> try:
    ...     parse_event('{"type": "clock", "deployment": "d", "time": "30"}')
    ... except ValidationError as err:
    ...     print(err.errors()[0]["loc"], err.errors()[0]["msg"])
    ('clock', 'time') Input should be a valid number
    """

    type: Literal["clock"] = "clock"
    payload: dict[str, None] = Field(default_factory=dict, max_length=0)


Event = Annotated[
    FpmEvent
    | FpmBatchEvent
    | InventoryEvent
    | CapabilitiesEvent
    | TrafficEvent
    | RequestEvent
    | AckEvent
    | LimitsEvent
    | ClockEvent,
    Field(discriminator="type"),
]
"""Any input event, discriminated by ``type``."""

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(raw: str | bytes) -> Event:
    """Decode one JSON line into an event; raises ``pydantic.ValidationError`` when invalid.

    >>> parse_event('{"type":"clock","deployment":"d","time":5}').time
    5.0
    """
    return EVENT_ADAPTER.validate_json(raw)


class RawEvent(NamedTuple):
    """An undecoded input line/message and where it came from (for dead letters).

    >>> RawEvent("in.jsonl", 3, '{"type": "clock"}').position
    3
    """

    source: str
    position: int
    data: str | bytes
