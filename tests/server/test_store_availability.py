"""What the agent may see, in the store on both backends: a kind marked unavailable loses its
objects and resume points in its scope, a SYNC_END or an "available" entry clears the mark,
and a narrower WatchScope removes what is outside it (server/store/_availability.py)."""

from __future__ import annotations

import trio

from server.store import AccountRecord, AccountScope, KindChange, ObjectRef, Store
from tests.server._stores import StoreBackend
from wire import EventType

from .test_store import ACCOUNT, Clock, marker, obj

FORBIDDEN = '403 Forbidden: pods is forbidden: User "agent" cannot list resource "pods"'


def forbidden(scope: str = "", *, kind: str = "Pod", api_version: str = "v1") -> KindChange:
    return KindChange(ACCOUNT, api_version, kind, scope, False, 403, FORBIDDEN)


def available(scope: str = "", *, kind: str = "Pod", api_version: str = "v1") -> KindChange:
    return KindChange(ACCOUNT, api_version, kind, scope, True)


async def names(store: Store, kind: str | None = None) -> set[tuple[str, str, str]]:
    page = await store.query_objects(account=ACCOUNT, kind=kind, limit=1000)
    return {(o.kind, o.namespace, o.name) for o in page.objects}


async def test_unavailable_kind_loses_its_objects_and_resume_points(
    store_backend: StoreBackend,
) -> None:
    clock = Clock()
    with trio.fail_after(10):
        async with store_backend.open(now_ms=clock) as store:
            await store.apply_events(
                [
                    obj("p1", rv="5"),
                    obj("p2", namespace="other", rv="6"),
                    obj("svc", kind="Service", rv="7"),
                    obj("other-account", account="elsewhere"),
                ]
            )
            assert {p.kind for p in await store.resume_points(ACCOUNT)} == {"Pod", "Service"}
            outcome = await store.apply_kind_changes([forbidden()])
            assert sorted(outcome.swept, key=lambda r: r.name) == [
                ObjectRef(ACCOUNT, "v1", "Pod", "default", "p1"),
                ObjectRef(ACCOUNT, "v1", "Pod", "other", "p2"),
            ]
            [mark] = outcome.marked
            assert (mark.kind, mark.scope, mark.code, mark.reason) == ("Pod", "", 403, FORBIDDEN)
            assert mark.since_ms == clock.ms
            assert mark.forbidden
            assert await names(store) == {("Service", "default", "svc")}
            # Its resume point is gone: when the kind comes back it is listed, not resumed.
            assert {p.kind for p in await store.resume_points(ACCOUNT)} == {"Service"}
            assert await store.unavailable_kinds(ACCOUNT) == [mark]
            assert await store.unavailable_kinds() == [mark]
            assert await store.unavailable_kinds("elsewhere") == []
            assert await store.count_objects("elsewhere") == 1

            # The same again (a new session's reflector meets the 403 too): nothing new.
            clock.ms += 5000
            again = await store.apply_kind_changes([forbidden()])
            assert (again.swept, again.marked, again.cleared) == ((), (), ())
            assert (await store.unavailable_kinds(ACCOUNT))[0].since_ms == mark.since_ms
            # Another reason is news (logged again), the first time it was marked stays.
            other = KindChange(ACCOUNT, "v1", "pod", "", False, 404, "404 NotFound: gone")
            [changed] = (await store.apply_kind_changes([other])).marked
            assert (changed.code, changed.since_ms) == (404, mark.since_ms)

            cleared = await store.apply_kind_changes([available()])
            assert [m.kind for m in cleared.cleared] == ["pod"]
            assert await store.unavailable_kinds(ACCOUNT) == []
            # Available for a kind with no mark: nothing to clear.
            assert (await store.apply_kind_changes([available(kind="Service")])).cleared == ()


