"""The PostgreSQL store: PgCore driven from trio through worker threads (``_threads``), each
call on a pooled connection of its own. psycopg's synchronous API is used on purpose: its
async API is asyncio's, and asyncio lives only in wire's bridge (DESIGN 2).

Each object write tells the other replicas about its change-log row (a NOTIFY on
CHANGES_CHANNEL, ``PgCore._announce``); ``listen`` is how a replica hears theirs, and the
operations' notifications (``_pg_listen``: one connection for every listener).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import psycopg
import trio

from .._errors import StoreClosed, StoreError
from . import _pg_listen
from ._facade import SMALL_WRITE, ThreadedStore
from ._notify import check_notices
from ._pg_core import Conn, PgCore, connect, is_broken
from ._records import Notification
from ._sqlite_core import wall_clock_ms
from ._threads import WorkerThreads
from ._url import DEFAULT_MAX_CONNECTIONS, DEFAULT_STATEMENT_TIMEOUT_MS, parse_store_url


class PgStore(ThreadedStore[Conn]):
    """The Store on PostgreSQL: up to ``max_connections`` calls at once, each one transaction
    on its own connection. A broken connection is dropped after the call that found it
    (which raises StoreError); the next call connects again. ``ping`` has one more connection
    of its own (see there). Obtain one with ``open_postgres_store``."""

    def __init__(
        self,
        core: PgCore,
        threads: WorkerThreads[Conn],
        open_connection: Callable[[], Conn] | None = None,
        open_listen_connection: Callable[[], Conn] | None = None,
    ) -> None:
        super().__init__(core, threads)
        self._core = core
        self._open_connection = open_connection
        self._open_listen_connection = open_listen_connection or open_connection
        # The ping's own connection, taken by the thread that pings and put back after: a
        # ping abandoned mid-call (its caller gave up) keeps it, and the next opens another.
        self._ping_lock = threading.Lock()
        self._ping_conn: Conn | None = None
        # The LISTEN threads' "finished" events (``_pg_listen``): close waits for them.
        self._listening: set[threading.Event] = set()
        self._hub = (
            _pg_listen.ListenHub(self._open_listen_connection, running=self._listening)
            if self._open_listen_connection is not None
            else None
        )
        self._ping_closed = False

    async def ping(self) -> None:
        """``SELECT 1`` on a connection of its own, outside the pool: the answer says whether
        the database answers, not whether this replica's pool is busy, and a ping never waits
        behind ingest. Raises StoreError when it does not answer, StoreClosed once closed.
        Cancelling it returns at once (the thread is abandoned and ends by itself: libpq's
        connect_timeout, 10 s unless the URL says otherwise, bounds a connect)."""
        if self._threads.closed or self._open_connection is None:
            raise StoreClosed("the store is closed")
        await trio.to_thread.run_sync(self._ping_in_thread, abandon_on_cancel=True)

    def _ping_in_thread(self) -> None:
        assert self._open_connection is not None
        with self._ping_lock:
            conn, self._ping_conn = self._ping_conn, None
        try:
            if conn is None or is_broken(conn):
                if conn is not None:
                    conn.close()
                conn = self._open_connection()  # raises StoreError naming the server
            conn.execute("SELECT 1")
        except psycopg.Error as exc:
            if conn is not None:
                conn.close()
            raise StoreError(f"the PostgreSQL store did not answer: {exc}") from exc
        with self._ping_lock:
            if self._ping_conn is None and not self._ping_closed:
                self._ping_conn, conn = conn, None
        if conn is not None:
            conn.close()

    @property
    def writer(self) -> str:
        """This store's name in the change log (its own rows are not read back)."""
        return self._core.writer

    async def notify(self, channel: str, payload: str) -> None:
        """``pg_notify`` on a pooled connection (delivered to every listening replica)."""
        check_notices([(channel, payload)])
        await self._write(SMALL_WRITE, self._core.notify, [(channel, payload)])

    async def listen(
        self,
        channels: Sequence[str],
        send: trio.MemorySendChannel[Notification],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """LISTEN until cancelled, on the one connection every listener of this store shares
        (``_pg_listen``)."""
        if self._hub is None:
            raise StoreClosed("this store cannot open a connection to listen on")
        await self._hub.listen(channels, send, task_status=task_status)

    async def aclose(self) -> None:
        with self._ping_lock:
            self._ping_closed = True
            conn, self._ping_conn = self._ping_conn, None
        with trio.CancelScope(shield=True):
            if conn is not None:
                await trio.to_thread.run_sync(conn.close)
            # The listeners were cancelled before the store closes; their threads end within
            # a wait of the connection (bounded here: one stuck in libpq is left behind).
            waiting = [e for e in self._listening if not e.is_set()]
            if waiting:
                await trio.to_thread.run_sync(_wait_all, waiting, _LISTEN_JOIN_SECONDS)
            self._listening.clear()
        await super().aclose()

    async def run_upkeep(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Nothing to do (PostgreSQL checkpoints by itself; change notifications go out with
        each write, ``PgCore._announce``): reports started, then waits until cancelled, as
        the Protocol promises."""
        task_status.started()
        await trio.sleep_forever()


_LISTEN_JOIN_SECONDS = 2.0


def _wait_all(events: list[threading.Event], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    for event in events:
        event.wait(max(0.0, deadline - time.monotonic()))


@asynccontextmanager
async def open_postgres_store(
    url: str,
    *,
    password_file: str = "",
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS,
    now_ms: Callable[[], int] = wall_clock_ms,
    replica_id: str = "",
) -> AsyncIterator[PgStore]:
    """Connect to the PostgreSQL store at ``url`` (a ``postgresql://`` URL, see ``_url``) and
    apply its migrations under the migration lock.

    ``password_file`` (or the URL's ``passwordFile``) holds the password, read at each
    connect. A statement running past ``statement_timeout_ms`` (0: no bound) fails.
    ``replica_id`` names the server replica using it in the change log (with a suffix of this
    store's own: two stores never take each other's rows for their own).
    Raises StoreError when the server cannot be reached or refuses us, SchemaError when the
    schema is newer or a migration fails. Every connection is closed on exit.
    """
    try:
        location = parse_store_url(url)
    except ValueError as exc:
        raise StoreError(str(exc)) from exc
    if location.backend != "postgresql":
        raise StoreError(f"{location.redacted()} is not a PostgreSQL URL")
    conninfo = location.conninfo
    secret_file = password_file or location.password_file

    def open_connection() -> Conn:
        return connect(conninfo, secret_file, statement_timeout_ms=statement_timeout_ms)

    def open_listen_connection() -> Conn:
        return connect(
            conninfo, secret_file, ingest=False, statement_timeout_ms=statement_timeout_ms
        )

    threads: WorkerThreads[Conn] = WorkerThreads(
        open_connection, lambda conn: conn.close(), max_connections, is_broken=is_broken
    )
    core = PgCore(now_ms, f"{replica_id or 'store'}/{secrets.token_hex(4)}")
    store = PgStore(core, threads, open_connection, open_listen_connection)
    try:
        await threads.run(core.migrate)
        yield store
    finally:
        await store.aclose()
