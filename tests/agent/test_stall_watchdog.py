"""The account's stall watchdog (agent/watch/_stall.py): a silent watch is cancelled between
its allowance and one resolution later; reads and pauses keep it alive."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from agent.watch._stall import StallWatchdog


async def _silent_for(watchdog: StallWatchdog, inactivity: float) -> float:
    """How long a watch that never reads lives under ``watchdog``."""
    started = trio.current_time()
    with trio.CancelScope() as scope, watchdog.watching(scope, inactivity):
        await trio.sleep_forever()
    assert scope.cancelled_caught
    return trio.current_time() - started


async def test_a_silent_watch_is_cancelled_within_one_resolution_of_its_allowance(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(600):
        watchdog = StallWatchdog(resolution=15)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watchdog.run)
            lived = await _silent_for(watchdog, 150)
            assert 150 <= lived <= 165
            assert watchdog.stalls == 1
            nursery.cancel_scope.cancel()


async def test_reads_and_pauses_keep_a_watch_alive(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(3600):
        watchdog = StallWatchdog(resolution=15)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watchdog.run)
            with trio.CancelScope() as scope, watchdog.watching(scope, 150) as ticket:
                for _ in range(10):  # a bookmark a minute: never silent for 150 s
                    await trio.sleep(60)
                    ticket.touch()
                with ticket.pause():  # backpressure for longer than the allowance
                    await trio.sleep(1000)
                await trio.sleep(100)  # the allowance started over when the pause ended
            assert not scope.cancelled_caught
            assert watchdog.stalls == 0
            nursery.cancel_scope.cancel()


def test_a_watchdog_needs_a_positive_resolution() -> None:
    with pytest.raises(ValueError, match="resolution"):
        StallWatchdog(resolution=0)
