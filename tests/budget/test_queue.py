"""The sans-I/O coalescing queue against a deliberately naive reference model."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from budget import CoalescingQueue, Entry, EntryKind

A = EntryKind.UPSERT_ADDED
M = EntryKind.UPSERT_MODIFIED
D = EntryKind.DELETED
B = EntryKind.BARRIER
K = EntryKind.BOOKMARK

# The merge table written out independently of budget._entries (old, new) -> merged kind.
_OBJECT = (A, M, D)
MERGED: dict[tuple[EntryKind, EntryKind], EntryKind | None] = {}
for _old in _OBJECT:
    for _new in _OBJECT:
        if _new is D:
            MERGED[_old, _new] = D
        elif _old in (A, D):
            MERGED[_old, _new] = A
        else:
            MERGED[_old, _new] = _new
    MERGED[_old, K] = None
    MERGED[K, _old] = None
MERGED[K, K] = K


@dataclass
class RefSlot:
    key: Hashable | None
    kind: EntryKind
    size: int
    value: object


class Reference:
    """A list; coalescing scans back from the end and stops at a barrier. O(n), obviously right."""

    def __init__(self) -> None:
        self.pending: list[RefSlot] = []

    def admit(self, entry: Entry) -> None:
        if entry.kind is not B and entry.key is not None:
            for slot in reversed(self.pending):
                if slot.kind is B:
                    break
                if slot.key == entry.key:
                    merged = MERGED[slot.kind, entry.kind]
                    if merged is not None:
                        slot.kind, slot.size, slot.value = merged, entry.size, entry.value
                        return
                    break
        self.pending.append(RefSlot(entry.key, entry.kind, entry.size, entry.value))

    def take(self, max_entries: int, max_bytes: int) -> list[RefSlot]:
        out: list[RefSlot] = []
        total = 0
        while self.pending and len(out) < max_entries:
            if out and total + self.pending[0].size > max_bytes:
                break
            slot = self.pending.pop(0)
            out.append(slot)
            total += slot.size
        return out


def as_tuple(entry: Entry | RefSlot) -> tuple[object, ...]:
    return (entry.key, entry.kind, entry.size, entry.value)


entries = st.builds(
    Entry,
    key=st.one_of(st.none(), st.integers(0, 3)),
    kind=st.sampled_from(EntryKind),
    size=st.integers(0, 20),
    value=st.integers(),
)


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.queue = CoalescingQueue(max_pending_entries=1000)
        self.ref = Reference()
        self.in_flight: list[tuple[int, int]] = []

    @rule(group=st.lists(entries, max_size=8))
    def admit(self, group: list[Entry]) -> None:
        net, new = self.queue.plan(group)
        before_bytes, before_len = self.queue.pending_bytes, len(self.queue)
        replaced = self.queue.admit(group)
        # plan() predicted exactly what admit() did, and admit reports what it replaced.
        assert self.queue.pending_bytes - before_bytes == net
        assert len(self.queue) - before_len == new
        assert net == sum(e.size for e in group) - replaced
        for entry in group:
            self.ref.admit(entry)

    @rule(max_entries=st.integers(1, 6), max_bytes=st.integers(1, 40))
    def take(self, max_entries: int, max_bytes: int) -> None:
        got, size = self.queue.take(max_entries, max_bytes)
        want = self.ref.take(max_entries, max_bytes)
        assert [as_tuple(e) for e in got] == [as_tuple(s) for s in want]
        assert size == sum(s.size for s in want)
        if got:
            self.in_flight.append((size, len(got)))

    @precondition(lambda self: self.in_flight)
    @rule(index=st.integers(0, 100))
    def acknowledge(self, index: int) -> None:
        size, count = self.in_flight.pop(index % len(self.in_flight))
        self.queue.acknowledge(size, count)

    @rule()
    def clear(self) -> None:
        total = self.queue.pending_bytes + self.queue.in_flight_bytes
        assert self.queue.clear() == total
        self.ref.pending.clear()
        self.in_flight.clear()

    @invariant()
    def accounting_matches(self) -> None:
        assert len(self.queue) == len(self.ref.pending)
        assert self.queue.pending_bytes == sum(s.size for s in self.ref.pending)
        assert self.queue.in_flight_bytes == sum(size for size, _ in self.in_flight)
        assert self.queue.in_flight_entries == sum(n for _, n in self.in_flight)
        assert self.queue.in_flight_batches == len(self.in_flight)


QueueMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
TestQueue = QueueMachine.TestCase


def test_coalesced_entry_keeps_the_oldest_place_and_the_newest_size() -> None:
    q = CoalescingQueue(10)
    q.admit([Entry("a", A, 10, 1), Entry("b", M, 5, 2)])
    assert q.admit([Entry("a", M, 3, 3)]) == 10
    got, size = q.take(10, 100)
    assert [as_tuple(e) for e in got] == [("a", A, 3, 3), ("b", M, 5, 2)]
    assert size == 8
    assert q.coalesced == 1
    assert q.sent == 3
    assert q.taken == 2


def test_no_coalescing_across_a_barrier_even_within_one_group() -> None:
    q = CoalescingQueue(10)
    q.admit([Entry("a", A, 1, 1), Entry(None, B, 0, "sync"), Entry("a", M, 1, 2)])
    got, _ = q.take(10, 100)
    assert [e.value for e in got] == [1, "sync", 2]


def test_a_lone_entry_larger_than_max_bytes_is_taken_alone() -> None:
    q = CoalescingQueue(10)
    q.admit([Entry(1, A, 50, "big"), Entry(2, A, 1, "small")])
    got, size = q.take(10, 10)
    assert [e.value for e in got] == ["big"]
    assert size == 50


def test_acknowledging_more_than_is_in_flight_is_refused() -> None:
    q = CoalescingQueue(10)
    with pytest.raises(ValueError, match="more than is in flight"):
        q.acknowledge(1, 1)
    with pytest.raises(ValueError, match="max_pending_entries"):
        CoalescingQueue(0)
