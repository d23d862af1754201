"""Small builders shared by the channel tests."""

from __future__ import annotations

from collections.abc import Hashable

from budget import ByteBudget, Entry, EntryKind, EventReceiver, EventSender, open_event_channel

A = EntryKind.UPSERT_ADDED
M = EntryKind.UPSERT_MODIFIED
D = EntryKind.DELETED
B = EntryKind.BARRIER
K = EntryKind.BOOKMARK


def entry(key: Hashable | None, size: int = 1, value: object = None, kind: EntryKind = M) -> Entry:
    return Entry(key, kind, size, value)


def channel(
    capacity: int = 1000, max_pending_entries: int = 1000
) -> tuple[ByteBudget, EventSender, EventReceiver]:
    budget = ByteBudget(capacity)
    send, receive = open_event_channel(budget, max_pending_entries=max_pending_entries)
    return budget, send, receive


def consistent(budget: ByteBudget, receive: EventReceiver) -> None:
    """The invariants between a budget used by one channel and that channel's statistics."""
    b = budget.statistics()
    c = receive.statistics()
    assert b.in_use == c.pending_bytes + c.in_flight_bytes
    assert c.pending_entries == c.sent - c.coalesced - c.taken or c.receiver_closed
    assert c.pending_entries <= c.max_pending_entries
    assert b.waiters <= 1  # only the channel's head sender ever parks in the budget
