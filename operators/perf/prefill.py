"""Prefill engine perf model: forward-pass time vs prefill tokens (reference spec §3.3)."""

from __future__ import annotations

import math

from operators.perf.basis import PerfModelBasis
from operators.perf.moving_average import MovingAverage, PrefillShape
from operators.perf.regression import (
    FpmRegressor,
    chunked_prefill_seconds,
    clamp_kv_hit_rate,
    require_finite,
)
from schemas import ForwardPassMetrics


class PrefillPerfModel(PrefillShape, FpmRegressor):
    """Online OLS of prefill wall time on ``sum_prefill_tokens`` (1-D).

    Moving averages (window ``max_num_fpm_samples``): ``avg_isl`` (prefill tokens per scheduled
    request, i.e. the chunk per request under chunked prefill) and ``avg_num_prefill``.

    With ``basis="piecewise"`` the wall time is a non-decreasing continuous piecewise-linear
    function of the tokens (up to ``bucket_count`` segments; :mod:`operators.perf.basis`), which
    passes through every point of a (non-decreasing) profile bootstrap: the per-pass floor at
    short prompts and the super-linear growth of long ones that one line misses.

    >>> from schemas import ForwardPassMetrics, ScheduledRequestMetrics
    >>> model = PrefillPerfModel(min_observations=3)
    >>> for tokens in (500, 1000, 1500, 2000, 2500):
    ...     model.add_observation(ForwardPassMetrics(wall_time=0.001 * tokens + 0.002,
    ...         scheduled_requests=ScheduledRequestMetrics(num_prefill_requests=1,
    ...                                                    sum_prefill_tokens=tokens)))
    >>> round(model.estimate_next_ttft(0, 2048), 6)
    1.502
    >>> rps, ttft_ms = model.find_best_engine_prefill_rps(ttft_sla_ms=2000, isl=1000)
    >>> round(rps, 5), round(ttft_ms, 3)
    (0.998, 1002.0)
    >>> curved = PrefillPerfModel(min_observations=3, basis="piecewise")
    >>> for tokens, ms in ((100, 20), (1100, 40), (2100, 70), (3100, 110)):
    ...     curved.learn_one({"sum_prefill_tokens": tokens}, ms / 1000)
    >>> [round(curved.predict_one({"sum_prefill_tokens": t}) * 1000, 6) for t in (100, 1600, 4100)]
    [20.0, 55.0, 150.0]
    """

    feature_names = ("sum_prefill_tokens",)
    piecewise_features = frozenset({0})

    def __init__(
        self,
        max_num_fpm_samples: int = 64,
        min_observations: int = 5,
        bucket_count: int = 16,
        basis: PerfModelBasis = "linear",
        suspect_factor: float | None = None,
    ) -> None:
        super().__init__(max_num_fpm_samples, min_observations, bucket_count, basis, suspect_factor)
        self.isl_average = MovingAverage(max_num_fpm_samples)
        self.num_prefill_average = MovingAverage(max_num_fpm_samples)

    def _features_of(self, fpm: ForwardPassMetrics) -> tuple[float, ...]:
        return (float(fpm.scheduled_requests.sum_prefill_tokens),)

    def _observe_averages(self, fpm: ForwardPassMetrics) -> None:
        self._observe_prefill(fpm.scheduled_requests)

    def estimate_next_ttft(
        self,
        queued_prefill_tokens: float,
        max_num_batched_tokens: float,
        kv_hit_rate: float | None = None,
    ) -> float | None:
        """Seconds until a request joining now finishes prefill, or ``None`` if not ready.

        The queue plus one average request, discounted by the clamped KV hit rate, is prefilled
        in chunks of ``max_num_batched_tokens``. ``None`` also when ``max_num_batched_tokens <= 0``.
        """
        queued = require_finite("queued_prefill_tokens", queued_prefill_tokens)
        mbt = require_finite("max_num_batched_tokens", max_num_batched_tokens)
        fit = self._fit()
        if fit is None or mbt <= 0:
            return None
        total = (queued + self.avg_isl) * (1.0 - clamp_kv_hit_rate(kv_hit_rate))
        return chunked_prefill_seconds(total, mbt, lambda c: fit.predict((c,)))

    def find_best_engine_prefill_rps(
        self,
        ttft_sla_ms: float,
        isl: float,
        max_num_batched_tokens: float | None = None,
        max_batch_requests: int | None = None,
    ) -> tuple[float, float]:
        """``(requests/s one engine sustains, TTFT ms of one request)`` at this ISL.

        ``(0.0, 0.0)`` when not ready or ``isl <= 0``. A prompt longer than
        ``max_num_batched_tokens`` is prefilled in full chunks plus a tail. The TTFT may exceed
        ``ttft_sla_ms``; the caller compares (a linear model's rate does not depend on batching).
        Callers pass the KV-hit-discounted ISL.

        Ours, with ``max_batch_requests`` (usually ``max_num_seqs``) and the token budget: an
        engine under load packs ``B`` prompts into one forward pass, paying the per-pass
        intercept once, so it sustains ``B / time(B · isl)`` requests/s; ``B`` is the largest
        batch that fits ``max_num_batched_tokens`` and ``max_batch_requests`` and still meets
        ``ttft_sla_ms`` (1 when none does), as in the reference's newer capacity search (spec
        §3.6). Without it (the G2 reference), the rate is ``1 / time(isl)`` — and so it is while
        every sample the model holds has the same token count: its fit is then flat (nothing
        tells the per-token cost), and a pass of eight such prompts would be priced as one,
        putting the engine's rate at 5× the truth (light traffic of one prompt length, learned
        live).

        >>> from schemas import ForwardPassMetrics, ScheduledRequestMetrics
        >>> model = PrefillPerfModel(min_observations=2)
        >>> for tokens in (1000, 4000):
        ...     model.learn_one({"sum_prefill_tokens": tokens}, 0.02 + 2e-5 * tokens)
        >>> [round(v, 3) for v in model.find_best_engine_prefill_rps(500, 1000, 8192)]
        [25.0, 40.0]
        >>> [round(v, 3) for v in model.find_best_engine_prefill_rps(500, 1000, 8192, 256)]
        [44.444, 180.0]
        """
        require_finite("ttft_sla_ms", ttft_sla_ms)
        tokens = require_finite("isl", isl)
        fit = self._fit()
        if fit is None or tokens <= 0:
            return 0.0, 0.0
        mbt = (
            None
            if max_num_batched_tokens is None
            else require_finite("max_num_batched_tokens", max_num_batched_tokens)
        )
        if mbt is not None and mbt > 0 and tokens > mbt:
            chunks = math.ceil(tokens / mbt)
            tail = tokens - (chunks - 1) * mbt
            wall = (chunks - 1) * fit.predict((mbt,)) + fit.predict((tail,))
            return 1.0 / wall, 1000.0 * wall
        batch = 1
        if max_batch_requests is not None and mbt is not None and mbt > 0 and self._has_slope():
            # a prompt of under one token (a degenerate mean) still takes a slot of its own
            limit = max(1, min(int(max_batch_requests), int(mbt // max(tokens, 1.0))))
            low, high = 1, limit  # largest batch meeting the SLA; 1 when none does
            while low < high:
                mid = (low + high + 1) // 2
                if 1000.0 * fit.predict((mid * tokens,)) <= ttft_sla_ms:
                    low = mid
                else:
                    high = mid - 1
            batch = low
        wall = fit.predict((batch * tokens,))
        return batch / wall, 1000.0 * wall

    def _has_slope(self) -> bool:
        """The samples held span two token counts at least: the fit has a per-token cost."""
        return len({x for x, _ in self.samples.samples()}) > 1
