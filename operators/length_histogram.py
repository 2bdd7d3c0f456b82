"""Request-length quantiles of a traffic window: a mergeable histogram, exact up to 512 tokens.

Capacity may be sized for a length quantile (``capacity_isl_quantile``, ...) instead of the
mean, so the quantiles of a window's ISL and OSL must be right at the traffic a deployment
really sees — a quiet one has a handful of requests a window — and the same whatever order
equal-time requests arrive in (a followed topic's partitions hand them on in either order;
its replay must decide the same). river's streaming estimator (``stats.Quantile``, P²) is
neither: at six requests it put the p90 below the mean, and it depends on arrival order.

:class:`LengthHistogram` counts lengths in buckets that keep a length's 9 leading bits: every
length below 512 has its own bucket, a longer one shares its bucket with lengths less than
1/256 (0.4 %) of it away (256 buckets per doubling, whatever the traffic). Counts add, so a
window's histograms merge into any span's, and a quantile depends only on the multiset of
lengths. Quantiles interpolate linearly between the order statistics around ``q·(n−1)``
(numpy's default), each read as the mean length of its bucket (integer sums, so exact and
order-free): exact wherever a bucket holds one distinct length — every length below 512
tokens, and in practice most lengths of a quiet window — and within 0.4 % otherwise (an order
statistic at the bottom of a bucket whose other lengths sit at its top reads up to 0.39 % long).
"""

from __future__ import annotations

from collections import Counter

EXACT_BITS = 9
"""Leading bits of a length a bucket keeps: lengths below ``2**EXACT_BITS`` are exact."""


def _bucket(length: int) -> int:
    """The lowest length of ``length``'s bucket."""
    shift = max(0, length.bit_length() - EXACT_BITS)
    return (length >> shift) << shift


class LengthHistogram:
    """Counts and sums of request lengths (tokens) in 0.4 % buckets; interpolated quantiles.

    >>> h = LengthHistogram()
    >>> for isl in (1000, 2000, 3000, 4000, 5000, 6000):
    ...     h.add(isl)
    >>> [round(h.quantile(q)) for q in (0.5, 0.9, 0.99)]  # numpy: 3500, 5500, 5950
    [3500, 5500, 5950]
    >>> other = LengthHistogram()
    >>> other.add(100)
    >>> h.merge(other)
    >>> h.count, h.quantile(0.0)
    (7, 100.0)
    """

    def __init__(self) -> None:
        self.counts: Counter[int] = Counter()
        self.sums: Counter[int] = Counter()
        self.count = 0

    def add(self, length: int) -> None:
        """Count one request of ``length`` tokens (``length >= 0``)."""
        length = int(length)
        bucket = _bucket(length)
        self.counts[bucket] += 1
        self.sums[bucket] += length
        self.count += 1

    def merge(self, other: LengthHistogram) -> None:
        """Add ``other``'s counts to these."""
        self.counts.update(other.counts)
        self.sums.update(other.sums)
        self.count += other.count

    def quantile(self, q: float) -> float | None:
        """The ``q``-quantile of the lengths counted (``None`` when there are none)."""
        if not self.count:
            return None
        rank = q * (self.count - 1)
        low = int(rank)
        values = self._order_statistics(low, min(low + 1, self.count - 1))
        return values[0] + (rank - low) * (values[1] - values[0])

    def _order_statistics(self, *ranks: int) -> list[float]:
        """The lengths at the given 0-based ranks (ascending ranks)."""
        out: list[float] = []
        seen = 0
        wanted = iter(ranks)
        rank = next(wanted)
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            while rank < seen:
                out.append(self.sums[bucket] / self.counts[bucket])
                rank = next(wanted, -1)
                if rank < 0:
                    return out
        raise AssertionError("ranks beyond the count")
