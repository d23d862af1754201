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
    """A list; coalescing scans back from the end and stops at a barrier, and the merged slot
    moves to the end (newest value, newest place). O(n), obviously right."""

    def __init__(self) -> None:
        self.pending: list[RefSlot] = []

    def admit(self, entry: Entry) -> None:
        if entry.kind is not B and entry.key is not None:
            # By position, not list.remove: slots compare by value, and remove() would take
            # the first equal slot, which may lie before a barrier (the example below).
            for index in range(len(self.pending) - 1, -1, -1):
                slot = self.pending[index]
                if slot.kind is B:
                    break
                if slot.key == entry.key:
                    merged = MERGED[slot.kind, entry.kind]
                    if merged is not None:
                        del self.pending[index]
                        self.pending.append(RefSlot(entry.key, merged, entry.size, entry.value))
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
        bookmarks = sum(s.kind is EntryKind.BOOKMARK for s in self.ref.pending)
        assert self.queue.pending_bookmarks == bookmarks
        assert self.queue.in_flight_bytes == sum(size for size, _ in self.in_flight)
        assert self.queue.in_flight_entries == sum(n for _, n in self.in_flight)
        assert self.queue.in_flight_batches == len(self.in_flight)


QueueMachine.TestCase.settings = settings(stateful_step_count=30)
TestQueue = QueueMachine.TestCase


def test_the_model_merges_equal_entries_after_a_barrier_not_before_it() -> None:
    # The seed that once failed CI: equal entries on both sides of a barrier. The model used
    # list.remove (equality) and dropped the slot before the barrier instead of the one after.
    group = [
        Entry("x", A, 1, 0),
        Entry(None, B, 0, "sync"),
        Entry("x", A, 1, 0),
        Entry("x", A, 1, 0),
    ]
    q = CoalescingQueue(10)
    q.admit(group)
    ref = Reference()
    for entry in group:
        ref.admit(entry)
    want = [("x", A, 1, 0), (None, B, 0, "sync"), ("x", A, 1, 0)]
    assert [as_tuple(e) for e in q.take(10, 100)[0]] == want
    assert [as_tuple(s) for s in ref.take(10, 100)] == want


def test_the_machine_replays_the_barrier_case() -> None:
    # The same case through the state machine, so the rule-based test itself covers it.
    machine = QueueMachine()
    machine.admit(
        [Entry("x", A, 1, 0), Entry(None, B, 0, "sync"), Entry("x", A, 1, 0), Entry("x", A, 1, 0)]
    )
    machine.accounting_matches()
    machine.take(max_entries=6, max_bytes=40)
    machine.accounting_matches()
    machine.teardown()


def test_coalesced_entry_takes_the_newest_place_and_the_newest_size() -> None:
    q = CoalescingQueue(10)
    q.admit([Entry("a", A, 10, 1), Entry("b", M, 5, 2)])
    assert q.admit([Entry("a", M, 3, 3)]) == 10
    got, size = q.take(10, 100)
    assert [as_tuple(e) for e in got] == [("b", M, 5, 2), ("a", A, 3, 3)]
    assert size == 8
    assert q.coalesced == 1
    assert q.sent == 3
    assert q.taken == 2


def test_the_first_entry_taken_is_never_newer_than_one_behind_it() -> None:
    # The reviewer's case (B1): a@5, b@6, a@7 must not hand out a@7 before b@6, or a consumer
    # that commits a@7's resourceVersion and then loses the stream resumes past b@6.
    q = CoalescingQueue(10)
    q.admit([Entry("a", M, 1, 5), Entry("b", M, 1, 6)])
    q.admit([Entry("a", M, 1, 7)])
    got, _ = q.take(1, 100)
    assert [e.value for e in got] == [6]
    got, _ = q.take(1, 100)
    assert [e.value for e in got] == [7]
    # Bookmarks too: bookmark@10, c@11, bookmark@12 sends c@11 first.
    q.admit([Entry("bm", K, 1, 10), Entry("c", M, 1, 11), Entry("bm", K, 1, 12)])
    got, _ = q.take(1, 100)
    assert [e.value for e in got] == [11]
    got, _ = q.take(10, 100)
    assert [(e.kind, e.value) for e in got] == [(K, 12)]


def test_pending_bookmarks_are_counted_through_merges_and_takes() -> None:
    q = CoalescingQueue(10)
    q.admit([Entry("bm1", K, 1, 1), Entry("bm2", K, 1, 2), Entry("a", M, 1, 3)])
    q.admit([Entry("bm1", K, 1, 4), Entry(None, K, 1, 5)])  # a merge, a keyless one
    assert q.pending_bookmarks == 3
    q.take(2, 100)  # bm2, a
    assert q.pending_bookmarks == 2
    q.take(10, 100)
    assert q.pending_bookmarks == 0


def test_a_merged_entry_moves_within_its_barrier_segment_only() -> None:
    q = CoalescingQueue(10)
    q.admit(
        [
            Entry("a", M, 1, 1),
            Entry(None, B, 0, "sync"),
            Entry("a", M, 1, 2),
            Entry("b", M, 1, 3),
            Entry("a", M, 1, 4),
        ]
    )
    got, _ = q.take(2, 100)  # a prefix: the table pops its front
    assert [e.value for e in got] == [1, "sync"]
    q.admit([Entry("b", D, 1, 5)])
    got, _ = q.take(10, 100)
    assert [(e.kind, e.value) for e in got] == [(M, 4), (D, 5)]


def test_a_prefix_take_leaves_the_rest_coalescing_in_newest_order() -> None:
    q = CoalescingQueue(10)
    q.admit([Entry(k, M, 1, i) for i, k in enumerate("abcab")])
    assert [e.value for e in q.take(1, 100)[0]] == [2]  # c; a and b moved behind it
    q.admit([Entry("c", M, 1, 5), Entry("a", M, 1, 6)])
    assert [e.value for e in q.take(10, 100)[0]] == [4, 5, 6]


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
