"""The byte budget: a counting semaphore in bytes, with FIFO waiters.

Theory of operation. ``BudgetCore`` is plain synchronous accounting: ``in_use`` bytes out of
``capacity``, a high-water mark, and a FIFO of waiters (each wants ``size`` bytes). A request
is granted when it fits (``size <= capacity - in_use``) or, for the single-oversize rule, when
nothing is in use at all (so one request larger than the whole budget can still pass, alone).
Waiters are served strictly in order: a waiter that does not fit blocks the ones behind it,
so a large request is never starved by a stream of small ones. Granting hands the bytes to
the waiter (``in_use`` grows at grant time), so a woken task owns its bytes before it runs.

``ByteBudget`` is the thin trio layer: ``reserve_nowait`` / ``await reserve`` park the task
with ``wait_task_rescheduled``; a cancelled reserve is removed from the FIFO and changes
nothing (if it was the head, the ones behind it are re-examined at once).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

import outcome
import trio

from ._errors import BudgetClosed

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BudgetStatistics:
    """A snapshot of a ByteBudget: bytes ``in_use`` out of ``capacity``, the most ever in
    use at once (``high_water``), how many reservations are parked now (``waiters``) and
    how many ever had to park (``waits``, a counter: each reservation that did not fit at
    once counts one, however long it waited and whether or not it was granted), and the
    seconds they spent parked, added up (``wait_seconds``, a counter: two reservations
    parked for one second count two; its rate is how many waited on average)."""

    capacity: int
    in_use: int
    high_water: int
    waiters: int
    waits: int
    wait_seconds: float = 0.0


def _check_size(what: str, n: int) -> None:
    if type(n) is not int:
        raise TypeError(f"{what}: expected an int number of bytes, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"{what}: the number of bytes must be >= 0, got {n}")


class BudgetCore(Generic[T]):
    """Sans-I/O accounting for a ByteBudget; waiters are opaque tokens of type T.

    Methods that can grant parked requests return the tokens granted, in FIFO order; the
    caller wakes them. Nothing here blocks or knows about trio.
    """

    __slots__ = ("_waiters", "capacity", "closed", "high_water", "in_use", "wait_seconds", "waits")

    def __init__(self, capacity: int) -> None:
        _check_size("ByteBudget capacity", capacity)
        if capacity == 0:
            raise ValueError("ByteBudget capacity: must be > 0")
        self.capacity = capacity
        self.in_use = 0
        self.high_water = 0
        self.waits = 0  # reservations ever parked (statistics().waits)
        self.wait_seconds = 0.0  # time they spent parked, added by the caller (waited())
        self.closed = False
        self._waiters: deque[tuple[int, T]] = deque()

    @property
    def waiter_count(self) -> int:
        return len(self._waiters)

    def fits(self, n: int) -> bool:
        """True when ``n`` bytes could be granted now, ignoring the FIFO."""
        return n <= self.capacity - self.in_use or self.in_use == 0

    def try_reserve(self, n: int) -> bool:
        """Take ``n`` bytes if they fit and nobody waits ahead; a zero request always succeeds.

        Raises BudgetClosed once closed (even for zero).
        """
        if self.closed:
            raise BudgetClosed("the byte budget is closed")
        if n == 0:
            return True
        if self._waiters or not (n <= self.capacity - self.in_use or self.in_use == 0):
            return False
        self._take(n)
        return True

    def _take(self, n: int) -> None:
        in_use = self.in_use + n
        self.in_use = in_use
        if in_use > self.high_water:
            self.high_water = in_use

    def enqueue(self, n: int, token: T) -> None:
        """Park ``token`` wanting ``n`` bytes at the back of the FIFO (after try_reserve failed)."""
        if self.closed:
            raise BudgetClosed("the byte budget is closed")
        self._waiters.append((n, token))
        self.waits += 1

    def waited(self, seconds: float) -> None:
        """Add the time one parked reservation waited, however its wait ended (the caller
        owns the clock)."""
        self.wait_seconds += max(seconds, 0.0)

    def cancel(self, token: T) -> list[T]:
        """Remove a parked ``token`` (it must be parked); returns tokens granted as a result."""
        for i, (_, parked) in enumerate(self._waiters):
            if parked is token:
                del self._waiters[i]
                break
        else:
            raise ValueError("BudgetCore.cancel: the token is not parked")
        return self._grant() if i == 0 else []

    def release(self, n: int) -> list[T]:
        """Give back ``n`` bytes; returns the parked tokens that are granted as a result.

        Raises ValueError when ``n`` is more than is in use (a double release is a bug that
        would silently widen the budget).
        """
        if n > self.in_use or n < 0:
            raise ValueError(f"ByteBudget.release({n}): only {self.in_use} bytes are in use")
        self.in_use -= n
        if self._waiters:
            return self._grant()
        return []

    def _grant(self) -> list[T]:
        granted: list[T] = []
        waiters = self._waiters
        while waiters:
            n, token = waiters[0]
            if not (n <= self.capacity - self.in_use or self.in_use == 0):
                break
            waiters.popleft()
            self._take(n)
            granted.append(token)
        return granted

    def close(self) -> list[T]:
        """Refuse further reservations; returns every parked token (to be failed)."""
        self.closed = True
        parked = [token for _, token in self._waiters]
        self._waiters.clear()
        return parked

    def statistics(self) -> BudgetStatistics:
        return BudgetStatistics(
            self.capacity,
            self.in_use,
            self.high_water,
            len(self._waiters),
            self.waits,
            self.wait_seconds,
        )


class ByteBudget:
    """A budget of bytes shared by trio tasks.

    ``reserve(n)`` waits in FIFO order until ``n`` bytes fit; a request larger than the whole
    capacity is granted only when nothing is in use. ``release(n)`` gives bytes back. The
    owner of reserved bytes is whoever reserved them; nothing is released implicitly.
    ``close()`` fails every parked reservation with BudgetClosed and refuses new ones;
    releases after close are still counted so ``statistics()`` stays truthful.
    """

    __slots__ = ("_core",)

    def __init__(self, capacity: int) -> None:
        self._core: BudgetCore[trio.lowlevel.Task] = BudgetCore(capacity)

    @property
    def capacity(self) -> int:
        return self._core.capacity

    def reserve_nowait(self, n: int) -> None:
        """Take ``n`` bytes now or raise ``trio.WouldBlock`` (also when others wait ahead).

        Raises BudgetClosed after close(), ValueError/TypeError for a bad ``n``.
        """
        _check_size("ByteBudget.reserve_nowait", n)
        if not self._core.try_reserve(n):
            raise trio.WouldBlock

    def _try_reserve(self, n: int) -> bool:
        """Package-internal fast path of reserve_nowait: a bool instead of WouldBlock."""
        return self._core.try_reserve(n)

    async def reserve(self, n: int) -> None:
        """Take ``n`` bytes, waiting (FIFO) until they fit. Always a checkpoint.

        If cancelled, nothing was taken. Raises BudgetClosed if the budget is or becomes
        closed while waiting, ValueError/TypeError for a bad ``n``.
        """
        _check_size("ByteBudget.reserve", n)
        await trio.lowlevel.checkpoint_if_cancelled()
        core = self._core
        if core.try_reserve(n):
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        task = trio.lowlevel.current_task()
        core.enqueue(n, task)
        parked = trio.current_time()

        def abort(_: object) -> trio.lowlevel.Abort:
            self._wake(core.cancel(task))
            return trio.lowlevel.Abort.SUCCEEDED

        try:
            await trio.lowlevel.wait_task_rescheduled(abort)
        finally:
            core.waited(trio.current_time() - parked)

    def release(self, n: int) -> None:
        """Give back ``n`` bytes and wake the waiters that now fit. Not a checkpoint.

        Raises ValueError when ``n`` exceeds the bytes in use.
        """
        _check_size("ByteBudget.release", n)
        granted = self._core.release(n)
        if granted:
            self._wake(granted)

    @staticmethod
    def _wake(tasks: list[trio.lowlevel.Task]) -> None:
        for task in tasks:
            trio.lowlevel.reschedule(task)

    def close(self) -> None:
        """Refuse new reservations and fail the parked ones with BudgetClosed. Idempotent."""
        for task in self._core.close():
            trio.lowlevel.reschedule(
                task, outcome.Error(BudgetClosed("the byte budget was closed"))
            )

    @property
    def closed(self) -> bool:
        return self._core.closed

    def statistics(self) -> BudgetStatistics:
        """A frozen snapshot: capacity, in_use, high_water, waiters, waits, wait_seconds."""
        return self._core.statistics()
