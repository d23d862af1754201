"""The producing end of the event channel (admission paths: see ``budget._channel``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import trio

from ._end import ChannelEnd
from ._entries import Entry
from ._errors import BudgetClosed
from ._state import ChannelState


def _chunks(
    entries: Sequence[Entry], capacity: int, max_entries: int
) -> list[tuple[list[Entry], int]]:
    """Split a group into in-order chunks of at most ``capacity`` bytes and ``max_entries``
    entries; an entry larger than ``capacity`` forms a chunk of its own."""
    chunks: list[tuple[list[Entry], int]] = []
    chunk: list[Entry] = []
    total = 0
    for entry in entries:
        size = entry.size
        if chunk and (total + size > capacity or len(chunk) >= max_entries):
            chunks.append((chunk, total))
            chunk, total = [], 0
        chunk.append(entry)
        total += size
    if chunk:
        chunks.append((chunk, total))
    return chunks


def _check_budget_open(state: ChannelState) -> None:
    if state.budget.closed:
        raise BudgetClosed("the byte budget of this channel is closed")


def _group_size(group: Sequence[Entry]) -> int:
    """The bytes of ``group`` if nothing coalesced; checks that every item is an Entry (an
    Entry checks its own fields), so admission never fails half-way through a group."""
    total = 0
    for entry in group:
        if type(entry) is not Entry:
            raise TypeError(f"send: expected budget.Entry items, got {type(entry).__name__}")
        total += entry.size
    return total


class EventSender(ChannelEnd):
    """The producing end. Clone it for each producer task; close every clone when done."""

    __slots__ = ("_closed", "_state")

    def __init__(self, state: ChannelState) -> None:
        self._state = state
        self._closed = False

    # -- admission ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("this event sender was closed")
        if self._state.receiver_closed:
            raise trio.BrokenResourceError("the event receiver was closed")

    def _try_admit(self, entries: Sequence[Entry], worst: int, behind: bool) -> bool:
        """Admit ``entries`` now if possible (see the module's fast and exact paths).

        ``behind`` is True when other senders wait ahead; then only a group that costs no
        bytes may pass.
        """
        state = self._state
        queue = state.queue
        budget = state.budget
        limit = queue.max_pending_entries
        if not behind and len(queue) + len(entries) <= limit and budget._try_reserve(worst):
            reserved = worst
        else:
            net, new = queue.plan(entries)
            if len(queue) + new > limit:
                return False
            if net <= 0:
                reserved = 0
            elif not behind and budget._try_reserve(net):
                reserved = net
            else:
                return False
        replaced = queue.admit(entries)
        surplus = reserved - worst + replaced
        if surplus:
            budget.release(surplus)
        state.after_admit()
        return True

    async def _admit_slow(self, entries: list[Entry], worst: int) -> None:
        """Wait in FIFO order until ``entries`` can be admitted, then admit them."""
        state = self._state
        scope = trio.CancelScope()
        state.slow_scopes[scope] = self
        if state.wake_on_blocked:
            state.wake_receiver()
        try:
            with scope:
                async with state.admission:
                    await self._admit_as_head(entries, worst)
        finally:
            del state.slow_scopes[scope]
        if scope.cancelled_caught:
            # Only close() (ours or the receiver's) cancels this scope: say which.
            self._check_open()
            raise AssertionError("a slow send was woken with neither end closed")

    async def _admit_as_head(self, entries: list[Entry], worst: int) -> None:
        state = self._state
        queue = state.queue
        budget = state.budget
        while True:
            self._check_open()
            _check_budget_open(state)
            if self._try_admit(entries, worst, behind=False):
                return
            _, new = queue.plan(entries)
            if len(queue) + new > queue.max_pending_entries:
                await self._wait_for_room(new)
                continue
            await budget.reserve(worst)
            # Granted: admit before any checkpoint, unless the world changed while we slept.
            if self._closed or state.receiver_closed:
                budget.release(worst)
                self._check_open()
            _, new = queue.plan(entries)
            if len(queue) + new > queue.max_pending_entries:
                budget.release(worst)
                continue
            replaced = queue.admit(entries)
            if replaced:
                budget.release(replaced)
            state.after_admit()
            return

    async def _wait_for_room(self, needed: int) -> None:
        state = self._state
        state.room_task = trio.lowlevel.current_task()
        state.room_needed = needed

        def abort(_: object) -> trio.lowlevel.Abort:
            state.room_task = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    # -- public API --------------------------------------------------------------------

    def send_many_nowait(self, entries: Iterable[Entry]) -> None:
        """Admit every entry now, or none and raise ``trio.WouldBlock``.

        Raises ClosedResourceError (this sender closed), BrokenResourceError (receiver
        closed), BudgetClosed, WouldBlock, or ValueError for a group that could never be
        admitted at once (more entries than max_pending_entries, or several entries whose
        total exceeds the budget's capacity): send_many splits those.
        """
        group = entries if isinstance(entries, list | tuple) else list(entries)
        self._check_open()
        state = self._state
        _check_budget_open(state)
        if not group:
            return
        worst = _group_size(group)
        if len(group) > state.queue.max_pending_entries or (
            len(group) > 1 and worst > state.budget.capacity
        ):
            raise ValueError(
                f"send_many_nowait: a group of {len(group)} entries / {worst} bytes can never be "
                "admitted at once (larger than max_pending_entries or the budget); use send_many"
            )
        if not self._try_admit(group, worst, behind=bool(state.slow_scopes)):
            raise trio.WouldBlock

    def send_nowait(self, entry: Entry) -> None:
        """``send_many_nowait((entry,))``."""
        self.send_many_nowait((entry,))

    async def send_many(self, entries: Iterable[Entry]) -> None:
        """Admit ``entries`` in order, waiting for budget bytes or entry room if needed.

        One checkpoint when the group is admitted at once. Cancellation before anything was
        admitted sends nothing; see the module docstring for groups split into chunks.
        Raises ClosedResourceError, BrokenResourceError or BudgetClosed (nothing admitted
        from the point of the error on).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        group = entries if isinstance(entries, list | tuple) else list(entries)
        self._check_open()
        state = self._state
        budget = state.budget
        _check_budget_open(state)
        worst = _group_size(group)
        queue = state.queue
        if worst <= budget.capacity and len(group) <= queue.max_pending_entries:
            if self._try_admit(group, worst, behind=bool(state.slow_scopes)):
                await trio.lowlevel.cancel_shielded_checkpoint()
                return
            await self._admit_slow(list(group), worst)
            return
        parked = False
        for chunk, chunk_worst in _chunks(group, budget.capacity, queue.max_pending_entries):
            self._check_open()
            if not self._try_admit(chunk, chunk_worst, behind=bool(state.slow_scopes)):
                parked = True
                await self._admit_slow(chunk, chunk_worst)
        if not parked:
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def send(self, entry: Entry) -> None:
        """``send_many((entry,))``."""
        await self.send_many((entry,))

    def clone(self) -> EventSender:
        """Another sender on the same channel (the channel ends when every clone is closed).

        Raises ClosedResourceError if this sender is closed.
        """
        if self._closed:
            raise trio.ClosedResourceError("this event sender was closed")
        self._state.open_senders += 1
        return EventSender(self._state)

    def close(self) -> None:
        """Close this sender; its parked sends raise ClosedResourceError. Idempotent."""
        if self._closed:
            return
        self._closed = True
        state = self._state
        state.open_senders -= 1
        for scope, sender in list(state.slow_scopes.items()):
            if sender is self:
                scope.cancel()
        if state.open_senders == 0:
            state.wake_receiver()
