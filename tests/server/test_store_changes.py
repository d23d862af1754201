"""The change log (schema step 4): what one store instance's writes changed, as another reads
it (server/store/_changes.py, _pg_changes.py). PostgreSQL only, but for the SQLite case
(nothing logged) and get_objects (both backends)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import trio

from server.store import ChangeCursor, ChangePage, ObjectRef, Store, sqlite_url
from server.store._changes import change_message
from wire import EventRecord, EventType

from ._stores import StoreBackend

ACCOUNT = "a1"


def pod(name: str, rv: str, etype: EventType = EventType.ADDED) -> EventRecord:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"}}
    return EventRecord(
        int(etype), ACCOUNT, "v1", "Pod", "ns", name, f"u-{name}", rv, json.dumps(body).encode()
    )


def marker(etype: EventType, rv: str = "") -> EventRecord:
    return EventRecord(int(etype), ACCOUNT, "v1", "Pod", "", "", "", rv, b"", "")


def seen(page: ChangePage) -> list[list[tuple[int, str, str]]]:
    """Each change's records as (type, name, resourceVersion)."""
    return [[(r.type, r.name, r.resource_version) for r in c.records] for c in page.changes]


async def start(store: Store) -> ChangeCursor:
    return (await store.read_changes(None)).cursor


async def test_another_stores_writes_in_order_without_bodies_or_its_own(
    pg_backend: StoreBackend,
) -> None:
    with trio.fail_after(30):
        async with pg_backend.open() as a, pg_backend.open() as b:
            cursor = await start(b)
            first = await a.apply_batch(
                ACCOUNT, [pod("p1", "1"), pod("p2", "2"), marker(EventType.BOOKMARK, "2")]
            )
            await a.apply_batch(ACCOUNT, [pod("p1", "3", EventType.MODIFIED)])
            relist = await a.apply_batch(
                ACCOUNT,
                [
                    marker(EventType.SYNC_BEGIN),
                    pod("p1", "4", EventType.MODIFIED),
                    marker(EventType.SYNC_END, "4"),
                ],
            )
            await b.apply_batch(ACCOUNT, [pod("p3", "5")])  # the reader's own: not read back
            await a.apply_operation_objects([pod("p1", "6", EventType.MODIFIED)])
            nothing = await a.apply_batch(ACCOUNT, [marker(EventType.BOOKMARK, "7")])
            assert nothing.change_seq == 0  # nothing a subscriber sees: no row

            page = await b.read_changes(cursor)
            assert not page.more
            assert not page.lagged
            added, modified, ended = int(EventType.ADDED), int(EventType.MODIFIED), 6
            assert seen(page) == [
                [(added, "p1", "1"), (added, "p2", "2")],  # the bookmark is not logged
                [(modified, "p1", "3")],
                [(modified, "p1", "4"), (ended, "", "4")],  # SYNC_BEGIN is not either
                [(modified, "p1", "6")],
            ]
            assert page.changes[0].seq == first.change_seq
            assert page.changes[2].seq == relist.change_seq
            assert page.changes[2].swept == (ObjectRef(ACCOUNT, "v1", "Pod", "ns", "p2"),)
            assert all(r.object == b"" for c in page.changes for r in c.records)
            assert all(c.writer.startswith("store/") for c in page.changes)
            assert len({c.writer for c in page.changes}) == 1

            # and the other way round: a reads only b's write
            mine = await a.read_changes(cursor)
            assert seen(mine) == [[(added, "p3", "5")]]
            # caught up: nothing more
            assert (await b.read_changes(page.cursor)).changes == []


async def test_a_lower_seq_that_commits_after_a_higher_one_is_read_not_skipped(
    pg_backend: StoreBackend,
) -> None:
    """The hazard: seq is taken at INSERT; T1 takes 10, T2 takes 11 and commits first."""
    message, count = change_message([pod("late", "1")], ()) or (b"", 0)
    insert = "INSERT INTO changes(writer, records, message) VALUES ('w', %s, %s) RETURNING seq"
    with trio.fail_after(30):
        async with pg_backend.open() as reader:
            cursor = await start(reader)
            with (
                psycopg.connect(pg_backend.url, autocommit=True) as t1,
                psycopg.connect(pg_backend.url, autocommit=True) as t2,
            ):
                t1.execute("BEGIN")
                low = t1.execute(insert, (count, message)).fetchone()
                t2.execute("BEGIN")
                high = t2.execute(insert, (count, message)).fetchone()
                t2.execute("COMMIT")
                assert low is not None
                assert high is not None
                assert low[0] < high[0]

                page = await reader.read_changes(cursor)
                assert [c.seq for c in page.changes] == [high[0]]
                t1.execute("COMMIT")
                page = await reader.read_changes(page.cursor)
                assert [c.seq for c in page.changes] == [low[0]]

                # a rolled-back row never shows and holds nothing back
                t1.execute("BEGIN")
                t1.execute(insert, (count, message))
                t1.execute("ROLLBACK")
                after = t2.execute(insert, (count, message)).fetchone()
                assert after is not None
                page = await reader.read_changes(page.cursor)
                assert [c.seq for c in page.changes] == [after[0]]
                assert not page.lagged


