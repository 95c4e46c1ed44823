"""A cumulative histogram of durations, kept in the process without prometheus_client.

:class:`DrainController` records one per request and one per drain; the metrics module renders
them as Prometheus histograms (``_bucket{le=...}``, ``_sum``, ``_count``).
"""

from __future__ import annotations

import bisect
import math

import attrs

__all__ = ["DRAIN_BUCKETS", "REQUEST_BUCKETS", "Histogram", "HistogramSnapshot"]

#: Seconds; inference requests range from a health-check-like call to a long generation.
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
#: Seconds; drains are bounded by a grace period of seconds to minutes.
DRAIN_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)


@attrs.frozen(kw_only=True)
class HistogramSnapshot:
    """Cumulative counts: ``buckets`` pairs each upper bound (the last is ``inf``) with the
    number of observations at most that large."""

    buckets: tuple[tuple[float, int], ...]
    sum: float
    count: int


class Histogram:
    """Observations counted in fixed buckets (upper bounds, ascending; ``+Inf`` is implied)."""

    __slots__ = ("_bounds", "_counts", "_sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        if list(bounds) != sorted(set(bounds)) or any(math.isinf(b) for b in bounds):
            raise ValueError("bucket bounds must be finite, ascending and distinct")
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # per bucket, the last one for +Inf
        self._sum = 0.0

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self._sum += value

    def snapshot(self) -> HistogramSnapshot:
        cumulative, buckets = 0, []
        for bound, count in zip((*self._bounds, math.inf), self._counts, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        return HistogramSnapshot(buckets=tuple(buckets), sum=self._sum, count=cumulative)
