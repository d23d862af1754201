"""ByteBudget and its sans-I/O core: FIFO, the single-oversize rule, cancellation, close."""

from __future__ import annotations

import dataclasses

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from budget import BudgetClosed, BudgetCore, BudgetStatistics, ByteBudget


def test_core_grants_in_fifo_order_and_a_big_head_blocks_small_followers() -> None:
    core: BudgetCore[str] = BudgetCore(100)
    assert core.try_reserve(60)
    assert not core.try_reserve(50)
    core.enqueue(50, "big")
    # 10 bytes would fit, but "big" waits ahead: FIFO means no overtaking.
    assert not core.try_reserve(10)
    core.enqueue(10, "small")
    # 45 bytes free: "small" would fit, but it stays behind "big".
    assert core.release(5) == []
    assert core.in_use == 55
    assert core.release(55) == ["big", "small"]
    assert core.in_use == 60
    assert core.statistics() == BudgetStatistics(100, 60, 60, 0, waits=2)


def test_core_cancelling_the_head_lets_the_next_one_in() -> None:
    core: BudgetCore[str] = BudgetCore(10)
    assert core.try_reserve(5)
    core.enqueue(8, "head")
    core.enqueue(3, "next")
    assert core.cancel("head") == ["next"]
    assert core.in_use == 8
    with pytest.raises(ValueError, match="not parked"):
        core.cancel("head")


def test_core_single_oversize_request_only_when_nothing_is_in_use() -> None:
    core: BudgetCore[str] = BudgetCore(10)
    assert core.try_reserve(1)
    assert not core.try_reserve(25)
    core.enqueue(25, "huge")
    assert core.release(1) == ["huge"]
    assert core.in_use == 25
    assert core.high_water == 25
    # While the oversize one is held, nothing else fits (but zero always does).
    assert not core.try_reserve(1)
    assert core.try_reserve(0)


def test_core_rejects_bad_arguments_clearly() -> None:
    with pytest.raises(ValueError, match="capacity: must be > 0"):
        BudgetCore(0)
    with pytest.raises(TypeError, match="expected an int"):
        BudgetCore(1.5)  # type: ignore[arg-type]
    core: BudgetCore[str] = BudgetCore(10)
    core.try_reserve(3)
    with pytest.raises(ValueError, match=r"release\(4\): only 3 bytes are in use"):
        core.release(4)


@given(
    st.integers(1, 50),
    st.lists(
        st.one_of(
            st.tuples(st.just("reserve"), st.integers(0, 80)),
            st.tuples(st.just("release"), st.integers(0, 10)),
            st.tuples(st.just("cancel"), st.integers(0, 10)),
        ),
        max_size=60,
    ),
)
def test_core_accounting_property(capacity: int, ops: list[tuple[str, int]]) -> None:
    """in_use is the sum of the grants held; it exceeds capacity only through one oversize
    grant made when nothing was in use; grants follow request order."""
    core: BudgetCore[int] = BudgetCore(capacity)
    held: list[int] = []  # sizes of grants held
    parked: list[tuple[int, int]] = []  # (token, size) in FIFO order
    next_token = 0
    sizes: dict[int, int] = {}
    for op, arg in ops:
        if op == "reserve":
            token = next_token
            next_token += 1
            sizes[token] = arg
            was_empty = core.in_use == 0
            if core.try_reserve(arg):
                assert not parked or arg == 0
                assert arg <= capacity or was_empty
                if arg:
                    held.append(arg)
            else:
                core.enqueue(arg, token)
                parked.append((token, arg))
            granted: list[int] = []
        elif op == "release":
            if not held:
                continue
            granted = core.release(held.pop(arg % len(held)))
        else:
            if not parked:
                continue
            token, _ = parked[arg % len(parked)]
            parked.remove((token, sizes[token]))
            granted = core.cancel(token)
        for token in granted:
            # Grants come from the front of the FIFO, in order.
            assert parked[0][0] == token
            parked.pop(0)
            held.append(sizes[token])
        assert core.in_use == sum(held)
        assert core.statistics().waiters == len(parked)
        if core.in_use > capacity:
            assert len([h for h in held if h]) == 1
        if parked:
            # The head is parked only because it does not fit.
            assert not core.fits(parked[0][1])


async def test_reserve_waits_fifo_and_release_wakes_in_order() -> None:
    budget = ByteBudget(100)
    order: list[str] = []

    async def reserver(name: str, n: int) -> None:
        await budget.reserve(n)
        order.append(name)

    with trio.fail_after(5):
        budget.reserve_nowait(90)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reserver, "a", 50)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(reserver, "b", 5)  # fits, but waits behind "a"
            await trio.testing.wait_all_tasks_blocked()
            assert order == []
            assert budget.statistics().waiters == 2
            with pytest.raises(trio.WouldBlock):
                budget.reserve_nowait(1)
            budget.release(40)  # room for "a" (50) only
            await trio.testing.wait_all_tasks_blocked()
            assert order == ["a"]
            budget.release(50)
        assert order == ["a", "b"]
        stats = budget.statistics()
        assert stats.wait_seconds > 0
        assert dataclasses.replace(stats, wait_seconds=0) == BudgetStatistics(100, 55, 100, 0, 2)


