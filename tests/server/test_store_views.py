"""The view index on both backends (the ``store_backend`` fixture: SQLite and PostgreSQL): kept
with the objects on ingest, on operation results and through every kind of deletion; read
by role and application, by owner, by namespace; searched; built once for an older database."""

from __future__ import annotations

import json
from typing import Any

import trio

from server.store import SearchRequest, ViewQuery, ViewRow
from tests.server._stores import StoreBackend
from wire import EventRecord, EventType

ACCOUNT = "prod"
APP = "moniker.spinnaker.io/application"
CLUSTER = "moniker.spinnaker.io/cluster"


def rec(
    kind: str,
    name: str,
    *,
    api: str = "v1",
    ns: str = "shop",
    annotations: dict[str, str] | None = None,
    owner: tuple[str, str] | None = None,
    rv: str = "1",
    etype: EventType = EventType.ADDED,
    account: str = ACCOUNT,
    spec: dict[str, Any] | None = None,
    scope: str = "",
) -> EventRecord:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{name}",
                            "resourceVersion": rv}  # fmt: skip
    if annotations:
        meta["annotations"] = annotations
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True,
                                    "uid": f"uid-{owner[1]}", "apiVersion": "apps/v1"}]  # fmt: skip
    body = {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec or {}}
    return EventRecord(int(etype), account, api, kind, ns, name, f"uid-{name}", rv,
                       json.dumps(body).encode(), scope)  # fmt: skip


def shop() -> list[EventRecord]:
    notes = {APP: "shop", CLUSTER: "deployment shop-web"}
    return [
        rec("Deployment", "shop-web", api="apps/v1", annotations=notes),
        rec("ReplicaSet", "shop-web-a1", api="apps/v1", annotations=notes,
            owner=("Deployment", "shop-web")),
        rec("ReplicaSet", "shop-web-b2", api="apps/v1", annotations=notes,
            owner=("Deployment", "shop-web")),
        rec("Pod", "shop-web-a1-x", owner=("ReplicaSet", "shop-web-a1")),
        rec("Pod", "shop-web-a1-y", owner=("ReplicaSet", "shop-web-a1")),
        rec("Pod", "shop-web-b2-z", owner=("ReplicaSet", "shop-web-b2")),
        rec("Service", "shop-web", spec={"selector": {"app": "web"}}),
        rec("Service", "other-svc", ns="shop"),  # app "other", in the same namespace
        rec("Service", "far-svc", ns="elsewhere"),
        rec("NetworkPolicy", "shop-db-access", api="networking.k8s.io/v1"),
        rec("ConfigMap", "shop-config"),  # not shown: no row
        rec("StatefulSet", "shop-db-v002", api="apps/v1"),  # Frigga: app shop, cluster shop-db
    ]  # fmt: skip


def names(rows: list[ViewRow]) -> list[str]:
    return sorted(f"{r.kind} {r.name}" for r in rows)


async def test_ingest_indexes_the_views_kinds(store_backend: StoreBackend) -> None:
    with trio.fail_after(30):
        async with store_backend.open() as store:
            await store.apply_batch(ACCOUNT, shop())
            sgs = ViewQuery(roles=("serverGroups",), app="shop")
            (clusters, groups, pods, near, linked, lean) = await store.read_views([
                ViewQuery(roles=("serverGroups", "serverGroupManagers"), clusters=True),
                sgs,
                ViewQuery(roles=("instances",), owned_by=sgs),
                ViewQuery(kinds=("Service",), near=sgs),
                ViewQuery(roles=("serverGroups", "serverGroupManagers", "loadBalancers",
                                 "securityGroups"), app="shop", bodies=False),
                ViewQuery(roles=("instances",), bodies=False, limit=2),
            ])  # fmt: skip
    assert [(r.app, r.account, r.cluster) for r in clusters] == [
        ("shop", ACCOUNT, "deployment shop-web"),
        ("shop", ACCOUNT, "shop-db"),
    ]
    assert names(groups) == [
        "ReplicaSet shop-web-a1",
        "ReplicaSet shop-web-b2",
        "StatefulSet shop-db-v002",
    ]
    rs = next(r for r in groups if r.name == "shop-web-a1")
    assert (rs.group, rs.role, rs.app, rs.cluster) == (
        "apps", "serverGroups", "shop", "deployment shop-web",
    )  # fmt: skip
    assert (rs.owner_kind, rs.owner_name) == ("deployment", "shop-web")
    assert json.loads(rs.body)["metadata"]["name"] == "shop-web-a1"
    assert (rs.api_version, rs.uid, rs.resource_version) == ("apps/v1", "uid-shop-web-a1", "1")
    assert names(pods) == ["Pod shop-web-a1-x", "Pod shop-web-a1-y", "Pod shop-web-b2-z"]
    assert names(near) == ["Service other-svc", "Service shop-web"]  # not far-svc
    assert names(linked) == [
        "Deployment shop-web",
        "NetworkPolicy shop-db-access",
        "ReplicaSet shop-web-a1",
        "ReplicaSet shop-web-b2",
        "Service shop-web",
        "StatefulSet shop-db-v002",
    ]
    assert all(r.body == b"" for r in linked)
    assert len(lean) == 2


