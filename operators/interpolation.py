"""Profile interpolators of the classic (G0 "SLA planner") throughput path (reference spec §6.2).

:class:`PrefillInterpolator` is a cubic spline over the profiled ISLs (TTFT and throughput per
GPU), the input ISL clamped to the profiled range. :class:`DecodeInterpolator` resamples the
scattered decode sweep onto a ``resolution × resolution`` grid of (KV usage fraction, context
length) with a cubic ``griddata`` (cells outside the samples' convex hull filled with the nearest
sample), then answers by index lookup.

Units follow the profile (§6.1): ISL and context in tokens, TTFT and ITL in ms, throughput in
tokens/s/GPU. Both classes hold plain numpy arrays (and a spline), so they pickle.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy.interpolate import griddata, make_interp_spline
from scipy.spatial import QhullError

from schemas.profile import DecodeProfile, PrefillProfile

_MIN_SPLINE_POINTS = 4  # a cubic spline through n points needs n >= 4


def _require_finite(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


class PrefillInterpolator:
    """TTFT (ms) and throughput per GPU (tokens/s) at an ISL, from the prefill sweep.

    The same curve as ``scipy.interpolate.interp1d(prefill_isl, y, kind="cubic")`` (a
    not-a-knot cubic spline, exact at the profiled points); an ISL outside
    ``[min_isl, max_isl]`` is clamped to the nearest end. Needs at least 4 distinct ISLs.

    >>> profile = PrefillProfile(prefill_isl=[1000, 2000, 3000, 4000],
    ...                          prefill_ttft=[20, 40, 60, 80],
    ...                          prefill_thpt_per_gpu=[30000, 40000, 45000, 47000])
    >>> prefill = PrefillInterpolator(profile)
    >>> round(prefill.interpolate_ttft(2500), 9), prefill.interpolate_ttft(10_000)
    (50.0, 80.0)
    >>> round(prefill.interpolate_thpt_per_gpu(2000), 6)
    40000.0
    """

    def __init__(self, profile: PrefillProfile) -> None:
        isl = np.asarray(profile.prefill_isl, dtype=float)
        order = np.argsort(isl, kind="stable")
        isl = isl[order]
        if isl.size < _MIN_SPLINE_POINTS:
            raise ValueError(
                f"prefill profile needs at least {_MIN_SPLINE_POINTS} points for a cubic "
                f"interpolation, got {isl.size}"
            )
        if np.any(np.diff(isl) <= 0):
            raise ValueError(f"prefill profile ISLs must be distinct, got {isl.tolist()}")
        self.min_isl = float(isl[0])
        self.max_isl = float(isl[-1])
        ttft = np.asarray(profile.prefill_ttft, dtype=float)[order]
        thpt = np.asarray(profile.prefill_thpt_per_gpu, dtype=float)[order]
        self._ttft = make_interp_spline(isl, ttft, k=3)
        self._thpt = make_interp_spline(isl, thpt, k=3)

    def _clamped(self, isl: float) -> float:
        return min(max(_require_finite("isl", isl), self.min_isl), self.max_isl)

    def interpolate_ttft(self, isl: float) -> float:
        """TTFT (ms) of one request of ``isl`` tokens (ISL clamped to the profiled range)."""
        return float(self._ttft(self._clamped(isl)))

    def interpolate_thpt_per_gpu(self, isl: float) -> float:
        """Prefill throughput (tokens/s/GPU) at ``isl`` (ISL clamped to the profiled range)."""
        return float(self._thpt(self._clamped(isl)))


class DecodeInterpolator:
    """ITL (ms) and throughput per GPU over (KV usage, context length), from the decode sweep.

    Grid: ``xi = linspace(0, 1, resolution)`` (KV usage fraction) by
    ``yi = linspace(0, max(y_context_length), resolution)`` (tokens); ``itl_grid[iy, ix]`` and
    ``thpt_grid[iy, ix]`` are cubic ``griddata`` of the samples, NaN cells (outside the convex
    hull) filled by ``method="nearest"``. A query maps ``kv_usage = concurrency * ctx /
    max_kv_tokens`` and ``ctx`` to the nearest grid indices, clipped to the grid (so a query
    beyond the grid answers with its edge cell).

    >>> profile = DecodeProfile(
    ...     x_kv_usage=[0.0, 0.5, 1.0] * 3,
    ...     y_context_length=[1000] * 3 + [2000] * 3 + [3000] * 3,
    ...     z_itl=[5, 15, 25, 6, 16, 26, 7, 17, 27],
    ...     z_thpt_per_gpu=[0, 5000, 10000, 0, 4000, 8000, 0, 3000, 6000],
    ...     max_kv_tokens=200_000)
    >>> decode = DecodeInterpolator(profile, resolution=101)  # steps of 0.01 and 30 tokens
    >>> decode.grid_index(concurrency=50, context_length=2010)  # kv usage 0.5025
    (50, 67)
    >>> round(decode.interpolate_itl(50, 2010), 2), decode.interpolate_itl(10**9, 10**9)
    (16.01, 27.0)
    >>> thpt, itl, kv_usage = decode.find_best_throughput_per_gpu(itl=16.0, context_length=2010)
    >>> round(thpt), round(itl, 2), kv_usage
    (3910, 15.81, 0.49)
    """

    def __init__(self, profile: DecodeProfile, resolution: int = 100) -> None:
        if isinstance(resolution, bool) or not isinstance(resolution, int) or resolution < 2:
            raise ValueError(f"resolution must be an integer >= 2, got {resolution!r}")
        if profile.max_kv_tokens < 1:
            raise ValueError(f"max_kv_tokens must be >= 1, got {profile.max_kv_tokens}")
        x = np.asarray(profile.x_kv_usage, dtype=float)
        y = np.asarray(profile.y_context_length, dtype=float)
        if y.size == 0 or not float(y.max()) > 0:
            raise ValueError("decode profile needs a context length > 0")
        self.resolution = resolution
        self.max_kv_tokens = int(profile.max_kv_tokens)
        self.xi: NDArray[np.float64] = np.linspace(0.0, 1.0, resolution)
        self.yi: NDArray[np.float64] = np.linspace(0.0, float(y.max()), resolution)
        grid = tuple(np.meshgrid(self.xi, self.yi))
        self.itl_grid = _resample((x, y), np.asarray(profile.z_itl, dtype=float), grid)
        self.thpt_grid = _resample((x, y), np.asarray(profile.z_thpt_per_gpu, dtype=float), grid)

    def _row(self, context_length: float) -> int:
        dy = self.yi[1] - self.yi[0]
        iy = np.round((_require_finite("context_length", context_length) - self.yi[0]) / dy)
        return int(np.clip(iy, 0, self.resolution - 1))

    def grid_index(self, concurrency: float, context_length: float) -> tuple[int, int]:
        """``(ix, iy)``: the grid cell of ``concurrency`` requests of ``context_length`` tokens."""
        context_length = _require_finite("context_length", context_length)
        kv_usage = _require_finite("concurrency", concurrency) * context_length / self.max_kv_tokens
        dx = self.xi[1] - self.xi[0]
        ix = int(np.clip(np.round((kv_usage - self.xi[0]) / dx), 0, self.resolution - 1))
        return ix, self._row(context_length)

    def interpolate_itl(self, concurrency: float, context_length: float) -> float:
        """ITL (ms) at ``concurrency`` requests of ``context_length`` tokens per engine."""
        ix, iy = self.grid_index(concurrency, context_length)
        return float(self.itl_grid[iy, ix])

    def interpolate_thpt_per_gpu(self, concurrency: float, context_length: float) -> float:
        """Decode throughput (tokens/s/GPU) at ``concurrency`` requests of ``context_length``."""
        ix, iy = self.grid_index(concurrency, context_length)
        return float(self.thpt_grid[iy, ix])

    def find_best_throughput_per_gpu(
        self, itl: float, context_length: float
    ) -> tuple[float, float, float]:
        """``(thpt_per_gpu, itl_ms, kv_usage)`` of the highest-KV-usage cell meeting ``itl``.

        Scans the ``context_length`` row from the last column down (a linear scan, because the
        interpolated ITL need not be monotone) and returns the first cell with
        ``itl_grid <= itl``; if none does, the ``kv_usage = 0`` cell (whose ITL then exceeds
        ``itl`` — the caller can see that).
        """
        target = _require_finite("itl", itl)
        iy = self._row(context_length)
        row = self.itl_grid[iy]
        meets = np.flatnonzero(row <= target)
        ix = int(meets[-1]) if meets.size else 0
        return float(self.thpt_grid[iy, ix]), float(row[ix]), float(self.xi[ix])


def _resample(
    points: tuple[NDArray[np.float64], NDArray[np.float64]],
    values: NDArray[np.float64],
    grid: tuple[NDArray[np.float64], ...],
) -> NDArray[np.float64]:
    """Cubic ``griddata`` on ``grid``, NaN cells (outside the hull) from the nearest sample."""
    try:
        cubic = np.asarray(griddata(points, values, grid, method="cubic"), dtype=float)
    except (QhullError, ValueError) as exc:
        raise ValueError(
            "decode profile samples cannot be triangulated (need at least 3 points not on one "
            f"line in (kv usage, context length)): {exc}"
        ) from exc
    missing = np.isnan(cubic)
    if missing.any():
        nearest = np.asarray(griddata(points, values, grid, method="nearest"), dtype=float)
        cubic[missing] = nearest[missing]
    cubic.setflags(write=False)
    return cubic
