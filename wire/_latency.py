"""A latency histogram with fixed buckets, kept by whoever times a round trip of the protocol.

The agent times each event batch from its send to the server's Ack; the server times each
operation from its send to the agent's result. Both export the numbers as a Prometheus
histogram read at scrape time, so the counting stays plain synchronous code with no metrics
library in the hot path: one ``bisect`` and two additions per observation.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

__all__ = ["ACK_BUCKETS", "OPERATION_BUCKETS", "LatencyHistogram"]

#: Batch send -> Ack: milliseconds on a healthy link, seconds when the store falls behind.
ACK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Operation send -> result: a patch takes milliseconds, a deploy waiting on a slow admission
#: webhook seconds, and ``operations.waitMs`` (30 s by default) ends the wait.
OPERATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass(slots=True)
class LatencyHistogram:
    """Counts of observations per bucket (``value <= bound``, as Prometheus' ``le``), their
    sum and their number. ``bounds`` must be increasing; +Inf is implied."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # one per bound, then +Inf
    total: float = 0.0

    def __post_init__(self) -> None:
        if list(self.bounds) != sorted(set(self.bounds)) or not all(
            math.isfinite(b) for b in self.bounds
        ):
            raise ValueError(f"bucket bounds must be finite and increasing: {self.bounds}")
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, seconds: float) -> None:
        """Count one observation; a negative one (a clock that went back) counts as 0."""
        seconds = max(seconds, 0.0)
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, observations <= le)`` for every bound and "+Inf": the ``_bucket`` samples of
        the Prometheus text format (``le`` written as Prometheus' clients write it, "0.25",
        "1.0")."""
        rows: list[tuple[str, int]] = []
        running = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            rows.append((repr(float(bound)), running))
        rows.append(("+Inf", running + self.counts[-1]))
        return rows
