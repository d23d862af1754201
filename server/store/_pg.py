"""The PostgreSQL store: PgCore driven from trio through worker threads (``_threads``), each
call on a pooled connection of its own. psycopg's synchronous API is used on purpose: its
async API is asyncio's, and asyncio lives only in wire's bridge (DESIGN 2)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio

from .._errors import StoreError
from ._facade import ThreadedStore
from ._pg_core import Conn, PgCore, connect, is_broken
from ._sqlite_core import wall_clock_ms
from ._threads import WorkerThreads
from ._url import DEFAULT_MAX_CONNECTIONS, parse_store_url


class PgStore(ThreadedStore[Conn]):
    """The Store on PostgreSQL: up to ``max_connections`` calls at once, each one transaction
    on its own connection. A broken connection is dropped after the call that found it
    (which raises StoreError); the next call connects again. Obtain one with
    ``open_postgres_store``."""

    def __init__(self, core: PgCore, threads: WorkerThreads[Conn]) -> None:
        super().__init__(core, threads)

    async def run_upkeep(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Nothing to do yet (PostgreSQL checkpoints by itself): reports started, then waits
        until cancelled, as the Protocol promises."""
        task_status.started()
        await trio.sleep_forever()


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
