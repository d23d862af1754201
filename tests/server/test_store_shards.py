"""Shards in the store, on both backends (docs/sharding.md): the objects of one account come
from several agents, each listing its own kinds or namespaces. A shard's relist sweeps its
own objects only, its WatchScope says nothing of the other shards' objects, and a shard that
is removed takes its objects and resume points, never another's."""

from __future__ import annotations

import trio

from server._shards import ShardSpec
from server.store import AccountScope, Store
from tests.server._stores import StoreBackend
from wire import EventType

from .test_store import ACCOUNT, marker, obj

PODS = ShardSpec.of({"name": "pods", "kinds": ["Pod"]})
REST = ShardSpec.of({"name": "rest", "omit_kinds": ["Pod"]})
TEAM_A = ShardSpec.of({"name": "team-a", "kinds": ["Pod"], "namespaces": ["a"]})


async def names(store: Store) -> set[tuple[str, str, str]]:
    page = await store.query_objects(account=ACCOUNT, limit=1000)
    return {(o.kind, o.namespace, o.name) for o in page.objects}


async def listed(store: Store) -> None:
    """Two shards list: Pods (one agent), Services and a cluster-scoped Node (the other)."""
    await store.apply_events(
        [
            marker(EventType.SYNC_BEGIN),
            obj("p1", namespace="a", rv="2"),
            obj("p2", namespace="b", rv="3"),
            marker(EventType.SYNC_END, rv="3"),
        ]
    )
    await store.apply_events(
        [
            marker(EventType.SYNC_BEGIN, kind="Service"),
            obj("s1", kind="Service", namespace="a", rv="4"),
            marker(EventType.SYNC_END, kind="Service", rv="4"),
            marker(EventType.SYNC_BEGIN, kind="Node"),
            obj("n1", kind="Node", namespace="", rv="5"),
            marker(EventType.SYNC_END, kind="Node", rv="5"),
        ]
    )


ALL = {("Pod", "a", "p1"), ("Pod", "b", "p2"), ("Service", "a", "s1"), ("Node", "", "n1")}


async def test_a_shards_relist_sweeps_only_its_own_objects(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            await listed(store)
            assert await names(store) == ALL
            # The Pods' shard relists and finds p2 gone: only p2 goes.
            outcome = await store.apply_events(
                [
                    marker(EventType.SYNC_BEGIN),
                    obj("p1", namespace="a", rv="2"),
                    marker(EventType.SYNC_END, rv="6"),
                ]
            )
            assert [r.name for r in outcome.swept] == ["p2"]
            assert await names(store) == ALL - {("Pod", "b", "p2")}


async def test_a_shards_watch_scope_keeps_the_other_shards_objects(
    store_backend: StoreBackend,
) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            await listed(store)
            # The Pods' agent says it watches Pods only: true of its shard, and nothing of
            # the rest's objects.
            pods = AccountScope(ACCOUNT, (("v1", "Pod"),), shard=PODS)
            assert (await store.apply_account_scope(pods)).swept == ()
            rest = AccountScope(ACCOUNT, (("v1", "Service"), ("v1", "Node")), shard=REST)
            assert (await store.apply_account_scope(rest)).swept == ()
            assert await names(store) == ALL
            # Within its shard a scope still narrows: the rest's agent stops watching
            # Services (a CRD removed, say), and only its Services go.
            narrower = AccountScope(ACCOUNT, (("v1", "Node"),), shard=REST)
            swept = (await store.apply_account_scope(narrower)).swept
            assert [r.name for r in swept] == ["s1"]
            # A namespace shard's scope (namespace a) leaves namespace b and the cluster scope.
            team = AccountScope(ACCOUNT, (("v1", "Pod"),), namespaces=("a",), shard=TEAM_A)
            assert (await store.apply_account_scope(team)).swept == ()
            assert await names(store) == ALL - {("Service", "a", "s1")}


async def test_a_removed_shard_takes_only_what_it_owns(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            await listed(store)
            # The shape of a shard's removal (server/_accounts.py): a scope of no kinds.
            outcome = await store.apply_account_scope(AccountScope(ACCOUNT, (), shard=PODS))
            assert sorted(r.name for r in outcome.swept) == ["p1", "p2"]
            assert await names(store) == {("Service", "a", "s1"), ("Node", "", "n1")}
            points = {p.kind for p in await store.resume_points(ACCOUNT)}
            assert points == {"Service", "Node"}
            await store.apply_account_scope(AccountScope(ACCOUNT, (), shard=REST))
            assert await names(store) == set()
            assert await store.resume_points(ACCOUNT) == []
