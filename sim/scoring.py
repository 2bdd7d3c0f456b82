"""Scores of a simulated run: per-request latencies, SLA attainment, goodput, GPU-hours, churn.

Per request: TTFT (arrival → first token), mean ITL (first → last token over ``osl - 1`` gaps)
and end-to-end latency. A request is *SLA-good* when it finished with TTFT ≤ ``ttft_ms`` and
mean ITL ≤ ``itl_ms`` (single-token requests have no ITL and pass that half). Requests that did
not finish by the end of the run, and requests rejected at arrival, are not good. Goodput is the
output tokens of SLA-good requests per second of run, and per GPU (divided by the mean number of
GPUs in use). TTFT percentiles count a request that never got its first token at the time it
had waited when the run ended (a lower bound: leaving it out would flatter a policy that starves
requests); requests rejected at arrival (prompt plus output beyond the context or KV) are left
out of them — no engine ever queued them, so their "wait" would be the rest of the run, not a
latency — and are reported as ``num_rejected``. ITL percentiles (and E2E) count finished
requests only: a request still decoding at the end is left out of them, unlike TTFT (its mean
ITL so far is not tracked; it already misses the SLA as unfinished). A *reversal* is a
scaling action of a role in the opposite direction of the role's previous action, within 5
minutes of it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from sim.engines import SimRequest

REVERSAL_WINDOW_S = 300.0


@dataclass(frozen=True, slots=True)
class ScalingAction:
    """A role's replica target changed from ``old`` to ``new`` at ``time_s``.

    >>> ScalingAction(time_s=60.0, role="decode", old=2, new=3).direction
    1
    """

    time_s: float
    role: str
    old: int
    new: int

    @property
    def direction(self) -> int:
        """+1 up, -1 down, 0 unchanged."""
        return (self.new > self.old) - (self.new < self.old)


def count_reversals(actions: Iterable[ScalingAction], window_s: float = REVERSAL_WINDOW_S) -> int:
    """Direction changes of a role's target within ``window_s`` of its previous change.

    >>> acts = [ScalingAction(0, "decode", 1, 2), ScalingAction(100, "decode", 2, 1),
    ...         ScalingAction(900, "decode", 1, 2), ScalingAction(950, "prefill", 1, 2)]
    >>> count_reversals(acts)
    1
    """
    last: dict[str, ScalingAction] = {}
    n = 0
    for act in sorted(actions, key=lambda a: a.time_s):
        if act.direction == 0:
            continue
        prev = last.get(act.role)
        if (
            prev is not None
            and prev.direction != act.direction
            and act.time_s - prev.time_s <= window_s
        ):
            n += 1
        last[act.role] = act
    return n


@dataclass(frozen=True)
class RunResult:
    """Scores of one run; :meth:`to_json` is deterministic, :meth:`table` is for people.

    >>> r = score(500, 50, [], 0, 0, [], {"decode": 3600.0}, 3600.0)
    >>> r.gpu_hours, r.sla_attainment, r.ttft_ms_p50 is None
    (1.0, None, True)
    """

    deployment: str
    seed: int
    duration_s: float
    ttft_target_ms: float
    itl_target_ms: float
    num_requests: int
    num_arrived: int
    num_finished: int
    num_unfinished: int
    num_rejected: int
    num_sla_good: int
    sla_attainment: float | None
    goodput_tok_s: float | None
    goodput_tok_s_per_gpu: float | None
    output_tok_s: float | None
    gpu_hours: float
    gpu_hours_by_role: dict[str, float]
    mean_gpus: float | None
    max_replicas: dict[str, int]
    scaling_actions: int
    scaling_actions_by_role: dict[str, int]
    reversals_5min: int
    preemptions: int
    ttft_ms_mean: float | None
    ttft_ms_p50: float | None
    ttft_ms_p90: float | None
    ttft_ms_p99: float | None
    itl_ms_mean: float | None
    itl_ms_p50: float | None
    itl_ms_p90: float | None
    itl_ms_p99: float | None
    e2e_s_p50: float | None
    e2e_s_p90: float | None
    e2e_s_p99: float | None
    extra: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> str:
        """Sorted-key JSON (floats as Python reprs, so equal runs give equal text)."""
        return json.dumps(asdict(self), sort_keys=True, indent=2, allow_nan=False)

    def table(self) -> str:
        """A readable two-column summary."""

        def f(v: float | None, unit: str = "", digits: int = 1) -> str:
            return "-" if v is None else f"{v:,.{digits}f}{unit}"

        pct = None if self.sla_attainment is None else 100.0 * self.sla_attainment
        lines = [
            ("deployment", self.deployment),
            ("simulated", f"{self.duration_s:,.1f} s"),
            (
                "requests",
                f"{self.num_arrived} arrived / {self.num_requests} in trace, "
                f"{self.num_finished} finished, {self.num_unfinished} unfinished, "
                f"{self.num_rejected} rejected",
            ),
            (
                "SLA targets",
                f"TTFT <= {self.ttft_target_ms:g} ms, ITL <= {self.itl_target_ms:g} ms",
            ),
            ("SLA attainment", f(pct, " %", 2)),
            (
                "goodput",
                f"{f(self.goodput_tok_s, ' tok/s')} "
                f"({f(self.goodput_tok_s_per_gpu, ' tok/s/GPU')})",
            ),
            ("output throughput", f(self.output_tok_s, " tok/s")),
            (
                "GPU-hours",
                f"{self.gpu_hours:.3f} ("
                + ", ".join(f"{k} {v:.3f}" for k, v in sorted(self.gpu_hours_by_role.items()))
                + f"), mean GPUs {f(self.mean_gpus, '', 2)}",
            ),
            ("max replicas", ", ".join(f"{k} {v}" for k, v in sorted(self.max_replicas.items()))),
            (
                "scaling actions",
                f"{self.scaling_actions} ("
                + ", ".join(f"{k} {v}" for k, v in sorted(self.scaling_actions_by_role.items()))
                + f"), reversals within 5 min {self.reversals_5min}",
            ),
            ("preemptions", str(self.preemptions)),
            (
                "TTFT ms p50/p90/p99",
                " / ".join(f(v) for v in (self.ttft_ms_p50, self.ttft_ms_p90, self.ttft_ms_p99)),
            ),
            (
                "ITL ms p50/p90/p99",
                " / ".join(
                    f(v, "", 2) for v in (self.itl_ms_p50, self.itl_ms_p90, self.itl_ms_p99)
                ),
            ),
            (
                "E2E s p50/p90/p99",
                " / ".join(f(v, "", 2) for v in (self.e2e_s_p50, self.e2e_s_p90, self.e2e_s_p99)),
            ),
        ]
        width = max(len(k) for k, _ in lines)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in lines)


def _pcts(values: np.ndarray) -> tuple[float | None, float | None, float | None, float | None]:
    if values.size == 0:
        return None, None, None, None
    p50, p90, p99 = (float(x) for x in np.percentile(values, [50, 90, 99]))
    return float(values.mean()), p50, p90, p99


def request_latencies(
    requests: Sequence[SimRequest],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Arrays over requests: arrival (s), TTFT (ms), mean ITL (ms), E2E (s); ``nan`` = none.

    >>> r = SimRequest(0, 1.0, 100, 3); r.first_token, r.finish = 1.25, 1.35
    >>> [round(float(a[0]), 3) for a in request_latencies([r])]
    [1.0, 250.0, 50.0, 0.35]
    """
    n = len(requests)
    arrival = np.empty(n)
    ttft = np.full(n, np.nan)
    itl = np.full(n, np.nan)
    e2e = np.full(n, np.nan)
    for i, r in enumerate(requests):
        arrival[i] = r.arrival
        if r.first_token is not None:
            ttft[i] = (r.first_token - r.arrival) * 1000.0
            if r.finish is not None:
                e2e[i] = r.finish - r.arrival
                if r.osl > 1:
                    itl[i] = (r.finish - r.first_token) * 1000.0 / (r.osl - 1)
    return arrival, ttft, itl, e2e


