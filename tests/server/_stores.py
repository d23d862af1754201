"""What the ``store_backend`` fixture (conftest.py) hands a test: a backend and a fresh store."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import apsw
import psycopg

from server.store import MIGRATIONS, PG_MIGRATIONS, Migration, Store, StoreConfig, open_store
from server.store._sqlite_core import wall_clock_ms

from ._postgres import TempPostgres


@dataclass(frozen=True)
class StoreBackend:
    """One backend with a fresh, empty, durable store at ``url`` (SQLite: a file in the
    test's folder; PostgreSQL: a database of its own). ``open`` may be called again (after
    the first is closed, or at once for a second replica) to reach the same data."""

    name: str
    url: str
    server: TempPostgres | None = None
    database: str = ""  # PostgreSQL: the database's name

    def open(
        self,
        *,
        now_ms: Callable[[], int] = wall_clock_ms,
        url: str | None = None,
        password_file: str = "",
    ) -> AbstractAsyncContextManager[Store]:
        config = StoreConfig(url=url or self.url, password_file=password_file)
        return open_store(config, now_ms=now_ms)

    @property
    def migrations(self) -> tuple[Migration, ...]:
        return MIGRATIONS if self.name == "sqlite" else PG_MIGRATIONS

    def sql(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement on the store's database outside the store (committed); its rows.
        Placeholders: ``?`` on SQLite, ``%s`` on PostgreSQL."""
        if self.name == "sqlite":
            # apsw, the store's own SQLite: two copies of SQLite in one process on one file
            # undo each other's locks (sqlite.org/howtocorrupt.html, 2.2.1). Autocommit.
            conn = apsw.Connection(self.url.removeprefix("sqlite://"))
            try:
                return [tuple(row) for row in conn.execute(statement, params)]
            finally:
                conn.close()
        with psycopg.connect(self.url, autocommit=True) as pg:
            cur = pg.execute(statement, params)
            return cur.fetchall() if cur.description else []
