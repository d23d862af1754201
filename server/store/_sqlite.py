"""The SQLite store: SqliteCore driven from trio through a worker thread (``_threads``, one
connection, so one call at a time), and (``run_upkeep``, started by the owner) a
WalCheckpointer copying its commits into the database file from another."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Concatenate, ParamSpec, TypeVar

import trio

from wire import EventRecord

from .._errors import StoreError
from ._checkpointer import MAX_LOG_BYTES, WalCheckpointer
from ._ingest import apply_groups
from ._records import (
    AccountRecord,
    AgentRecord,
    BatchOutcome,
    ObjectPage,
    OperationEvent,
    OperationRecord,
    ResumePoint,
    StoredObject,
)
from ._sqlite_core import AUTOCHECKPOINT_PAGES, SqliteCore, wall_clock_ms
from ._threads import WorkerThreads

# To hand checkpoints back to SQLite after the upkeep stops: one PRAGMA on the writer thread;
# short, since it runs after the drain's bound (docs/configuration.md "Shutdown").
_CLEANUP_SECONDS = 2.0

P = ParamSpec("P")
T = TypeVar("T")


class SqliteStore:
    """The Store on SQLite. Calls run one at a time in a worker thread (one connection).

    A call cancelled while its statement runs waits for the thread to finish (trio's
    to_thread is not abandoned), so a transaction is either committed or rolled back, never
    left half done. Obtain one with ``open_sqlite_store``.
    """

    def __init__(self, core: SqliteCore) -> None:
        self._core = core
        self._threads = WorkerThreads(lambda: core, SqliteCore.close, 1)
        self._checkpointer: WalCheckpointer | None = None  # while run_upkeep runs
        # Held across admit and the write: a writer is admitted against the log's size only
        # once the write before it has committed (else each writer queued on the thread
        # would be let in against the same stale size).
        self._write_lock = trio.Lock()

    async def _run(
        self, fn: Callable[Concatenate[SqliteCore, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        return await self._threads.run(fn, *args, **kwargs)

    async def _write(
        self,
        nbytes: int,
        fn: Callable[Concatenate[SqliteCore, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``_run`` for a call that writes about ``nbytes``: it waits while the WAL is over
        its bound, and tells the checkpointer it has frames to copy."""
        checkpointer = self._checkpointer
        if checkpointer is None:
            return await self._run(fn, *args, **kwargs)
        async with self._write_lock:
            await checkpointer.admit()
            try:
                return await self._run(fn, *args, **kwargs)
            finally:
                checkpointer.committed(nbytes)

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
        self._checkpointer = checkpointer
        task_status.started()
        try:
            await checkpointer.run()
        finally:
            self._checkpointer = None
            with trio.move_on_after(_CLEANUP_SECONDS, shield=True):
                if not self._threads.closed:
                    await self._run(SqliteCore.set_autocheckpoint, AUTOCHECKPOINT_PAGES)

    async def apply_batch(self, account: str, records: Sequence[EventRecord]) -> BatchOutcome:
        return await self._write(_size(records), SqliteCore.apply_events, records, account)

    async def apply_events(self, records: Sequence[EventRecord]) -> BatchOutcome:
        return await self._write(_size(records), SqliteCore.apply_events, records, None)

    async def apply_operation_objects(self, records: Sequence[EventRecord]) -> BatchOutcome:
        return await self._write(_size(records), SqliteCore.apply_operation_objects, records)

    async def get_object(
        self, account: str, api_version_or_group: str, kind: str, namespace: str, name: str
    ) -> StoredObject | None:
        return await self._run(
            SqliteCore.get_object, account, api_version_or_group, kind, namespace, name
        )

    async def query_objects(
        self,
        account: str | None = None,
        kind: str | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
        limit: int = 500,
        continue_token: str | None = None,
        *,
        group: str | None = None,
    ) -> ObjectPage:
        return await self._run(
            SqliteCore.query_objects,
            account,
            group,
            kind,
            namespace,
            label_selector,
            limit,
            continue_token,
        )

    async def count_objects(self, account: str | None = None, kind: str | None = None) -> int:
        return await self._run(SqliteCore.count_objects, account, kind)

    async def resume_points(self, account: str) -> list[ResumePoint]:
        return await self._run(SqliteCore.resume_points, account)

    async def upsert_account(self, record: AccountRecord) -> None:
        await self._write(_SMALL, SqliteCore.upsert_account, record)

    async def get_account(self, name: str) -> AccountRecord | None:
        return await self._run(SqliteCore.get_account, name)

    async def list_accounts(self) -> list[AccountRecord]:
        return await self._run(SqliteCore.list_accounts)

    async def delete_account(self, name: str) -> bool:
        return await self._write(_SMALL, SqliteCore.delete_account, name)

    async def upsert_agent(self, record: AgentRecord) -> None:
        await self._write(_SMALL, SqliteCore.upsert_agent, record)

    async def delete_agent(self, session_id: str) -> None:
        await self._write(_SMALL, SqliteCore.delete_agent, session_id)

    async def list_agents(self) -> list[AgentRecord]:
        return await self._run(SqliteCore.list_agents)

    async def record_operation(self, record: OperationRecord, message: str = "") -> None:
        await self._write(_SMALL, SqliteCore.record_operation, record, message)

    async def record_operations(self, items: Sequence[tuple[OperationRecord, str]]) -> None:
        await self._write(_SMALL, SqliteCore.record_operations, items)

    async def record_operations_and_objects(
        self,
        items: Sequence[tuple[OperationRecord, str]],
        objects: Sequence[Sequence[EventRecord]],
    ) -> list[StoreError | None]:
        def both(core: SqliteCore) -> list[StoreError | None]:
            errors = apply_groups(core.apply_operation_objects, objects)
            core.record_operations(items)
            return errors

        return await self._write(sum(map(_size, objects)), both)

    async def get_operation(self, operation_id: str) -> OperationRecord | None:
        return await self._run(SqliteCore.get_operation, operation_id)

    async def list_operations(
        self, account: str | None = None, limit: int = 100
    ) -> list[OperationRecord]:
        return await self._run(SqliteCore.list_operations, account, limit)

    async def operation_history(self, operation_id: str) -> list[OperationEvent]:
        return await self._run(SqliteCore.operation_history, operation_id)

    async def aclose(self) -> None:
        """Close the connection (after any call in progress); later calls raise StoreClosed."""
        await self._threads.aclose()


# What a write of accounts, agents or operations adds to the log, about: a page or two.
_SMALL = 8192


def _size(records: Sequence[EventRecord]) -> int:
    """About what writing ``records`` adds to the log: their objects, and a page for the
    index entries and the resume points."""
    return sum(len(r.object) for r in records) + 4096


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
