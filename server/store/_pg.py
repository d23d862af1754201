"""The PostgreSQL store: PgCore driven from trio through worker threads (``_threads``), each
call on a pooled connection of its own. psycopg's synchronous API is used on purpose: its
async API is asyncio's, and asyncio lives only in wire's bridge (DESIGN 2)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Concatenate, ParamSpec, TypeVar

import trio

from wire import EventRecord

from .._errors import StoreError
from ._ingest import apply_groups
from ._pg_core import Conn, PgCore, connect, is_broken
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
from ._sqlite_core import wall_clock_ms
from ._threads import WorkerThreads
from ._url import DEFAULT_MAX_CONNECTIONS, parse_store_url

P = ParamSpec("P")
T = TypeVar("T")


class PgStore:
    """The Store on PostgreSQL: up to ``max_connections`` calls at once, each one transaction
    on its own connection. A broken connection is dropped after the call that found it
    (which raises StoreError); the next call connects again. Obtain one with
    ``open_postgres_store``."""

    def __init__(self, core: PgCore, threads: WorkerThreads[Conn]) -> None:
        self._core = core
        self._threads = threads

    async def _run(
        self, fn: Callable[Concatenate[Conn, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        return await self._threads.run(fn, *args, **kwargs)

    async def run_upkeep(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Nothing to do yet (PostgreSQL checkpoints by itself): reports started, then waits
        until cancelled, as the Protocol promises."""
        task_status.started()
        await trio.sleep_forever()

    async def apply_batch(self, account: str, records: Sequence[EventRecord]) -> BatchOutcome:
        return await self._run(self._core.apply_events, records, account)

    async def apply_events(self, records: Sequence[EventRecord]) -> BatchOutcome:
        return await self._run(self._core.apply_events, records, None)

    async def apply_operation_objects(self, records: Sequence[EventRecord]) -> BatchOutcome:
        return await self._run(self._core.apply_operation_objects, records)

    async def get_object(
        self, account: str, api_version_or_group: str, kind: str, namespace: str, name: str
    ) -> StoredObject | None:
        return await self._run(
            self._core.get_object, account, api_version_or_group, kind, namespace, name
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
            self._core.query_objects,
            account,
            group,
            kind,
            namespace,
            label_selector,
            limit,
            continue_token,
        )

    async def count_objects(self, account: str | None = None, kind: str | None = None) -> int:
        return await self._run(self._core.count_objects, account, kind)

    async def resume_points(self, account: str) -> list[ResumePoint]:
        return await self._run(self._core.resume_points, account)

    async def upsert_account(self, record: AccountRecord) -> None:
        await self._run(self._core.upsert_account, record)

    async def get_account(self, name: str) -> AccountRecord | None:
        return await self._run(self._core.get_account, name)

    async def list_accounts(self) -> list[AccountRecord]:
        return await self._run(self._core.list_accounts)

    async def delete_account(self, name: str) -> bool:
        return await self._run(self._core.delete_account, name)

    async def upsert_agent(self, record: AgentRecord) -> None:
        await self._run(self._core.upsert_agent, record)

    async def delete_agent(self, session_id: str) -> None:
        await self._run(self._core.delete_agent, session_id)

    async def list_agents(self) -> list[AgentRecord]:
        return await self._run(self._core.list_agents)

    async def record_operation(self, record: OperationRecord, message: str = "") -> None:
        await self._run(self._core.record_operation, record, message)

    async def record_operations(self, items: Sequence[tuple[OperationRecord, str]]) -> None:
        await self._run(self._core.record_operations, items)

    async def record_operations_and_objects(
        self,
        items: Sequence[tuple[OperationRecord, str]],
        objects: Sequence[Sequence[EventRecord]],
    ) -> list[StoreError | None]:
        core = self._core

        def both(conn: Conn) -> list[StoreError | None]:
            errors = apply_groups(lambda g: core.apply_operation_objects(conn, g), objects)
            core.record_operations(conn, items)
            return errors

        return await self._run(both)

    async def get_operation(self, operation_id: str) -> OperationRecord | None:
        return await self._run(self._core.get_operation, operation_id)

    async def list_operations(
        self, account: str | None = None, limit: int = 100
    ) -> list[OperationRecord]:
        return await self._run(self._core.list_operations, account, limit)

    async def operation_history(self, operation_id: str) -> list[OperationEvent]:
        return await self._run(self._core.operation_history, operation_id)

    async def aclose(self) -> None:
        """Close every connection (after the calls in progress); later calls raise
        StoreClosed."""
        await self._threads.aclose()


@asynccontextmanager
async def open_postgres_store(
    url: str,
    *,
    password_file: str = "",
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    now_ms: Callable[[], int] = wall_clock_ms,
) -> AsyncIterator[PgStore]:
    """Connect to the PostgreSQL store at ``url`` (a ``postgresql://`` URL, see ``_url``) and
    apply its migrations under the migration lock.

    ``password_file`` (or the URL's ``passwordFile``) holds the password, read at each
    connect. Raises StoreError when the server cannot be reached or refuses us, SchemaError
    when the schema is newer or a migration fails. Every connection is closed on exit.
    """
    try:
        location = parse_store_url(url)
    except ValueError as exc:
        raise StoreError(str(exc)) from exc
    if location.backend != "postgresql":
        raise StoreError(f"{location.redacted()} is not a PostgreSQL URL")
    conninfo = location.conninfo
    secret_file = password_file or location.password_file
    threads: WorkerThreads[Conn] = WorkerThreads(
        lambda: connect(conninfo, secret_file),
        lambda conn: conn.close(),
        max_connections,
        is_broken=is_broken,
    )
    core = PgCore(now_ms)
    store = PgStore(core, threads)
    try:
        await threads.run(core.migrate)
        yield store
    finally:
        await store.aclose()
