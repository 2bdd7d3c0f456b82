"""Bucketed sample store and exact least squares for the perf models (reference spec §3.1).

A perf model keeps at most ``max_samples`` (features, wall time) samples. To keep the fit
covering the whole operating range, samples are spread over a grid of buckets (per feature axis,
``buckets_per_axis`` equal-width buckets between the smallest and largest value ever seen); when
the store overflows, the OLDEST sample of the FATTEST bucket is retired. A long stretch of
identical load therefore cannot push out the few samples that pin the other end of the line.

The fit is ordinary least squares with an intercept, solved exactly with ``numpy.linalg.lstsq``
on centered data (the minimum-norm solution when features are collinear, as sklearn's
``LinearRegression`` gives). A negative slope on a "relaxable" feature is clipped to zero, the
other slopes and the intercept staying those of the full fit (spec §3.1); a
negative slope on any other feature rejects the fit, because a model that says more work is
faster would drive scaling the wrong way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_WALL_TIME_S = 1e-6
"""Every prediction is floored at this many seconds."""

NEGLIGIBLE_CONTRIBUTION_S = 1e-9
"""A negative slope whose largest contribution over the retained samples is smaller than this
(one nanosecond) is round-off of a true zero slope; it is set to exactly 0 instead of rejecting."""

Features = tuple[float, ...]
Sample = tuple[int, Features, float]
"""``(sequence number, features, wall time in seconds)``; the sequence number orders samples."""


class BucketedSampleStore:
    """At most ``max_samples`` samples on a grid of buckets; fattest-bucket FIFO retirement.

    Bucket index on each axis: ``int((v - lo) / (hi - lo) * B)`` clamped to ``[0, B - 1]`` (0 when
    ``hi <= lo``), where ``lo``/``hi`` are the smallest/largest values ever seen on that axis.
    When a bound moves, every stored sample is re-bucketed. On overflow the oldest sample of the
    bucket holding the most samples is dropped; among equally fat buckets, the one whose oldest
    sample is the oldest loses it (ours: the reference takes the first fattest bucket in its
    dict's order, which depends on the history of re-bucketing; ours is a total order on the
    samples themselves, so retirement is deterministic and FIFO among equals).

    >>> store = BucketedSampleStore(ndim=1, max_samples=3, buckets_per_axis=2)
    >>> for tokens in (100.0, 110.0, 120.0, 1000.0):
    ...     _ = store.add((tokens,), tokens / 1000)
    >>> [x for x, _ in store.samples()]
    [(110.0,), (120.0,), (1000.0,)]
    """

    def __init__(self, ndim: int, max_samples: int, buckets_per_axis: int) -> None:
        if ndim < 1 or max_samples < 1 or buckets_per_axis < 1:
            raise ValueError("ndim, max_samples and buckets_per_axis must all be >= 1")
        self.ndim = ndim
        self.max_samples = max_samples
        self.buckets_per_axis = buckets_per_axis
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.buckets: dict[tuple[int, ...], deque[Sample]] = {}
        self.total = 0
        self.next_seq = 0

    def __len__(self) -> int:
        return self.total

    def add(self, x: Features, y: float) -> int:
        """Store one sample (retiring one if the store is full); returns its sequence number.
        ``x`` has ``ndim`` values."""
        if len(x) != self.ndim:
            raise ValueError(f"expected {self.ndim} feature values, got {len(x)}")
        if self._widen_bounds(x) and self.total:
            self._rebucket()
        seq = self.next_seq
        self.buckets.setdefault(self._key(x), deque()).append((seq, x, y))
        self.next_seq += 1
        self.total += 1
        if self.total > self.max_samples:
            self._retire_one()
        return seq

    def entries(self) -> list[Sample]:
        """The retained samples with their sequence numbers, oldest first."""
        return sorted(s for bucket in self.buckets.values() for s in bucket)

    def samples(self) -> list[tuple[Features, float]]:
        """The retained samples, oldest first."""
        return [(x, y) for _, x, y in self.entries()]

    def seqs(self) -> set[int]:
        """The sequence numbers of the retained samples."""
        return {s[0] for bucket in self.buckets.values() for s in bucket}

    def remove(self, seqs: set[int]) -> int:
        """Drop the retained samples with these sequence numbers; returns how many went.

        The bucket bounds are recomputed from the samples that stay (an explicit removal, unlike
        retirement, takes its range with it) and every sample is re-bucketed.

        >>> store = BucketedSampleStore(ndim=1, max_samples=4, buckets_per_axis=2)
        >>> for tokens in (100.0, 200.0, 9000.0):
        ...     _ = store.add((tokens,), tokens / 1000)
        >>> store.remove({2}), store.upper, [x for x, _ in store.samples()]
        (1, [200.0], [(100.0,), (200.0,)])
        """
        kept = sorted(s for bucket in self.buckets.values() for s in bucket if s[0] not in seqs)
        removed = self.total - len(kept)
        if not removed:
            return 0
        self.total = len(kept)
        self.lower = [min(s[1][i] for s in kept) for i in range(self.ndim)] if kept else []
        self.upper = [max(s[1][i] for s in kept) for i in range(self.ndim)] if kept else []
        self.buckets = {}
        for sample in kept:
            self.buckets.setdefault(self._key(sample[1]), deque()).append(sample)
        return removed

    def bucket_sizes(self) -> dict[tuple[int, ...], int]:
        """Number of samples per non-empty bucket (for diagnostics and tests)."""
        return {key: len(bucket) for key, bucket in sorted(self.buckets.items())}

    def _widen_bounds(self, x: Features) -> bool:
        if not self.lower:
            self.lower = list(x)
            self.upper = list(x)
            return True
        changed = False
        for i, v in enumerate(x):
            if v < self.lower[i]:
                self.lower[i] = v
                changed = True
            if v > self.upper[i]:
                self.upper[i] = v
                changed = True
        return changed

    def _key(self, x: Features) -> tuple[int, ...]:
        b = self.buckets_per_axis
        key = []
        for v, lo, hi in zip(x, self.lower, self.upper, strict=True):
            idx = 0 if hi <= lo else int((v - lo) / (hi - lo) * b)
            key.append(min(max(idx, 0), b - 1))
        return tuple(key)

    def _rebucket(self) -> None:
        stored = sorted(s for bucket in self.buckets.values() for s in bucket)
        self.buckets = {}
        for sample in stored:
            self.buckets.setdefault(self._key(sample[1]), deque()).append(sample)

    def _retire_one(self) -> None:
        # Fattest bucket; ties go to the bucket whose head (oldest sample) is oldest.
        key = min(self.buckets, key=lambda k: (-len(self.buckets[k]), self.buckets[k][0][0]))
        bucket = self.buckets[key]
        bucket.popleft()
        if not bucket:
            del self.buckets[key]
        self.total -= 1


@dataclass(frozen=True)
class LinearFit:
    """``wall_time = intercept + sum(coefficients * features)``, floored at 1 µs.

    >>> LinearFit(coefficients=(0.001,), intercept=0.002).predict((1500.0,))
    1.502
    >>> LinearFit(coefficients=(0.001,), intercept=-5.0).predict((0.0,))
    1e-06
    """

    coefficients: tuple[float, ...]
    intercept: float

    def predict(self, x: Sequence[float]) -> float:
        """Predicted wall time (seconds) of one forward pass with features ``x``."""
        value = self.intercept
        for c, v in zip(self.coefficients, x, strict=True):
            value += c * v
        return max(MIN_WALL_TIME_S, value)

    def named_coefficients(self, names: Sequence[str]) -> dict[str, float]:
        """Slope per feature name, then ``"intercept"``."""
        out = dict(zip(names, self.coefficients, strict=True))
        out["intercept"] = self.intercept
        return out


@dataclass(frozen=True)
class FitOutcome:
    """A fit, or the reason there is none (``fit is None``).

    >>> FitOutcome(LinearFit(coefficients=(0.2,), intercept=0.1)).fit.predict((2.0,))
    0.5
    >>> rejected = least_squares([(1.0,), (2.0,), (3.0,)], [0.7, 0.5, 0.3], names=("isl",))
    >>> rejected.fit is None, rejected.reason
    (True, 'negative coefficients (isl=-0.2): model rejected')
    """

    fit: LinearFit | None
    reason: str = ""


def least_squares(
    xs: Sequence[Features],
    ys: Sequence[float],
    relaxable: frozenset[int] = frozenset(),
    names: Sequence[str] = (),
) -> FitOutcome:
    """Exact OLS with intercept; a negative slope on a ``relaxable`` feature is clipped to zero
    (spec §3.1: the other coefficients and the intercept stay those of the full fit), on any
    other feature it rejects the fit. A negative slope whose contribution over the observed
    range is below ``NEGLIGIBLE_CONTRIBUTION_S`` counts as zero (rounding, not a trend).

    >>> fit = least_squares([(1.0, 1.0), (2.0, 1.0), (3.0, 2.0)], [0.3, 0.5, 0.5], {1}).fit
    >>> [round(c, 12) for c in fit.coefficients], round(fit.intercept, 12)  # full fit: 0.2, -0.2
    ([0.2, 0.0], 0.3)

    >>> fit = least_squares([(1.0,), (2.0,), (3.0,)], [0.3, 0.5, 0.7]).fit
    >>> round(fit.coefficients[0], 12), round(fit.intercept, 12)
    (0.2, 0.1)
    >>> least_squares([(1.0,), (2.0,), (3.0,)], [0.7, 0.5, 0.3]).reason
    'negative coefficients (#0=-0.2): model rejected'
    """
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    if x.ndim != 2 or x.shape[0] != y.shape[0] or x.shape[0] == 0:
        raise ValueError("least_squares needs a non-empty (n, k) feature matrix and n targets")
    x_mean = np.mean(x, axis=0)
    y_mean = float(np.mean(y))
    coef = np.linalg.lstsq(x - x_mean, y - y_mean, rcond=None)[0]
    intercept = y_mean - float(x_mean @ coef)
    scale = np.max(np.abs(x), axis=0)
    negligible = (coef < 0.0) & (coef * scale > -NEGLIGIBLE_CONTRIBUTION_S)
    coef[negligible] = 0.0
    hard = [i for i in range(x.shape[1]) if coef[i] < 0.0 and i not in relaxable]
    if hard:
        slopes = ", ".join(f"{names[i] if i < len(names) else f'#{i}'}={coef[i]:.3g}" for i in hard)
        return FitOutcome(None, f"negative coefficients ({slopes}): model rejected")
    coef = np.maximum(coef, 0.0)  # only relaxable slopes can still be negative here
    return FitOutcome(LinearFit(tuple(float(c) for c in coef), float(intercept)))
