"""The SQLite store: SqliteCore driven from trio through a worker thread (``_threads``, one
connection, so one call at a time), and (``run_upkeep``, started by the owner) a
WalCheckpointer copying its commits into the database file from another."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Concatenate, ParamSpec, TypeVar

import trio

from ..views import SearchHits
from ._checkpointer import MAX_LOG_BYTES, WalCheckpointer
from ._facade import ThreadedStore
from ._notify import LocalHub, Notice, check_notices
from ._records import Notification
from ._sqlite_core import AUTOCHECKPOINT_PAGES, SqliteCore, wall_clock_ms
from ._sqlite_groups import HandedBack, WriteGroups
from ._sqlite_views import READERS, ViewReader
from ._threads import WorkerThreads
from ._views import SearchRequest, ViewQuery, ViewRow

# To hand checkpoints back to SQLite after the upkeep stops: one PRAGMA on the writer thread;
# short, since it runs after the drain's bound (docs/configuration.md "Shutdown").
_CLEANUP_SECONDS = 2.0

P = ParamSpec("P")
T = TypeVar("T")


class SqliteStore(ThreadedStore[SqliteCore]):
    """The Store on SQLite. Calls run one at a time in a worker thread (one connection).

    A call cancelled while its statement runs waits for the thread to finish (trio's
    to_thread is not abandoned), so a transaction is either committed or rolled back, never
    left half done. Obtain one with ``open_sqlite_store``.
    """

    def __init__(self, core: SqliteCore) -> None:
        # The core's methods, unbound, take the core as their handle (one connection). It is
        # idle from the start, so closing the store closes it even if no call ever ran: left
        # open, it was closed by whichever thread collected the store, at any later moment
        # (a test's own sqlite3 connection to the file then crashed the process, SIGBUS).
        super().__init__(SqliteCore, WorkerThreads(lambda: core, SqliteCore.close, 1, idle=[core]))
        self._core = core
        # While run_upkeep runs, writes go in groups (``_sqlite_groups``), admitted by the
        # checkpointer a group at a time: against the log's size once the group before has
        # committed (each writer admitted alone would be let in against the same stale size).
        self._groups: WriteGroups[SqliteCore] | None = None
        self._hub = LocalHub()  # one process owns the file: notifications stay in it
        # Deck's views read on connections of their own (``_sqlite_views``); a store in
        # memory has no file to share, and reads them on the writer's.
        self._readers: WorkerThreads[ViewReader] | None = None
        if core.wal:
            path = core.path
            self._readers = WorkerThreads(lambda: ViewReader(path), ViewReader.close, READERS)

    @property
    def writer(self) -> str:
        """ "": one process owns the file, and there is no change log."""
        return ""

    async def _write(
        self,
        nbytes: int,
        fn: Callable[Concatenate[SqliteCore, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``_run`` for a call that writes about ``nbytes``: it waits while the WAL is over
        its bound, and tells the checkpointer it has frames to copy."""
        groups = self._groups
        if groups is not None:
            try:
                return await groups.write(lambda core: fn(core, *args, **kwargs), nbytes)
            except HandedBack:
                pass  # the upkeep stopped: SQLite checkpoints inside its commits again
        return await self._run(fn, *args, **kwargs)

    def _committed(self, notices: Sequence[Notice]) -> None:
        self._hub.notify(notices)

    async def notify(self, channel: str, payload: str) -> None:
        """Delivered to this store's listeners (one process: nobody else could listen)."""
        check_notices([(channel, payload)])
        self._hub.notify([(channel, payload)])

    async def listen(
        self,
        channels: Sequence[str],
        send: trio.MemorySendChannel[Notification],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Receive this store's notifications on ``channels`` until cancelled."""
        await self._hub.listen(channels, send, task_status=task_status)

    async def read_views(self, queries: Sequence[ViewQuery]) -> list[list[ViewRow]]:
        if self._readers is None or not queries:
            return await super().read_views(queries)
        return await self._readers.run(ViewReader.read_views, queries)

    async def search_views(self, request: SearchRequest) -> SearchHits:
        if self._readers is None:
            return await super().search_views(request)
        return await self._readers.run(ViewReader.search_views, request)

    async def count_objects(self, account: str | None = None, kind: str | None = None) -> int:
        # On a reader: counting walks the whole index (~25-110 ms of CPU at 1M objects, at
        # every /metrics scrape), which on the writer's connection held up every batch and
        # read queued behind it.
        if self._readers is None:
            return await super().count_objects(account, kind)
        return await self._readers.run(ViewReader.count_objects, account, kind)

    async def aclose(self) -> None:
        """Close the readers, then the writer's connection (after the calls in progress)."""
        if self._readers is not None:
            await self._readers.aclose()
        await super().aclose()

    async def ping(self) -> None:
        """One read of the database file on the store's thread (after the call in progress);
        raises StoreError when it fails, StoreClosed once closed."""
        await self._run(SqliteCore.ping)

    async def run_upkeep(
        self,
        *,
        max_wal_bytes: int = MAX_LOG_BYTES,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Copy the write-ahead log into the database file from a thread of its own until
        cancelled, keeping the log under ``max_wal_bytes`` plus one transaction (see
        ``_checkpointer``). Without it (or for an in-memory store, where it returns at once)
        SQLite checkpoints inside the COMMIT that crosses AUTOCHECKPOINT_PAGES, as before."""
        core = self._core
        if not core.wal:
            task_status.started()
            return
        checkpointer = WalCheckpointer(core.path, core.page_size, max_log_bytes=max_wal_bytes)
        await self._run(SqliteCore.set_autocheckpoint, 0)
        groups: WriteGroups[SqliteCore] = WriteGroups(self._threads.run)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(groups.run, checkpointer.admit, checkpointer.committed)
                self._groups = groups
                task_status.started()
                await checkpointer.run()
        finally:
            self._groups = None
            with trio.move_on_after(_CLEANUP_SECONDS, shield=True):
                if not self._threads.closed:
                    await self._run(SqliteCore.set_autocheckpoint, AUTOCHECKPOINT_PAGES)


@asynccontextmanager
async def open_sqlite_store(
    path: str, *, now_ms: Callable[[], int] = wall_clock_ms
) -> AsyncIterator[SqliteStore]:
    """Open (creating and migrating as needed) the SQLite store at ``path`` or ``":memory:"``.

    ``now_ms`` stamps resume points and records (wall-clock milliseconds by default, so ages
    survive restarts). A server starts ``store.run_upkeep`` in its nursery. Raises
    StoreError/SchemaError when the file cannot be opened or migrated. The store is closed on
    exit.
    """
    core = await trio.to_thread.run_sync(SqliteCore, path, now_ms)
    store = SqliteStore(core)
    try:
        yield store
    finally:
        await store.aclose()
