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


def test_a_retry_after_longer_than_the_cap_is_clamped_to_the_cap() -> None:
    """One 429 with ``Retry-After: 86400`` parked a reflector for a day; client-go caps a
    server's hint too. A shorter hint still lengthens the delay it is given."""
    backoff = Backoff(base=1.0, multiplier=1.6, jitter=0.0, max_delay=120.0)
    assert backoff.next_delay(at_least=86_400.0) == 120.0
    assert backoff.next_delay(at_least=30.0) == 30.0
    assert backoff.next_delay(at_least=float("inf")) == 120.0
