"""Coarse sleeps: long sleeps that need no precision share one trio deadline a second.

A trio sleep ends by its deadline cancelling it: the runner raises Cancelled into the sleeping
task and unwinds it, ~60 µs of CPU here. An agent of 1,000 clusters has an HTTP/2 health check
per connection and a stall watchdog per account, each waking every few seconds: ~100 such ends
a second, a fifth of what it spends while nothing happens. Sleepers here wait on the Event of a
one-second bucket instead, set by one system task that sleeps to the next bucket: a wake costs
an Event's set (~15 µs) and one deadline ends a second, however many sleep.

A coarse sleep ends at its deadline or up to ``RESOLUTION`` later, never earlier. Meant for
timers measured in seconds (health checks, watchdogs, rediscovery); anything that needs to be
on time uses trio's own sleeps and deadlines.
"""

from __future__ import annotations

import heapq
import math

import trio

__all__ = ["RESOLUTION", "coarse_sleep", "coarse_sleep_until"]

RESOLUTION = 1.0  # seconds: the bucket's width


class _Wheel:
    """The buckets of one trio run: one Event per whole ``RESOLUTION`` a sleeper waits for."""

    __slots__ = ("buckets", "changed", "due")

    def __init__(self) -> None:
        self.buckets: dict[int, trio.Event] = {}
        self.due: list[int] = []  # heap of the bucket numbers in ``buckets``
        self.changed = trio.Event()  # a bucket earlier than all others was added

    def event_for(self, deadline: float) -> trio.Event:
        key = math.ceil(deadline / RESOLUTION)
        event = self.buckets.get(key)
        if event is None:
            event = self.buckets[key] = trio.Event()
            heapq.heappush(self.due, key)
            if self.due[0] == key:
                self.changed.set()
        return event

    async def run(self) -> None:
        """Set each bucket's Event when its time comes. Never raises (a system task)."""
        while True:
            self.changed = trio.Event()
            if not self.due:
                await self.changed.wait()
                continue
            with trio.move_on_at(self.due[0] * RESOLUTION):
                await self.changed.wait()
                continue  # an earlier bucket came: sleep to that one instead
            now = trio.current_time()
            while self.due and self.due[0] * RESOLUTION <= now:
                self.buckets.pop(heapq.heappop(self.due)).set()


_WHEEL: trio.lowlevel.RunVar[_Wheel] = trio.lowlevel.RunVar("kubesvc_coarse_wheel")


def _wheel() -> _Wheel:
    try:
        return _WHEEL.get()
    except LookupError:
        wheel = _Wheel()
        _WHEEL.set(wheel)
        # A system task: it lives as long as the run, beside every nursery, and ends with it.
        trio.lowlevel.spawn_system_task(wheel.run, name="kubesvc coarse sleeps")
        return wheel


async def coarse_sleep_until(deadline: float) -> None:
    """Sleep until ``deadline`` (``trio.current_time()``'s clock), or up to ``RESOLUTION``
    seconds later. A checkpoint; cancellable as any sleep."""
    if deadline <= trio.current_time():
        await trio.lowlevel.checkpoint()
        return
    await _wheel().event_for(deadline).wait()


async def coarse_sleep(seconds: float) -> None:
    """Sleep ``seconds``, or up to ``RESOLUTION`` seconds longer (``coarse_sleep_until``)."""
    if seconds < 0 or math.isnan(seconds):
        raise ValueError(f"coarse_sleep: seconds must be >= 0, got {seconds!r}")
    await coarse_sleep_until(trio.current_time() + seconds)