def score(
    spec_ttft_ms: float,
    spec_itl_ms: float,
    requests: Sequence[SimRequest],
    num_trace_requests: int,
    rejected: int,
    actions: Sequence[ScalingAction],
    gpu_seconds: dict[str, float],
    duration_s: float,
    deployment: str = "sim",
    seed: int = 0,
    preemptions: int = 0,
    max_replicas: dict[str, int] | None = None,
) -> RunResult:
    """Score a run (see the module docstring for the definitions)."""
    arrival, ttft, itl, e2e = request_latencies(requests)
    osl = np.array([r.osl for r in requests], dtype=np.int64)
    finished = ~np.isnan(e2e)
    single = osl <= 1
    with np.errstate(invalid="ignore"):
        good = finished & (ttft <= spec_ttft_ms) & (single | (itl <= spec_itl_ms))
    n_arrived = len(requests)
    n_finished = int(finished.sum())
    dur = duration_s if duration_s > 0 else None
    gpu_total = sum(gpu_seconds.values())
    mean_gpus = gpu_total / dur if dur else None
    goodput = float(osl[good].sum()) / dur if dur else None
    by_role: dict[str, int] = {}
    for a in actions:
        if a.direction:
            by_role[a.role] = by_role.get(a.role, 0) + 1
    waited_ms = np.maximum(0.0, duration_s - arrival) * 1000.0
    queued = np.array([not r.rejected for r in requests], dtype=bool)
    t_mean, t50, t90, t99 = _pcts(np.where(np.isnan(ttft), waited_ms, ttft)[queued])
    i_mean, i50, i90, i99 = _pcts(itl[~np.isnan(itl)])
    _, e50, e90, e99 = _pcts(e2e[finished])
    return RunResult(
        deployment=deployment,
        seed=seed,
        duration_s=float(duration_s),
        ttft_target_ms=float(spec_ttft_ms),
        itl_target_ms=float(spec_itl_ms),
        num_requests=num_trace_requests,
        num_arrived=n_arrived,
        num_finished=n_finished,
        num_unfinished=n_arrived - n_finished - rejected,
        num_rejected=rejected,
        num_sla_good=int(good.sum()),
        sla_attainment=float(good.sum()) / n_arrived if n_arrived else None,
        goodput_tok_s=goodput,
        goodput_tok_s_per_gpu=goodput / mean_gpus if goodput is not None and mean_gpus else None,
        output_tok_s=float(osl[finished].sum()) / dur if dur else None,
        gpu_hours=gpu_total / 3600.0,
        gpu_hours_by_role={k: v / 3600.0 for k, v in sorted(gpu_seconds.items())},
        mean_gpus=mean_gpus,
        max_replicas=dict(sorted((max_replicas or {}).items())),
        scaling_actions=sum(by_role.values()),
        scaling_actions_by_role=dict(sorted(by_role.items())),
        reversals_5min=count_reversals(actions),
        preemptions=preemptions,
        ttft_ms_mean=t_mean,
        ttft_ms_p50=t50,
        ttft_ms_p90=t90,
        ttft_ms_p99=t99,
        itl_ms_mean=i_mean,
        itl_ms_p50=i50,
        itl_ms_p90=i90,
        itl_ms_p99=i99,
        e2e_s_p50=e50,
        e2e_s_p90=e90,
        e2e_s_p99=e99,
    )


