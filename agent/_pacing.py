"""Idle pacing: an agent with nothing but bookmarks and timers to handle coalesces its wake-ups.

What an idle agent of 1,000 clusters spends its CPU on is waking up: ~150 times a second a
bookmark (one per watch a minute) arrives alone on its connection, and each arrival costs a
pass of trio's loop out of an idle process, ~150-200 µs on a shared 2-core VM, of which the
bookmark's own handling is a small part (bench_fleet, session 12: a trio reader of one socket
among 200 took 165 µs of CPU a wake at 400 wakes a second and 41 µs with 20 messages a wake).

So when the loop is about to block, having nothing to run, and the agent has been quiet, the
pacer first sleeps ``delay`` (the thread, not a task): whatever arrives meanwhile waits in the
kernel's buffers and is handled in one pass. Quiet means no operation running and no object
event read for ``quiet`` seconds (``busy()`` and ``unpaced()`` below, called by the operations
and the watches): the first change after a quiet spell reaches the server up to ``delay``
later, the ones after it and every operation's steps are not delayed. Timers and signals are
late by at most ``delay`` too. Interrupt moderation, in a NIC's terms.

The sleep runs inside trio's loop, where trio catches whatever an instrument raises (and drops
the instrument): a signal handler that raises during it is lost. The agent's handlers do not
raise (SIGTERM and SIGINT go through ``trio.open_signal_receiver``; trio postpones
KeyboardInterrupt out of its loop).

The pacer is a trio Instrument of the whole run, installed by the composition root
(``kubesvc agent``) from ``idle.coalesceMs``; without one (tests, embedding) ``busy`` and
``unpaced`` do nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import trio

__all__ = ["QUIET_SECONDS", "Pacer", "busy", "idle_pacing", "unpaced"]

#: How long after the last object event or operation the agent is still busy (not paced).
QUIET_SECONDS = 1.0


class Pacer(trio.abc.Instrument):
    """Sleeps ``delay`` seconds before each wait for I/O of a quiet run (see the module).

    ``sleep`` is the blocking sleep (``time.sleep``; tests give a recorder). Raises ValueError
    unless ``delay`` > 0."""

    def __init__(
        self,
        delay: float,
        quiet: float = QUIET_SECONDS,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not delay > 0:
            raise ValueError(f"a Pacer needs a delay > 0, got {delay!r}")
        self.delay = delay
        self.quiet = quiet
        self._sleep = sleep
        self.busy_until = -float("inf")  # trio.current_time() before which it is not paced
        self._holds = 0
        self.paced = 0  # waits delayed so far (tests)

    def before_io_wait(self, timeout: float) -> None:
        # ``timeout`` is how long the loop will block (trio works it out before calling us, and
        # still waits all of it after our sleep). 0: tasks are runnable, the loop only polls.
        # At most ``delay``: a timer is about to fire, and a sleep would only make it later.
        # Busy or held: no delay at all. So a timer fires at most ``delay`` late.
        if timeout <= self.delay or self._holds or trio.current_time() < self.busy_until:
            return
        self.paced += 1
        self._sleep(self.delay)

    def busy(self) -> None:
        """Something that wants no delay happened: no pacing for the next ``quiet`` seconds."""
        self.busy_until = trio.current_time() + self.quiet

    @contextmanager
    def unpaced(self) -> Iterator[None]:
        """No pacing while the block runs, nor for ``quiet`` seconds after it."""
        self._holds += 1
        try:
            yield
        finally:
            self._holds -= 1
            self.busy()


_PACER: trio.lowlevel.RunVar[Pacer | None] = trio.lowlevel.RunVar("kubesvc_pacer", default=None)


@contextmanager
def idle_pacing(
    delay: float, *, sleep: Callable[[float], None] = time.sleep
) -> Iterator[Pacer | None]:
    """Pace this trio run while the block runs (``delay`` seconds; 0: no pacing, yields None).
    Call inside ``trio.run``, once, from the composition root: a second pacer in the same run
    raises RuntimeError (two would each sleep, and ``busy`` could reach only one)."""
    if delay <= 0:
        yield None
        return
    if _PACER.get() is not None:
        raise RuntimeError("this trio run is paced already (idle_pacing is entered once)")
    pacer = Pacer(delay, sleep=sleep)
    trio.lowlevel.add_instrument(pacer)
    token = _PACER.set(pacer)
    try:
        yield pacer
    finally:
        _PACER.reset(token)
        # trio drops an instrument that raised (and logs it): then it is gone already.
        with suppress(KeyError):
            trio.lowlevel.remove_instrument(pacer)


def busy() -> None:
    """Mark the run busy for ``QUIET_SECONDS`` (an object event was read); no-op unpaced."""
    pacer = _PACER.get()
    if pacer is not None:
        pacer.busy()


@contextmanager
def unpaced() -> Iterator[None]:
    """No pacing while the block runs (an operation); no-op when the run is not paced."""
    pacer = _PACER.get()
    if pacer is None:
        yield
        return
    with pacer.unpaced():
        yield
