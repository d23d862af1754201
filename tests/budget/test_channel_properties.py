"""Random interleavings of send / take / linger / acknowledge / cancel / close, checked by
properties. Hypothesis picks the operations; each runs as a task and the driver waits until
every task is blocked (trio.testing.wait_all_tasks_blocked) before checking the invariants,
so the interleaving is exactly the one generated.

Properties (K = a key, "sent" = admitted by a send that returned normally):

1. Exactly once, final state: when the receiver was never closed and everything is drained,
   for every key K the last value delivered for K is the newest value of K that was sent, or
   newer (a later send that was cancelled part-way may have admitted newer entries), and
   no value is delivered twice.
2. No stale value: the values delivered for K appear in send order (a value never comes
   after a newer one of the same key).
2b. Send order per producer, after coalescing: the values one producer's entries carry are
   delivered in the order that producer sent them (a coalesced entry takes the place of its
   newest value, so nothing is delivered before an entry that was sent before that value).
   The agent relies on it: the server's resume point follows the last resourceVersion it
   committed, so a value delivered early would let a reconnect skip the ones it overtook.
3. Barriers: a producer's entries sent before one of its barriers are delivered before it,
   those sent after it are delivered after it; barriers and keyless entries are delivered
   exactly once (never coalesced).
4. Kinds: a delivered entry has the kind of the value it carries, except that MODIFIED may
   show as ADDED (ADDED then MODIFIED, or DELETED then MODIFIED).
5. Nothing is sent by a send cancelled before any of its entries was admitted.
6. Bytes: budget in use == pending + in-flight bytes of the channel; it exceeds the capacity
   only while one entry larger than the capacity is in the channel; every byte is back once
   the receiver is closed, and no task stays parked in the budget.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.testing
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from budget import Batch, ByteBudget, Entry, EntryKind, open_event_channel

A = EntryKind.UPSERT_ADDED
M = EntryKind.UPSERT_MODIFIED
B = EntryKind.BARRIER
PRODUCERS = 3
# An operation as hypothesis draws it: (name, *arguments).
Op = tuple[Any, ...]


def tag(entry: Entry) -> tuple[int, int]:
    """The (producer, sequence number) every test entry carries as its value."""
    value = entry.value
    assert isinstance(value, tuple)
    return value


@dataclass
class SendTask:
    producer: int
    entries: list[Entry]
    single_chunk: bool
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    outcome: str = "running"


@dataclass
class ConsumerTask:
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    done: bool = False


group_strategy = st.lists(
    st.tuples(
        st.sampled_from([0, 0, 0, 1, 1, 2, None]),  # hot keys, so that entries coalesce
        st.sampled_from(EntryKind),
        st.one_of(st.integers(0, 12), st.integers(0, 60)),
    ),
    min_size=1,
    max_size=6,
)
send_op = st.tuples(st.just("send"), st.integers(0, PRODUCERS - 1), group_strategy)
take_op = st.tuples(st.just("take"), st.integers(1, 5), st.integers(1, 60))
ack_op = st.tuples(st.just("ack"), st.integers(0, 100))
# Repeated branches weight the draw: mostly sends, takes and acks. Closing the receiver is a
# separate parameter (close_at), because it ends the interesting part of a run.
op_strategy = st.one_of(
    send_op,
    send_op,
    send_op,
    send_op,
    take_op,
    take_op,
    ack_op,
    ack_op,
    st.tuples(st.just("linger"), st.integers(1, 5), st.integers(1, 60)),
    st.tuples(st.just("cancel_send"), st.integers(0, PRODUCERS - 1)),
    st.tuples(st.just("cancel_take")),
    st.tuples(st.just("close_sender"), st.integers(0, PRODUCERS - 1)),
)


class Scenario:
    def __init__(self, capacity: int, max_pending: int) -> None:
        self.capacity = capacity
        self.budget = ByteBudget(capacity)
        first, self.receive = open_event_channel(self.budget, max_pending_entries=max_pending)
        self.senders = [first] + [first.clone() for _ in range(PRODUCERS - 1)]
        self.seq = itertools.count()
        self.sends: list[SendTask] = []
        self.current: dict[int, SendTask] = {}
        self.consumer: ConsumerTask | None = None
        self.delivered: list[Entry] = []
        self.unacked: list[Batch] = []
        self.largest = 0

    # -- tasks -----------------------------------------------------------------------

    async def run_send(self, task: SendTask) -> None:
        with task.scope:
            try:
                await self.senders[task.producer].send_many(task.entries)
                task.outcome = "ok"
            except trio.BrokenResourceError:
                task.outcome = "broken"
            except trio.ClosedResourceError:
                task.outcome = "closed"
        if task.scope.cancelled_caught:
            task.outcome = "cancelled"

    def record(self, batch: Batch) -> None:
        assert batch.size == sum(e.size for e in batch)
        self.delivered.extend(batch)
        self.unacked.append(batch)

    async def run_take(self, task: ConsumerTask, max_entries: int, max_bytes: int) -> None:
        with task.scope:
            try:
                self.record(await self.receive.receive_batch(max_entries, max_bytes))
            except (trio.EndOfChannel, trio.ClosedResourceError):
                pass
        task.done = True

    async def run_linger(self, task: ConsumerTask, min_entries: int, min_bytes: int) -> None:
        with task.scope:
            try:
                await self.receive.wait_pending(min_entries, min_bytes)
                self.record(self.receive.receive_batch_nowait(min_entries, 10_000))
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                pass
        task.done = True

    # -- the driver ------------------------------------------------------------------

    def apply(self, nursery: trio.Nursery, op: Op) -> None:
        kind = op[0]
        if kind == "send":
            producer, spec = op[1], op[2]
            if producer in self.current or self.senders[producer]._closed:
                return
            entries = [
                Entry(None if k is None else (producer, k), kind_, size, (producer, next(self.seq)))
                for k, kind_, size in spec
            ]
            self.largest = max(self.largest, *(e.size for e in entries))
            total = sum(e.size for e in entries)
            single = len(entries) == 1 or (
                total <= self.capacity
                and len(entries) <= self.receive.statistics().max_pending_entries
            )
            task = SendTask(producer, entries, single)
            self.sends.append(task)
            self.current[producer] = task
            nursery.start_soon(self.run_send, task)
        elif kind in ("take", "linger"):
            if self.consumer is not None and not self.consumer.done:
                return
            self.consumer = ConsumerTask()
            runner = self.run_take if kind == "take" else self.run_linger
            nursery.start_soon(runner, self.consumer, op[1], op[2])
        elif kind == "ack":
            if self.unacked:
                self.receive.acknowledge(self.unacked.pop(op[1] % len(self.unacked)))
        elif kind == "cancel_send":
            running = self.current.get(op[1])
            if running is not None:
                running.scope.cancel()
        elif kind == "cancel_take":
            if self.consumer is not None:
                self.consumer.scope.cancel()
        elif kind == "close_sender":
            sender = self.senders[op[1]]
            sender.close()
        else:
            self.receive.close()

    def settle_bookkeeping(self) -> None:
        for producer, task in list(self.current.items()):
            if task.outcome != "running":
                del self.current[producer]

    def check_invariants(self) -> None:
        b = self.budget.statistics()
        c = self.receive.statistics()
        assert b.waiters <= 1
        if c.receiver_closed:
            assert b.in_use == 0, "every byte comes back on close"
            assert b.waiters == 0
            assert c.senders_waiting == 0
        else:
            assert b.in_use == c.pending_bytes + c.in_flight_bytes
            assert c.in_flight_bytes == sum(batch.size for batch in self.unacked)
            assert c.in_flight_entries == sum(len(batch) for batch in self.unacked)
            assert c.pending_entries == c.sent - c.coalesced - c.taken
            assert c.taken == len(self.delivered)
            assert c.pending_entries <= c.max_pending_entries
            # After settling, every unfinished send is parked in the channel's slow path.
            assert c.senders_waiting == len(self.current)
            if self.current:
                event("a sender was parked")
        if b.in_use > self.capacity:
            event("a single oversize entry was in flight")
            assert self.largest > self.capacity
            assert b.in_use <= self.largest
        assert b.high_water <= max(self.capacity, self.largest)

    async def drain(self) -> None:
        if self.consumer is not None:
            self.consumer.scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(200):
            self.settle_bookkeeping()
            if self.receive.statistics().receiver_closed:
                break
            while self.unacked:
                self.receive.acknowledge(self.unacked.pop())
            try:
                self.record(self.receive.receive_batch_nowait(10_000, 10_000))
            except trio.EndOfChannel:
                break
            except trio.WouldBlock:
                if not self.current:
                    break
            await trio.testing.wait_all_tasks_blocked()
        else:
            raise AssertionError("a sender stayed parked although everything was drained")
        self.settle_bookkeeping()
        assert not self.current

    def check_delivery(self, receiver_closed: bool) -> None:
        values = [e.value for e in self.delivered]
        assert len(values) == len(set(values)), "a value was delivered twice"
        by_value = {e.value: (task, e) for task in self.sends for e in task.entries}
        last: dict[object, int] = {}
        for got in self.delivered:
            task, sent = by_value[got.value]
            assert got.key == sent.key
            assert got.size == sent.size
            assert got.kind == sent.kind or (sent.kind is M and got.kind is A), (sent, got)
            assert task.outcome != "cancelled" or not task.single_chunk
            if sent.kind is not B and sent.key is not None:
                seq = tag(got)[1]
                assert seq > last.get(sent.key, -1), "a stale value came after a newer one"
                last[sent.key] = seq
        for task in self.sends:
            if task.outcome in ("cancelled", "broken", "closed") and task.single_chunk:
                assert not any(e.value in set(values) for e in task.entries)
        # Send order per producer (2b): sequence numbers only grow along the delivered stream.
        newest_seen: dict[int, int] = {}
        for got in self.delivered:
            producer, seq = tag(got)
            assert seq > newest_seen.get(producer, -1), (
                f"producer {producer}: value {seq} delivered after {newest_seen[producer]}"
            )
            newest_seen[producer] = seq
        # Barriers: per producer, the delivered order respects each barrier.
        position = {value: i for i, value in enumerate(values)}
        for task in self.sends:
            for barrier in task.entries:
                if barrier.kind is not B or barrier.value not in position:
                    continue
                producer, bseq = tag(barrier)
                for other in self.delivered:
                    p, seq = tag(other)
                    if p != producer or seq == bseq:
                        continue
                    if seq < bseq:
                        assert position[other.value] < position[barrier.value]
                    else:
                        assert position[other.value] > position[barrier.value]
        event(f"outcomes: {sorted({t.outcome for t in self.sends})}")
        if any(e.kind is not B and e.key is not None for e in self.delivered):
            event("keyed entries delivered")
        if self.receive.statistics().coalesced:
            event("entries coalesced")
        if receiver_closed:
            return
        delivered = set(values)
        newest_ok: dict[object, int] = {}
        for task in self.sends:
            if task.outcome != "ok":
                continue
            for e in task.entries:
                if e.kind is B or e.key is None:
                    assert e.value in delivered, "a barrier or keyless entry was lost"
                else:
                    newest_ok[e.key] = max(newest_ok.get(e.key, -1), tag(e)[1])
        for key, seq in newest_ok.items():
            assert last.get(key, -1) >= seq, f"the final state of {key} was not delivered"


# More than the profile's default: the model runs many short interleavings; explore adds more.
@settings(max_examples=max(200, settings().max_examples))
@given(
    capacity=st.integers(1, 40),
    max_pending=st.integers(1, 6),
    ops=st.lists(op_strategy, min_size=6, max_size=50),
    close_at=st.one_of(st.none(), st.integers(0, 50)),
)
# The reviewer's case (B1), always run: a@0, b@1, a@2 from one producer must arrive b, a.
@example(
    capacity=40, max_pending=6, ops=[("send", 0, [(0, M, 1), (1, M, 1), (0, M, 1)])], close_at=None
)
def test_random_interleavings_keep_every_promise(
    capacity: int, max_pending: int, ops: list[Op], close_at: int | None
) -> None:
    if close_at is not None:
        ops = [*ops[:close_at], ("close_receiver",), *ops[close_at:]]

    async def main() -> None:
        scenario = Scenario(capacity, max_pending)
        with trio.fail_after(1000):
            async with trio.open_nursery() as nursery:
                for op in ops:
                    scenario.apply(nursery, op)
                    await trio.testing.wait_all_tasks_blocked()
                    scenario.settle_bookkeeping()
                    scenario.check_invariants()
                closed = scenario.receive.statistics().receiver_closed
                await scenario.drain()
                scenario.check_invariants()
                if not closed:
                    for sender in scenario.senders:
                        sender.close()
                    try:
                        scenario.receive.receive_batch_nowait()
                    except trio.EndOfChannel:
                        pass
                    else:
                        raise AssertionError("EndOfChannel expected after draining")
                scenario.check_delivery(closed)
                scenario.receive.close()
                scenario.check_invariants()
                assert scenario.budget.statistics().in_use == 0

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