async def test_every_deletion_takes_the_row_along(store_backend: StoreBackend) -> None:
    pods = ViewQuery(roles=("instances",), bodies=False)
    with trio.fail_after(30):
        async with store_backend.open() as store:
            await store.apply_batch(ACCOUNT, shop())
            # A watch's DELETED, in the same batch as an update of another pod.
            await store.apply_batch(ACCOUNT, [
                rec("Pod", "shop-web-a1-x", etype=EventType.DELETED, rv="2",
                    owner=("ReplicaSet", "shop-web-a1")),
                rec("Pod", "shop-web-a1-y", etype=EventType.MODIFIED, rv="3",
                    owner=("ReplicaSet", "shop-web-a1")),
            ])  # fmt: skip
            (after_delete,) = await store.read_views([pods])
            # A relist that no longer sees shop-web-b2-z sweeps it.
            await store.apply_batch(ACCOUNT, [
                EventRecord(int(EventType.SYNC_BEGIN), ACCOUNT, "v1", "Pod", "", "", "", "",
                            b"", ""),
                rec("Pod", "shop-web-a1-y", etype=EventType.MODIFIED, rv="4",
                    owner=("ReplicaSet", "shop-web-a1")),
                EventRecord(int(EventType.SYNC_END), ACCOUNT, "v1", "Pod", "", "", "", "5",
                            b"", ""),
            ])  # fmt: skip
            (after_sweep,) = await store.read_views([pods])
            # An operation's delete.
            await store.apply_operation_objects([
                rec("Service", "shop-web", etype=EventType.DELETED, rv="6"),
            ])  # fmt: skip
            (services,) = await store.read_views([ViewQuery(kinds=("Service",), bodies=False)])
            # The account's removal.
            await store.delete_account(ACCOUNT)
            (left,) = await store.read_views([ViewQuery(bodies=False)])
    assert names(after_delete) == ["Pod shop-web-a1-y", "Pod shop-web-b2-z"]
    assert names(after_sweep) == ["Pod shop-web-a1-y"]
    assert names(services) == ["Service far-svc", "Service other-svc"]
    assert left == []


async def test_a_changed_moniker_moves_the_object(store_backend: StoreBackend) -> None:
    moved = {APP: "store", CLUSTER: "replicaSet store-api"}
    with trio.fail_after(30):
        async with store_backend.open() as store:
            await store.apply_batch(ACCOUNT, shop())
            await store.apply_batch(ACCOUNT, [
                rec("ReplicaSet", "shop-web-a1", api="apps/v1", annotations=moved, rv="9"),
            ])  # fmt: skip
            (clusters,) = await store.read_views(
                [ViewQuery(roles=("serverGroups",), clusters=True)]
            )
            (rows,) = await store.read_views(
                [ViewQuery(roles=("serverGroups",), app="store", bodies=False)]
            )
    assert [(r.app, r.cluster) for r in clusters] == [
        ("shop", "deployment shop-web"), ("shop", "shop-db"), ("store", "replicaSet store-api"),
    ]  # fmt: skip
    assert [(r.name, r.owner_name) for r in rows] == [("shop-web-a1", "")]


async def test_operation_results_index_only_what_they_wrote(store_backend: StoreBackend) -> None:
    with trio.fail_after(30):
        async with store_backend.open() as store:
            await store.apply_batch(ACCOUNT, [
                rec("ReplicaSet", "shop-api-v001", api="apps/v1", rv="10",
                    annotations={APP: "shop", CLUSTER: "replicaSet shop-api"}),
            ])  # fmt: skip
            # An older result (the watch stored a newer version already): nothing changes.
            await store.apply_operation_objects([
                rec("ReplicaSet", "shop-api-v001", api="apps/v1", rv="5",
                    annotations={APP: "old", CLUSTER: "old"}),
                rec("Service", "shop-api", rv="11"),  # new: indexed
            ])  # fmt: skip
            (rows,) = await store.read_views([ViewQuery(bodies=False)])
    assert [(r.name, r.app, r.cluster) for r in rows] == [
        ("shop-api-v001", "shop", "replicaSet shop-api"),
        ("shop-api", "shop", "shop-api"),
    ]


