"""The store fixture: every store test runs on SQLite and on a real PostgreSQL.

``store_backend`` is parametrized over both backends. For PostgreSQL it uses one throwaway
server per test session (``tests/server/_postgres.py``: initdb into a temporary folder, a unix
socket in it, stopped and removed at the end) and a new empty database per test. Where no
PostgreSQL binaries can be had, the PostgreSQL cases are skipped with the reason, and the
reason is repeated in the summary at the end of the run (never a silent skip).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from server.store import sqlite_url

from ._postgres import NoPostgres, TempPostgres, temp_postgres
from ._stores import StoreBackend

_skipped_because: list[str] = []


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[TempPostgres]:
    """The session's PostgreSQL server; skips (saying why) where none can be started."""
    try:
        with temp_postgres() as server:
            yield server
    except NoPostgres as exc:
        _skipped_because.append(str(exc))
        pytest.skip(f"PostgreSQL tests skipped: {exc}")


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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for reason in dict.fromkeys(_skipped_because):
        terminalreporter.write_line(f"PostgreSQL tests SKIPPED: {reason}", yellow=True, bold=True)
