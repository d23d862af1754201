"""A long-lived process's collector schedule (kubesvc/_collector.py): survivors are frozen, and
a cycle that became garbage among frozen objects is still reclaimed at the next full pass."""

from __future__ import annotations

import gc
import weakref

import pytest
import trio
import trio.testing

from kubesvc._collector import manage_collector


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


async def test_survivors_are_frozen_and_frozen_cycles_are_collected_at_the_full_pass(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(3600):
        gc.unfreeze()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: manage_collector(freeze_seconds=30, full_seconds=300))
            await trio.testing.wait_all_tasks_blocked()  # the collector sleeps: it has begun
            at_start = gc.get_freeze_count()
            assert at_start > 0  # what the start made is frozen at once
            a, b = _Node(), _Node()
            a.other, b.other = b, a  # a cycle: only the cyclic collector can free it
            dead = weakref.ref(a)
            await trio.sleep(31)  # past the first interval's freeze, not at the same instant
            assert gc.get_freeze_count() > at_start  # the cycle, among the rest, frozen now
            del a, b
            gc.collect()
            assert dead() is not None  # frozen: the ordinary collections do not see it
            await trio.sleep(300)
            assert dead() is None  # the full pass unfroze and collected it
            assert gc.get_freeze_count() > 0  # and froze the survivors again
            nursery.cancel_scope.cancel()
        assert gc.get_freeze_count() == 0  # unfrozen on the way out


async def test_bad_intervals_are_refused() -> None:
    with trio.fail_after(5), pytest.raises(ValueError, match="freeze_seconds"):
        await manage_collector(freeze_seconds=60, full_seconds=30)
