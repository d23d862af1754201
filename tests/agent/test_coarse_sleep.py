"""Coarse sleeps: never early, at most a bucket late, cancellable, many sharing a deadline."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from agent._coarse_sleep import RESOLUTION, _wheel, coarse_sleep, coarse_sleep_until


async def test_sleepers_wake_in_order_never_early_and_at_most_a_bucket_late(
    autojump_clock: trio.testing.MockClock,
) -> None:
    woke: list[tuple[float, float]] = []

    async def sleeper(seconds: float) -> None:
        start = trio.current_time()
        await coarse_sleep(seconds)
        woke.append((seconds, trio.current_time() - start))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            # The later one first: the wheel must move to the earlier bucket added after it.
            for seconds in (30.0, 7.25, 7.5, 0.1, 12.0):
                nursery.start_soon(sleeper, seconds)
    # Each once, in deadline order across buckets (7.25 and 7.5 share one: either first).
    assert [seconds for seconds, _ in woke][::4] == [0.1, 30.0]
    assert sorted(seconds for seconds, _ in woke) == [0.1, 7.25, 7.5, 12.0, 30.0]
    for seconds, slept in woke:
        assert seconds <= slept <= seconds + RESOLUTION


async def test_a_past_deadline_is_a_checkpoint_and_a_cancelled_sleep_leaves_the_rest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(60):
        with trio.testing.assert_checkpoints():
            await coarse_sleep_until(trio.current_time() - 5)
        with trio.move_on_after(2) as cancelled:
            await coarse_sleep(10)
        assert cancelled.cancelled_caught
        start = trio.current_time()
        await coarse_sleep(3)  # the bucket of the cancelled sleep still fires, harmlessly
        assert 3 <= trio.current_time() - start <= 3 + RESOLUTION
        with pytest.raises(ValueError, match="seconds must be >= 0"):
            await coarse_sleep(-1)


async def test_a_thousand_sleepers_share_one_deadline_per_bucket(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ended = 0

    async def sleeper(seconds: float) -> None:
        nonlocal ended
        await coarse_sleep(seconds)
        ended += 1

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for n in range(1000):
                nursery.start_soon(sleeper, 5 + (n % 10) / 10)  # 5.0 .. 5.9 s: two buckets
            await trio.testing.wait_all_tasks_blocked()
            # The sleepers wait on the Events of two buckets; the wheel's sleep is the one
            # deadline.
            assert len(_wheel().buckets) == 2
        assert ended == 1000
