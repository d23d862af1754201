"""LatencyHistogram: Prometheus' bucket rule (value <= le), cumulative rows, bad bounds."""

from __future__ import annotations

import pytest

import wire


def test_observations_land_in_the_first_bucket_they_fit_and_rows_are_cumulative() -> None:
    histogram = wire.LatencyHistogram((0.1, 1.0, 10.0))
    for seconds in (0.05, 0.1, 0.5, 1.0, 3.0, 99.0, -1.0):  # -1: a clock that went back
        histogram.observe(seconds)
    assert histogram.counts == [3, 2, 1, 1]  # 0.1 is in "le=0.1", like Prometheus' le
    assert histogram.cumulative() == [("0.1", 3), ("1.0", 5), ("10.0", 6), ("+Inf", 7)]
    assert histogram.count == 7
    assert histogram.total == pytest.approx(0.05 + 0.1 + 0.5 + 1.0 + 3.0 + 99.0)


def test_the_default_buckets_are_usable_and_bad_bounds_are_refused() -> None:
    for bounds in (wire.ACK_BUCKETS, wire.OPERATION_BUCKETS):
        assert wire.LatencyHistogram(bounds).cumulative()[-1] == ("+Inf", 0)
    for bad in ((1.0, 0.5), (1.0, 1.0), (1.0, float("inf"))):
        with pytest.raises(ValueError, match="increasing"):
            wire.LatencyHistogram(bad)
