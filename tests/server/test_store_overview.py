"""``Store.kind_overview`` on both backends: the status page's objects per kind and synced
watches per account, in one call."""

from __future__ import annotations

import trio

from server.store import KindOverview
from tests.server._stores import StoreBackend
from wire import EventType

from .test_store import ACCOUNT, Clock, marker, obj


async def test_objects_and_synced_watches_per_kind(store_backend: StoreBackend) -> None:
    clock = Clock()
    with trio.fail_after(10):
        async with store_backend.open(now_ms=clock) as store:
            assert await store.kind_overview() == []
            await store.apply_batch(
                ACCOUNT,
                [
                    marker(EventType.SYNC_BEGIN),
                    obj("a"),
                    obj("b", namespace="other"),
                    marker(EventType.SYNC_END, rv="10"),
                    obj("d", kind="Deployment", api_version="apps/v1"),
                ],
            )
            clock.ms += 500
            # A listing of ConfigMaps that found none: synced, with no objects.
            await store.apply_batch(
                ACCOUNT,
                [
                    marker(EventType.SYNC_BEGIN, kind="ConfigMap", scope="n1"),
                    marker(EventType.SYNC_END, kind="ConfigMap", rv="11", scope="n1"),
                    marker(EventType.SYNC_BEGIN, kind="ConfigMap", scope="n2"),
                    marker(EventType.SYNC_END, kind="ConfigMap", rv="12", scope="n2"),
                ],
            )
            # A watch event moves its watch's resume point as a SYNC_END does.
            await store.apply_batch("dev", [obj("x", account="dev", kind="Service")])
            assert await store.kind_overview() == [
                KindOverview("dev", "", "Service", 1, 1, 1_000_500),
                KindOverview(ACCOUNT, "", "ConfigMap", 0, 2, 1_000_500),
                KindOverview(ACCOUNT, "", "Pod", 2, 1, 1_000_000),
                KindOverview(ACCOUNT, "apps", "Deployment", 1, 1, 1_000_000),
            ]


async def test_a_kind_spelled_two_ways_is_one_kind(store_backend: StoreBackend) -> None:
    with trio.fail_after(10):
        async with store_backend.open() as store:
            await store.apply_batch(
                ACCOUNT, [obj("a", kind="Widget", api_version="x.io/v1"), obj("b", kind="widget")]
            )
            await store.apply_batch(
                ACCOUNT, [obj("c", kind="widget", api_version="x.io/v1", namespace="n")]
            )
            (core, widgets) = await store.kind_overview()
            assert (core.group, core.kind.lower(), core.objects) == ("", "widget", 1)
            assert (widgets.group, widgets.kind.lower(), widgets.objects) == ("x.io", "widget", 2)
