"""The initial-list caps: both held during a list, released on exit and on cancellation."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from agent import ListCaps


async def test_both_caps_bound_concurrent_lists(autojump_clock: trio.testing.MockClock) -> None:
    caps = ListCaps(total_budget=3, budget_per_account=2)
    running: dict[str, int] = {"a": 0, "b": 0}
    peak = {"a": 0, "b": 0, "total": 0}

    async def lister(account: str) -> None:
        async with caps.for_account(account).initial_list():
            running[account] += 1
            peak[account] = max(peak[account], running[account])
            peak["total"] = max(peak["total"], sum(running.values()))
            await trio.sleep(1)
            running[account] -= 1

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(lister, "a")
                nursery.start_soon(lister, "b")
    assert peak == {"a": 2, "b": 2, "total": 3}
    assert caps.total.borrowed_tokens == 0


async def test_cancelled_waiter_holds_nothing(autojump_clock: trio.testing.MockClock) -> None:
    caps = ListCaps(total_budget=1, budget_per_account=5)
    first, second = caps.for_account("a"), caps.for_account("b")
    holder = object()
    await first.acquire(holder)
    with trio.move_on_after(0.1):
        await second.acquire(object())
    assert second.account.borrowed_tokens == 0
    first.release(holder)
    assert caps.total.borrowed_tokens == 0


def test_caps_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ListCaps(total_budget=0)
