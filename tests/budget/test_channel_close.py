"""Closing and cancellation: trio memory-channel semantics, and nothing leaks."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from budget import BudgetClosed, open_event_channel

from .helpers import channel, consistent, entry


async def test_end_of_channel_after_every_sender_closed_and_drained(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel()
    with trio.fail_after(5):
        other = send.clone()
        await send.send(entry(1))
        await send.aclose()
        await other.send(entry(2))
        other.close()
        other.close()  # idempotent
        batch = await receive.receive_batch()
        assert [e.key for e in batch] == [1, 2]
        with pytest.raises(trio.EndOfChannel):
            await receive.receive_batch()
        with pytest.raises(trio.EndOfChannel):
            receive.receive_batch_nowait()
        await receive.wait_pending(10, 10)  # nothing more can come: returns
        receive.acknowledge(batch)
        assert budget.statistics().in_use == 0


async def test_a_parked_receive_gets_end_of_channel_when_the_last_sender_closes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, send, receive = channel()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def consumer() -> None:
                with pytest.raises(trio.EndOfChannel):
                    await receive.receive_batch()

            nursery.start_soon(consumer)
            await trio.testing.wait_all_tasks_blocked()
            send.close()


async def test_using_a_closed_end_raises_closed_resource_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, send, receive = channel()
    with trio.fail_after(5):
        send.close()
        with pytest.raises(trio.ClosedResourceError):
            await send.send(entry(1))
        with pytest.raises(trio.ClosedResourceError):
            send.send_nowait(entry(1))
        with pytest.raises(trio.ClosedResourceError):
            send.clone()
        receive.close()
        with pytest.raises(trio.ClosedResourceError):
            await receive.receive_batch()
        with pytest.raises(trio.ClosedResourceError):
            await receive.wait_pending(1, 1)


async def test_closing_the_receiver_breaks_senders_and_returns_every_byte(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel(capacity=10)
    broken: list[str] = []

    async def producer(name: str) -> None:
        with pytest.raises(trio.BrokenResourceError):
            await send.send(entry(name, 6))
        broken.append(name)

    with trio.fail_after(5):
        await send.send_many([entry(1, 3), entry(2, 3)])
        in_flight = await receive.receive_batch(max_entries=1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(producer, "a")
            nursery.start_soon(producer, "b")
            await trio.testing.wait_all_tasks_blocked()
            assert receive.statistics().senders_waiting == 2
            receive.close()
        assert sorted(broken) == ["a", "b"]
        assert budget.statistics().in_use == 0  # pending and in-flight bytes came back
        assert budget.statistics().waiters == 0
        receive.acknowledge(in_flight)  # after close: accepted, nothing to release
        assert budget.statistics().in_use == 0
        with pytest.raises(trio.BrokenResourceError):
            await send.send(entry(3))
        with pytest.raises(trio.BrokenResourceError):
            send.send_nowait(entry(3))


async def test_closing_a_sender_fails_its_own_parked_send(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel(capacity=10)
    with trio.fail_after(5):
        await send.send(entry(1, 10))
        other = send.clone()
        async with trio.open_nursery() as nursery:

            async def producer() -> None:
                with pytest.raises(trio.ClosedResourceError):
                    await other.send(entry(2, 5))

            nursery.start_soon(producer)
            await trio.testing.wait_all_tasks_blocked()
            other.close()
        consistent(budget, receive)
        assert receive.statistics().open_senders == 1


async def test_closing_the_receiver_wakes_a_parked_receive(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, _send, receive = channel()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def consumer() -> None:
                with pytest.raises(trio.ClosedResourceError):
                    await receive.receive_batch()

            nursery.start_soon(consumer)
            await trio.testing.wait_all_tasks_blocked()
            receive.close()


async def test_two_tasks_cannot_wait_on_one_receiver(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, send, receive = channel()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive.receive_batch)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(trio.BusyResourceError):
                await receive.receive_batch()
            await send.send(entry(1))


async def test_a_closed_budget_fails_parked_and_new_sends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel(capacity=10)
    with trio.fail_after(5):
        await send.send(entry(1, 10))
        async with trio.open_nursery() as nursery:

            async def producer() -> None:
                with pytest.raises(BudgetClosed):
                    await send.send(entry(2, 5))

            nursery.start_soon(producer)
            await trio.testing.wait_all_tasks_blocked()
            budget.close()
        with pytest.raises(BudgetClosed):
            await send.send(entry(3, 1))
        with pytest.raises(BudgetClosed):
            send.send_nowait(entry(3, 1))
        receive.close()
        assert budget.statistics().in_use == 0


async def test_acknowledge_refuses_foreign_or_repeated_batches(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel()
    _, other_receive = open_event_channel(budget)
    with trio.fail_after(5):
        await send.send(entry(1, 4))
        batch = await receive.receive_batch()
        with pytest.raises(ValueError, match="another channel"):
            other_receive.acknowledge(batch)
        receive.acknowledge(batch)
        with pytest.raises(ValueError, match="already acknowledged"):
            receive.acknowledge(batch)
        assert budget.statistics().in_use == 0
        with pytest.raises(ValueError, match="max_entries"):
            await receive.receive_batch(max_entries=0)


async def test_nowait_refuses_a_group_that_can_never_fit_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, send, _receive = channel(capacity=10, max_pending_entries=2)
    with pytest.raises(ValueError, match="use send_many"):
        send.send_many_nowait([entry(1, 6), entry(2, 6)])
    with pytest.raises(ValueError, match="use send_many"):
        send.send_many_nowait([entry(i, 0) for i in range(3)])
    send.send_many_nowait([entry(1, 50)])  # a single oversize entry, with nothing in flight


# -- cancellation at every await: nothing changes ------------------------------------------


async def _cancel_while_parked(start: Callable[[], Awaitable[object]]) -> None:
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                await start()
                raise AssertionError("should have parked")

            nursery.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()
    assert scope.cancelled_caught


async def test_cancelling_a_send_parked_on_bytes_changes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel(capacity=10)
    with trio.fail_after(5):
        await send.send_many([entry(1, 6), entry(2, 4)])
        before = (budget.statistics(), receive.statistics())
        await _cancel_while_parked(lambda: send.send_many([entry(3, 2), entry(1, 9)]))
        # No byte or entry changed hands; the wait itself is counted (budget waits).
        waited = dataclasses.replace(before[0], waits=before[0].waits + 1)
        assert (budget.statistics(), receive.statistics()) == (waited, before[1])
        consistent(budget, receive)


async def test_cancelling_a_send_parked_behind_another_changes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel(capacity=10)
    with trio.fail_after(5):
        await send.send(entry(1, 10))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send.send, entry(2, 5))  # the head
            await trio.testing.wait_all_tasks_blocked()
            before = (budget.statistics(), receive.statistics())
            await _cancel_while_parked(lambda: send.send(entry(3, 5)))  # parked on the lock
            assert (budget.statistics(), receive.statistics()) == before
            receive.acknowledge(await receive.receive_batch())
        assert [e.key for e in await receive.receive_batch()] == [2]
        consistent(budget, receive)


async def test_cancelling_a_send_parked_on_entry_room_changes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel(max_pending_entries=2)
    with trio.fail_after(5):
        await send.send_many([entry(1), entry(2)])
        before = (budget.statistics(), receive.statistics())
        await _cancel_while_parked(lambda: send.send(entry(3)))
        assert (budget.statistics(), receive.statistics()) == before
        # The room wait is cleared: taking later must not wake a stale task.
        await receive.receive_batch()
        await send.send(entry(3))
        consistent(budget, receive)


async def test_cancelling_receive_and_wait_pending_takes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel()
    with trio.fail_after(5):
        await _cancel_while_parked(receive.receive_batch)
        await send.send(entry(1))
        await _cancel_while_parked(lambda: receive.wait_pending(5, 100))
        assert receive.statistics().taken == 0
        # The receiver is free again for one task.
        assert [e.key for e in await receive.receive_batch()] == [1]
        consistent(budget, receive)


async def test_cancelled_before_anything_sends_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel()
    with trio.CancelScope() as scope:
        scope.cancel()
        await send.send_many([entry(1), entry(2)])
    assert receive.statistics().sent == 0
    assert budget.statistics().in_use == 0


async def test_cancelling_a_split_group_keeps_the_prefix_it_admitted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel(capacity=10)
    with trio.fail_after(5):
        await _cancel_while_parked(lambda: send.send_many([entry(1, 6), entry(2, 6), entry(3, 6)]))
        # The first chunk (6 bytes) went in; the second could not fit and was not sent.
        assert [e.key for e in receive.receive_batch_nowait()] == [1]
        consistent(budget, receive)


async def test_a_group_with_a_non_entry_is_refused_whole(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel()
    with pytest.raises(TypeError, match=r"expected budget\.Entry items, got tuple"):
        await send.send_many([entry(1), ("not", "an", "entry")])  # type: ignore[list-item]
    assert receive.statistics().sent == 0
    consistent(budget, receive)


async def test_bad_limits_are_named_in_the_error(autojump_clock: trio.testing.MockClock) -> None:
    _, _send, receive = channel()
    with pytest.raises(ValueError, match="max_bytes: must be an int >= 1, got 0"):
        receive.receive_batch_nowait(10, 0)
    with pytest.raises(ValueError, match="min_entries: must be an int >= 1, got -1"):
        await receive.wait_pending(-1, 10)


async def test_a_close_between_grant_and_wakeup_still_returns_the_bytes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel(capacity=10)
    with trio.fail_after(5):
        await send.send(entry(1, 10))
        held = await receive.receive_batch()
        async with trio.open_nursery() as nursery:

            async def producer() -> None:
                with pytest.raises(trio.BrokenResourceError):
                    await send.send(entry(2, 8))

            nursery.start_soon(producer)
            await trio.testing.wait_all_tasks_blocked()
            receive.acknowledge(held)  # grants the parked sender its 8 bytes...
            assert budget.statistics().in_use == 8
            receive.close()  # ...and the receiver closes before that sender runs
        assert budget.statistics().in_use == 0
        assert receive.statistics().pending_entries == 0


async def test_two_channels_can_share_one_budget(autojump_clock: trio.testing.MockClock) -> None:
    budget, first, first_receive = channel(capacity=10)
    second, second_receive = open_event_channel(budget)
    with trio.fail_after(5):
        await first.send(entry("a", 6))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(second.send_many, (entry(k, 3) for k in "bc"))  # a generator
            await trio.testing.wait_all_tasks_blocked()
            assert second_receive.statistics().senders_waiting == 1
            first_receive.acknowledge(await first_receive.receive_batch())
        assert budget.statistics().in_use == 6
        second_receive.close()
        first_receive.close()
        assert budget.statistics().in_use == 0
