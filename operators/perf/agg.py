"""Aggregated engine perf model: chunked prefill and decode in one forward pass (spec §3.5)."""

from __future__ import annotations

from operators.perf.basis import WallTimeFit
from operators.perf.moving_average import DecodeShape, MovingAverage, PrefillShape
from operators.perf.regression import (
    FpmRegressor,
    chunked_prefill_seconds,
    clamp_kv_hit_rate,
    effective_accept_length,
    require_finite,
)
from schemas import ForwardPassMetrics

DEFAULT_AGG_KV_BATCH_CAP = 1024
"""Decode batch bound when ``max_kv_tokens`` is unknown."""


def balanced_batch_limit(
    isl: float, osl: float, max_num_batched_tokens: float, hard_cap: int, accept_length: float = 1.0
) -> int:
    """Largest decode batch ``x <= max(1, hard_cap)`` with ``isl / (mbt - x) <= osl / accept``.

    The prefill of one request, done in the token budget the decode batch leaves, must take no
    more passes than its decode (the literal balance test; errata §16.1a). 1 when even ``x = 1``
    fails.

    >>> balanced_batch_limit(4000, 200, 8192, hard_cap=10_000)
    8172
    """

    def balanced(x: int) -> bool:
        room = max_num_batched_tokens - x
        return room > 0 and isl / room <= osl / accept_length

    low, high = 1, max(1, hard_cap)
    if not balanced(low):
        return 1
    while low < high:  # balanced(low) holds; balanced is monotone (true, then false)
        mid = (low + high + 1) // 2
        if balanced(mid):
            low = mid
        else:
            high = mid - 1
    return low


