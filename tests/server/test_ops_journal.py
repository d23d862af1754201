"""The operations journal: concurrent writes share transactions, and each is committed when
its writer returns."""

from __future__ import annotations

from pathlib import Path

import trio

from server.ops._journal import OperationJournal
from server.store import OperationRecord, open_sqlite_store


async def test_concurrent_writes_are_grouped_and_committed(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with open_sqlite_store(str(tmp_path / "j.db")) as store:
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