async def test_cancelled_reserve_changes_nothing() -> None:
    budget = ByteBudget(10)
    with trio.fail_after(5):
        budget.reserve_nowait(8)
        before = budget.statistics()
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(budget.reserve, 5)
                await trio.testing.wait_all_tasks_blocked()
                assert budget.statistics().waiters == 1
                scope.cancel()
        # Nothing taken; the wait is counted all the same (it did wait), and its time too.
        waited = budget.statistics().wait_seconds
        assert waited > 0
        after = dataclasses.replace(before, waits=before.waits + 1, wait_seconds=waited)
        assert budget.statistics() == after
        # An already-cancelled reserve takes nothing even when it would fit, nor waits.
        with trio.CancelScope() as scope:
            scope.cancel()
            await budget.reserve(1)
        assert budget.statistics() == after


async def test_cancelling_the_head_waiter_admits_the_one_behind() -> None:
    budget = ByteBudget(10)
    budget.reserve_nowait(6)
    got: list[int] = []

    async def reserver(n: int, scope: trio.CancelScope) -> None:
        with scope:
            await budget.reserve(n)
            got.append(n)

    with trio.fail_after(5):
        head = trio.CancelScope()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reserver, 9, head)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(reserver, 3, trio.CancelScope())
            await trio.testing.wait_all_tasks_blocked()
            assert got == []
            head.cancel()
        assert got == [3]
        assert budget.statistics().in_use == 9


async def test_oversize_reserve_waits_for_an_empty_budget() -> None:
    budget = ByteBudget(10)
    with trio.fail_after(5):
        budget.reserve_nowait(1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(budget.reserve, 30)
            await trio.testing.wait_all_tasks_blocked()
            assert budget.statistics().in_use == 1
            budget.release(1)
        assert budget.statistics().in_use == 30
        with pytest.raises(trio.WouldBlock):
            budget.reserve_nowait(1)
        budget.release(30)
        assert budget.statistics().in_use == 0


async def test_close_fails_waiters_and_refuses_new_reservations() -> None:
    budget = ByteBudget(4)
    failures: list[BaseException] = []

    async def reserver() -> None:
        try:
            await budget.reserve(4)
        except BudgetClosed as exc:
            failures.append(exc)

    with trio.fail_after(5):
        budget.reserve_nowait(4)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reserver)
            await trio.testing.wait_all_tasks_blocked()
            budget.close()
            budget.close()  # idempotent
        assert len(failures) == 1
        with pytest.raises(BudgetClosed):
            budget.reserve_nowait(1)
        with pytest.raises(BudgetClosed):
            await budget.reserve(1)
        budget.release(4)  # still counted after close
        stats = dataclasses.replace(budget.statistics(), wait_seconds=0)
        assert stats == BudgetStatistics(4, 0, 4, 0, waits=1)
        assert budget.closed


async def test_reserve_is_a_checkpoint_and_statistics_are_frozen() -> None:
    budget = ByteBudget(4)
    with trio.testing.assert_checkpoints():
        await budget.reserve(1)
    stats = budget.statistics()
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.in_use = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="must be >= 0"):
        budget.reserve_nowait(-1)


async def test_waits_count_the_reservations_that_parked_and_only_those() -> None:
    """``waits`` (kubesvc_budget_waits_total) rises once per reservation that did not fit
    at once: never for one that fits, nor for a refused reserve_nowait."""
    budget = ByteBudget(10)
    with trio.fail_after(5):
        await budget.reserve(6)
        budget.reserve_nowait(4)
        with pytest.raises(trio.WouldBlock):
            budget.reserve_nowait(1)
        assert budget.statistics().waits == 0
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(budget.reserve, 2)
            await trio.testing.wait_all_tasks_blocked()
            assert budget.statistics().waits == 3
            budget.release(6)
        assert budget.statistics().waits == 3
        assert budget.statistics().in_use == 10


async def test_wait_seconds_add_up_the_time_each_parked_reservation_waited(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``wait_seconds`` (kubesvc_budget_wait_seconds_total) adds each parked reservation's
    wait, granted or cancelled: its rate is how many reflectors waited for room on average."""
    budget = ByteBudget(10)
    with trio.fail_after(60):
        budget.reserve_nowait(10)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(budget.reserve, 5)
            nursery.start_soon(budget.reserve, 5)
            await trio.sleep(3)
            budget.release(10)  # both granted after 3 s: 6 s of waiting
        assert budget.statistics().wait_seconds == pytest.approx(6)
        with trio.move_on_after(2):
            await budget.reserve(1)  # the budget is full: parked, then cancelled
        assert budget.statistics().wait_seconds == pytest.approx(8)
        assert budget.statistics().waits == 3
