"""The store on both backends (the ``store_backend`` fixture: SQLite and PostgreSQL): batches,
sync brackets, resume points, queries, Secrets, migrations; then SQLite's own write-ahead log."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import apsw
import pytest
import trio

from server import InvalidQuery, InvalidRecord, SchemaError, StoreClosed, StoreError
from server.store import (
    AccountRecord,
    AccountState,
    OperationRecord,
    SqliteStore,
    open_sqlite_store,
)
from server.store._checkpointer import WalCheckpointer
from tests.server._stores import StoreBackend
from wire import EventRecord, EventType

ACCOUNT = "prod"


def obj(
    name: str,
    *,
    namespace: str = "default",
    kind: str = "Pod",
    api_version: str = "v1",
    rv: str = "1",
    labels: dict[str, str] | None = None,
    etype: EventType = EventType.ADDED,
    account: str = ACCOUNT,
    extra: dict[str, object] | None = None,
) -> EventRecord:
    body = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "labels": labels or {},
        },
        **(extra or {}),
    }
    return EventRecord(
        int(etype),
        account,
        api_version,
        kind,
        namespace,
        name,
        f"uid-{name}",
        rv,
        json.dumps(body).encode(),
        "",  # a cluster-wide watch
    )


def marker(
    etype: EventType, *, kind: str = "Pod", api_version: str = "v1", rv: str = "", scope: str = ""
) -> EventRecord:
    return EventRecord(int(etype), ACCOUNT, api_version, kind, "", "", "", rv, b"", scope)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


async def test_upsert_get_delete_in_order(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            out = await store.apply_batch(
                ACCOUNT, [obj("a"), obj("b"), obj("a", rv="2", etype=EventType.MODIFIED)]
            )
            assert (out.upserted, out.deleted) == (3, 0)
            a = await store.get_object(ACCOUNT, "v1", "pod", "default", "a")
            assert a is not None
            assert a.resource_version == "2"
            assert a.group == ""
            assert json.loads(a.body)["metadata"]["name"] == "a"
            # delete then re-add inside one batch keeps the order
            await store.apply_batch(ACCOUNT, [obj("b", etype=EventType.DELETED), obj("b", rv="5")])
            b = await store.get_object(ACCOUNT, "", "Pod", "default", "b")
            assert b is not None
            assert b.resource_version == "5"
            await store.apply_batch(ACCOUNT, [obj("b", etype=EventType.DELETED)])
            assert await store.get_object(ACCOUNT, "v1", "Pod", "default", "b") is None
            assert await store.count_objects(ACCOUNT) == 1


async def test_group_not_version_is_the_key(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            await store.apply_batch(ACCOUNT, [obj("d", kind="Deployment", api_version="apps/v1")])
            for ref in ("apps", "apps/v1", "apps/v1beta2"):
                found = await store.get_object(ACCOUNT, ref, "deployment", "default", "d")
                assert found is not None
                assert found.api_version == "apps/v1"
            assert await store.get_object(ACCOUNT, "v1", "Deployment", "default", "d") is None


async def test_sync_bracket_deletes_objects_not_seen(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            await store.apply_batch(
                ACCOUNT,
                [obj("old1"), obj("keep"), obj("old2", namespace="x"), obj("svc", kind="Service")],
            )
            out = await store.apply_batch(
                ACCOUNT, [marker(EventType.SYNC_BEGIN), obj("keep", rv="7"), obj("new", rv="8")]
            )
            assert out.swept == ()
            out = await store.apply_batch(ACCOUNT, [marker(EventType.SYNC_END, rv="9")])
            assert sorted(r.name for r in out.swept) == ["old1", "old2"]
            page = await store.query_objects(account=ACCOUNT)
            assert sorted(o.name for o in page.objects) == ["keep", "new", "svc"]


async def test_namespaced_sync_scope_only_touches_its_namespace(
    store_backend: StoreBackend,
) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            await store.apply_batch(ACCOUNT, [obj("a", namespace="n1"), obj("b", namespace="n2")])
            out = await store.apply_batch(
                ACCOUNT,
                [marker(EventType.SYNC_BEGIN, scope="n1"), marker(EventType.SYNC_END, scope="n1")],
            )
            assert [r.name for r in out.swept] == ["a"]
            assert await store.get_object(ACCOUNT, "v1", "Pod", "n2", "b") is not None


async def test_sync_end_without_begin_sweeps_nothing(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            await store.apply_batch(ACCOUNT, [obj("a")])
            out = await store.apply_batch(ACCOUNT, [marker(EventType.SYNC_END, rv="3")])
            assert out.swept == ()
            assert await store.count_objects() == 1


async def test_resume_points_follow_watch_positions_not_list_items(
    store_backend: StoreBackend,
) -> None:
    clock = Clock()
    with trio.fail_after(10):
        async with store_backend.open(now_ms=clock) as store:
            await store.apply_batch(ACCOUNT, [marker(EventType.SYNC_BEGIN), obj("a", rv="50")])
            assert await store.resume_points(ACCOUNT) == []  # bracket open: no resume point
            clock.ms += 10
            await store.apply_batch(ACCOUNT, [marker(EventType.SYNC_END, rv="60")])
            (point,) = await store.resume_points(ACCOUNT)
            assert (point.kind, point.scope, point.resource_version) == ("Pod", "", "60")
            assert point.age_ms(clock.ms + 5) == 5
            bookmark = EventRecord(
                int(EventType.BOOKMARK), ACCOUNT, "v1", "Pod", "", "", "", "75", b"", ""
            )
            await store.apply_batch(ACCOUNT, [obj("b", rv="70"), bookmark])
            (point,) = await store.resume_points(ACCOUNT)
            assert point.resource_version == "75"
            # a new listing withdraws the resume point until it ends
            await store.apply_batch(ACCOUNT, [marker(EventType.SYNC_BEGIN)])
            assert await store.resume_points(ACCOUNT) == []


async def test_secret_data_is_never_stored(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            secret = obj(
                "s",
                kind="Secret",
                extra={"data": {"password": "aHVudGVyMg=="}, "stringData": {"x": "y"}},
            )
            await store.apply_batch(ACCOUNT, [secret])
            stored = await store.get_object(ACCOUNT, "v1", "Secret", "default", "s")
            assert stored is not None
            body = json.loads(stored.body)
            assert "data" not in body
            assert "stringData" not in body
            assert b"aHVudGVyMg" not in stored.body
            garbage = EventRecord(
                int(EventType.ADDED),
                ACCOUNT,
                "v1",
                "Secret",
                "default",
                "g",
                "u",
                "1",
                b"not json data=hunter2",
                "",
            )
            await store.apply_batch(ACCOUNT, [garbage])
            stored = await store.get_object(ACCOUNT, "v1", "Secret", "default", "g")
            assert stored is not None
            assert b"hunter2" not in stored.body


async def test_bad_record_rolls_back_the_whole_batch(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            bad = EventRecord(
                int(EventType.ADDED),
                ACCOUNT,
                "v1",
                "Pod",
                "default",
                "bad",
                "u",
                "1",
                b"{not json",
                "",
            )
            with pytest.raises(InvalidRecord, match=r"record 2 .*not valid"):
                await store.apply_batch(ACCOUNT, [marker(EventType.SYNC_BEGIN), obj("a"), bad])
            with pytest.raises(InvalidRecord, match="not 'prod'"):
                await store.apply_batch(ACCOUNT, [obj("x", account="other")])
            assert await store.count_objects() == 0
            # the rolled-back SYNC_BEGIN left no open bracket behind
            await store.apply_batch(ACCOUNT, [obj("b"), marker(EventType.SYNC_END)])
            assert await store.count_objects() == 1


async def test_query_pages_and_label_selectors(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            records = [
                obj(f"p{i:02}", labels={"app": "web" if i % 2 else "db", "tier": str(i % 3)})
                for i in range(25)
            ]
            await store.apply_batch(ACCOUNT, records)
            names: list[str] = []
            token = None
            while True:
                page = await store.query_objects(
                    account=ACCOUNT, kind="pod", limit=10, continue_token=token
                )
                names += [o.name for o in page.objects]
                if page.next_token is None:
                    break
                token = page.next_token
            assert names == sorted(r.name for r in records)
            web = await store.query_objects(label_selector="app=web,tier in (0, 1)")
            assert {o.name for o in web.objects} == {
                f"p{i:02}" for i in range(25) if i % 2 and i % 3 in (0, 1)
            }
            not_db = await store.query_objects(label_selector="app!=db,!missing")
            assert len(not_db.objects) == 12
            with pytest.raises(InvalidQuery, match="label selector"):
                await store.query_objects(label_selector="app=(")
            with pytest.raises(InvalidQuery, match="continue token"):
                await store.query_objects(continue_token="garbage!")
            with pytest.raises(InvalidQuery, match="limit"):
                await store.query_objects(limit=0)


async def test_accounts_roundtrip_and_delete_cascades(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            record = AccountRecord(
                name=ACCOUNT,
                kube_host="10.0.0.1:6443",
                cert_fingerprint="ab",
                status=AccountState.ACTIVE,
                permissions={"READ": ["dev"]},
                properties={"kinds": ["pod"]},
                orphaned_at_ms=None,
            )
            await store.upsert_account(record)
            got = await store.get_account(ACCOUNT)
            assert got is not None
            assert got.permissions == {"READ": ["dev"]}
            assert got.status is AccountState.ACTIVE
            await store.apply_batch(ACCOUNT, [obj("a"), marker(EventType.SYNC_BEGIN)])
            assert await store.delete_account(ACCOUNT)
            assert not await store.delete_account(ACCOUNT)
            assert await store.list_accounts() == []
            assert await store.count_objects() == 0
            assert await store.resume_points(ACCOUNT) == []


async def test_operations_and_history(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            op = OperationRecord(id="op1", account=ACCOUNT, type="deployManifest")
            await store.record_operation(op, "sent")
            await store.record_operation(
                OperationRecord(
                    id="op1", account=ACCOUNT, type="deployManifest", state="DONE", result_json="{}"
                ),
                "ok",
            )
            got = await store.get_operation("op1")
            assert got is not None
            assert got.state == "DONE"
            assert [e.state for e in await store.operation_history("op1")] == ["PENDING", "DONE"]
            assert [o.id for o in await store.list_operations(ACCOUNT)] == ["op1"]


async def test_an_operations_end_is_written_once(store_backend: StoreBackend) -> None:
    """Two replicas may end one dispatched operation (the target wrote the agent's result, the
    origin gave up a moment before): the first end stays, the second reaches the history."""
    with trio.fail_after(10):
        async with store_backend.open() as store:
            op = OperationRecord(id="op2", account=ACCOUNT, type="deployManifest")
            await store.record_operation(op, "received")
            await store.record_operation(
                OperationRecord(
                    id="op2", account=ACCOUNT, type="deployManifest", state="FAILED", error_code="T"
                ),
                "failed: no result in time",
            )
            await store.record_operations(
                [
                    (
                        OperationRecord(
                            id="op2", account=ACCOUNT, type="deployManifest", state="SUCCEEDED"
                        ),
                        "result received",
                    )
                ]
            )
            got = await store.get_operation("op2")
            assert got is not None
            assert (got.state, got.error_code) == ("FAILED", "T")
            history = await store.operation_history("op2")
            assert [e.state for e in history] == ["PENDING", "FAILED", "SUCCEEDED"]


async def test_reopening_keeps_objects_brackets_and_resume_points(
    store_backend: StoreBackend,
) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            await store.apply_batch(
                ACCOUNT, [obj("gone"), marker(EventType.SYNC_BEGIN), obj("kept")]
            )
        async with store_backend.open() as store:
            out = await store.apply_batch(ACCOUNT, [marker(EventType.SYNC_END, rv="10")])
            assert [r.name for r in out.swept] == ["gone"]
            assert [p.resource_version for p in await store.resume_points(ACCOUNT)] == ["10"]
    versions = [v for (v,) in store_backend.sql("SELECT version FROM schema_version")]
    assert versions == [m.version for m in store_backend.migrations]


async def test_a_sqlite_file_is_in_wal_mode(tmp_path: Path) -> None:
    path = str(tmp_path / "cache.db")
    with trio.fail_after(10):
        async with open_sqlite_store(path):
            pass
    # apsw, the store's own SQLite: two copies of SQLite in one process on one file undo
    # each other's locks (sqlite.org/howtocorrupt.html, 2.2.1).
    conn = apsw.Connection(path)
    try:
        assert conn.execute("PRAGMA journal_mode").get == "wal"
    finally:
        conn.close()


async def test_closing_a_store_no_call_used_closes_its_connection(tmp_path: Path) -> None:
    """The writer's connection is closed by ``aclose`` itself, the log copied into the file
    and removed, even when no call ever ran on it (it was left to the garbage collector)."""
    path = tmp_path / "cache.db"
    with trio.fail_after(10):
        async with open_sqlite_store(str(path)) as store:
            assert (tmp_path / "cache.db-wal").exists()
        # The store is still referenced here: only its own close can have closed the file.
        assert store is not None
        assert sorted(p.name for p in await trio.Path(tmp_path).iterdir()) == ["cache.db"]


async def test_a_newer_schema_is_refused(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open():
            pass
    mark = "?" if store_backend.name == "sqlite" else "%s"
    store_backend.sql(f"INSERT INTO schema_version VALUES ({mark}, 0, 'from the future')", (99,))
    with trio.fail_after(10), pytest.raises(SchemaError, match="version 99"):
        async with store_backend.open():
            pass


async def test_a_refused_sqlite_open_closes_its_connection(tmp_path: Path) -> None:
    """An open that fails after the file was opened (here: a newer schema) closes it before
    raising, not whenever the half-made store is collected."""
    path = tmp_path / "cache.db"
    with trio.fail_after(10):
        async with open_sqlite_store(str(path)):
            pass
    conn = apsw.Connection(str(path))
    conn.execute("INSERT INTO schema_version VALUES (99, 0, 'from the future')")
    conn.close()
    with trio.fail_after(10), pytest.raises(SchemaError, match="version 99") as refused:
        async with open_sqlite_store(str(path)):
            pass
    # The traceback still holds the half-made store: only the open itself can have closed it.
    assert refused.tb is not None
    assert sorted(p.name for p in await trio.Path(tmp_path).iterdir()) == ["cache.db"]


async def test_replicas_starting_together_migrate_once(store_backend: StoreBackend) -> None:
    # Four servers opening one new database at the same moment: each step is applied by
    # exactly one of them (SQLite: under BEGIN IMMEDIATE; PostgreSQL: under an advisory
    # lock in the step's transaction), and all four end up open and usable.
    opened = 0

    async def replica(name: str) -> None:
        nonlocal opened
        async with store_backend.open() as store:
            opened += 1
            await store.apply_batch(ACCOUNT, [obj(name)])

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for i in range(4):
                nursery.start_soon(replica, f"r{i}")
        async with store_backend.open() as store:
            assert await store.count_objects(ACCOUNT) == 4
    assert opened == 4
    versions = [v for (v,) in store_backend.sql("SELECT version FROM schema_version")]
    assert versions == [m.version for m in store_backend.migrations]


async def test_closed_store_refuses_calls(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            pass
        with pytest.raises(StoreClosed):
            await store.count_objects()


async def test_an_open_bracket_in_one_namespace_does_not_freeze_the_others(
    store_backend: StoreBackend,
) -> None:
    # An agent that died mid-list in namespace "a" (and then stopped watching it) leaves that
    # bracket open; namespace "b" of the same kind must keep advancing its resume point.
    def in_b(name: str, rv: str) -> EventRecord:
        record = obj(name, namespace="b", rv=rv)
        return EventRecord(
            record.type,
            record.account,
            record.api_version,
            record.kind,
            record.namespace,
            record.name,
            record.uid,
            record.resource_version,
            record.object,
            "b",
        )

    with trio.fail_after(10):
        async with store_backend.open() as store:
            await store.apply_batch(ACCOUNT, [marker(EventType.SYNC_BEGIN, scope="a")])
            await store.apply_batch(
                ACCOUNT,
                [
                    marker(EventType.SYNC_BEGIN, scope="b"),
                    in_b("x", "10"),
                    marker(EventType.SYNC_END, rv="10", scope="b"),
                ],
            )
            await store.apply_batch(ACCOUNT, [in_b("y", "20")])
            points = {p.scope: p.resource_version for p in await store.resume_points(ACCOUNT)}
            assert points == {"b": "20"}


@pytest.mark.parametrize("writers", [1, 8])
async def test_the_write_ahead_log_stays_under_its_bound(tmp_path: Path, writers: int) -> None:
    # The checkpointer copies commits into the file from its own thread; a writer that
    # outruns it waits at the bound, and the log rewinds instead of growing with the data.
    # Several writers (sessions) at once are admitted one after the other.
    path = str(tmp_path / "cache.db")
    bound = 256 * 1024
    pad: dict[str, object] = {"status": {"pad": "x" * 4000}}
    wal = trio.Path(path + "-wal")
    largest = 0

    async def write(store: SqliteStore, first: int) -> None:
        nonlocal largest
        for batch in range(first, 40, writers):
            await store.apply_batch(
                ACCOUNT, [obj(f"p{batch}-{i}", rv=str(batch), extra=pad) for i in range(40)]
            )
            largest = max(largest, (await wal.stat()).st_size)

    with trio.fail_after(30):
        async with open_sqlite_store(path) as store, trio.open_nursery() as upkeep:
            await upkeep.start(functools.partial(store.run_upkeep, max_wal_bytes=bound))
            async with trio.open_nursery() as nursery:
                for first in range(writers):  # ~6.4 MB of objects, 25 times the bound
                    nursery.start_soon(write, store, first)
            assert await store.count_objects(ACCOUNT) == 1600
            upkeep.cancel_scope.cancel()
        # The bound plus a transaction or two (each ~375 KB of frames here: 40 objects that
        # each fill an overflow page, and their view index rows (pods), estimated from their
        # ~250 KB (JSON and rows)), where an unchecked log would have held all ~6.4 MB.
        assert largest < bound + 2 * 410 * 1024
        async with open_sqlite_store(path) as store:
            assert await store.count_objects(ACCOUNT) == 1600
            got = await store.get_object(ACCOUNT, "v1", "Pod", "default", "p39-39")
            assert got is not None
            assert json.loads(got.body)["status"]["pad"] == "x" * 4000


async def test_a_log_over_its_bound_with_failing_checkpoints_refuses_writes(
    tmp_path: Path,
) -> None:
    # A checkpointer whose passes fail (here it cannot open its file) must not let the log
    # grow without a bound: after MAX_FAILURES passes in a row, a write over it fails. Once
    # it has stopped (SQLite checkpoints by itself again), writers go ahead.
    checkpointer = WalCheckpointer(str(tmp_path / "missing" / "cache.db"), 4096, max_log_bytes=1)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(checkpointer.run)
            await checkpointer.admit()  # an empty log is under any bound
            checkpointer.committed(4096)
            with pytest.raises(StoreError, match=r"the last 3 checkpoints failed: .*"):
                await checkpointer.admit()
            nursery.cancel_scope.cancel()
        await checkpointer.admit()


async def test_an_error_leaving_the_store_block_keeps_its_cause(tmp_path: Path) -> None:
    # The store's nursery (its checkpointer) must not show up around, or rewrite the chain
    # of, what the caller's own block raised.
    async def fail_inside() -> None:
        async with open_sqlite_store(str(tmp_path / "cache.db")):
            try:
                int("not a number")
            except ValueError as exc:
                raise StoreError("wrapped") from exc

    with trio.fail_after(10), pytest.raises(StoreError) as caught:
        await fail_inside()
    assert isinstance(caught.value.__cause__, ValueError)


def job(uid: str, rv: str, etype: EventType = EventType.MODIFIED) -> EventRecord:
    """Job ``migrate`` as the object of one uid (the same name deleted and created again)."""
    meta = {"name": "migrate", "namespace": "default", "uid": uid, "resourceVersion": rv}
    body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta}
    return EventRecord(
        int(etype), ACCOUNT, "batch/v1", "Job", "default", "migrate", uid, rv,
        json.dumps(body).encode(), "",
    )  # fmt: skip


async def test_a_deletion_removes_only_the_object_of_its_uid(
    store_backend: StoreBackend,
) -> None:
    async def stored_uid() -> str | None:
        found = await store.get_object(ACCOUNT, "batch", "Job", "default", "migrate")
        return None if found is None else found.uid

    with trio.fail_after(10):
        async with store_backend.open() as store:
            # The watch saw Job A; an operation deleted it and ran Job B under the same name,
            # and its result reached the cache before the watch's late DELETED of A.
            await store.apply_batch(ACCOUNT, [job("a", "10", EventType.ADDED)])
            await store.apply_operation_objects([job("b", "20", EventType.ADDED)])
            assert await stored_uid() == "b"
            await store.apply_batch(ACCOUNT, [job("a", "15", EventType.DELETED)])
            assert await stored_uid() == "b"  # A's deletion says nothing about B
            await store.apply_batch(ACCOUNT, [job("b", "20", EventType.ADDED)])
            assert await stored_uid() == "b"
            # B's own deletion removes it, in the same batch as a late one of A, too.
            await store.apply_batch(
                ACCOUNT, [job("a", "15", EventType.DELETED), job("b", "30", EventType.DELETED)]
            )
            assert await stored_uid() is None
            # An unknown uid on either side deletes by name, as before.
            await store.apply_batch(ACCOUNT, [job("c", "40", EventType.ADDED)])
            await store.apply_batch(ACCOUNT, [job("", "41", EventType.DELETED)])
            assert await stored_uid() is None
            await store.apply_batch(ACCOUNT, [job("", "42", EventType.ADDED)])
            await store.apply_batch(ACCOUNT, [job("d", "43", EventType.DELETED)])
            assert await stored_uid() is None
