"""The consuming end of the event channel: take batches, acknowledge them, close."""

from __future__ import annotations

import math

import trio

from ._end import ChannelEnd
from ._state import Batch, ChannelState


def _check_limits(
    entries: int, nbytes: int, names: tuple[str, str] = ("max_entries", "max_bytes")
) -> None:
    for name, value in zip(names, (entries, nbytes), strict=True):
        if type(value) is not int or value < 1:
            raise ValueError(f"{name}: must be an int >= 1, got {value!r}")


class EventReceiver(ChannelEnd):
    """The consuming end: take batches, acknowledge them, close when done. One task at a
    time may wait on it (a second raises trio.BusyResourceError)."""

    __slots__ = ("_state",)

    def __init__(self, state: ChannelState) -> None:
        self._state = state

    def receive_batch_nowait(self, max_entries: int = 200, max_bytes: int = 512 * 1024) -> Batch:
        """Take the oldest pending entries: at most ``max_entries`` and ``max_bytes`` (a lone
        entry larger than ``max_bytes`` comes alone). Their bytes stay reserved until
        ``acknowledge``. Raises WouldBlock (nothing pending), EndOfChannel (nothing pending
        and every sender closed), ClosedResourceError (this receiver closed).
        """
        _check_limits(max_entries, max_bytes)
        state = self._state
        if state.receiver_closed:
            raise trio.ClosedResourceError("this event receiver was closed")
        queue = state.queue
        if not len(queue):
            if state.open_senders == 0:
                raise trio.EndOfChannel
            raise trio.WouldBlock
        entries, size = queue.take(max_entries, max_bytes)
        room_task = state.room_task
        if room_task is not None and len(queue) + state.room_needed <= queue.max_pending_entries:
            state.room_task = None
            trio.lowlevel.reschedule(room_task)
        return Batch(state, entries, size)

    async def receive_batch(self, max_entries: int = 200, max_bytes: int = 512 * 1024) -> Batch:
        """Wait until at least one entry is pending, then ``receive_batch_nowait``.

        Always a checkpoint; if cancelled, nothing was taken.
        """
        _check_limits(max_entries, max_bytes)
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            batch = self.receive_batch_nowait(max_entries, max_bytes)
        except trio.WouldBlock:
            pass
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return batch
        while True:
            await self._park(1, math.inf, wake_on_blocked=False)
            try:
                return self.receive_batch_nowait(max_entries, max_bytes)
            except trio.WouldBlock:
                continue

    async def wait_pending(self, min_entries: int, min_bytes: int) -> None:
        """Return once ``min_entries`` entries or ``min_bytes`` bytes are pending, or as soon
        as waiting longer is pointless: every sender is closed, or a sender is blocked
        (nothing more can arrive until something is taken). Meant for linger, under
        ``trio.move_on_after``. Always a checkpoint. Raises ClosedResourceError once closed.
        """
        _check_limits(min_entries, min_bytes, ("min_entries", "min_bytes"))
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._pending_enough(min_entries, min_bytes):
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        while not self._pending_enough(min_entries, min_bytes):
            await self._park(min_entries, min_bytes, wake_on_blocked=True)

    async def wait_not_only_bookmarks(self) -> None:
        """Return once an entry that is not a bookmark is pending, or as soon as waiting
        longer is pointless (as ``wait_pending``). Bookmarks arriving alone do not wake the
        waiter: an agent with thousands of idle watches gets hundreds a second, and a
        linger that woke for each cost more than sending them. Meant for linger, under
        ``trio.move_on_after``. Always a checkpoint. Raises ClosedResourceError once closed.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._others_pending():
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        while not self._others_pending():
            await self._park(math.inf, math.inf, wake_on_blocked=True, want_others=1)

    def _others_pending(self) -> bool:
        queue = self._state.queue
        return self._pointless_to_wait() or len(queue) > queue.pending_bookmarks

    def _pending_enough(self, min_entries: int, min_bytes: int) -> bool:
        queue = self._state.queue
        return (
            self._pointless_to_wait()
            or len(queue) >= min_entries
            or queue.pending_bytes >= min_bytes
        )

    def _pointless_to_wait(self) -> bool:
        """Nothing more can come (every sender closed) or a sender is blocked (nothing more
        can come until something is taken). Raises ClosedResourceError once closed."""
        state = self._state
        if state.receiver_closed:
            raise trio.ClosedResourceError("this event receiver was closed")
        return state.open_senders == 0 or bool(state.slow_scopes)

    async def _park(
        self,
        want_entries: float,
        want_bytes: float,
        *,
        wake_on_blocked: bool,
        want_others: float = math.inf,
    ) -> None:
        state = self._state
        if state.receiver_task is not None:
            raise trio.BusyResourceError("another task is already waiting on this receiver")
        state.receiver_task = trio.lowlevel.current_task()
        state.want_entries = want_entries
        state.want_bytes = want_bytes
        state.want_others = want_others
        state.wake_on_blocked = wake_on_blocked

        def abort(_: object) -> trio.lowlevel.Abort:
            state.receiver_task = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def acknowledge(self, batch: Batch) -> None:
        """Release the bytes of ``batch`` (taken from this receiver). Not a checkpoint.

        After close() this does nothing (close already returned the bytes). Raises
        ValueError for a batch of another channel or one acknowledged before.
        """
        state = self._state
        if batch._state is not state:
            raise ValueError("acknowledge: this batch was taken from another channel")
        if batch._acknowledged:
            raise ValueError("acknowledge: this batch was already acknowledged")
        batch._acknowledged = True
        if state.receiver_closed:
            return
        state.queue.acknowledge(batch.size, len(batch.entries))
        state.budget.release(batch.size)

    def close(self) -> None:
        """Drop what is pending, return every pending and in-flight byte to the budget, and
        wake waiting senders (BrokenResourceError) and a waiting receive
        (ClosedResourceError). Idempotent."""
        state = self._state
        if state.receiver_closed:
            return
        state.receiver_closed = True
        state.budget.release(state.queue.clear())
        for scope in list(state.slow_scopes):
            scope.cancel()
        state.wake_receiver()
