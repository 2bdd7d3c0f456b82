"""Fixed-window moving average with leading-zero skip (reference spec §3.2), as a river statistic.

Why not ``river.utils.Rolling(river.stats.Mean, window_size)``: its incremental update/revert
drifts. Measured with river 0.26.1 after 100 000 updates of values up to 1e5, a window holding
only zeros read ``-5.25e-10`` (a negative request count) and a window of 1500s read
``1499.9999999994743``. The planner compares these averages with thresholds and multiplies them
into queue sizes, so this class keeps the window itself and sums it exactly (``math.fsum``) on
read: the mean is the correctly rounded mean of the values in the window, independent of history.
It is still a ``river.stats.base.Univariate`` (``update`` / ``get``), so it composes with river.
"""

from __future__ import annotations

import math
from collections import deque

from river.stats.base import Univariate

from schemas import ScheduledRequestMetrics


class MovingAverage(Univariate):
    """Mean of the last ``window`` values; zeros before the first non-zero value are skipped.

    Once a non-zero value has been seen, zeros count (an idle engine pulls the average down).
    An empty window reads 0.0. Non-finite values are rejected with ``ValueError``.

    >>> avg = MovingAverage(window=3)
    >>> for v in (0, 0, 4, 0, 2, 6):
    ...     avg.update(v)
    >>> avg.get(), len(avg)
    (2.6666666666666665, 3)
    >>> MovingAverage(window=3).get()
    0.0
    """

    def __init__(self, window: int) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        self.window = window
        self.values: deque[float] = deque(maxlen=window)
        self.seen_nonzero = False

    def __len__(self) -> int:
        return len(self.values)

    def update(self, x: float) -> None:
        """Add one value."""
        value = float(x)
        if not math.isfinite(value):
            raise ValueError(f"moving average input must be finite, got {x!r}")
        if value == 0.0 and not self.seen_nonzero:
            return
        self.seen_nonzero = True
        self.values.append(value)

    def get(self) -> float:
        """The mean of the window (0.0 when empty)."""
        if not self.values:
            return 0.0
        return math.fsum(self.values) / len(self.values)

    @property
    def name(self) -> str:
        return f"moving_average_{self.window}"


class PrefillShape:
    """Mixin: a perf model's moving averages of scheduled prefill work (spec §3.3).

    ``avg_isl`` is the mean tokens per scheduled prefill request (under chunked prefill: the
    chunk), ``avg_num_prefill`` the mean prefill requests per pass. The model sets
    ``isl_average`` / ``num_prefill_average`` and calls :meth:`_observe_prefill` per FPM.

    >>> from schemas import ScheduledRequestMetrics
    >>> shape = PrefillShape()
    >>> shape.isl_average, shape.num_prefill_average = MovingAverage(4), MovingAverage(4)
    >>> shape._observe_prefill(ScheduledRequestMetrics(num_prefill_requests=2,
    ...                                                sum_prefill_tokens=3000))
    >>> shape.avg_isl, shape.avg_num_prefill
    (1500.0, 2.0)
    """

    isl_average: MovingAverage
    num_prefill_average: MovingAverage

    @property
    def avg_isl(self) -> float:
        """Moving average of prefill tokens per scheduled prefill request."""
        return self.isl_average.get()

    @property
    def avg_num_prefill(self) -> float:
        """Moving average of scheduled prefill requests per forward pass."""
        return self.num_prefill_average.get()

    def _observe_prefill(self, s: ScheduledRequestMetrics) -> None:
        if s.num_prefill_requests > 0:
            self.isl_average.update(s.sum_prefill_tokens / s.num_prefill_requests)
        self.num_prefill_average.update(s.num_prefill_requests)


class DecodeShape:
    """Mixin: a perf model's moving averages of scheduled decode work (spec §3.4).

    ``avg_decode_length`` is the mean KV tokens per decode request, ``avg_num_decode`` the mean
    decode requests per pass (heartbeats count as 0 once traffic was seen).

    >>> from schemas import ScheduledRequestMetrics
    >>> shape = DecodeShape()
    >>> shape.decode_length_average, shape.num_decode_average = MovingAverage(4), MovingAverage(4)
    >>> shape._observe_decode(ScheduledRequestMetrics(num_decode_requests=4,
    ...                                               sum_decode_kv_tokens=8000))
    >>> shape.avg_decode_length, shape.avg_num_decode
    (2000.0, 4.0)
    """

    decode_length_average: MovingAverage
    num_decode_average: MovingAverage

    @property
    def avg_decode_length(self) -> float:
        """Moving average of KV tokens per decode request."""
        return self.decode_length_average.get()

    @property
    def avg_num_decode(self) -> float:
        """Moving average of decode requests per forward pass."""
        return self.num_decode_average.get()

    def _observe_decode(self, s: ScheduledRequestMetrics) -> None:
        if s.num_decode_requests > 0:
            self.decode_length_average.update(s.sum_decode_kv_tokens / s.num_decode_requests)
        self.num_decode_average.update(s.num_decode_requests)