class AggPerfModel(PrefillShape, DecodeShape, FpmRegressor):
    """Online OLS of wall time on ``[sum_prefill_tokens, sum_decode_kv_tokens]`` (2-D).

    Both slopes must be non-negative (no relaxable feature). Moving averages: ``avg_isl``,
    ``avg_decode_length``, ``avg_prefill_tokens`` (prefill tokens per forward pass, every FPM),
    ``avg_num_prefill``, ``avg_num_decode``. Always linear (``PlannerConfig.perf_model_basis``
    shapes the prefill model only).

    >>> from schemas import ForwardPassMetrics, ScheduledRequestMetrics
    >>> model = AggPerfModel()
    >>> for p, d in ((100, 1000), (200, 3000), (300, 2000), (400, 5000), (500, 4000)):
    ...     model.add_observation(ForwardPassMetrics(wall_time=0.001 * p + 0.0001 * d + 0.001,
    ...         scheduled_requests=ScheduledRequestMetrics(num_prefill_requests=1,
    ...             sum_prefill_tokens=p, num_decode_requests=10, sum_decode_kv_tokens=d)))
    >>> {k: round(v, 9) for k, v in model.coefficients.items()}
    {'sum_prefill_tokens': 0.001, 'sum_decode_kv_tokens': 0.0001, 'intercept': 0.001}
    >>> rps, ttft_ms, itl_ms = model.find_best_engine_agg_rps(
    ...     isl=2048, osl=150, max_num_batched_tokens=4096, ttft_sla_ms=5000, itl_sla_ms=500)
    >>> rps > 0 and itl_ms <= 500 and ttft_ms <= 5000
    True
    """

    feature_names = ("sum_prefill_tokens", "sum_decode_kv_tokens")

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
        self.isl_average = MovingAverage(max_num_fpm_samples)
        self.decode_length_average = MovingAverage(max_num_fpm_samples)
        self.prefill_tokens_average = MovingAverage(max_num_fpm_samples)
        self.num_prefill_average = MovingAverage(max_num_fpm_samples)
        self.num_decode_average = MovingAverage(max_num_fpm_samples)

    @property
    def avg_prefill_tokens(self) -> float:
        """Moving average of prefill tokens per forward pass (piggy-backed prefill work)."""
        return self.prefill_tokens_average.get()

    def _features_of(self, fpm: ForwardPassMetrics) -> tuple[float, ...]:
        s = fpm.scheduled_requests
        return (float(s.sum_prefill_tokens), float(s.sum_decode_kv_tokens))

    def _observe_averages(self, fpm: ForwardPassMetrics) -> None:
        s = fpm.scheduled_requests
        self._observe_prefill(s)
        self._observe_decode(s)
        self.prefill_tokens_average.update(s.sum_prefill_tokens)

    def estimate_next_ttft(
        self,
        queued_prefill_tokens: float,
        max_num_batched_tokens: float,
        current_decode_kv: float,
        kv_hit_rate: float | None = None,
    ) -> float | None:
        """Seconds to prefill the queue plus one average request, each chunk carrying the current
        decode batch (``current_decode_kv`` KV tokens); ``None`` if not ready or mbt <= 0."""
        queued = require_finite("queued_prefill_tokens", queued_prefill_tokens)
        mbt = require_finite("max_num_batched_tokens", max_num_batched_tokens)
        decode_kv = require_finite("current_decode_kv", current_decode_kv)
        fit = self._fit()
        if fit is None or mbt <= 0:
            return None
        return self._ttft(fit, queued, mbt, decode_kv, clamp_kv_hit_rate(kv_hit_rate))

    def _ttft(
        self, fit: WallTimeFit, queued: float, mbt: float, decode_kv: float, hit: float
    ) -> float:
        total = (queued + self.avg_isl) * (1.0 - hit)
        return chunked_prefill_seconds(total, mbt, lambda c: fit.predict((c, decode_kv)))

    def estimate_next_itl(
        self, scheduled_decode_kv: float, queued_decode_kv: float
    ) -> float | None:
        """Seconds per step once one more average request joins (carrying the average prefill
        work per pass), or ``None`` if not ready."""
        scheduled = require_finite("scheduled_decode_kv", scheduled_decode_kv)
        queued = require_finite("queued_decode_kv", queued_decode_kv)
        fit = self._fit()
        if fit is None:
            return None
        total_kv = scheduled + queued + self.avg_decode_length
        return fit.predict((self.avg_prefill_tokens, total_kv))

    def find_best_engine_agg_rps(
        self,
        isl: float,
        osl: float,
        max_num_batched_tokens: int,
        ttft_sla_ms: float,
        itl_sla_ms: float,
        max_kv_tokens: int | None = None,
        max_num_seqs: int | None = None,
        kv_hit_rate: float | None = None,
        accept_length: float = 1.0,
    ) -> tuple[float, float, float]:
        """``(requests/s one engine sustains, TTFT ms, ITL ms)`` at the best decode batch.

        With ``isl_eff = isl * (1 - hit)`` and ``ctx = isl + osl / 2`` (KV residency uses the full
        ISL), the batch is capped by KV (``max_kv_tokens // ctx``, else 1024), ``max_num_seqs``,
        ``mbt - 1`` and the prefill/decode balance ``isl_eff / (mbt - bs) <= osl / accept`` (a
        request's prefill, in the budget left by the decode tokens, takes no more iterations than
        its decode; errata §16.1a). Batches ``bs = 1, 2, …`` are swept until the ITL or TTFT SLA
        breaks: each pass carries ``min(bs * accept * isl_eff / osl, mbt)`` prefill tokens and
        ``bs * ctx`` KV tokens; ITL = pass time / accept; TTFT is ``estimate_next_ttft`` with that
        prefill as the queue. A batch's rate is the smaller of decode egress
        ``bs * accept / (osl * pass)`` and prefill admission ``(mbt - bs) / (isl_eff * pass)``;
        the best passing batch is returned. The sweep also stops once a batch's admission falls
        below the best rate so far: the slopes are non-negative, so the pass time never shrinks
        as the batch grows and admission only falls; no larger batch can do better, and the
        result is the full sweep's, found in fewer passes (to the egress/admission crossing,
        ``mbt / (1 + accept * isl_eff / osl)``, instead of to the balance limit: 390 instead of
        1024 batches at ISL 4000, OSL 200, ``mbt`` 8192). If ``bs = 1`` already breaks an SLA,
        its (decode egress) rate and latencies are returned and the caller compares.
        ``(0, 0, 0)`` when not ready or any of ``isl``, ``osl``, ``max_num_batched_tokens`` <= 0.
        """
        in_len = require_finite("isl", isl)
        out_len = require_finite("osl", osl)
        mbt = require_finite("max_num_batched_tokens", max_num_batched_tokens)
        ttft_sla = require_finite("ttft_sla_ms", ttft_sla_ms)
        itl_sla = require_finite("itl_sla_ms", itl_sla_ms)
        fit = self._fit()
        if fit is None or in_len <= 0 or out_len <= 0 or mbt <= 0:
            return 0.0, 0.0, 0.0
        hit = clamp_kv_hit_rate(kv_hit_rate)
        accept = effective_accept_length(accept_length)
        isl_eff = in_len * (1.0 - hit)
        ctx = in_len + out_len / 2.0
        if max_kv_tokens is not None and max_kv_tokens > 0:
            kv_cap = max(1, int(max_kv_tokens / max(1.0, ctx)))
        else:
            kv_cap = DEFAULT_AGG_KV_BATCH_CAP
        seq_cap = max_num_seqs if max_num_seqs is not None and max_num_seqs > 0 else kv_cap
        hard_cap = max(1, min(kv_cap, seq_cap, int(mbt) - 1))

        max_bs = balanced_batch_limit(isl_eff, out_len, mbt, hard_cap, accept)

        best: tuple[float, float, float] | None = None
        for bs in range(1, max_bs + 1):
            decode_kv = bs * ctx
            prefill_per_pass = min(bs * accept * isl_eff / out_len, mbt)
            wall = fit.predict((prefill_per_pass, decode_kv))
            itl_ms = 1000.0 * wall / accept
            # The queue is given in raw prompt tokens; the KV-hit discount is applied inside once.
            queued_raw = prefill_per_pass / (1.0 - hit)
            ttft_ms = 1000.0 * self._ttft(
                fit, float(int(queued_raw)), mbt, float(int(decode_kv)), hit
            )
            egress = bs * accept / (out_len * wall)
            if itl_ms > itl_sla or ttft_ms > ttft_sla:
                if best is None:
                    return egress, ttft_ms, itl_ms
                break
            admission = (mbt - bs) / (isl_eff * wall)  # isl_eff > 0: hit <= 0.95; bs < mbt
            rate = min(egress, admission)
            if best is None or rate > best[0]:
                best = (rate, ttft_ms, itl_ms)
            elif admission < best[0]:
                break  # admission only falls from here (wall never shrinks): none can do better
        assert best is not None
        return best
