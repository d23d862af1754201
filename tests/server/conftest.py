"""The store fixture: every store test runs on SQLite and on a real PostgreSQL.

``store_backend`` is parametrized over both backends. For PostgreSQL it uses the session's
throwaway server (``postgres_server``, tests/conftest.py: skipped with the reason, repeated in
the run's summary, where no PostgreSQL can be had) and a new empty database per test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from server.store import sqlite_url

from ._postgres import TempPostgres
from ._stores import StoreBackend


@pytest.fixture(params=["sqlite", "postgresql"])
def store_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    """Each backend in turn, with a fresh store."""
    if request.param == "sqlite":
        yield StoreBackend("sqlite", sqlite_url(str(tmp_path / "store.db")))
    else:
        yield from _postgres_backend(request.getfixturevalue("postgres_server"))


@pytest.fixture
def pg_backend(postgres_server: TempPostgres) -> Iterator[StoreBackend]:
    """PostgreSQL alone (for what only it has), with a fresh database."""
    yield from _postgres_backend(postgres_server)


def _postgres_backend(server: TempPostgres) -> Iterator[StoreBackend]:
    name = server.create_database()
    try:
        yield StoreBackend("postgresql", server.url(name), server, name)
    finally:
        server.drop_database(name)
