"""Backoff, the plain object behind every retry delay: no event loop, exact delays (no jitter)."""

from __future__ import annotations

import pytest

from agent._backoff import Backoff


def test_the_delay_stays_at_the_cap_however_long_the_failures_last() -> None:
    """``1.6**attempt`` overflowed a float at attempt 1511 (OverflowError): a reflector died
    after ~25 h of an API server answering 5xx. Past the cap the exponent stops growing."""
    backoff = Backoff(base=1.0, multiplier=1.6, jitter=0.0, max_delay=120.0)
    delays = [backoff.next_delay() for _ in range(5_000)]
    assert delays[:3] == pytest.approx([1.0, 1.6, 2.56])
    assert set(delays[20:]) == {120.0}
    assert backoff.attempts == 5_000
    backoff.reset()
    assert backoff.next_delay() == 1.0
