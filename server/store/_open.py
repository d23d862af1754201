"""Open the store a ``StoreConfig`` names: SQLite or PostgreSQL behind the one Protocol."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from .._errors import StoreError
from ._pg import open_postgres_store
from ._protocol import Store
from ._sqlite import open_sqlite_store
from ._sqlite_core import wall_clock_ms
from ._url import StoreConfig

log = logging.getLogger("server.store")


@asynccontextmanager
async def open_store(
    config: StoreConfig, *, now_ms: Callable[[], int] = wall_clock_ms, replica_id: str = ""
) -> AsyncIterator[Store]:
    """Open (creating and migrating as needed) the store at ``config.url``; closed on exit.
    ``replica_id`` names the server using it in PostgreSQL's change log.

    Raises StoreError when the URL is not a store URL or the store cannot be opened,
    SchemaError when its schema is newer than this code or a migration fails.
    """
    try:
        location = config.location
    except ValueError as exc:
        raise StoreError(f"store.url: {exc}") from exc
    log.info("store: %s", location.redacted())
    if location.backend == "sqlite":
        async with open_sqlite_store(location.path, now_ms=now_ms) as sqlite:
            yield sqlite
    else:
        async with open_postgres_store(
            config.url,
            password_file=config.password_file,
            max_connections=config.max_connections,
            statement_timeout_ms=config.statement_timeout_ms,
            now_ms=now_ms,
            replica_id=replica_id,
        ) as pg:
            yield pg
