"""CPython's cyclic garbage collector on a long-lived role's schedule (``kubesvc agent``,
``kubesvc server``).

Why: an agent with 1,000 accounts holds ~12,000 watches (their tasks, HTTP/2 streams, cancel
scopes and buffers) for as long as it runs. CPython's full collection traverses every tracked
object each time the heap has grown by a quarter since the last one: during bench_fleet's
initial sync of 1,000 clusters that was 15 full collections, 8.7 s of the agent's 49 s of CPU,
each a pause of the whole event loop that grows with the heap.

The server is such a role too (sessions of up to 1,000 agents, task and kind caches), and
in bench_ops it made one or two full collections in a quarter of a minute, ~50 ms each.

What: what the start made is frozen at once (modules, configuration: never garbage), and
every ``freeze_seconds`` every tracked object is frozen (``gc.freeze``: moved where
automatic collections do not look; a list splice, no traversal), so automatic collections
only ever see what was allocated since. The young generations are collected by CPython as
usual in between: what is frozen has survived them, or is at most a few hundred objects
old. Every ``full_seconds``
everything is unfrozen and collected once, so a reference cycle that became garbage among
frozen objects (a watch's task after its account was removed) is reclaimed within that
interval: the garbage held is bounded by one interval's, never growing.

A process-wide policy: it belongs to the composition root of a process that runs one
role, not to the agent's library code (a test process runs many agents and servers).
"""

from __future__ import annotations

import gc
import logging
import time

import trio

__all__ = ["manage_collector"]

log = logging.getLogger("kubesvc")


async def manage_collector(*, freeze_seconds: float = 30.0, full_seconds: float = 600.0) -> None:
    """Run the schedule above until cancelled; unfreezes on the way out."""
    if freeze_seconds <= 0 or full_seconds < freeze_seconds:
        raise ValueError("manage_collector needs 0 < freeze_seconds <= full_seconds")
    try:
        next_full = trio.current_time() + full_seconds
        gc.freeze()  # what the start made (modules, configuration) is never garbage
        while True:
            await trio.sleep(freeze_seconds)
            if trio.current_time() >= next_full:
                next_full = trio.current_time() + full_seconds
                started = time.perf_counter()
                gc.unfreeze()
                found = gc.collect()
                log.debug(
                    "full garbage collection: %d unreachable objects in %.0f ms",
                    found,
                    (time.perf_counter() - started) * 1000,
                )
            gc.freeze()
    finally:
        gc.unfreeze()
