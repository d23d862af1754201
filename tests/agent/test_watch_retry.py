"""RetryPolicy and LogLimiter, the reflector's retry decisions, with no event loop.

Times are plain numbers passed in; delays have no jitter, so each is exact: 1, 1.6, 2.56, ...
"""

from __future__ import annotations

from dataclasses import astuple

import pytest

from agent._backoff import Backoff
from agent.watch._retry import LogLimiter, Retry, RetryPolicy, RetryReason

NETWORK = RetryReason.NETWORK


def parts(retry: Retry | None) -> tuple[object, ...]:
    assert retry is not None
    return astuple(retry)


def policy(*, cap: float = 60.0) -> RetryPolicy:
    return RetryPolicy(Backoff(base=1.0, multiplier=1.6, jitter=0.0, max_delay=cap))


def grown(p: RetryPolicy, failures: int, now: float = 0.0) -> float:
    """``failures`` requests that failed before any watch opened; the last delay."""
    delay = 0.0
    for _ in range(failures):
        delay = p.failed(NETWORK, now).delay
    return delay


def test_failures_back_off_exponentially_up_to_the_cap() -> None:
    p = policy(cap=5.0)
    delays = [p.failed(NETWORK, 0.0).delay for _ in range(6)]
    assert delays == pytest.approx([1.0, 1.6, 2.56, 4.096, 5.0, 5.0])
    assert p.attempts == 6


def test_a_watch_that_broke_before_delivering_does_not_reset() -> None:
    p = policy()
    assert grown(p, 3) == pytest.approx(2.56)
    p.watch_opened(10.0)
    assert astuple(p.failed(NETWORK, 12.0)) == (NETWORK, pytest.approx(4.096), 4)


def test_a_watch_that_delivered_then_broke_starts_from_the_smallest_delay() -> None:
    p = policy()
    grown(p, 5)
    p.watch_opened(100.0)
    p.delivered()
    assert p.failed(NETWORK, 100.5) == Retry(NETWORK, 1.0, 1)
    assert astuple(p.failed(NETWORK, 101.5)) == (NETWORK, pytest.approx(1.6), 2)


def test_a_watch_that_ran_longer_than_the_cap_then_broke_starts_over() -> None:
    """Issue 15 point 6 (a): no event at all, but open past the cap (60 s)."""
    p = policy()
    grown(p, 5)
    p.watch_opened(100.0)
    assert p.failed(RetryReason.SERVER_ERROR, 160.0) == Retry(RetryReason.SERVER_ERROR, 1.0, 1)


def test_a_watch_shorter_than_the_cap_with_nothing_delivered_keeps_growing() -> None:
    p = policy()
    grown(p, 2)
    p.watch_opened(100.0)
    assert p.failed(NETWORK, 159.9).attempt == 3


def test_a_successful_streaming_list_starts_over() -> None:
    """Issue 15 point 6 (b): the initial events ended (``listed``) on a watch, then it broke."""
    p = policy()
    grown(p, 4)
    p.watch_opened(10.0)
    p.listed()  # the initial-events-end bookmark
    assert p.failed(NETWORK, 10.1) == Retry(NETWORK, 1.0, 1)


def test_a_relist_after_a_410_starts_over() -> None:
    """Issue 15 point 6 (c): the backoff grew, the resumed watch met 410, the relist worked;
    the next failure (before the new watch delivered anything) waits the smallest delay."""
    p = policy()
    grown(p, 5)
    p.watch_opened(50.0)
    assert p.gone(50.1) == Retry(RetryReason.GONE, 0.0, 1)  # relist at once
    p.listed()
    p.watch_opened(50.3)
    assert p.failed(NETWORK, 51.0) == Retry(NETWORK, 1.0, 1)


def test_a_relist_that_fails_after_a_410_starts_from_the_smallest_delay() -> None:
    """The 410 itself proves the API server answers: the relist's own failures (a pooled
    connection the outage left stale) do not inherit the outage's delays."""
    p = policy()
    grown(p, 6)
    p.watch_opened(50.0)
    p.gone(50.1)
    assert p.failed(NETWORK, 50.2) == Retry(NETWORK, 1.0, 1)


def test_a_retry_after_is_honoured_even_after_a_reset() -> None:
    p = policy()
    p.watch_opened(0.0)
    p.delivered()
    assert p.failed(RetryReason.THROTTLED, 1.0, at_least=7.0).delay == 7.0