def timeline_columns(
    requests: Sequence[SimRequest],
    samples: Sequence[dict[str, float]],
    end_s: float,
    interval_s: float,
    ttft_ms: float,
    itl_ms: float,
) -> dict[str, list[float]]:
    """Per-interval columns (see :meth:`sim.fleet.FleetSim.timeline`); ``time`` = bin end.

    >>> r = SimRequest(0, 1.0, 100, 3); r.first_token, r.finish = 1.25, 1.35
    >>> cols = timeline_columns([r], [{"time": 10.0, "ready_decode": 2.0}], 20.0, 10.0, 500, 50)
    >>> cols["time"], cols["arrival_rps"], cols["ready_decode"], cols["ttft_ms_mean"]
    ([10.0, 20.0], [0.1, 0.0], [2.0, 2.0], [250.0, nan])
    """
    nbins = max(1, math.ceil(end_s / interval_s - 1e-9))
    arrival, ttft, itl, _ = request_latencies(requests)
    idx = (
        np.minimum((arrival // interval_s).astype(np.int64), nbins - 1)
        if len(requests)
        else (np.empty(0, dtype=np.int64))
    )
    cols: dict[str, list[float]] = {
        "time": [float((k + 1) * interval_s) for k in range(nbins)],
        "arrival_rps": (np.bincount(idx, minlength=nbins)[:nbins] / interval_s).tolist(),
    }
    order = np.argsort(idx, kind="stable")
    bounds = np.searchsorted(idx[order], np.arange(nbins + 1))
    for name, values in (("ttft_ms", ttft), ("itl_ms", itl)):
        mean = [math.nan] * nbins
        p90 = [math.nan] * nbins
        for k in range(nbins):
            v = values[order[bounds[k] : bounds[k + 1]]]
            v = v[~np.isnan(v)]
            if v.size:
                mean[k] = float(v.mean())
                p90[k] = float(np.percentile(v, 90))
        cols[f"{name}_mean"] = mean
        cols[f"{name}_p90"] = p90
    keys = sorted({k for s in samples for k in s if k != "time"})
    times = [s["time"] for s in samples]
    for key in keys:
        col = []
        j = -1
        for t in cols["time"]:
            while j + 1 < len(times) and times[j + 1] <= t + 1e-9:
                j += 1
            col.append(float(samples[j].get(key, math.nan)) if j >= 0 else math.nan)
        cols[key] = col
    cols["ttft_sla_ms"] = [float(ttft_ms)] * nbins
    cols["itl_sla_ms"] = [float(itl_ms)] * nbins
    return cols
