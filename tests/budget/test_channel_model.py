"""One producer, one consumer, under budget and entry-cap pressure: the channel delivers
exactly what the naive reference model of test_queue delivers, batch for batch.

With a single producer, admission order is send order, and ``statistics().sent`` says how
many entries were admitted so far (a waiting group is admitted chunk by chunk), so the
model can be fed exactly the admitted prefix before each take.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from hypothesis import event, given, settings
from hypothesis import strategies as st

from budget import Batch, ByteBudget, Entry, EntryKind, open_event_channel

from .test_queue import Reference, as_tuple

entry_strategy = st.builds(
    Entry,
    key=st.sampled_from([0, 0, 1, 1, 2, None]),
    kind=st.sampled_from(EntryKind),
    size=st.one_of(st.integers(0, 8), st.integers(0, 40)),
    value=st.integers(),
)
op_strategy = st.one_of(
    st.tuples(st.just("send"), st.lists(entry_strategy, min_size=1, max_size=8)),
    st.tuples(st.just("take"), st.integers(1, 6), st.integers(1, 50)),
    st.tuples(st.just("ack")),
)


# More than the profile's default: the model runs many short interleavings; explore adds more.
@settings(max_examples=max(150, settings().max_examples))
@given(
    capacity=st.integers(1, 30),
    max_pending=st.integers(1, 5),
    ops=st.lists(op_strategy, min_size=1, max_size=30),
)
def test_the_channel_matches_the_reference_model(
    capacity: int, max_pending: int, ops: list[tuple[Any, ...]]
) -> None:
    async def main() -> None:
        budget = ByteBudget(capacity)
        send, receive = open_event_channel(budget, max_pending_entries=max_pending)
        ref = Reference()
        queued: list[Entry] = []  # every entry handed to send_many, in order
        fed = 0
        unacked: list[Batch] = []
        busy = False

        async def producer(group: list[Entry]) -> None:
            nonlocal busy
            await send.send_many(group)
            busy = False

        def take(max_entries: int, max_bytes: int) -> None:
            nonlocal fed
            admitted = receive.statistics().sent
            for e in queued[fed:admitted]:
                ref.admit(e)
            fed = admitted
            try:
                batch = receive.receive_batch_nowait(max_entries, max_bytes)
            except trio.WouldBlock:
                assert not ref.pending
                return
            want = ref.take(max_entries, max_bytes)
            assert [as_tuple(e) for e in batch] == [as_tuple(s) for s in want]
            unacked.append(batch)

        with trio.fail_after(100):
            async with trio.open_nursery() as nursery:
                for op in ops:
                    if op[0] == "send" and not busy:
                        busy = True
                        queued.extend(op[1])
                        nursery.start_soon(producer, op[1])
                    elif op[0] == "take":
                        take(op[1], op[2])
                    elif op[0] == "ack" and unacked:
                        receive.acknowledge(unacked.pop(0))
                    await trio.testing.wait_all_tasks_blocked()
                    if busy:
                        event("the producer waited")
                    stats = budget.statistics()
                    channel = receive.statistics()
                    assert stats.in_use == channel.pending_bytes + channel.in_flight_bytes
                # Drain: the consumer keeps up until the producer is done and all is taken.
                for _ in range(1000):
                    while unacked:
                        receive.acknowledge(unacked.pop(0))
                    take(1000, 10_000)
                    await trio.testing.wait_all_tasks_blocked()
                    if not busy and not receive.statistics().pending_entries:
                        break
                else:
                    raise AssertionError("the producer never finished")
            assert fed == len(queued)
            assert not ref.pending
            receive.close()
            assert budget.statistics().in_use == 0

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