async def test_a_namespace_scope_is_marked_alone(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            await store.apply_batch(
                ACCOUNT,
                [
                    obj("a1", namespace="a"),
                    obj("b1", namespace="b"),
                    marker(EventType.BOOKMARK, rv="9", scope="a"),
                    marker(EventType.BOOKMARK, rv="9", scope="b"),
                ],
            )
            outcome = await store.apply_kind_changes([forbidden("b")])
            assert [r.name for r in outcome.swept] == ["b1"]
            assert await names(store) == {("Pod", "a", "a1")}
            # (the objects' own events stored a cluster-wide point: another watch, kept)
            assert {p.scope for p in await store.resume_points(ACCOUNT)} == {"", "a"}
            [mark] = await store.unavailable_kinds(ACCOUNT)
            assert mark.scope == "b"
            assert mark.covers("", "pod", "b")
            assert mark.covers(None, "Pod", "b")
            assert not mark.covers("", "pod", "a")
            assert not mark.covers("apps", "pod", "b")


async def test_a_completed_listing_clears_the_mark(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            await store.apply_kind_changes([forbidden(), forbidden("a", kind="ConfigMap")])
            # A listing that began is not enough: only its end shows the kind readable.
            begun = await store.apply_batch(ACCOUNT, [marker(EventType.SYNC_BEGIN), obj("p")])
            assert begun.restored == ()
            assert len(await store.unavailable_kinds(ACCOUNT)) == 2
            ended = await store.apply_batch(ACCOUNT, [marker(EventType.SYNC_END, rv="10")])
            assert [(m.kind, m.scope) for m in ended.restored] == [("Pod", "")]
            assert [m.kind for m in await store.unavailable_kinds(ACCOUNT)] == ["ConfigMap"]
            assert await names(store) == {("Pod", "default", "p")}


async def test_a_narrower_scope_removes_what_is_outside(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            await store.apply_batch(
                ACCOUNT,
                [
                    obj("a1", namespace="a"),
                    obj("b1", namespace="b"),
                    obj("c1", namespace="c"),
                    obj("cm", kind="ConfigMap", namespace="a"),
                    obj("d", kind="Deployment", api_version="apps/v1", namespace="a"),
                    obj("n1", kind="Node", namespace=""),
                    obj("w", kind="Widget", api_version="example.com/v1", namespace="a"),
                    marker(EventType.BOOKMARK, rv="3", scope="b"),
                    marker(EventType.BOOKMARK, rv="3", scope="a"),
                    marker(EventType.BOOKMARK, rv="3", kind="Node"),
                    marker(EventType.BOOKMARK, rv="3", kind="ConfigMap", scope="a"),
                ],
            )
            await store.apply_kind_changes([forbidden("b"), forbidden(kind="Widget")])
            scope = AccountScope(
                ACCOUNT,
                kinds=(("v1", "Pod"), ("apps/v1", "deployment"), ("v1", "Node")),
                namespaces=("a", "c"),
                omit_namespaces=("c",),
            )
            outcome = await store.apply_account_scope(scope)
            assert sorted((r.kind, r.name) for r in outcome.swept) == [
                ("ConfigMap", "cm"),
                ("Pod", "c1"),
                ("Widget", "w"),
            ]
            assert await names(store) == {
                ("Pod", "a", "a1"),
                ("Deployment", "a", "d"),
                ("Node", "", "n1"),
            }
            points = {(p.kind, p.scope) for p in await store.resume_points(ACCOUNT)}
            # (the objects' own events stored cluster-wide points: "" is never out of scope)
            assert points == {("Pod", "a"), ("Pod", ""), ("Deployment", ""), ("Node", "")}
            # Marks outside the scope go with it (Widget no longer watched, namespace b not).
            assert sorted((m.kind, m.scope) for m in outcome.dropped) == [
                ("Pod", "b"),
                ("Widget", ""),
            ]
            assert await store.unavailable_kinds(ACCOUNT) == []
            # The same scope again removes nothing more.
            again = await store.apply_account_scope(scope)
            assert (again.swept, again.dropped) == ((), ())


async def test_deleting_the_account_drops_its_marks(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            await store.upsert_account(AccountRecord(ACCOUNT))
            await store.apply_kind_changes([forbidden()])
            assert await store.delete_account(ACCOUNT)
            assert await store.unavailable_kinds() == []


async def test_another_replica_reads_the_removals_in_the_change_log(
    pg_backend: StoreBackend,
) -> None:
    # Several replicas (PostgreSQL): the objects a KindStatus or a WatchScope removed reach
    # the other replicas' feeds through the change log; the mark is read by any of them.
    with trio.fail_after(30):
        async with pg_backend.open() as a, pg_backend.open() as b:
            await a.apply_batch(ACCOUNT, [obj("p1"), obj("cm", kind="ConfigMap", namespace="x")])
            cursor = (await b.read_changes(None)).cursor
            marked = await a.apply_kind_changes([forbidden()])
            scoped = await a.apply_account_scope(AccountScope(ACCOUNT, (("v1", "Pod"),)))
            nothing = await a.apply_account_scope(AccountScope(ACCOUNT, (("v1", "Pod"),)))
            assert nothing.change_seq == 0  # nothing removed: no row
            page = await b.read_changes(cursor)
            assert [c.seq for c in page.changes] == [marked.change_seq, scoped.change_seq]
            assert [[r.name for r in c.swept] for c in page.changes] == [["p1"], ["cm"]]
            assert [c.records for c in page.changes] == [(), ()]
            assert [m.kind for m in await b.unavailable_kinds(ACCOUNT)] == ["Pod"]
