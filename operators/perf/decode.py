"""Decode engine perf model: forward-pass time vs batch size and KV tokens (reference spec §3.4)."""

from __future__ import annotations

import math

from river import stats

from operators.perf.moving_average import DecodeShape, MovingAverage
from operators.perf.regression import (
    FpmRegressor,
    effective_accept_length,
    require_finite,
)
from schemas import ForwardPassMetrics

DEFAULT_KV_BATCH_CAP = 256
"""Batch-size search bound when neither ``max_kv_tokens`` nor any observed KV is known."""


class DecodePerfModel(DecodeShape, FpmRegressor):
    """Online OLS of decode wall time on ``[num_decode_requests, sum_decode_kv_tokens]`` (2-D).

    A negative slope on ``num_decode_requests`` is clipped to 0 (the other terms stay those of
    the full fit); a negative slope on ``sum_decode_kv_tokens`` rejects the fit. Moving
    averages: ``avg_decode_length`` (KV tokens per decode request), ``avg_num_decode``;
    ``max_observed_kv`` is the largest ``sum_decode_kv_tokens`` ever seen.

    Always linear (``PlannerConfig.perf_model_basis`` shapes the prefill model only): expanding
    ``sum_decode_kv_tokens`` into segments was measured (shipped H200 profile, bootstrap within a
    256-sequence engine) and not adopted: against the simulator's decode timing at batches
    <= 256 it cut the mean error only from 6.6 % to 5.4 % (max 33 % either way, at batch 1-2 of
    long contexts, which no additive model reaches), and in closed-loop replays it lowered our
    planner's SLA attainment (azure conv x20: 97.2 % -> 96.3 % at +1.3 % GPU-hours).

    >>> from schemas import ForwardPassMetrics, ScheduledRequestMetrics
    >>> model = DecodePerfModel()
    >>> for n in (5, 10, 20, 30, 40):
    ...     model.add_observation(ForwardPassMetrics(wall_time=1e-5 * 1000 * n + 0.001,
    ...         scheduled_requests=ScheduledRequestMetrics(num_decode_requests=n,
    ...                                                    sum_decode_kv_tokens=1000 * n)))
    >>> rps, itl_ms = model.find_best_engine_decode_rps(itl_ms=50, context_length=1000, osl=150)
    >>> round(rps, 4), round(itl_ms, 6)
    (0.6504, 41.0)
    """

    feature_names = ("num_decode_requests", "sum_decode_kv_tokens")
    relaxable_features = frozenset({0})

    def __init__(
        self,
        max_num_fpm_samples: int = 64,
        min_observations: int = 5,
        bucket_count: int = 16,
        suspect_factor: float | None = None,
    ) -> None:
        super().__init__(
            max_num_fpm_samples, min_observations, bucket_count, suspect_factor=suspect_factor
        )
        self.decode_length_average = MovingAverage(max_num_fpm_samples)
        self.num_decode_average = MovingAverage(max_num_fpm_samples)
        self.kv_max = stats.Max()

    @property
    def max_observed_kv(self) -> int:
        """Largest ``sum_decode_kv_tokens`` seen in any FPM (0 before the first)."""
        value = self.kv_max.get()
        return int(value) if math.isfinite(value) else 0

    def _features_of(self, fpm: ForwardPassMetrics) -> tuple[float, ...]:
        s = fpm.scheduled_requests
        return (float(s.num_decode_requests), float(s.sum_decode_kv_tokens))

    def _observe_averages(self, fpm: ForwardPassMetrics) -> None:
        self._observe_decode(fpm.scheduled_requests)
        self.kv_max.update(fpm.scheduled_requests.sum_decode_kv_tokens)

    def estimate_next_itl(
        self, scheduled_decode_kv: float, queued_decode_kv: float
    ) -> float | None:
        """Seconds per decode step once one more average request joins, or ``None``."""
        scheduled = require_finite("scheduled_decode_kv", scheduled_decode_kv)
        queued = require_finite("queued_decode_kv", queued_decode_kv)
        fit = self._fit()
        if fit is None:
            return None
        total_kv = scheduled + queued + self.avg_decode_length
        return fit.predict((self.avg_num_decode + 1.0, total_kv))

    def find_best_engine_decode_rps(
        self,
        itl_ms: float,
        context_length: float,
        osl: float,
        max_kv_tokens: int | None = None,
        max_num_seqs: int | None = None,
        accept_length: float = 1.0,
    ) -> tuple[float, float]:
        """``(requests/s one engine sustains, its ITL ms)`` at the largest batch meeting ``itl_ms``.

        Batch ``bs`` holds ``bs * context_length`` KV tokens; ITL = forward time / accept length.
        The batch is capped by ``max_kv_tokens // context_length`` (else by the largest KV seen,
        else 256) and ``max_num_seqs``. Rate = ``bs / (osl * ITL)`` (Little's law). If even
        ``bs = 1`` misses the SLA, the ``bs = 1`` rate and ITL are returned (caller compares).
        ``(0.0, 0.0)`` when not ready or any of ``itl_ms``, ``context_length``, ``osl`` <= 0;
        a context or OSL of under one token (a degenerate mean) counts as one token.
        """
        sla = require_finite("itl_ms", itl_ms)
        ctx = require_finite("context_length", context_length)
        out_len = require_finite("osl", osl)
        fit = self._fit()
        if fit is None or ctx <= 0 or out_len <= 0 or sla <= 0:
            return 0.0, 0.0
        accept = effective_accept_length(accept_length)
        held = max(1.0, ctx)  # KV tokens a request holds: at least one, whatever the mean says
        if max_kv_tokens is not None and max_kv_tokens > 0:
            kv_cap = max(1, int(max_kv_tokens / held))
        elif self.max_observed_kv > 0:
            kv_cap = max(1, int(self.max_observed_kv / held))
        else:
            kv_cap = DEFAULT_KV_BATCH_CAP
        seq_cap = max_num_seqs if max_num_seqs is not None and max_num_seqs > 0 else kv_cap
        max_batch = max(1, min(kv_cap, seq_cap))

        def itl_of(bs: int) -> float:
            return 1000.0 * fit.predict((float(bs), bs * ctx)) / accept

        best = 1
        if itl_of(1) <= sla:
            low, high = 1, max_batch  # itl_of(low) <= sla always holds
            while low < high:
                mid = (low + high + 1) // 2
                if itl_of(mid) <= sla:
                    low = mid
                else:
                    high = mid - 1
            best = low
        itl = itl_of(best)
        return best / (max(out_len, 1.0) * itl / 1000.0), itl  # a request takes a step at least
