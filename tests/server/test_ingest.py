"""A session's batch pipeline: in order, acknowledged after commit, one batch ahead at most."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest
import trio

from server import InvalidRecord, StoreError
from server._ingest import Ingest
from server.store import BatchOutcome, open_sqlite_store
from wire import EventRecord

from .test_store import ACCOUNT, obj


class _Refused(Exception):
    def __init__(self, seq: int, cause: Exception) -> None:
        super().__init__(f"batch {seq}: {cause}")
        self.seq = seq


def _failed(seq: int, exc: InvalidRecord | StoreError) -> BaseException:
    return _Refused(seq, exc)


async def test_batches_are_applied_and_acknowledged_in_order(tmp_path: Path) -> None:
    acked: list[tuple[int, int, BatchOutcome | None]] = []
    with trio.fail_after(10):
        async with open_sqlite_store(str(tmp_path / "s.db")) as store:

            async def applied(
                seq: int, records: Sequence[EventRecord], outcome: BatchOutcome | None
            ) -> None:
                # Acknowledged after the commit: the batch is already visible to readers.
                if records:
                    assert await store.get_object(ACCOUNT, "v1", "Pod", "default", f"p{seq}")
                acked.append((seq, len(records), outcome))

            ingest = Ingest(store, applied, _failed)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ingest.run)
                for seq in range(1, 21):
                    batch = [] if seq == 7 else [obj(f"p{seq}"), obj(f"q{seq}")]
                    await ingest.submit(seq, lambda batch=batch: batch)  # type: ignore[misc]
                await ingest.drain()
                nursery.cancel_scope.cancel()
    assert [seq for seq, _, _ in acked] == list(range(1, 21))
    assert acked[6] == (7, 0, None)  # an empty batch is acknowledged in its place, unwritten
    assert all(o is not None and o.upserted == 2 for s, _, o in acked if s != 7)


async def test_at_most_one_batch_is_prepared_ahead(tmp_path: Path) -> None:
    produced: list[int] = []
    release = trio.Event()
    with trio.fail_after(10):
        async with open_sqlite_store(str(tmp_path / "s.db")) as store:

            async def applied(
                seq: int, records: Sequence[EventRecord], outcome: BatchOutcome | None
            ) -> None:
                if seq == 1:
                    await release.wait()  # an Ack that cannot go out yet

            def producer(seq: int) -> list[EventRecord]:
                produced.append(seq)
                return [obj(f"p{seq}")]

            ingest = Ingest(store, applied, _failed)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ingest.run)

                async def submit_all() -> None:
                    for seq in range(1, 5):
                        await ingest.submit(seq, lambda seq=seq: producer(seq))  # type: ignore[misc]

                nursery.start_soon(submit_all)
                while len(produced) < 2:
                    await trio.sleep(0.01)  # batch 1 commits in the store's worker thread
                await trio.sleep(0.2)
                # Batch 1 is stuck after its commit; batch 2 is prepared and waits; 3 is not
                # even decoded.
                assert produced == [1, 2]
                release.set()
                while len(produced) < 4:
                    await trio.sleep(0.01)
                await ingest.drain()
                assert produced == [1, 2, 3, 4]
                nursery.cancel_scope.cancel()


async def test_a_bad_record_refuses_its_batch_and_keeps_the_earlier_ones(tmp_path: Path) -> None:
    acked: list[int] = []
    with trio.fail_after(10):
        async with open_sqlite_store(str(tmp_path / "s.db")) as store:

            async def applied(
                seq: int, records: Sequence[EventRecord], outcome: BatchOutcome | None
            ) -> None:
                acked.append(seq)

            ingest = Ingest(store, applied, _failed)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ingest.run)
                await ingest.submit(1, lambda: [obj("a")])
                bad = msgspec.structs.replace(obj("b"), object=b"{")
                with pytest.raises(_Refused, match=r"batch 2: record 0 .*not valid"):
                    await ingest.submit(2, lambda: [bad])
                await ingest.drain()
                nursery.cancel_scope.cancel()
            assert acked == [1]
            assert await store.get_object(ACCOUNT, "v1", "Pod", "default", "a") is not None
            assert await store.get_object(ACCOUNT, "v1", "Pod", "default", "b") is None
