"""PostgreSQL's LISTEN for trio: ONE connection per store for every listener, read in a
worker thread.

Theory of operation. A replica has two listeners (the live feed's follower and the operations
service) and a managed PostgreSQL counts every connection: they share one (``ListenHub``). The
first listener's task leads: it runs a worker thread that opens a connection (outside the
pool: a listening connection is never idle for another call), LISTENs on every listener's
channels, then waits in psycopg's ``notifies`` with a short timeout, so it looks at its stop
flag and at new listeners' channels twice a second, and hands each packet of notifications to
trio (``trio.from_thread.run_sync``), where each goes to the listeners of its channel through a
``Deliverer`` (their own bounded channels). A listener that joins later is LISTENed for by the
running thread within ``WAIT_SECONDS``; when the leader leaves, another listener leads (a
new connection). When the connection fails (the database restarted, a failover, a network
fault) the thread ends with StoreError, the trio side logs it, waits ``retry_seconds``
(doubling up to ``max_retry_seconds``) and starts again. A resync marker after each LISTEN
tells the listeners concerned to poll for what they may have missed. Nothing here ends the
process. A quiet connection is checked with ``SELECT 1`` every ``KEEPALIVE_SECONDS`` so that a
connection the network dropped without a word is noticed. Cancelling a listener returns at
once: the thread of a leader is abandoned and stops by itself within the timeout, closing
its connection.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
import trio
from psycopg import sql

from .._errors import StoreError
from ._notify import Deliverer
from ._records import Notification

log = logging.getLogger("server.store")

Conn = psycopg.Connection[tuple[Any, ...]]

WAIT_SECONDS = 0.5  # how long the thread waits for a notification before it looks at stop
KEEPALIVE_SECONDS = 10.0


@dataclass(eq=False)
class _Listener:
    channels: frozenset[str]
    deliverer: Deliverer
    lead: trio.Event = field(default_factory=trio.Event)


class ListenHub:
    """Every listener of one store on one LISTEN connection (see the module docstring).
    ``running`` holds a "finished" event for each listening thread not yet ended (an
    abandoned one ends by itself within WAIT_SECONDS), so the store's close can wait for
    them: a thread still in libpq while the interpreter exits may crash it."""

    def __init__(
        self,
        open_connection: Callable[[], Conn],
        *,
        running: set[threading.Event],
        retry_seconds: float = 0.5,
        max_retry_seconds: float = 10.0,
    ) -> None:
        self._open_connection = open_connection
        self._running = running
        self._retry_seconds = retry_seconds
        self._max_retry_seconds = max_retry_seconds
        self._listeners: list[_Listener] = []  # trio's side only
        self._leader: _Listener | None = None
        # The channels the thread should listen on: written by trio, read by the thread.
        self._lock = threading.Lock()
        self._wanted: frozenset[str] = frozenset()
        # What the thread has LISTENed on so far (trio's side, told by the thread).
        self._listened: frozenset[str] = frozenset()

    async def listen(
        self,
        channels: Sequence[str],
        send: trio.MemorySendChannel[Notification],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Deliver the notifications on ``channels`` into ``send`` until cancelled. Reports
        started at once, before the LISTEN: the receiver learns that listening began from
        the resync marker. Never raises for the database's faults."""
        me = _Listener(frozenset(channels), Deliverer(send))
        self._listeners.append(me)
        self._want()
        if me.channels and me.channels <= self._listened:
            me.deliverer.deliver([Notification("")])  # already listened on: poll once now
        if self._leader is None:
            self._leader = me
            me.lead.set()
        task_status.started()
        try:
            await me.lead.wait()
            await self._lead()
        finally:
            self._listeners.remove(me)
            self._want()
            if self._leader is me:
                self._leader = self._listeners[0] if self._listeners else None
                if self._leader is not None:
                    self._leader.lead.set()

    def _want(self) -> None:
        with self._lock:
            self._wanted = frozenset().union(*(x.channels for x in self._listeners))

    def _wanted_now(self) -> frozenset[str]:
        with self._lock:
            return self._wanted

    def _dispatch(self, items: Sequence[Notification], listened: frozenset[str]) -> None:
        """In trio: the thread just LISTENed on ``listened`` (a resync marker to their
        listeners: poll once now), or received ``items`` (each to its channel's listeners)."""
        if listened:
            self._listened |= listened
            for listener in self._listeners:
                if listener.channels & listened:
                    listener.deliverer.deliver([Notification("")])
            return
        for listener in self._listeners:
            mine = [n for n in items if n.channel in listener.channels]
            if mine:
                listener.deliverer.deliver(mine)

    async def _lead(self) -> None:
        token = trio.lowlevel.current_trio_token()
        delay = self._retry_seconds
        while True:
            stop = threading.Event()
            listened = threading.Event()
            finished = threading.Event()
            self._running.add(finished)
            work = functools.partial(
                _marking_the_end,
                finished,
                functools.partial(self._listen_in_thread, stop, listened, token),
            )
            try:
                await trio.to_thread.run_sync(work, abandon_on_cancel=True)
            except StoreError as exc:
                log.warning(
                    "listening for notifications on %s failed (%s); again in %.1f s",
                    ", ".join(sorted(self._wanted_now())),
                    exc,
                    delay,
                )
            finally:
                stop.set()
                self._listened = frozenset()  # a new connection LISTENs again
                if finished.is_set():
                    self._running.discard(finished)  # ended (not abandoned): nothing to wait for
            delay = (
                self._retry_seconds
                if listened.is_set()
                else min(self._max_retry_seconds, delay * 2)
            )
            await trio.sleep(delay)

    def _listen_in_thread(
        self, stop: threading.Event, listened: threading.Event, token: trio.lowlevel.TrioToken
    ) -> None:
        def deliver(items: list[Notification], channels: frozenset[str]) -> None:
            if not stop.is_set():
                self._dispatch(items, channels)

        conn = self._open_connection()  # StoreError naming the server when it cannot connect
        try:
            listening: set[str] = set()
            quiet_since = time.monotonic()
            while not stop.is_set():
                new = self._wanted_now() - listening
                if new:
                    for channel in sorted(new):
                        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    listening |= new
                    listened.set()
                    trio.from_thread.run_sync(deliver, [], frozenset(new), trio_token=token)
                got = [
                    Notification(n.channel, n.payload)
                    for n in conn.notifies(timeout=WAIT_SECONDS, stop_after=1)
                ]
                if got:
                    quiet_since = time.monotonic()
                    trio.from_thread.run_sync(deliver, got, frozenset(), trio_token=token)
                elif time.monotonic() - quiet_since > KEEPALIVE_SECONDS:
                    conn.execute("SELECT 1")
                    quiet_since = time.monotonic()
        except psycopg.Error as exc:
            raise StoreError(f"the notification connection failed: {exc}") from exc
        except (trio.RunFinishedError, trio.Cancelled):
            return  # trio is shutting down: nothing to deliver to
        finally:
            conn.close()


def _marking_the_end(finished: threading.Event, work: Callable[[], None]) -> None:
    try:
        work()
    finally:
        finished.set()
