"""The operations journal, on both stores: concurrent writes share transactions, and each is
committed when its writer returns."""

from __future__ import annotations

import json

import trio

from server._errors import StoreError
from server.ops._journal import OperationJournal
from server.store import OperationRecord
from wire import EventRecord, EventType

from ._stores import StoreBackend


async def test_concurrent_writes_are_grouped_and_committed(store_backend: StoreBackend) -> None:
    with trio.fail_after(20):
        async with store_backend.open() as store:
            journal = OperationJournal(store, max_pending=64, max_batch=50)
            async with trio.open_nursery() as nursery:
                await nursery.start(journal.run)

                async def write(i: int) -> None:
                    record = OperationRecord(id=f"op-{i}", account="k1", type="scaleManifest")
                    await journal.write(record, f"received {i}")
                    # Committed when write returns: a read sees it.
                    assert await store.get_operation(f"op-{i}") is not None

                async with trio.open_nursery() as writers:
                    for i in range(200):
                        writers.start_soon(write, i)
                assert journal.flushes < 200
                history = await store.operation_history("op-7")
                assert [(e.state, e.message) for e in history] == [("PENDING", "received 7")]
                nursery.cancel_scope.cancel()
            # After the flusher stopped, writes go to the store directly.
            await journal.write(OperationRecord(id="late", account="k1", type="t"), "late")
            assert await store.get_operation("late") is not None


def _object(name: str, body: bytes | None = None) -> EventRecord:
    return EventRecord(
        type=int(EventType.MODIFIED),
        account="k1",
        api_version="v1",
        kind="ConfigMap",
        namespace="default",
        name=name,
        uid=f"uid-{name}",
        resource_version="5",
        object=body if body is not None else json.dumps({"metadata": {"name": name}}).encode(),
    )


async def test_objects_ride_with_the_records_and_a_bad_group_spoils_no_other(
    store_backend: StoreBackend,
) -> None:
    with trio.fail_after(20):
        async with store_backend.open() as store:
            journal = OperationJournal(store)
            async with trio.open_nursery() as nursery:
                await nursery.start(journal.run)
                results: dict[str, list[StoreError | None]] = {}

                async def end(name: str, groups: list[list[EventRecord]]) -> None:
                    record = OperationRecord(id=name, account="k1", type="deployManifest")
                    results[name] = await journal.write_all([(record, "ended")], groups)

                async with trio.open_nursery() as writers:
                    writers.start_soon(end, "a", [[_object("a1")], [_object("a2")]])
                    writers.start_soon(end, "b", [[_object("b1", b"not json")]])
                    writers.start_soon(end, "c", [])
                assert results["a"] == [None, None]
                assert results["c"] == []
                (bad,) = results["b"]
                assert isinstance(bad, StoreError)
                for name in ("a", "b", "c"):
                    assert await store.get_operation(name) is not None
                for name in ("a1", "a2"):
                    assert await store.get_object("k1", "v1", "ConfigMap", "default", name)
                assert not await store.get_object("k1", "v1", "ConfigMap", "default", "b1")
                nursery.cancel_scope.cancel()
