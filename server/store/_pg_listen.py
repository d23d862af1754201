"""PostgreSQL's LISTEN for trio: a connection of its own, read in a worker thread.

Theory of operation. ``listen`` runs a worker thread that opens a connection (outside the
pool: a listening connection is never idle for another call), LISTENs on the channels, then
waits in psycopg's ``notifies`` with a short timeout, so it looks at its stop flag twice a
second, and hands each packet of notifications to trio (``trio.from_thread.run_sync``), where
a ``Deliverer`` puts them into the receiver's bounded channel. When the connection fails
(the database restarted, a failover, a network fault) the thread ends with StoreError, the
trio side logs it, waits ``retry_seconds`` (doubling up to ``max_retry_seconds``) and
starts again; a resync marker after each LISTEN tells the receiver to poll for what it may
have missed. Nothing here ends the process. A quiet connection is checked with ``SELECT 1``
every ``KEEPALIVE_SECONDS`` so that a connection the network dropped without a word is
noticed. Cancelling ``listen`` returns at once: the thread is abandoned and stops by itself
within the timeout, closing its connection.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
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


async def listen(
    open_connection: Callable[[], Conn],
    channels: Sequence[str],
    send: trio.MemorySendChannel[Notification],
    *,
    retry_seconds: float = 0.5,
    max_retry_seconds: float = 10.0,
    running: set[threading.Event] | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Deliver the notifications on ``channels`` into ``send`` until cancelled (see the
    module docstring). Reports started at once, before the first LISTEN: the receiver learns
    that listening began from the resync marker. Never raises for the database's faults.
    ``running`` holds a "finished" event for each listening thread not yet ended (an
    abandoned one ends by itself within WAIT_SECONDS), so the store's close can wait for
    them: a thread still in libpq while the interpreter exits may crash it."""
    deliverer = Deliverer(send)
    token = trio.lowlevel.current_trio_token()
    task_status.started()
    delay = retry_seconds
    while True:
        stop = threading.Event()
        listened = threading.Event()
        finished = threading.Event()
        if running is not None:
            running.add(finished)
        work = functools.partial(
            _marking_the_end,
            finished,
            functools.partial(
                _listen_in_thread, open_connection, channels, stop, listened, deliverer, token
            ),
        )
        try:
            await trio.to_thread.run_sync(work, abandon_on_cancel=True)
        except StoreError as exc:
            log.warning(
                "listening for notifications on %s failed (%s); again in %.1f s",
                ", ".join(channels),
                exc,
                delay,
            )
        finally:
            stop.set()
            if running is not None and finished.is_set():
                running.discard(finished)  # ended (not abandoned): nothing to wait for
        delay = retry_seconds if listened.is_set() else min(max_retry_seconds, delay * 2)
        await trio.sleep(delay)


def _marking_the_end(finished: threading.Event, work: Callable[[], None]) -> None:
    try:
        work()
    finally:
        finished.set()


def _listen_in_thread(
    open_connection: Callable[[], Conn],
    channels: Sequence[str],
    stop: threading.Event,
    listened: threading.Event,
    deliverer: Deliverer,
    token: trio.lowlevel.TrioToken,
) -> None:
    def deliver(items: list[Notification]) -> None:
        if not stop.is_set():
            deliverer.deliver(items)

    conn = open_connection()  # StoreError naming the server when it cannot connect
    try:
        for channel in channels:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        listened.set()
        trio.from_thread.run_sync(deliver, [Notification("")], trio_token=token)
        quiet_since = time.monotonic()
        while not stop.is_set():
            got = [
                Notification(n.channel, n.payload)
                for n in conn.notifies(timeout=WAIT_SECONDS, stop_after=1)
            ]
            if got:
                quiet_since = time.monotonic()
                trio.from_thread.run_sync(deliver, got, trio_token=token)
            elif time.monotonic() - quiet_since > KEEPALIVE_SECONDS:
                conn.execute("SELECT 1")
                quiet_since = time.monotonic()
    except psycopg.Error as exc:
        raise StoreError(f"the notification connection failed: {exc}") from exc
    except (trio.RunFinishedError, trio.Cancelled):
        return  # trio is shutting down: nothing to deliver to
    finally:
        conn.close()
