"""PostgreSQL LISTEN/NOTIFY, as a generic seam: a channel name and a text payload.

Theory of operation. ``notify`` sends one on any connection (``SELECT pg_notify``; on an
autocommit connection it is delivered at once, in a transaction at its commit). Receiving
needs a connection of its own that LISTENs and waits: ``PgListener.run`` keeps one in a worker
thread (psycopg's ``notifies()`` with a short timeout, so the thread notices cancellation
within NOTICE_SECONDS) and hands each notification to the trio side, into the bounded memory
channel of its channel name (``PgListener.channel``, registered before ``run``).

A notification is a wake-up, never the only way news travels: one that finds its channel
full is dropped (counted in ``dropped``: the reader is awake anyway and reads the tables),
and those sent while the listener is reconnecting are lost. So after every reconnect each
channel gets a ``Notification`` with ``missed=True``, and every user keeps a poll behind it
(the feed follower; the operations' wake-ups of DESIGN 5a can share this listener by adding
their channel).

Faults: a connection that breaks (a database restart, the network) is logged and opened again
with backoff (BACKOFF_SECONDS doubling up to MAX_BACKOFF_SECONDS); nothing here ends the
process. The connection is closed when ``run`` is cancelled, before it returns.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg
import trio
from psycopg import pq

from .._errors import StoreError

if TYPE_CHECKING:
    from ._pg_core import Conn

__all__ = ["Notification", "PgListener", "notify"]

log = logging.getLogger("server.store")

NOTICE_SECONDS = 0.25  # the longest the listening thread waits before it looks at cancellation
BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 10.0
_CHANNEL_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")  # LISTEN takes an identifier, not a value


@dataclass(frozen=True, slots=True)
class Notification:
    """One NOTIFY received. ``missed``: the listener (re)connected and may have missed some
    on this channel; read what the channel is about."""

    channel: str
    payload: str
    missed: bool = False


_NOTIFY = "SELECT pg_notify(%s, %s)"
# A NOTIFY takes a transaction id, so a statement that is only a NOTIFY writes a commit record
# (82 bytes of WAL, measured) and, with synchronous_commit on, waits for its flush: on a disk
# whose fsync takes milliseconds, one more flush per batch. A notification is not durable
# anyway: that transaction commits asynchronously (set_config(..., true) holds for it alone).
_NOTIFY_ALONE = "SELECT set_config('synchronous_commit', 'off', true), pg_notify(%s, %s)"


def notify(conn: Conn, channel: str, payload: str) -> None:
    """NOTIFY ``channel`` with ``payload`` on ``conn`` (a worker thread's): in the caller's
    transaction if one is open (sent at its commit), else at once. Raises StoreError."""
    alone = conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE
    try:
        conn.execute(_NOTIFY_ALONE if alone else _NOTIFY, (channel, payload))
    except psycopg.Error as exc:
        raise StoreError(f"NOTIFY {channel} failed: {exc}") from exc


class PgListener:
    """LISTEN on the registered channels from a connection of its own (see the module
    docstring). ``channel(name)`` before ``run``; ``run`` in a nursery."""

    def __init__(self, open_connection: Callable[[], Conn]) -> None:
        self._open = open_connection
        self._senders: dict[str, trio.MemorySendChannel[Notification]] = {}
        self._running = False
        self._backoff = BACKOFF_SECONDS
        #: notifications dropped because their channel was full
        self.dropped = 0
        #: times a LISTEN connection was established (the first, and each reconnect)
        self.connections = 0

    def channel(
        self, name: str, *, max_buffer: int = 16
    ) -> trio.MemoryReceiveChannel[Notification]:
        """The notifications of channel ``name`` (a lower-case SQL identifier), at most
        ``max_buffer`` waiting. Raises ValueError for a bad name, RuntimeError once running."""
        if self._running:
            raise RuntimeError("PgListener: add channels before run()")
        if not _CHANNEL_NAME.fullmatch(name) or name in self._senders:
            raise ValueError(f"not a new channel name (lower-case identifier): {name!r}")
        send, receive = trio.open_memory_channel[Notification](max_buffer)
        self._senders[name] = send
        return receive

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled. Reports started at once: a database that is down when the
        server starts must not hold the start back (the readers poll meanwhile)."""
        self._running = True
        task_status.started()
        try:
            while True:
                try:
                    await trio.to_thread.run_sync(self._listen)
                except (StoreError, psycopg.Error) as exc:
                    log.warning(
                        "LISTEN %s: %s; connecting again in %g s",
                        ", ".join(self._senders),
                        exc,
                        self._backoff,
                    )
                await trio.sleep(self._backoff)
                self._backoff = min(self._backoff * 2, MAX_BACKOFF_SECONDS)
        finally:
            for sender in self._senders.values():
                sender.close()

    def _listen(self) -> None:
        """In a worker thread: connect, LISTEN, then hand notifications over until the
        connection breaks (raises) or the task is cancelled (raises Cancelled)."""
        conn = self._open()
        try:
            for name in self._senders:
                conn.execute(f"LISTEN {name}")
            trio.from_thread.run_sync(self._listening)
            while True:
                trio.from_thread.check_cancelled()
                for note in conn.notifies(timeout=NOTICE_SECONDS):
                    trio.from_thread.run_sync(self._deliver, note.channel, note.payload, False)
        finally:
            conn.close()

    def _listening(self) -> None:
        self._backoff = BACKOFF_SECONDS
        self.connections += 1
        if self.connections > 1:
            log.info("LISTEN %s: connected again", ", ".join(self._senders))
            for name in self._senders:
                self._deliver(name, "", True)

    def _deliver(self, channel: str, payload: str, missed: bool) -> None:
        sender = self._senders.get(channel)
        if sender is None:
            return
        try:
            sender.send_nowait(Notification(channel, payload, missed))
        except trio.WouldBlock:
            self.dropped += 1
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # nobody reads this channel any more
