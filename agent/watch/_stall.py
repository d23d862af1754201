"""Stall detection for every watch of an account with one timer.

A watch whose connection goes silent (not even a bookmark) for ``inactivity`` seconds is
dropped and resumed (the reflector's step 4). The obvious way, a deadline on the watch's
cancel scope pushed forward by every read, costs trio a heap entry per move: with 12,000
watches each getting a bookmark a minute that was 200 moves a second, and trio re-building
its deadline heap of ~25,000 entries every few seconds to drop the stale ones (7 % of a
1,000-cluster agent's idle CPU in bench_fleet's profile). Here a read only stores the time
(``Ticket.touch``) and one task per account looks at its watches every ``resolution``
seconds, cancelling the scope of any silent for longer than its allowance: a stall is seen
between ``inactivity`` and ``inactivity + resolution`` (+ a coarse sleep's second) seconds
after the last read.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import trio

from .._coarse_sleep import coarse_sleep

__all__ = ["StallWatchdog", "Ticket"]


@dataclass(eq=False, slots=True)
class Ticket:
    """One watch under watch: its scope, its allowance and when it last heard anything."""

    scope: trio.CancelScope
    inactivity: float
    last: float
    #: Waiting for room in the budget is not inactivity: a paused ticket never stalls.
    paused: bool = False

    def touch(self) -> None:
        self.last = trio.current_time()

    @contextmanager
    def pause(self) -> Iterator[None]:
        """No stall while the block runs; the allowance starts over when it ends."""
        self.paused = True
        try:
            yield
        finally:
            self.paused = False
            self.touch()


class StallWatchdog:
    """Cancels the scope of a watch that heard nothing for its allowance. ``run`` in a
    nursery; ``watching`` registers a scope for the duration of a block."""

    def __init__(self, resolution: float) -> None:
        if resolution <= 0:
            raise ValueError("a StallWatchdog needs resolution > 0")
        self._resolution = resolution
        self._tickets: set[Ticket] = set()
        self.stalls = 0  # scopes cancelled so far (tests)

    @contextmanager
    def watching(self, scope: trio.CancelScope, inactivity: float) -> Iterator[Ticket]:
        ticket = Ticket(scope, inactivity, trio.current_time())
        self._tickets.add(ticket)
        try:
            yield ticket
        finally:
            self._tickets.discard(ticket)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await coarse_sleep(self._resolution)
            now = trio.current_time()
            for ticket in self._tickets:
                silent = not ticket.paused and now - ticket.last >= ticket.inactivity
                if silent and not ticket.scope.cancel_called:
                    self.stalls += 1
                    ticket.scope.cancel()