async def test_search(store_backend: StoreBackend) -> None:
    with trio.fail_after(30):
        async with store_backend.open() as store:
            await store.apply_batch(ACCOUNT, shop())
            hits = await store.search_views(
                SearchRequest(("ReplicaSet", "NetworkPolicy"), "shop", 100, app_clusters=True)
            )
            paged = await store.search_views(SearchRequest(("ReplicaSet",), "web-b2", 1))
            by_namespace = await store.search_views(SearchRequest(("Service",), ":elsewhere:", 10))
            nothing = await store.search_views(SearchRequest((), "shop", 10))
            pods_only = await store.search_views(
                SearchRequest(("Pod",), "shop", 10, with_apps=False, with_clusters=False)
            )
    assert [h[3] for h in hits.direct] == ["shop-db-access", "shop-web-a1", "shop-web-b2"]
    assert hits.apps == ["shop"]
    assert hits.clusters == [(ACCOUNT, "shop", "deployment shop-web"), (ACCOUNT, "shop", "shop-db")]
    assert hits.app_clusters == hits.clusters
    assert sorted(h[3] for h in hits.related) == ["shop-db-access", "shop-web-a1", "shop-web-b2"]
    assert [h[3] for h in paged.direct] == ["shop-web-b2"]
    assert paged.related == []  # no application or cluster key has "web-b2" in it
    assert [h[3] for h in by_namespace.direct] == ["far-svc"]
    assert (nothing.direct, nothing.related) == ([], [])
    assert [h[3] for h in pods_only.direct] == ["shop-web-a1-x", "shop-web-a1-y", "shop-web-b2-z"]
    assert (pods_only.apps, pods_only.clusters, pods_only.related) == ([], [], [])


async def test_an_older_database_gets_its_index_built_once(store_backend: StoreBackend) -> None:
    with trio.fail_after(30):
        async with store_backend.open() as store:
            await store.apply_batch(ACCOUNT, shop())
        # As a database migrated from schema 4 is: objects, an empty index, not built.
        store_backend.sql("DELETE FROM view_index")
        store_backend.sql("UPDATE view_state SET built = 0")
        async with store_backend.open() as store:
            (rows,) = await store.read_views([ViewQuery(bodies=False)])
    assert len(rows) == 11  # every object but the ConfigMap
    assert store_backend.sql("SELECT built FROM view_state") == [(1,)]


async def test_rows_of_listed_owners(store_backend: StoreBackend) -> None:
    with trio.fail_after(30):
        async with store_backend.open() as store:
            await store.apply_batch(ACCOUNT, shop())
            (pods,) = await store.read_views([
                ViewQuery(roles=("instances",), bodies=False,
                          owners=((ACCOUNT, "shop", "ReplicaSet", "shop-web-b2"),
                                  (ACCOUNT, "other", "ReplicaSet", "shop-web-a1"))),
            ])  # fmt: skip
    assert names(pods) == ["Pod shop-web-b2-z"]


async def test_searches_see_clusters_come_and_go(store_backend: StoreBackend) -> None:
    """A reader keeps the clusters between searches (``ClusterKeys``): a cluster that appears
    or goes is seen by the next search, on every reader (several searches: both of them)."""

    async def clusters() -> list[list[tuple[str, str, str]]]:
        wanted = SearchRequest(("ReplicaSet",), "shop", 100)
        return [list((await store.search_views(wanted)).clusters) for _ in range(4)]

    with trio.fail_after(30):
        async with store_backend.open() as store:
            await store.apply_batch(ACCOUNT, shop())
            before = await clusters()
            await store.apply_batch(ACCOUNT, [
                rec("ReplicaSet", "shop-api-v001", api="apps/v1", rv="2"),  # a new cluster
                rec("StatefulSet", "shop-db-v002", api="apps/v1", etype=EventType.DELETED,
                    rv="3"),  # its cluster's last row
            ])  # fmt: skip
            after = await clusters()
    web = (ACCOUNT, "shop", "deployment shop-web")
    assert before == [[web, (ACCOUNT, "shop", "shop-db")]] * 4
    assert after == [[web, (ACCOUNT, "shop", "shop-api")]] * 4


