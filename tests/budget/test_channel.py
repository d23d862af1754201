"""The coalescing event channel: order, coalescing, batching, backpressure and budget charges."""

from __future__ import annotations

import trio
import trio.testing

from .helpers import A, B, D, K, M, channel, consistent, entry


async def test_entries_arrive_in_order_and_acknowledge_returns_their_bytes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel()
    with trio.fail_after(5):
        await send.send_many([entry(1, 10, "a"), entry(2, 20, "b")])
        await send.send(entry(3, 5, "c"))
        assert budget.statistics().in_use == 35
        batch = await receive.receive_batch()
        assert [e.value for e in batch] == ["a", "b", "c"]
        assert len(batch) == 3
        assert batch.size == 35
        stats = receive.statistics()
        assert (stats.pending_entries, stats.in_flight_entries, stats.in_flight_bytes) == (0, 3, 35)
        assert budget.statistics().in_use == 35  # still held until acknowledged
        receive.acknowledge(batch)
        assert budget.statistics().in_use == 0
        consistent(budget, receive)


async def test_pending_entries_coalesce_into_the_newest_place_with_the_newest_value(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel()
    with trio.fail_after(5):
        await send.send_many(
            [
                entry("x", 10, "x1", A),
                entry("y", 10, "y1", M),
                entry("z", 10, "z1", D),
                entry("x", 12, "x2", M),  # ADDED then MODIFIED stays ADDED
                entry("y", 3, "y2", D),  # MODIFIED then DELETED becomes DELETED
                entry("z", 4, "z2", M),  # DELETED then MODIFIED becomes ADDED
            ]
        )
        assert budget.statistics().in_use == 12 + 3 + 4  # the newest sizes are charged
        batch = await receive.receive_batch()
        assert [(e.key, e.kind, e.value) for e in batch] == [
            ("x", A, "x2"),
            ("y", D, "y2"),
            ("z", A, "z2"),
        ]
        assert receive.statistics().coalesced == 3


async def test_barriers_stop_coalescing_and_are_never_coalesced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, send, receive = channel()
    with trio.fail_after(5):
        await send.send_many([entry("x", value=1), entry("s", 0, "begin", B)])
        await send.send_many([entry("x", value=2), entry("s", 0, "end", B), entry("x", value=3)])
        batch = await receive.receive_batch()
        assert [e.value for e in batch] == [1, "begin", 2, "end", 3]


async def test_bookmarks_coalesce_per_key_and_keyless_entries_never_do(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, send, receive = channel()
    with trio.fail_after(5):
        await send.send_many(
            [
                entry(("acct", "Pod", ""), 2, "rv1", K),
                entry(None, 1, "n1"),
                entry(("acct", "Pod", ""), 2, "rv2", K),
                entry(None, 1, "n2"),
                entry(("acct", "Pod", "ns"), 2, "other", K),
            ]
        )
        batch = await receive.receive_batch()
        # The coalesced bookmark moved to where rv2 was sent: after n1, never before it.
        assert [e.value for e in batch] == ["n1", "rv2", "n2", "other"]


async def test_taken_entries_no_longer_coalesce(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, send, receive = channel()
    with trio.fail_after(5):
        await send.send(entry("x", value=1))
        first = await receive.receive_batch()
        await send.send(entry("x", value=2))
        second = await receive.receive_batch()
        assert [e.value for e in first] == [1]
        assert [e.value for e in second] == [2]


async def test_batches_are_bounded_by_entries_and_bytes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, send, receive = channel()
    with trio.fail_after(5):
        await send.send_many([entry(i, 10, i) for i in range(10)])
        assert [e.value for e in await receive.receive_batch(max_entries=3)] == [0, 1, 2]
        assert [e.value for e in await receive.receive_batch(max_bytes=25)] == [3, 4]
        await send.send(entry("big", 500, "big"))
        rest = await receive.receive_batch(max_entries=100, max_bytes=100)
        assert [e.value for e in rest] == [5, 6, 7, 8, 9]
        alone = await receive.receive_batch(max_bytes=100)  # larger than max_bytes: comes alone
        assert [e.value for e in alone] == ["big"]


async def test_receive_batch_waits_for_a_send(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, send, receive = channel()
    got: list[object] = []

    async def consumer() -> None:
        batch = await receive.receive_batch()
        got.extend(e.value for e in batch)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consumer)
            await trio.testing.wait_all_tasks_blocked()
            await send.send_many([entry(1, value="a"), entry(2, value="b")])
        assert got == ["a", "b"]


async def test_a_bigger_replacement_is_charged_the_difference_and_a_smaller_one_refunds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel(capacity=100)
    with trio.fail_after(5):
        await send.send(entry("x", 40))
        await send.send(entry("x", 70))
        assert budget.statistics().in_use == 70
        await send.send(entry("x", 5))
        assert budget.statistics().in_use == 5
        consistent(budget, receive)


async def test_a_replacement_no_larger_never_waits_even_when_the_budget_is_full(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel(capacity=100)
    with trio.fail_after(5):
        await send.send_many([entry("x", 50), entry("y", 50)])
        async with trio.open_nursery() as nursery:
            # Another producer is parked waiting for room...
            nursery.start_soon(send.clone().send, entry("z", 30, "z"))
            await trio.testing.wait_all_tasks_blocked()
            assert receive.statistics().senders_waiting == 1
            # ...yet replacements of equal or smaller size pass at once (they only give back).
            send.send_nowait(entry("x", 50, "x2"))
            await send.send(entry("y", 20, "y2"))
            # The 30 freed bytes went to the parked producer.
            await trio.testing.wait_all_tasks_blocked()
            assert receive.statistics().senders_waiting == 0
        assert budget.statistics().in_use == 100
        # A bigger replacement, though, has to wait for room.
        with trio.move_on_after(1):
            await send.send(entry("y", 21))
        assert budget.statistics().in_use == 100
        batch = await receive.receive_batch()
        assert [e.value for e in batch] == ["x2", "y2", "z"]
        consistent(budget, receive)


async def test_producers_wait_for_room_in_fifo_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel(capacity=10)
    admitted: list[str] = []

    async def producer(name: str, size: int) -> None:
        async with send.clone() as mine:
            await mine.send(entry(name, size, name))
            admitted.append(name)

    with trio.fail_after(5):
        await send.send(entry("first", 10))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(producer, "big", 8)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(producer, "small", 1)  # would fit after a small ack, but waits
            await trio.testing.wait_all_tasks_blocked()
            assert receive.statistics().senders_waiting == 2
            batch = await receive.receive_batch()
            receive.acknowledge(batch)
        assert admitted == ["big", "small"]
        assert budget.statistics().in_use == 9
        consistent(budget, receive)


async def test_a_waiting_producer_keeps_its_later_entries_behind_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel(capacity=10)
    with trio.fail_after(5):
        await send.send(entry("hold", 10))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send.send_many, [entry("a", 5, "a"), entry("b", 5, "b")])
            await trio.testing.wait_all_tasks_blocked()
            # A nowait send cannot overtake a waiting sender.
            try:
                send.send_nowait(entry("c", 0, "c"))
            except trio.WouldBlock:
                overtook = False
            else:
                overtook = True
            receive.acknowledge(await receive.receive_batch())
        batch = await receive.receive_batch()
        values = [e.value for e in batch]
        assert values[:2] == ["a", "b"] or (overtook and values == ["c", "a", "b"])
        consistent(budget, receive)


async def test_an_oversize_entry_waits_until_nothing_is_in_flight(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel(capacity=100)
    with trio.fail_after(5):
        await send.send(entry("small", 10, "small"))
        small = await receive.receive_batch()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send.send, entry("huge", 250, "huge"))
            await trio.testing.wait_all_tasks_blocked()
            assert receive.statistics().senders_waiting == 1  # 10 bytes in flight block it
            receive.acknowledge(small)
        assert budget.statistics().in_use == 250
        # While it is in flight nothing else gets in.
        with trio.move_on_after(1):
            await send.send(entry("next", 1))
        huge = await receive.receive_batch()
        assert [e.value for e in huge] == ["huge"]
        receive.acknowledge(huge)
        await send.send(entry("next", 1))
        assert budget.statistics().in_use == 1
        assert budget.statistics().high_water == 250


async def test_a_group_larger_than_the_budget_is_admitted_in_chunks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel(capacity=30)
    got: list[object] = []

    async def consumer() -> None:
        while True:
            try:
                batch = await receive.receive_batch()
            except trio.EndOfChannel:
                return
            assert budget.statistics().in_use <= 30
            got.extend(e.value for e in batch)
            receive.acknowledge(batch)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consumer)
            async with send:
                await send.send_many([entry(i, 10, i) for i in range(10)])
        assert got == list(range(10))
        assert budget.statistics().high_water <= 30


async def test_the_pending_entry_cap_makes_senders_wait_for_the_consumer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget, send, receive = channel(max_pending_entries=3)
    with trio.fail_after(5):
        await send.send_many([entry(i) for i in range(3)])
        await send.send(entry(0, value="coalesces"))  # no new slot: fits even at the cap
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send.send_many, [entry(i) for i in range(3, 8)])
            await trio.testing.wait_all_tasks_blocked()
            assert receive.statistics().senders_waiting == 1
            # The waiting group is admitted in chunks of at most 3 entries, each whole.
            # (0 coalesced, so it moved behind 1 and 2: newest value, newest place.)
            assert [e.key for e in await receive.receive_batch(max_entries=2)] == [1, 2]
            await trio.testing.wait_all_tasks_blocked()
            assert receive.statistics().senders_waiting == 1  # room for 2, the chunk needs 3
            assert [e.value for e in await receive.receive_batch(max_entries=1)] == ["coalesces"]
            await trio.testing.wait_all_tasks_blocked()
            stats = receive.statistics()
            assert (stats.pending_entries, stats.senders_waiting) == (3, 1)
            assert [e.key for e in await receive.receive_batch()] == [3, 4, 5]
        assert [e.key for e in await receive.receive_batch()] == [6, 7]
        assert receive.statistics().pending_entries <= 3
        consistent(budget, receive)


async def test_wait_pending_returns_at_a_threshold_or_times_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, send, receive = channel()
    with trio.fail_after(5):
        with trio.move_on_after(0.01) as linger:
            await receive.wait_pending(3, 1000)
        assert linger.cancelled_caught  # nothing pending: the linger ran out
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive.wait_pending, 3, 1000)
            await trio.testing.wait_all_tasks_blocked()
            await send.send_many([entry(1), entry(2)])
            await trio.testing.wait_all_tasks_blocked()
            assert receive.statistics().pending_entries == 2  # not yet: the waiter still parks
            await send.send(entry(3))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive.wait_pending, 100, 50)
            await trio.testing.wait_all_tasks_blocked()
            await send.send(entry(4, 47))  # 3 + 47 = 50 bytes
        await receive.wait_pending(1, 1)  # already satisfied: returns at once


