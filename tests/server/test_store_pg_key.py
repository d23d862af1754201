"""PostgreSQL's one-column object key (``server/store/_okey.py``, migration 7): a database
migrated with objects in it keeps them, every read and write of objects seeks the key's
index (no statement scans or sorts the table for a page), and a coordinate that would break
the key's order (a control character) is refused on both backends."""

from __future__ import annotations

import psycopg
import pytest
import trio

from server import InvalidQuery, InvalidRecord
from server.store import Migration
from server.store._okey import OBJECTS_PER_KIND, okey_of
from server.store._paging import make_token
from server.store._pg_changes import _GET_OBJECTS
from server.store._pg_core import connect
from server.store._pg_schema import PG_MIGRATIONS, migrate_pg
from server.store._queries import (
    POSTGRESQL,
    ObjectQuery,
    count_sql,
    get_object_sql,
    query_sql,
    stale_objects_where,
)
from wire import EventType

from ._stores import StoreBackend
from .test_store import ACCOUNT, obj


async def test_a_database_migrated_with_objects_keeps_them_under_the_new_key(
    pg_backend: StoreBackend,
) -> None:
    body = b'{"kind":"Pod","metadata":{"name":"web-1","namespace":"default"}}'
    with psycopg.connect(pg_backend.url, autocommit=True) as conn:
        assert migrate_pg(conn, 0, PG_MIGRATIONS[:6]) == 6  # the five-column key
        for account, group, name in (
            (ACCOUNT, "", "web-1"),
            # Control characters, which the code before accepted: two that would collide
            # under the new key, and one that would break its order. They go.
            ("a\x01b", "c", "x"),
            ("a", "b\x01c", "x"),
            (ACCOUNT, "", "odd\x02name"),
        ):
            conn.execute(
                "INSERT INTO objects(account, grp, kind, namespace, name, api_version, uid,"
                " resource_version, epoch, updated_at_ms, labels, body) VALUES"
                " (%s, %s, 'Pod', 'default', %s, 'v1', 'u1', '5', 0, 0, NULL, %s)",
                (account, group, name, body),
            )
    with trio.fail_after(30):
        async with pg_backend.open() as store:
            found = await store.get_object(ACCOUNT, "v1", "pod", "default", "web-1")
            assert found is not None
            assert found.resource_version == "5"
            # An update of the migrated row lands on it (the key is computed for old rows).
            await store.apply_batch(ACCOUNT, [obj("web-1", rv="6", etype=EventType.MODIFIED)])
            page = await store.query_objects(account=ACCOUNT, kind="Pod")
            assert [(o.name, o.resource_version) for o in page.objects] == [("web-1", "6")]
    keys = pg_backend.sql("SELECT okey FROM objects")
    assert keys == [(f"{ACCOUNT}\x01\x01pod\x01default\x01web-1",)]


def test_a_migration_is_not_cut_short_by_the_statement_timeout(pg_backend: StoreBackend) -> None:
    # Migration 7 rewrites the objects table (minutes for millions of objects), on a
    # connection whose statement_timeout is the store's (60 s by default).
    slow = Migration(99, "a step slower than the timeout", ("SELECT pg_sleep(0.3)",))
    with connect(pg_backend.url, "", ingest=False, statement_timeout_ms=100) as conn:
        assert migrate_pg(conn, 0, (*PG_MIGRATIONS, slow)) == 99
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute("SELECT pg_sleep(0.3)")  # the timeout still holds outside them


def _plan(backend: StoreBackend, sql: str, params: list[object]) -> str:
    """EXPLAIN of ``sql`` with sequential scans priced out of reach: what is left can only
    be a scan the conditions allow."""
    with psycopg.connect(backend.url, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        rows = conn.execute(f"EXPLAIN {sql}", params).fetchall()
    return "\n".join(str(row[0]) for row in rows)


_TOKEN = make_token((ACCOUNT, "", "pod", "default", "web-1"))


@pytest.mark.parametrize(
    "query",
    [
        ObjectQuery(ACCOUNT, None, None, None, None, 500, None),
        ObjectQuery(ACCOUNT, "", "Pod", None, None, 500, None),
        ObjectQuery(ACCOUNT, "", "Pod", "default", None, 500, _TOKEN),
        ObjectQuery(ACCOUNT, None, "Pod", None, None, 500, _TOKEN),  # kind past a gap
    ],
    ids=["account", "kind", "namespace-later-page", "kind-without-group-later-page"],
)
async def test_every_page_walks_the_key_in_order(
    pg_backend: StoreBackend, query: ObjectQuery
) -> None:
    async with pg_backend.open():
        pass  # migrated
    sql, params = query_sql(POSTGRESQL, query)
    plan = _plan(pg_backend, sql, params)
    assert "objects_pkey" in plan, plan
    assert "Sort" not in plan, plan
    assert "Seq Scan" not in plan, plan


async def test_object_reads_and_deletes_seek_the_key(pg_backend: StoreBackend) -> None:
    async with pg_backend.open():
        pass
    coordinates = [ACCOUNT, "", "Pod", "default", "web-1"]
    sweep, sweep_params = stale_objects_where(
        POSTGRESQL, obj("x", etype=EventType.SYNC_BEGIN), "", 3
    )
    count, count_params = count_sql(POSTGRESQL, ACCOUNT, "Pod")
    view_join = (
        "SELECT o.body FROM view_index v JOIN objects o ON o.okey = "
        + okey_of("v.account", "v.grp", "v.kind_key", "v.namespace", "v.name")
        + " WHERE v.kind_key = 'pod'"
    )
    for sql, params in (
        (get_object_sql(POSTGRESQL), coordinates),
        (f"DELETE FROM objects WHERE {sweep}", sweep_params),
        (count, count_params),
        (_GET_OBJECTS, [[c] for c in coordinates]),
        (view_join, []),
        (OBJECTS_PER_KIND, []),  # the status page's, every few seconds
    ):
        plan = _plan(pg_backend, sql, list(params))
        assert "objects_pkey" in plan, (sql, plan)
        assert "Seq Scan on objects" not in plan, (sql, plan)


@pytest.mark.parametrize("where", ["name", "namespace", "kind", "account"])
async def test_a_control_character_in_a_coordinate_is_refused(
    store_backend: StoreBackend, where: str
) -> None:
    bad = "web\x01x"
    record = {
        "name": obj(bad),
        "namespace": obj("web", namespace=bad),
        "kind": obj("web", kind="Po\x01d"),
        "account": obj("web", account=bad),
    }[where]
    with trio.fail_after(20):
        async with store_backend.open() as store:
            with pytest.raises(InvalidRecord, match=rf"record 0: its {where} .* control"):
                await store.apply_events([record])
            deleted = obj(bad, etype=EventType.DELETED)
            with pytest.raises(InvalidRecord, match=r"record 0: its name .* control"):
                await store.apply_events([deleted])
            assert (await store.query_objects()).objects == []


async def test_a_query_for_a_coordinate_with_a_control_character_is_refused(
    store_backend: StoreBackend,
) -> None:
    # On PostgreSQL "deployment\x01prod" as a kind would otherwise reach into the key's
    # next coordinate (a namespace prod) through the key's range.
    with trio.fail_after(20):
        async with store_backend.open() as store:
            with pytest.raises(InvalidQuery, match=r"kind 'deployment\\x01prod' holds a control"):
                await store.query_objects(account=ACCOUNT, group="apps", kind="deployment\x01prod")
            with pytest.raises(InvalidQuery, match="account"):
                await store.count_objects(account="prod\x01")