async def test_clusters_are_counted_as_their_rows_come_and_go(store_backend: StoreBackend) -> None:
    def clusters_query() -> ViewQuery:
        return ViewQuery(roles=("serverGroups", "serverGroupManagers"), clusters=True)

    with trio.fail_after(30):
        async with store_backend.open() as store:
            await store.apply_batch(ACCOUNT, shop())
            (before,) = await store.read_views([clusters_query()])
            # Two of the three rows of "deployment shop-web" go; it stays.
            await store.apply_batch(ACCOUNT, [
                rec("ReplicaSet", "shop-web-a1", api="apps/v1", etype=EventType.DELETED, rv="2"),
                rec("Deployment", "shop-web", api="apps/v1", etype=EventType.DELETED, rv="3"),
            ])  # fmt: skip
            (kept,) = await store.read_views([clusters_query()])
            # The last one moves to another cluster: the old one is gone.
            await store.apply_batch(ACCOUNT, [
                rec("ReplicaSet", "shop-web-b2", api="apps/v1", rv="4",
                    annotations={APP: "shop", CLUSTER: "replicaSet shop-web"}),
            ])  # fmt: skip
            (moved,) = await store.read_views([clusters_query()])
            (one,) = await store.read_views(
                [ViewQuery(clusters=True, app="shop", cluster="shop-db")]
            )
    assert [r.cluster for r in before] == ["deployment shop-web", "shop-db"]
    assert [r.cluster for r in kept] == ["deployment shop-web", "shop-db"]
    assert [r.cluster for r in moved] == ["replicaSet shop-web", "shop-db"]
    assert [(r.app, r.account, r.cluster) for r in one] == [("shop", ACCOUNT, "shop-db")]
    assert store_backend.sql("SELECT app, cluster, refs FROM view_clusters ORDER BY cluster") == [
        ("shop", "replicaSet shop-web", 1), ("shop", "shop-db", 1),
    ]  # fmt: skip


async def test_objects_without_a_row_are_indexed_by_a_fill(store_backend: StoreBackend) -> None:
    # A replica of a version from before the index, still running during a rolling upgrade,
    # stores objects without their rows; housekeeping's fill (and, on PostgreSQL, every
    # replica's start) indexes those and only those.
    missing = "DELETE FROM view_index WHERE name IN ('shop-web-a1-x', 'far-svc')"
    with trio.fail_after(30):
        async with store_backend.open() as store:
            await store.apply_batch(ACCOUNT, shop())
        store_backend.sql(missing)  # SQLite's file is written by one process at a time
        async with store_backend.open() as store:
            if store_backend.name == "sqlite":
                assert await store.fill_views() == 2
            assert await store.fill_views() == 0
            (rows,) = await store.read_views([ViewQuery(bodies=False)])
            assert len(rows) == 11
            if store_backend.name != "sqlite":
                store_backend.sql(missing)  # while this replica runs
                assert await store.fill_views() == 2


async def test_the_last_row_of_an_object_in_a_batch_wins(store_backend: StoreBackend) -> None:
    # An object twice in one batch (a change and the next): its view row is the later one's,
    # batch after batch. (On PostgreSQL the writer keeps the last row of each key itself: the
    # COPY's table reuses pages a VACUUM freed, so the rows' physical order need not be the
    # order they were written in, and no statement may pick "the last" by it.)
    def moved(n: int) -> list[EventRecord]:
        notes = {APP: "shop", CLUSTER: f"replicaSet shop-{n}"}
        filler = [rec("Pod", f"pod-{n}-{i}", rv=str(n), owner=("ReplicaSet", "x"))
                  for i in range(40)]  # fmt: skip
        return [
            *filler[:20],
            rec("ReplicaSet", "shop-web", api="apps/v1", rv=f"{n}0", annotations=notes),
            *filler[20:],
            rec("ReplicaSet", "shop-web", api="apps/v1", rv=f"{n}1",
                annotations={**notes, CLUSTER: f"replicaSet shop-{n}-later"}),
        ]  # fmt: skip

    with trio.fail_after(60):
        async with store_backend.open() as store:
            for n in range(1, 13):
                await store.apply_batch(ACCOUNT, moved(n))
                (rows,) = await store.read_views([ViewQuery(kinds=("ReplicaSet",))])
                assert [r.cluster for r in rows] == [f"replicaSet shop-{n}-later"], n