def test_410_loops_without_progress_back_off_and_a_list_does_not_reset_them() -> None:
    p = policy()
    delays = []
    for step in range(5):
        p.listed()
        p.watch_opened(float(step))
        delays.append(p.gone(float(step)).delay)
    assert delays == pytest.approx([0.0, 1.0, 1.6, 2.56, 4.096])
    # A watch that delivered ends the loop: the next 410 relists at once again.
    p.listed()
    p.watch_opened(10.0)
    p.delivered()
    assert p.gone(11.0).delay == 0.0


def test_a_clean_end_resumes_at_once_unless_the_watch_was_short_and_empty() -> None:
    p = policy()
    p.watch_opened(0.0)
    assert p.watch_ended(0.2) == Retry(RetryReason.SHORT_WATCH, 1.0, 1)
    p.watch_opened(2.0)
    assert parts(p.watch_ended(2.3)) == (RetryReason.SHORT_WATCH, pytest.approx(1.6), 2)
    p.watch_opened(5.0)
    assert p.watch_ended(10.0) is None  # lived past min_watch: the server's timeout
    assert p.attempts == 2  # ... but proved nothing, so the backoff stands
    p.watch_opened(20.0)
    p.delivered()
    assert p.watch_ended(20.1) is None
    assert p.attempts == 0


def test_a_stall_resumes_at_once_and_resets_after_a_long_watch() -> None:
    p = policy()
    grown(p, 3)
    p.watch_opened(0.0)
    assert p.stalled(150.0) == Retry(RetryReason.STALLED, 0.0, 0)


def unavailable_policy() -> RetryPolicy:
    return RetryPolicy(
        Backoff(base=1.0, multiplier=1.6, jitter=0.0, max_delay=60.0),
        unavailable=Backoff(base=10.0, multiplier=2.0, jitter=0.0, max_delay=120.0),
    )


def test_an_unavailable_kind_backs_off_from_10_s_to_2_min_on_its_own_backoff() -> None:
    p = unavailable_policy()
    grown(p, 2)
    delays = [p.unavailable(0.0).delay for _ in range(6)]
    assert delays == pytest.approx([10.0, 20.0, 40.0, 80.0, 120.0, 120.0])
    assert p.unavailable(0.0) == Retry(RetryReason.UNAVAILABLE, 120.0, 7)
    # The network backoff is not spent by them, nor reset.
    assert p.failed(NETWORK, 0.0).attempt == 3


def test_a_listing_or_a_delivering_watch_starts_the_unavailable_backoff_over() -> None:
    p = unavailable_policy()
    for _ in range(4):
        p.unavailable(0.0)
    p.listed()
    assert p.unavailable(0.0).delay == pytest.approx(10.0)
    p.unavailable(0.0)
    p.watch_opened(0.0)
    p.delivered()
    p.watch_ended(1.0)
    assert p.unavailable(2.0) == Retry(RetryReason.UNAVAILABLE, 10.0, 1)


def test_the_default_unavailable_backoff_is_10_s_to_2_min() -> None:
    p = policy()
    first = p.unavailable(0.0).delay
    assert 8.0 <= first <= 12.0  # ±20 % jitter
    for _ in range(10):
        last = p.unavailable(0.0).delay
    assert 96.0 <= last <= 120.0


def test_the_log_limiter_allows_one_line_per_interval_and_counts_the_rest() -> None:
    limiter = LogLimiter(30.0)
    assert limiter.allow(0.0) == 0
    assert limiter.allow(1.0) is None
    assert limiter.allow(29.9) is None
    assert limiter.allow(30.0) == 2
    assert limiter.allow(100.0) == 0


def test_a_429_asking_for_a_day_waits_no_longer_than_the_cap() -> None:
    """The reflector hands a 429's Retry-After to ``failed(at_least=...)``."""
    p = policy(cap=60.0)
    assert p.failed(RetryReason.THROTTLED, 0.0, at_least=86_400.0).delay == 60.0


def test_the_log_limiter_hands_over_what_it_held_back() -> None:
    limiter = LogLimiter(interval=30.0)
    assert limiter.allow(0.0) == 0
    assert limiter.allow(1.0) is None
    assert limiter.allow(2.0) is None
    assert limiter.flush() == 2  # for the closing line
    assert limiter.flush() == 0
    assert limiter.allow(3.0) is None  # the interval still holds after a flush
    assert limiter.allow(31.0) == 1
