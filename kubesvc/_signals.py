"""SIGTERM and SIGINT for the long-lived roles (``kubesvc agent``, ``kubesvc server``).

Kubernetes sends SIGTERM when a pod is to stop, then SIGKILL after the pod's grace period
(30 s by default). The first SIGTERM (or SIGINT, Ctrl-C) sets the role's ``stop`` event: the
role drains within its own configured bound (``shutdown.drainSeconds``) and returns, and the
process exits 0. A second signal while it drains ends it at once: its tasks are cancelled
(their cleanup is shielded and bounded) and the exit code is 128 + the signal's number (143
for SIGTERM, 130 for SIGINT), as a shell reports a process a signal ended.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable

import trio

import wire

from ._collector import manage_collector

__all__ = ["SIGNALS", "run_role", "run_until_signalled"]

log = logging.getLogger("kubesvc")

SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def run_until_signalled(role: str, run: Callable[[trio.Event], Awaitable[None]]) -> int:
    """Run ``await run(stop)``; the first SIGTERM/SIGINT sets ``stop``, a second cancels it.

    Returns the exit code: 0 when ``run`` returned (it drained, or it had nothing left to
    do), 128 + signum when a second signal cut the drain short. Exceptions from ``run``
    propagate (the CLI collapses them)."""
    stop = trio.Event()
    code = 0
    with trio.open_signal_receiver(*SIGNALS) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                nonlocal code
                async for signum in signals:
                    name = signal.Signals(signum).name
                    if not stop.is_set():
                        log.info(
                            "%s: %s received, draining (a second signal stops at once)", role, name
                        )
                        stop.set()
                    else:
                        log.warning("%s: %s received again, stopping now", role, name)
                        code = 128 + signum
                        nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            await run(stop)
            nursery.cancel_scope.cancel()
    return code


async def run_role(role: str, run: Callable[[trio.Event], Awaitable[None]]) -> int:
    """A long-lived role's process around ``run``: the bridge's loop (wire.open_loop), the
    collector schedule of long-lived roles (kubesvc/_collector.py) and the signals above.
    Returns what :func:`run_until_signalled` returns."""
    async with wire.open_loop(), trio.open_nursery() as nursery:
        nursery.start_soon(manage_collector)
        code = await run_until_signalled(role, run)
        nursery.cancel_scope.cancel()
        return code
