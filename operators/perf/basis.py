"""Continuous piecewise-linear basis for the perf models: a monotone least-squares fit (ours).

A prefill forward pass is not a straight line in its tokens: it has a fixed per-pass floor and
its attention grows super-linearly with the prompt. With ``PlannerConfig.perf_model_basis =
"piecewise"`` a model fits, instead of one slope per feature, a *continuous piecewise-linear*
function of each feature it expands (the other features stay linear)::

    wall = b + sum_i [ a_i x_i + sum_j h_ij max(0, x_i - k_ij) ]      (hinge form)

Knots. Per expanded feature, the distinct retained values ``u_0 < … < u_{n-1}`` are split into
``m = min(max_segments, n - 1)`` segments at evenly spaced order statistics
``k_j = u_{floor(j (n-1) / m + 1/2)}``, ``j = 0 … m`` (:func:`segment_knots`): the ends are the
smallest and largest retained value, every knot is a retained value, so every segment has data
at both ends and the fit is identified. On an evenly spaced profile (the shipped H200 one: ISL
100, 1117, …, 16372) with ``m = n - 1`` the knots are the profile's own points, which are also
the sample store's bucket edges. A feature with fewer than two distinct values has no segment
(slope 0, as the minimum-norm linear fit gives it).

Fit. The same function space is written in the *segment-slope* basis
``phi_j(x) = clip(x, k_j, k_{j+1}) - k_j`` (the first segment extended below ``k_0``, the last
beyond ``k_m``), whose coefficients are the segment slopes ``s_j``. The function is
non-decreasing in every feature exactly when every ``s_j >= 0``; a prefill pass never gets
cheaper with more tokens. The intercept is free: it is eliminated exactly by centering (for any
slopes the best intercept is ``mean(y) - mean(Phi) s``), and the slopes solve the non-negative
least-squares problem on the centered columns by the Lawson-Hanson active-set method
(:func:`monotone_least_squares`). What is exact:

* the result is THE least-squares fit among the continuous piecewise-linear functions with these
  knots that are non-decreasing in every feature (the active-set method ends at the KKT point
  of this convex problem; no iteration cap is reached on these sizes, and round-off aside);
* when the unconstrained least-squares fit over the same basis is already non-decreasing, it is
  that fit: ``numpy.linalg.lstsq`` on ``[1, x, max(0, x - k_j)]`` gives the same function;
* one repair, below a nanosecond: a change of slope between neighbouring segments whose effect
  over the retained range is under ``NEGLIGIBLE_CONTRIBUTION_S`` (1 ns) is set to exactly 0 and
  the intercept refitted, so exactly linear data gives hinge coefficients of exactly 0 (the
  linear model's line). The slopes stay non-negative (each is a slope the fit produced).

Beyond the knots the first and last segments continue linearly: above the largest retained
value with the last segment's slope (never negative). Predictions are floored at 1 µs like the
linear fit's.

>>> xs = [(float(t),) for t in (100, 1100, 2100, 3100)]
>>> fit = monotone_least_squares(xs, [0.020, 0.040, 0.070, 0.110], max_segments=(3,))
>>> [round(fit.predict((t,)) * 1000, 6) for t in (100, 1600, 3100, 4100)]
[20.0, 55.0, 110.0, 150.0]
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from operators.perf.samples import MIN_WALL_TIME_S, NEGLIGIBLE_CONTRIBUTION_S

PerfModelBasis = Literal["linear", "piecewise"]
"""``linear``: one slope per feature (the reference). ``piecewise``: the monotone continuous
piecewise-linear fit of this module on the features a model expands."""

PERF_MODEL_BASES: tuple[PerfModelBasis, ...] = ("linear", "piecewise")


class WallTimeFit(Protocol):
    """What the perf models need of a fit: a wall time and its named coefficients.

    Any class with these two methods is one (a structural type):

    >>> class Flat:
    ...     def predict(self, x): return 0.01
    ...     def named_coefficients(self, names): return {"intercept": 0.01}
    >>> fit: WallTimeFit = Flat()
    >>> fit.predict([512.0])
    0.01
    """

    def predict(self, x: Sequence[float]) -> float:
        """Predicted wall time (seconds, floored at 1 µs) of a forward pass with features ``x``."""
        ...

    def named_coefficients(self, names: Sequence[str]) -> dict[str, float]:
        """Coefficients by name, ``"intercept"`` last."""
        ...


def segment_knots(values: Iterable[float], max_segments: int) -> tuple[float, ...]:
    """Knots ``k_0 … k_m`` at evenly spaced order statistics of the distinct ``values``.

    ``m = min(max_segments, distinct - 1)``; ``()`` / ``(v,)`` when there are no / one distinct
    value (no segment).

    >>> segment_knots([5.0, 1.0, 3.0, 3.0, 9.0, 7.0], 2)
    (1.0, 5.0, 9.0)
    >>> segment_knots([4.0, 4.0], 8), segment_knots(range(0, 4), 8)
    ((4.0,), (0.0, 1.0, 2.0, 3.0))
    """
    if max_segments < 1:
        raise ValueError(f"max_segments must be >= 1, got {max_segments!r}")
    distinct = sorted({float(v) for v in values})
    n = len(distinct)
    if n < 2:
        return tuple(distinct)
    m = min(max_segments, n - 1)
    # floor(j (n - 1) / m + 1/2) in integers; steps are >= 1, so the indices are distinct
    return tuple(distinct[(2 * j * (n - 1) + m) // (2 * m)] for j in range(m + 1))


def segment_slope_columns(x: np.ndarray, knots: Sequence[float]) -> np.ndarray:
    """The segment-slope basis ``phi_j(x)`` (one column per segment) of one feature.

    >>> segment_slope_columns(np.array([0.0, 1.5, 5.0]), (1.0, 2.0, 4.0)).tolist()
    [[-1.0, 0.0], [0.5, 0.0], [1.0, 3.0]]
    """
    m = len(knots) - 1
    columns = np.empty((x.shape[0], max(m, 0)))
    for j in range(m):
        lower = -np.inf if j == 0 else knots[j]
        upper = np.inf if j == m - 1 else knots[j + 1]
        columns[:, j] = np.clip(x, lower, upper) - knots[j]
    return columns


def hinge_columns(x: np.ndarray, knots: Sequence[Sequence[float]]) -> np.ndarray:
    """The hinge basis ``[x_i, max(0, x_i - k_ij) for interior knots]`` (no constant column).

    The unconstrained least-squares fit on ``[1, hinge_columns]`` is the reference against which
    :func:`monotone_least_squares` is tested.

    >>> hinge_columns(np.array([[1.0, 7.0], [3.0, 8.0]]), [(0.0, 2.0, 4.0), (7.0, 8.0)]).tolist()
    [[1.0, 0.0, 7.0], [3.0, 1.0, 8.0]]
    """
    columns = []
    for i, ks in enumerate(knots):
        if len(ks) < 2:
            continue
        columns.append(x[:, i])
        columns.extend(np.maximum(0.0, x[:, i] - k) for k in ks[1:-1])
    return np.column_stack(columns) if columns else np.empty((x.shape[0], 0))


@dataclass(frozen=True)
class PiecewiseLinearFit:
    """``wall = offset + sum_i g_i(x_i)``, ``g_i`` piecewise linear with ``g_i(k_i0) = 0``.

    ``knots[i]`` are feature ``i``'s knots ``k_0 … k_m``, ``slopes[i]`` its ``m`` segment
    slopes and ``levels[i][j] = g_i(k_ij)``. Floored at 1 µs.

    >>> fit = PiecewiseLinearFit(knots=((100.0, 1100.0, 2100.0),), slopes=((2e-5, 3e-5),),
    ...                          levels=((0.0, 0.02),), offset=0.02)
    >>> [round(fit.predict((t,)), 6) for t in (0, 100, 1600, 3100)]
    [0.018, 0.02, 0.055, 0.1]
    >>> {k: round(v, 9) for k, v in fit.named_coefficients(("tokens",)).items()}
    {'tokens': 2e-05, 'tokens>1100': 1e-05, 'intercept': 0.018}
    """

    knots: tuple[tuple[float, ...], ...]
    slopes: tuple[tuple[float, ...], ...]
    levels: tuple[tuple[float, ...], ...]
    offset: float

    def predict(self, x: Sequence[float]) -> float:
        """Predicted wall time (seconds) of one forward pass with features ``x``."""
        value = self.offset
        for v, ks, ss, gs in zip(x, self.knots, self.slopes, self.levels, strict=True):
            if ss:
                j = min(max(bisect_right(ks, v) - 1, 0), len(ss) - 1)
                value += gs[j] + ss[j] * (v - ks[j])
        return max(MIN_WALL_TIME_S, value)

    @property
    def intercept(self) -> float:
        """The (unfloored) value with every feature at 0: ``b`` of the hinge form."""
        pairs = zip(self.knots, self.slopes, strict=True)
        return self.offset - sum(ss[0] * ks[0] for ks, ss in pairs if ss)

    def named_coefficients(self, names: Sequence[str]) -> dict[str, float]:
        """Hinge form: ``a_i`` under the feature's name, ``h_ij`` under ``"name>knot"``, then
        ``"intercept"`` (``b``)."""
        out: dict[str, float] = {}
        for name, ss in zip(names, self.slopes, strict=True):
            out[name] = ss[0] if ss else 0.0
        for name, ks, ss in zip(names, self.knots, self.slopes, strict=True):
            for j in range(1, len(ss)):
                out[f"{name}>{ks[j]:.15g}"] = ss[j] - ss[j - 1]
        out["intercept"] = self.intercept
        return out


def monotone_least_squares(
    xs: Sequence[Sequence[float]], ys: Sequence[float], max_segments: Sequence[int]
) -> PiecewiseLinearFit:
    """The least-squares continuous piecewise-linear fit, non-decreasing in every feature.

    ``max_segments[i]`` bounds feature ``i``'s segments (1 keeps it linear); see the module
    docstring for the knots and what is exact.

    >>> fit = monotone_least_squares([(1.0,), (2.0,), (3.0,)], [0.3, 0.5, 0.7], (2,))
    >>> {name: round(value, 12) for name, value in fit.named_coefficients(("x",)).items()}
    {'x': 0.2, 'x>2': 0.0, 'intercept': 0.1}
    >>> flat = monotone_least_squares([(1.0,), (2.0,), (3.0,)], [0.7, 0.5, 0.3], (2,))
    >>> [round(flat.predict((t,)), 12) for t in (1.0, 3.0)]  # decreasing data: a flat line
    [0.5, 0.5]
    """
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    if x.ndim != 2 or x.shape[0] != y.shape[0] or x.shape[0] == 0:
        raise ValueError("monotone_least_squares needs a non-empty (n, k) matrix and n targets")
    if len(max_segments) != x.shape[1]:
        raise ValueError(f"expected {x.shape[1]} max_segments, got {len(max_segments)}")
    knots = [segment_knots(x[:, i], max_segments[i]) for i in range(x.shape[1])]
    blocks = [segment_slope_columns(x[:, i], ks) for i, ks in enumerate(knots)]
    phi = np.hstack(blocks)
    y_mean = float(np.mean(y))
    phi_mean = np.mean(phi, axis=0)
    slopes = non_negative_least_squares(phi - phi_mean, y - y_mean) if phi.shape[1] else phi_mean
    per_feature: list[tuple[float, ...]] = []
    start = 0
    for ks in knots:
        m = max(len(ks) - 1, 0)
        per_feature.append(_snap_negligible_changes(slopes[start : start + m], ks))
        start += m
    flat = np.array([s for ss in per_feature for s in ss])
    offset = y_mean - float(phi_mean @ flat) if flat.size else y_mean
    levels = tuple(
        tuple(float(v) for v in np.concatenate(([0.0], np.cumsum(np.diff(ks)[:-1] * ss[:-1]))))
        if ss
        else ()
        for ks, ss in zip(knots, per_feature, strict=True)
    )
    return PiecewiseLinearFit(
        knots=tuple(tuple(ks) for ks in knots),
        slopes=tuple(per_feature),
        levels=levels,
        offset=float(offset),
    )


def _snap_negligible_changes(slopes: np.ndarray, knots: Sequence[float]) -> tuple[float, ...]:
    """Each slope that differs from the (snapped) previous one by less than 1 ns over the
    retained range takes the previous one's value (so every slope stays one the fit produced)."""
    if slopes.size == 0:
        return ()
    span = knots[-1] - knots[0]
    out = [max(0.0, float(slopes[0]))]
    for s in slopes[1:]:
        value = max(0.0, float(s))
        out.append(out[-1] if abs(value - out[-1]) * span < NEGLIGIBLE_CONTRIBUTION_S else value)
    return tuple(out)


