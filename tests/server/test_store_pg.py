"""What only the PostgreSQL store has: a password from a file, reconnecting after the server
dropped a connection, running a transaction again after a deadlock, and clear errors when it
cannot be reached (the shared behaviour is in
test_store.py, on both backends)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
import trio

from server import StoreError
from server.store import StoreConfig, open_store
from server.store._pg_core import Cursor, PgCore, connect
from server.store._sqlite_core import wall_clock_ms

from ._postgres import PASSWORD, PASSWORD_USER, TempPostgres
from ._stores import StoreBackend
from .test_store import ACCOUNT, obj


def _as_password_user(backend: StoreBackend) -> str:
    assert backend.server is not None
    return backend.url.replace("postgresql://kubesvc@", f"postgresql://{PASSWORD_USER}@", 1)


async def test_the_password_comes_from_a_file(pg_backend: StoreBackend, tmp_path: Path) -> None:
    secret = tmp_path / "pg-password"
    secret.write_text(PASSWORD + "\n")  # as `kubectl create secret --from-file` may leave it
    url = _as_password_user(pg_backend)
    with trio.fail_after(20):
        async with pg_backend.open(url=url, password_file=str(secret)) as store:
            await store.apply_batch(ACCOUNT, [obj("a")])
            assert await store.count_objects(ACCOUNT) == 1
        # The URL's own option works the same (for --store).
        async with pg_backend.open(url=f"{url}&passwordFile={secret}") as store:
            assert await store.count_objects(ACCOUNT) == 1
        secret.write_text("wrong")
        with pytest.raises(StoreError, match="cannot connect to the PostgreSQL store") as info:
            async with pg_backend.open(url=url, password_file=str(secret)):
                pass
        assert "wrong" not in str(info.value)
        with pytest.raises(StoreError, match="cannot read the PostgreSQL password file"):
            async with pg_backend.open(url=url, password_file=str(tmp_path / "absent")):
                pass


async def test_a_dropped_connection_fails_one_call_and_the_next_reconnects(
    pg_backend: StoreBackend,
) -> None:
    # What a PostgreSQL restart or failover does to the pool's connections.
    config = StoreConfig(url=pg_backend.url, max_connections=1)
    with trio.fail_after(20):
        async with open_store(config) as store:
            await store.apply_batch(ACCOUNT, [obj("a")])
            pg_backend_server_sql(
                pg_backend,
                # 5 s: wait until each is gone, so the next call finds its connection dead.
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                pg_backend.database,
            )
            with pytest.raises(StoreError):
                await store.count_objects()
            assert await store.count_objects() == 1  # a new connection
            await store.apply_batch(ACCOUNT, [obj("b")])
            assert await store.count_objects() == 2


async def test_a_statement_held_past_the_statement_timeout_fails(pg_backend: StoreBackend) -> None:
    # A lock another replica holds (here: a bare connection's open transaction) must not hold
    # a store call, a worker thread and the server's shutdown forever.
    config = StoreConfig(url=pg_backend.url, max_connections=1, statement_timeout_ms=300)
    with trio.fail_after(20):
        async with open_store(config) as store:
            await store.apply_batch(ACCOUNT, [obj("a")])
            with psycopg.connect(pg_backend.url) as holder:
                holder.execute("LOCK TABLE objects IN ACCESS EXCLUSIVE MODE")
                began = trio.current_time()
                with pytest.raises(StoreError, match="statement timeout"):
                    await store.count_objects()
                assert trio.current_time() - began < 10
            assert await store.count_objects() == 1  # the lock is gone: the store goes on


def test_the_urls_own_statement_timeout_wins(pg_backend: StoreBackend) -> None:
    conninfo = pg_backend.url
    with connect(conninfo, "", statement_timeout_ms=300) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone() == ("300ms",)
    # The URL's options come after ours on the connection: an operator's setting wins.
    given = psycopg.conninfo.make_conninfo(conninfo, options="-c statement_timeout=0")
    with connect(given, "", statement_timeout_ms=300) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone() == ("0",)


def pg_backend_server_sql(backend: StoreBackend, statement: str, *params: object) -> None:
    assert backend.server is not None
    with psycopg.connect(backend.server.url(), autocommit=True) as conn:
        conn.execute(statement, params)


async def test_an_unreachable_server_is_a_clear_error(
    pg_backend: StoreBackend, tmp_path: Path
) -> None:
    server: TempPostgres | None = pg_backend.server
    assert server is not None
    url = f"postgresql://kubesvc@/t?host={tmp_path}/nowhere&port=5432"
    with trio.fail_after(20), pytest.raises(StoreError, match=r"cannot connect .*nowhere"):
        async with open_store(StoreConfig(url=url)):
            pass


def test_a_transaction_aborted_for_a_deadlock_runs_again(pg_backend: StoreBackend) -> None:
    # PostgreSQL aborts one of two writers that lock rows in opposite orders (SQLSTATE
    # 40P01); the store runs the loser's transaction again, from the start, and gives up
    # with a StoreError only after three aborts in a row. The aborts here are real server
    # errors with that code, raised on demand.
    core = PgCore(wall_clock_ms)
    aborts, session = 2, "s1"

    def write(cur: Cursor) -> int:
        nonlocal aborts
        cur.execute("INSERT INTO agents VALUES (%s,'a','','','','','[]',0,0)", (session,))
        if aborts:
            aborts -= 1
            cur.execute("DO $$ BEGIN RAISE EXCEPTION 'deadlock' USING ERRCODE = '40P01'; END $$")
        cur.execute("SELECT count(*) FROM agents")
        row = cur.fetchone()
        return int(row[0]) if row else -1

    with connect(pg_backend.url, "") as conn:
        core.migrate(conn)
        assert core._tx(conn, write) == 1  # the aborted runs' inserts were rolled back
        assert pg_backend.sql("SELECT count(*) FROM agents") == [(1,)]
        aborts, session = 3, "s2"
        with pytest.raises(StoreError, match="failed 3 times in a row"):
            core._tx(conn, write)
        assert pg_backend.sql("SELECT count(*) FROM agents") == [(1,)]


def test_the_ingest_tables_stay_one_batch_large(pg_backend: StoreBackend) -> None:
    # The COPY's temporary tables are emptied by the writer and their space reclaimed after
    # each batch (not truncated at every commit: _pg_core's _RECLAIM_IN): many batches
    # leave them no larger than one batch made them, and empty.
    core = PgCore(wall_clock_ms)
    batch = [obj(f"web-{i}", rv=str(i), extra={"pad": "x" * 2000}) for i in range(200)]

    def size(conn: psycopg.Connection[tuple[int]]) -> int:
        row = conn.execute(
            "SELECT pg_total_relation_size('objects_in') + pg_total_relation_size('views_in')"
        ).fetchone()
        return int(row[0]) if row else -1

    with connect(pg_backend.url, "") as conn:
        core.migrate(conn)
        core.apply_events(conn, batch, ACCOUNT)
        first = size(conn)
        for _ in range(30):
            core.apply_events(conn, batch, ACCOUNT)
        assert size(conn) <= first
        assert conn.execute("SELECT count(*) FROM objects_in").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM views_in").fetchone() == (0,)
    assert pg_backend.sql("SELECT count(*) FROM objects") == [(200,)]
