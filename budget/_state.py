"""The state an event channel's ends share, its statistics, and the Batch it hands out."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from ._budget import ByteBudget
from ._entries import Entry
from ._queue import CoalescingQueue

if TYPE_CHECKING:
    from ._sender import EventSender


@dataclass(frozen=True, slots=True)
class ChannelStatistics:
    """A snapshot of an event channel.

    ``coalesced`` counts entries merged into a pending one; ``sent`` counts entries accepted
    (coalesced or not); ``taken`` counts entries handed out in batches; ``senders_waiting``
    counts send calls parked for room or bytes.
    """

    pending_entries: int
    pending_bytes: int
    #: how many of the pending entries are BOOKMARKs
    pending_bookmarks: int
    in_flight_entries: int
    in_flight_bytes: int
    in_flight_batches: int
    coalesced: int
    sent: int
    taken: int
    max_pending_entries: int
    open_senders: int
    senders_waiting: int
    receiver_closed: bool


class Batch:
    """Entries taken together, in send order; ``size`` is the bytes they hold in the budget
    until ``EventReceiver.acknowledge(batch)``."""

    __slots__ = ("_acknowledged", "_state", "entries", "size")

    def __init__(self, state: ChannelState, entries: list[Entry], size: int) -> None:
        self._state = state
        self._acknowledged = False
        self.entries = entries
        self.size = size

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    def __repr__(self) -> str:
        return f"<Batch entries={len(self.entries)} size={self.size}>"


class ChannelState:
    """What the sender clones and the receiver share (package-private)."""

    __slots__ = (
        "admission",
        "budget",
        "open_senders",
        "queue",
        "receiver_closed",
        "receiver_task",
        "room_needed",
        "room_task",
        "slow_scopes",
        "wake_on_blocked",
        "want_bytes",
        "want_entries",
        "want_others",
    )

    def __init__(self, budget: ByteBudget, max_pending_entries: int) -> None:
        self.budget = budget
        self.queue = CoalescingQueue(max_pending_entries)
        self.open_senders = 1
        self.receiver_closed = False
        # The one task parked in receive_batch / wait_pending, and what wakes it.
        self.receiver_task: trio.lowlevel.Task | None = None
        self.want_entries: float = 1
        self.want_bytes = math.inf
        # Entries that are not bookmarks (``EventReceiver.wait_not_only_bookmarks``).
        self.want_others: float = math.inf
        self.wake_on_blocked = False
        # Slow-path senders: FIFO lock, and the cancel scope of each (closing cancels them).
        self.admission = trio.Lock()
        self.slow_scopes: dict[trio.CancelScope, EventSender] = {}
        # The lock holder, when it waits for pending-entry room.
        self.room_task: trio.lowlevel.Task | None = None
        self.room_needed = 0

    def wake_receiver(self) -> None:
        task = self.receiver_task
        if task is not None:
            self.receiver_task = None
            trio.lowlevel.reschedule(task)

    def after_admit(self) -> None:
        queue = self.queue
        if self.receiver_task is not None and (
            len(queue) >= self.want_entries
            or queue.pending_bytes >= self.want_bytes
            or len(queue) - queue.pending_bookmarks >= self.want_others
        ):
            self.wake_receiver()

    def statistics(self) -> ChannelStatistics:
        q = self.queue
        return ChannelStatistics(
            pending_entries=len(q),
            pending_bytes=q.pending_bytes,
            pending_bookmarks=q.pending_bookmarks,
            in_flight_entries=q.in_flight_entries,
            in_flight_bytes=q.in_flight_bytes,
            in_flight_batches=q.in_flight_batches,
            coalesced=q.coalesced,
            sent=q.sent,
            taken=q.taken,
            max_pending_entries=q.max_pending_entries,
            open_senders=self.open_senders,
            senders_waiting=len(self.slow_scopes),
            receiver_closed=self.receiver_closed,
        )