async def test_wait_pending_stops_waiting_when_a_sender_is_blocked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, send, receive = channel(capacity=10)
    with trio.fail_after(5):
        await send.send(entry(1, 10))
        async with trio.open_nursery() as outer:
            async with trio.open_nursery() as inner:
                inner.start_soon(receive.wait_pending, 100, 1000)
                await trio.testing.wait_all_tasks_blocked()
                outer.start_soon(send.clone().send, entry(2, 5))
            # wait_pending returned: the parked sender needs the consumer now.
            assert receive.statistics().senders_waiting == 1
            receive.acknowledge(await receive.receive_batch())
        assert receive.statistics().senders_waiting == 0


async def test_wait_not_only_bookmarks_sleeps_through_bookmarks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, send, receive = channel(capacity=100)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive.wait_not_only_bookmarks)
            await trio.testing.wait_all_tasks_blocked()
            for n in range(5):  # bookmarks of five watches: the waiter is not woken
                await send.send(entry(("acct", "Pod", str(n)), 1, n, K))
                await trio.testing.wait_all_tasks_blocked()
                assert nursery.child_tasks
            await send.send(entry(None, 1, "change"))
        assert receive.statistics().pending_entries == 6
        await receive.wait_not_only_bookmarks()  # already satisfied: returns at once
        receive.acknowledge(await receive.receive_batch())
        # Bookmarks alone and a blocked sender: waiting longer is pointless.
        await send.send(entry(("acct", "Pod", ""), 60, "rv", K))
        async with trio.open_nursery() as outer:
            async with trio.open_nursery() as inner:
                inner.start_soon(receive.wait_not_only_bookmarks)
                await trio.testing.wait_all_tasks_blocked()
                outer.start_soon(send.clone().send, entry(None, 50, "big"))
            assert receive.statistics().senders_waiting == 1
            receive.acknowledge(await receive.receive_batch())


async def test_send_many_is_one_checkpoint_and_statistics_are_snapshots(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, send, receive = channel()
    with trio.testing.assert_checkpoints():
        await send.send_many([entry(i) for i in range(10)])
    with trio.testing.assert_checkpoints():
        await receive.receive_batch()
    stats = receive.statistics()
    assert send.statistics() == stats
    assert stats.sent == 10