def non_negative_least_squares(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``argmin ||a z - b||`` subject to ``z >= 0``: Lawson-Hanson active set.

    Columns are scaled to unit norm for the solve (a positive scaling keeps the constraint);
    all-zero columns get 0. Ends at the KKT point (the gradient is <= tol on every variable held
    at 0); raises ``RuntimeError`` if it has not after ``10 (k + 1)`` outer iterations.

    >>> a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> non_negative_least_squares(a, np.array([2.0, -1.0, 1.0])).round(12).tolist()
    [1.5, 0.0]
    """
    n, k = a.shape
    norms = np.linalg.norm(a, axis=0)
    usable = norms > 0
    scaled = np.zeros_like(a)
    scaled[:, usable] = a[:, usable] / norms[usable]
    tol = 10.0 * np.finfo(float).eps * max(n, k) * max(1.0, float(np.linalg.norm(b)))
    z = np.zeros(k)
    passive = np.zeros(k, dtype=bool)
    refused = np.zeros(k, dtype=bool)  # entered with a non-positive solution since z last moved
    for _ in range(10 * (k + 1)):
        gradient = scaled.T @ (b - scaled @ z)
        candidates = ~passive & ~refused & usable & (gradient > tol)
        if not candidates.any():
            out = np.zeros(k)
            out[usable] = z[usable] / norms[usable]
            return out
        entering = int(np.argmax(np.where(candidates, gradient, -np.inf)))
        passive[entering] = True
        trial = _passive_solution(scaled, b, passive)
        if trial[entering] <= 0:  # round-off: the gradient promised a positive value
            passive[entering] = False
            refused[entering] = True
            continue
        while not np.all(trial[passive] > 0):
            blocking = passive & (trial <= 0)
            step = float(np.min(z[blocking] / (z[blocking] - trial[blocking])))
            z = z + step * (trial - z)
            passive &= z > tol
            z[~passive] = 0.0
            trial = _passive_solution(scaled, b, passive)
        z = trial
        refused[:] = False
    raise RuntimeError("non-negative least squares did not converge")


def _passive_solution(a: np.ndarray, b: np.ndarray, passive: np.ndarray) -> np.ndarray:
    out = np.zeros(a.shape[1])
    if passive.any():
        out[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
    return out
