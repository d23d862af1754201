"""A batch whose object writes are split by a deletion (two runs of upserts in one
transaction), on both backends: each run writes only its own objects."""

from __future__ import annotations

import trio

from server.store import ViewQuery
from tests.server._stores import StoreBackend
from tests.server.test_store_views import ACCOUNT, rec
from wire import EventType


async def test_runs_of_writes_split_by_deletions(store_backend: StoreBackend) -> None:
    with trio.fail_after(30):
        async with store_backend.open() as store:
            await store.apply_batch(ACCOUNT, [rec("Service", "b")])
            await store.apply_batch(ACCOUNT, [
                rec("Service", "a", rv="1"),
                rec("Service", "a", rv="2", etype=EventType.DELETED),
                rec("Service", "b", rv="3", etype=EventType.DELETED),
                rec("Service", "c", rv="4"),
                rec("Service", "b", rv="5"),
            ])  # fmt: skip
            page = await store.query_objects(account=ACCOUNT)
            (views,) = await store.read_views([ViewQuery(bodies=False)])
    assert sorted((o.name, o.resource_version) for o in page.objects) == [("b", "5"), ("c", "4")]
    assert sorted(v.name for v in views) == ["b", "c"]
