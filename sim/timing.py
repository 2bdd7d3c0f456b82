"""Iteration wall times of simulated engines, calibrated from a pre-deployment profile.

The model (chosen to reproduce every profile point exactly, and cheap to evaluate in Python):

* **Prefill.** The profile gives TTFT(ISL) for single prompts. Let ``c0`` be the TTFT
  extrapolated to zero tokens (straight line through the first two points, clamped to
  ``[0, TTFT(first)]``; 17.66 ms on the H200 / Llama-3.1-8B-FP8 profile) and
  ``g(x) = TTFT(x) - c0`` the piecewise-linear work curve through the points (extrapolated with
  the last segment's slope). A prefill iteration that computes, for each scheduled prompt ``i``,
  ``P_i`` new tokens on top of ``R_i`` tokens already in KV (prefix-cache hits or earlier
  chunks) takes ``c0 + sum_i [g(R_i + P_i) - g(R_i)]``. A single uncached prompt therefore
  takes exactly the profile's TTFT; chunks of a long prompt each pay ``c0`` again, and cache
  hits save the work of the cached prefix while the attention over it stays in ``g``.
* **Decode.** The profile gives ITL at (KV usage ``u``, context length ``c``) on rows of constant
  ``c``. A decode iteration of ``B`` requests holding ``K`` KV tokens in total has ``c = K / B``;
  its time is interpolated linearly in ``c`` between the two rows that bracket it, each read at
  the SAME batch size ``B`` (row ``r`` at ``u = B · c_r / max_kv_tokens``, piecewise-linearly
  along the row). Reading the rows at the same batch rather than the same KV fraction keeps the
  model inside the batch sizes the engine runs (the shortest-context row reaches batches of
  ~1 000 at the fraction a 256-request batch of longer context holds) and makes the time grow
  with context at a fixed batch. ``c`` below the shortest row clamps to it. Beyond the longest
  row ``c_N`` the time extends linearly in ``c`` at the same batch, with the non-negative slope
  of the chord from the shortest row ``c_0`` to ``c_N`` read at that batch:
  ``itl(c) = itl(c_N) + max(0, (itl(c_N) - itl(c_0)) / (c_N - c_0)) · (c - c_N)`` — the
  profile's per-KV-token attention cost (2.8-3.4 ms per 100 k KV tokens at batches 1-67 on the
  H200 profile), so decoding keeps slowing as long contexts fill the KV cache. ``u`` below a
  row's first point clamps to it, above its last point extends with the last non-negative slope.
* **Mixed (aggregated) iterations** add the decode part's cost above the batch-1 floor
  ``d0 = ITL(B=1, K->0)`` to the prefill cost:
  ``c0 + sum_i [...] + max(0, itl(B, K) - d0)``.

Error against the shipped profile (``tests/data/profiles/h200_llama3.1-8b-fp8_tp1``):
0.000 % at all 17 prefill and all 41 decode points (interpolation through the points; checked
in ``tests/sim/test_timing.py``), and one request on one engine reproduces the profile's TTFT
and ITL within 0.3 % — except prompts longer than the engine's ``max_num_batched_tokens``
(8 192 in the benchmark), which the engine prefills in chunks that each pay the iteration
overhead ``c0``: +10 % at the profile's 8 236-token point, +5 % at 16 372 (the profile, taken
with the engine's defaults, already contains its own chunking). Leave-one-out (each interior
point predicted from the others, a measure of the error between points): prefill TTFT 3.5 %
mean / 9.7 % max over 15 points; decode ITL 3.9 % mean / 13.9 % max over 29 points (worst at
context 8291, batch 19, between the batch-1 point and the next sample of that row).
Beyond the longest context row (13 585 tokens on this profile) the decode time is extrapolated:
holding that row out and extrapolating from the others predicts its 7 points 4.6 % low on mean
(-11.8 % to +0.1 %), where the slope between the last two rows alone misses by up to 19 %.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from schemas.profile import DecodeProfile, PerformanceProfile, PrefillProfile


class PrefillTiming:
    """Prefill iteration time (seconds) from the profile's TTFT(ISL) points.

    >>> t = PrefillTiming([100, 1100, 2100], [20.0, 40.0, 70.0])
    >>> round(t.overhead_s * 1000, 6), round(t.iteration_s([(0, 1100)]) * 1000, 6)
    (18.0, 40.0)
    >>> round(t.iteration_s([(1000, 100)]) * 1000, 6)  # last 100 tokens of a cached prompt
    20.0
    """

    __slots__ = ("_slopes", "_xs", "_ys", "overhead_s")

    def __init__(self, isl: Sequence[float], ttft_ms: Sequence[float]) -> None:
        pairs = sorted(zip(isl, ttft_ms, strict=True))
        if len(pairs) < 2 or pairs[0][0] <= 0:
            raise ValueError("prefill profile needs at least two points with ISL > 0")
        (x0, y0), (x1, y1) = pairs[0], pairs[1]
        c0 = y0 - (y1 - y0) / (x1 - x0) * x0
        c0 = min(max(c0, 0.0), y0)
        self.overhead_s = c0 / 1000.0
        xs = [0.0] + [float(x) for x, _ in pairs]
        ys = [0.0] + [(y - c0) / 1000.0 for _, y in pairs]
        for i in range(1, len(ys)):  # work never decreases with more tokens
            ys[i] = max(ys[i], ys[i - 1])
        self._xs = xs
        self._ys = ys
        self._slopes = [
            (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]) if xs[i + 1] > xs[i] else 0.0
            for i in range(len(xs) - 1)
        ]

    @classmethod
    def from_profile(cls, profile: PrefillProfile) -> PrefillTiming:
        """Calibrate from a :class:`schemas.profile.PrefillProfile`."""
        return cls(profile.prefill_isl, profile.prefill_ttft)

    def work_s(self, tokens: float) -> float:
        """``g(tokens)``: compute time of a prompt prefix of this length, without overhead."""
        xs = self._xs
        if tokens <= 0:
            return 0.0
        i = bisect_right(xs, tokens) - 1
        if i >= len(self._slopes):
            i = len(self._slopes) - 1
        return self._ys[i] + self._slopes[i] * (tokens - xs[i])

    def chunk_s(self, computed: int, tokens: int) -> float:
        """Work of ``tokens`` new tokens on top of ``computed`` tokens already in KV."""
        return self.work_s(computed + tokens) - self.work_s(computed)

    def iteration_s(self, chunks: Sequence[tuple[int, int]]) -> float:
        """Time of a prefill-only iteration of ``(computed, new_tokens)`` chunks."""
        return self.overhead_s + sum(self.chunk_s(r, p) for r, p in chunks)

    def ttft_s(self, isl: int) -> float:
        """Time of a single uncached prompt (equals the profile's TTFT at its points)."""
        return self.overhead_s + self.work_s(isl)


class DecodeTiming:
    """Decode iteration time (seconds) of ``batch`` requests holding ``kv_tokens`` KV tokens.

    >>> t = DecodeTiming([0.001, 0.5, 0.002, 0.5], [1000, 1000, 2000, 2000], [5.0, 25.0, 6.0,
    ...                  30.0], max_kv_tokens=1_000_000)
    >>> round(t.itl_s(1, 1000) * 1000, 6), round(t.itl_s(250, 500_000) * 1000, 6)
    (5.0, 30.0)
    >>> round(t.itl_s(1, 3000) * 1000, 6)  # beyond the longest row: +1 ms per 1000 tokens
    7.0
    """

    __slots__ = ("_cs", "_rows", "floor_s", "inv_max_kv")

    def __init__(
        self,
        kv_usage: Sequence[float],
        context_length: Sequence[float],
        itl_ms: Sequence[float],
        max_kv_tokens: int,
    ) -> None:
        if max_kv_tokens <= 0:
            raise ValueError("max_kv_tokens must be positive")
        by_ctx: dict[float, list[tuple[float, float]]] = {}
        for u, c, v in zip(kv_usage, context_length, itl_ms, strict=True):
            by_ctx.setdefault(float(c), []).append((float(u), float(v) / 1000.0))
        if not by_ctx:
            raise ValueError("decode profile is empty")
        self._cs = sorted(by_ctx)
        self._rows = []
        for c in self._cs:
            pts = sorted(by_ctx[c])
            us = [u for u, _ in pts]
            vs = [v for _, v in pts]
            slopes = [
                (vs[i + 1] - vs[i]) / (us[i + 1] - us[i]) if us[i + 1] > us[i] else 0.0
                for i in range(len(us) - 1)
            ]
            tail = max(slopes[-1], 0.0) if slopes else 0.0
            # segment k = bisect_right(us, u): below the first point constant, between points
            # linear, beyond the last point the last non-negative slope
            n = len(us)
            bx = [us[0], *us[: n - 1], us[n - 1]]
            bv = [vs[0], *vs[: n - 1], vs[n - 1]]
            sl = [0.0, *slopes, tail]
            self._rows.append((us, bx, bv, sl))
        self.inv_max_kv = 1.0 / max_kv_tokens
        self.floor_s = self._rows[0][2][0]

    @classmethod
    def from_profile(cls, profile: DecodeProfile) -> DecodeTiming:
        """Calibrate from a :class:`schemas.profile.DecodeProfile`."""
        return cls(
            profile.x_kv_usage, profile.y_context_length, profile.z_itl, profile.max_kv_tokens
        )

    def _row_s(self, r: int, per_token: float) -> float:
        """Time on context row ``r`` at the batch whose KV usage per context token is given."""
        us, bx, bv, sl = self._rows[r]
        u = per_token * self._cs[r]
        k = bisect_right(us, u)
        return bv[k] + sl[k] * (u - bx[k])

    def itl_s(self, batch: int, kv_tokens: float) -> float:
        """Iteration time of a decode batch (the profile's ITL at its points)."""
        if batch <= 0:
            return 0.0
        c = kv_tokens / batch
        per_token = batch * self.inv_max_kv  # KV usage of this batch per token of context
        cs = self._cs
        rows = self._rows
        j = bisect_right(cs, c) - 1
        # each context row read at the same batch: u = per_token * c_row on row r, then
        # bv[k] + sl[k] * (u - bx[k]) at k = bisect_right(us, u) (inlined: a hot path)
        if j < 0:
            return self._row_s(0, per_token)
        if j >= len(cs) - 1:
            last = self._row_s(-1, per_token)
            if c <= cs[-1] or len(cs) < 2:
                return last
            # beyond the longest row: linear in context at this batch, with the slope of the
            # chord from the shortest row (the profile's per-KV-token cost), never negative
            slope = (last - self._row_s(0, per_token)) / (cs[-1] - cs[0])
            return last + slope * (c - cs[-1]) if slope > 0.0 else last
        # the same batch size on both bracketing context rows, then linear in context
        c_lo = cs[j]
        c_hi = cs[j + 1]
        us, bx, bv, sl = rows[j]
        u = per_token * c_lo
        k = bisect_right(us, u)
        lo = bv[k] + sl[k] * (u - bx[k])
        us, bx, bv, sl = rows[j + 1]
        u = per_token * c_hi
        k = bisect_right(us, u)
        hi = bv[k] + sl[k] * (u - bx[k])
        w = (c - c_lo) / (c_hi - c_lo)
        return lo * (1.0 - w) + hi * w


class EngineTiming:
    """Prefill, decode and mixed iteration times of one engine configuration.

    >>> from schemas.profile import DecodeProfile, PerformanceProfile, PrefillProfile
    >>> prof = PerformanceProfile(
    ...     prefill=PrefillProfile(prefill_isl=[100, 1100], prefill_ttft=[20, 40],
    ...                            prefill_thpt_per_gpu=[5000, 27500]),
    ...     decode=DecodeProfile(x_kv_usage=[0.001, 0.5], y_context_length=[1000, 1000],
    ...                          z_itl=[5, 25], z_thpt_per_gpu=[200, 9000],
    ...                          max_kv_tokens=1_000_000))
    >>> t = EngineTiming.from_profile(prof)
    >>> round(t.mixed_s(0.0, 0, 0) * 1000, 6), round(t.mixed_s(0.002, 1, 1000) * 1000, 6)
    (18.0, 20.0)
    """

    __slots__ = ("decode", "prefill")

    def __init__(self, prefill: PrefillTiming, decode: DecodeTiming) -> None:
        self.prefill = prefill
        self.decode = decode

    @classmethod
    def from_profile(cls, profile: PerformanceProfile) -> EngineTiming:
        """Both sweeps are required to simulate an engine."""
        if profile.prefill is None or profile.decode is None:
            raise ValueError("the simulator needs a profile with both prefill and decode sweeps")
        return cls(
            PrefillTiming.from_profile(profile.prefill), DecodeTiming.from_profile(profile.decode)
        )

    def mixed_s(self, prefill_work_s: float, batch: int, kv_tokens: float) -> float:
        """An iteration with prefill work (sum of chunk works) and a decode batch."""
        p = self.prefill.overhead_s + prefill_work_s
        if batch <= 0:
            return p
        extra = self.decode.itl_s(batch, kv_tokens) - self.decode.floor_s
        return p + extra if extra > 0.0 else p
