"""Workloads for the simulator: synthetic arrivals, and time/load transforms of recorded traces.

* :func:`poisson_load`, :func:`sinusoidal_load`, :func:`burst_load` draw arrivals (homogeneous
  or, by thinning, inhomogeneous Poisson) with lengths from a :class:`LengthSampler`;
* :func:`speed_up` compresses a trace's time axis (``--speedup``);
* :func:`scale_load` superimposes ``K`` copies of a trace, each shifted by a seeded random offset
  that wraps around the trace's span (``--load-scale K``), so a trace of a small service can
  load a large fleet with realistic, independent burstiness. Copy 0 is the original; copy ``k``
  gets request ids ``<id>#k`` and its own prefix-hash namespace (copies are different users).

Everything takes a ``seed``; the same inputs and seed give the same requests, bit for bit
(numpy ``PCG64``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from schemas.trace import TraceRequest

_HASH_MASK = (1 << 64) - 1
_HASH_MIX = 0x9E3779B97F4A7C15


@dataclass(frozen=True)
class LengthSampler:
    """Prompt/output lengths: empirical ``pairs`` drawn uniformly, else log-normal around the
    means with coefficient of variation ``cv`` (``cv=0``: constant).

    >>> rng = np.random.Generator(np.random.PCG64(0))
    >>> LengthSampler(isl_mean=3000, osl_mean=150).sample(rng, 2)
    ([3000, 3000], [150, 150])
    >>> isl, osl = LengthSampler(pairs=((10, 2), (20, 4))).sample(rng, 50)
    >>> sorted(set(zip(isl, osl)))
    [(10, 2), (20, 4)]
    """

    isl_mean: float = 3000.0
    osl_mean: float = 150.0
    cv: float = 0.0
    pairs: tuple[tuple[int, int], ...] = ()

    def sample(self, rng: np.random.Generator, n: int) -> tuple[list[int], list[int]]:
        """``n`` (isl, osl) draws as two lists of ints >= 1."""
        if self.pairs:
            idx = rng.integers(0, len(self.pairs), size=n)
            return [self.pairs[i][0] for i in idx], [self.pairs[i][1] for i in idx]
        if self.cv <= 0:
            return [max(1, round(self.isl_mean))] * n, [max(1, round(self.osl_mean))] * n
        sigma = math.sqrt(math.log1p(self.cv * self.cv))
        out = []
        for mean in (self.isl_mean, self.osl_mean):
            mu = math.log(mean) - 0.5 * sigma * sigma
            draws = rng.lognormal(mu, sigma, size=n)
            out.append([max(1, round(float(x))) for x in draws])
        return out[0], out[1]


def _rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def _requests(
    times: np.ndarray, lengths: LengthSampler, rng: np.random.Generator, prefix: str
) -> list[TraceRequest]:
    isl, osl = lengths.sample(rng, len(times))
    return [
        TraceRequest(arrival_s=float(t), isl=i, osl=o, request_id=f"{prefix}{k}")
        for k, (t, i, o) in enumerate(zip(times, isl, osl, strict=True))
    ]


def _thinned(
    rate: Callable[[np.ndarray], np.ndarray],
    peak: float,
    duration_s: float,
    rng: np.random.Generator,
) -> np.ndarray:
    if peak <= 0 or duration_s <= 0:
        return np.empty(0)
    n = rng.poisson(peak * duration_s)
    t = np.sort(rng.uniform(0.0, duration_s, size=n))
    keep = rng.uniform(0.0, peak, size=n) < rate(t)
    return t[keep]


def poisson_load(
    rate_rps: float, duration_s: float, lengths: LengthSampler | None = None, seed: int = 0
) -> list[TraceRequest]:
    """Homogeneous Poisson arrivals at ``rate_rps`` over ``[0, duration_s)``.

    >>> reqs = poisson_load(5.0, 100.0, seed=1)
    >>> 400 < len(reqs) < 600, reqs == poisson_load(5.0, 100.0, seed=1)
    (True, True)
    """
    rng = _rng(seed)
    times = _thinned(lambda t: np.full(t.shape, rate_rps), rate_rps, duration_s, rng)
    return _requests(times, lengths or LengthSampler(), rng, "poisson-")


def sinusoidal_load(
    mean_rps: float,
    amplitude_rps: float,
    period_s: float,
    duration_s: float,
    lengths: LengthSampler | None = None,
    seed: int = 0,
    phase: float = 0.0,
) -> list[TraceRequest]:
    """Poisson arrivals at ``mean + amplitude * sin(2 pi t / period + phase)`` (floored at 0).

    >>> reqs = sinusoidal_load(4.0, 3.0, 200.0, 200.0, seed=2)
    >>> first = sum(r.arrival_s < 100 for r in reqs); first > len(reqs) - first
    True
    """
    if period_s <= 0:
        raise ValueError("period_s must be positive")
    rng = _rng(seed)
    w = 2.0 * math.pi / period_s

    def rate(t: np.ndarray) -> np.ndarray:
        return np.maximum(mean_rps + amplitude_rps * np.sin(w * t + phase), 0.0)

    peak = mean_rps + abs(amplitude_rps)
    return _requests(
        _thinned(rate, peak, duration_s, rng), lengths or LengthSampler(), rng, "sine-"
    )


def burst_load(
    base_rps: float,
    bursts: Sequence[tuple[float, float, float]],
    duration_s: float,
    lengths: LengthSampler | None = None,
    seed: int = 0,
) -> list[TraceRequest]:
    """Poisson arrivals at ``base_rps``, and at ``rps`` during each ``(start_s, length_s, rps)``
    burst (step changes; the last burst covering ``t`` wins).

    >>> reqs = burst_load(1.0, [(50.0, 10.0, 50.0)], 100.0, seed=3)
    >>> sum(50 <= r.arrival_s < 60 for r in reqs) > 300
    True
    """
    rng = _rng(seed)

    def rate(t: np.ndarray) -> np.ndarray:
        r = np.full(t.shape, float(base_rps))
        for start, length, rps in bursts:
            r[(t >= start) & (t < start + length)] = rps
        return r

    peak = max([base_rps, *(b[2] for b in bursts)])
    return _requests(
        _thinned(rate, peak, duration_s, rng), lengths or LengthSampler(), rng, "burst-"
    )


def speed_up(requests: Sequence[TraceRequest], factor: float) -> list[TraceRequest]:
    """Compress time by ``factor`` (``2`` = twice the request rate).

    >>> speed_up([TraceRequest(arrival_s=10.0, isl=5, osl=1)], 4.0)[0].arrival_s
    2.5
    """
    if not factor > 0 or not math.isfinite(factor):
        raise ValueError("speed-up factor must be positive and finite")
    if factor == 1:
        return list(requests)
    return [replace(r, arrival_s=r.arrival_s / factor) for r in requests]


def trace_span(requests: Sequence[TraceRequest]) -> float:
    """Length of the time axis a trace covers: last arrival plus one mean inter-arrival gap.

    >>> trace_span([TraceRequest(arrival_s=t, isl=1, osl=1) for t in (0.0, 1.0, 2.0)])
    3.0
    """
    if not requests:
        return 0.0
    first, last = requests[0].arrival_s, requests[-1].arrival_s
    n = len(requests)
    return last + ((last - first) / (n - 1) if n > 1 else 1.0)


def scale_load(requests: Sequence[TraceRequest], copies: int, seed: int = 0) -> list[TraceRequest]:
    """Superimpose ``copies`` copies of a sorted trace, copy ``k >= 1`` shifted by a seeded
    random offset in ``[0, span)`` and wrapped around; sorted by arrival (stable by copy).

    >>> base = [TraceRequest(arrival_s=t, isl=100, osl=10, hash_ids=(7,)) for t in (0.0, 5.0)]
    >>> out = scale_load(base, 3, seed=4)
    >>> len(out), all(0 <= r.arrival_s < 10.0 for r in out), out == scale_load(base, 3, seed=4)
    (6, True, True)
    >>> len({r.hash_ids for r in out})  # each copy has its own prefix-hash namespace
    3
    """
    if copies < 1:
        raise ValueError("load scale must be >= 1")
    base = list(requests)
    if copies == 1 or not base:
        return base
    span = trace_span(base)
    offsets = _rng(seed).uniform(0.0, span, size=copies - 1)
    arrivals = np.array([r.arrival_s for r in base])
    rows: list[tuple[float, int, int, TraceRequest]] = [
        (r.arrival_s, 0, i, r) for i, r in enumerate(base)
    ]
    for k in range(1, copies):
        shifted = np.mod(arrivals + offsets[k - 1], span)
        salt = (k * _HASH_MIX) & _HASH_MASK
        for i, (t, r) in enumerate(zip(shifted.tolist(), base, strict=True)):
            rid = f"{r.request_id if r.request_id is not None else i}#{k}"
            hashes = tuple((h ^ salt) & _HASH_MASK for h in r.hash_ids) if r.hash_ids else ()
            rows.append((t, k, i, replace(r, arrival_s=t, hash_ids=hashes, request_id=rid)))
    rows.sort(key=lambda x: (x[0], x[1], x[2]))
    return [x[3] for x in rows]