async def test_pages_keep_the_order_and_read_each_change_once(pg_backend: StoreBackend) -> None:
    with trio.fail_after(30):
        async with pg_backend.open() as a, pg_backend.open() as b:
            cursor = await start(b)
            for i in range(7):
                await a.apply_batch(ACCOUNT, [pod(f"p{i}", str(i + 1))])
            seqs: list[int] = []
            more_flags: list[bool] = []
            while True:
                page = await b.read_changes(cursor, 3)
                seqs += [c.seq for c in page.changes]
                more_flags.append(page.more)
                cursor = page.cursor
                if not page.more:
                    break
            assert more_flags == [True, True, False]
            assert len(seqs) == 7
            assert seqs == sorted(seqs)


async def test_trimming_by_rows_and_by_age_and_a_reader_behind_it_is_told(
    pg_backend: StoreBackend,
) -> None:
    with trio.fail_after(30):
        async with pg_backend.open() as a, pg_backend.open() as b:
            behind = await start(b)
            outcomes = [await a.apply_batch(ACCOUNT, [pod(f"p{i}", str(i + 1))]) for i in range(5)]
            assert await a.trim_changes(600_000, 2) == 3  # all young: the row bound cuts
            page = await b.read_changes(behind)
            assert page.lagged  # it had not read what was trimmed
            assert [c.seq for c in page.changes] == [o.change_seq for o in outcomes[3:]]
            # a reader that started after the trim, or read on past it, is not behind
            assert not (await b.read_changes(page.cursor)).lagged
            fresh = await start(b)
            await a.apply_batch(ACCOUNT, [pod("p9", "9")])
            assert not (await b.read_changes(fresh)).lagged

            # by age (the database's clock): rows older than keep_ms go, however few
            pg_backend.sql(
                "UPDATE changes SET at_ms = at_ms - 3600000 WHERE seq <= %s",
                (outcomes[4].change_seq,),
            )
            assert await a.trim_changes(60_000, 1000) == 2
            left = pg_backend.sql("SELECT count(*) FROM changes")
            assert left == [(1,)]
            assert await a.trim_changes(60_000, 1000) == 0


async def test_sqlite_keeps_no_change_log(tmp_path: Path) -> None:
    store_backend = StoreBackend("sqlite", sqlite_url(str(tmp_path / "store.db")))
    with trio.fail_after(10):
        async with store_backend.open() as store:
            cursor = await start(store)
            outcome = await store.apply_batch(ACCOUNT, [pod("p1", "1")])
            assert outcome.change_seq == 0
            page = await store.read_changes(cursor)
            assert page.changes == []
            assert not page.more
            assert not page.lagged
            assert await store.trim_changes(0, 0) == 0
    # the step is there (the versions of both backends stay in step), empty
    assert store_backend.sql("SELECT count(*) FROM changes") == [(0,)]


async def test_get_objects_by_keys(store_backend: StoreBackend) -> None:
    with trio.fail_after(20):
        async with store_backend.open() as store:
            await store.apply_batch(ACCOUNT, [pod("p1", "1"), pod("p2", "2")])
            found = await store.get_objects(
                [
                    (ACCOUNT, "v1", "POD", "ns", "p1"),  # the kind in any case
                    (ACCOUNT, "", "pod", "ns", "p2"),  # a group, not an apiVersion
                    (ACCOUNT, "v1", "Pod", "ns", "absent"),
                ]
            )
            assert sorted((o.name, o.resource_version) for o in found) == [
                ("p1", "1"),
                ("p2", "2"),
            ]
            assert all(o.body.startswith(b"{") for o in found)
            assert await store.get_objects([]) == []
