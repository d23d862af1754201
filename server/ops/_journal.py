"""Group commit of operation records: one store transaction for every write queued meanwhile.

Every store call costs a hop to the store's worker thread, which on a busy server (the GIL held
by the event loop) costs milliseconds, and the store runs one call at a time. Operations write
several records each, so under load the hops, not SQLite, set the throughput. Writers queue
``(record, message)`` pairs here and wait; one flusher task takes everything queued (at most
``max_batch``) and writes it with ``store.record_operations`` in one transaction, then wakes
the writers. A write has returned only once it is committed, so "recorded before sent" holds.
At most ``max_pending`` records wait; further writers wait for room (backpressure).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import trio

from .._errors import ServerError
from ..store import OperationRecord, Store

__all__ = ["OperationJournal"]

log = logging.getLogger("server.operations")


@dataclass(slots=True)
class _Write:
    record: OperationRecord
    message: str
    done: trio.Event = field(default_factory=trio.Event)
    error: ServerError | None = None


class OperationJournal:
    """``await journal.write(record, message)``; ``run`` must be running (see module doc)."""

    def __init__(self, store: Store, *, max_pending: int = 10_000, max_batch: int = 500) -> None:
        self._store = store
        self._max_batch = max_batch
        self._room = trio.Semaphore(max_pending)
        self._queued: list[_Write] = []
        self._wake = trio.Event()
        self.flushes = 0  # how many transactions (for tests and the benchmark)
        self._stopped = False

    async def write(self, record: OperationRecord, message: str) -> None:
        """Queue one write and wait for its commit. Raises StoreError when the transaction
        failed. Cancelled while waiting, the write still happens (it is already queued).
        Once the flusher stopped (shutdown), writes go to the store directly."""
        if self._stopped:
            await self._store.record_operations([(record, message)])
            return
        await self._room.acquire()
        write = _Write(record, message)
        self._queued.append(write)
        self._wake.set()
        await write.done.wait()
        if write.error is not None:
            raise write.error

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Flush until cancelled; what is queued at cancellation is written first (shielded)."""
        task_status.started()
        try:
            while True:
                await self._wake.wait()
                await self._flush()
        finally:
            self._stopped = True
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                while self._queued:
                    await self._flush()
            for write in self._queued:  # the store did not answer in time
                write.error = ServerError("the server stopped before the write was committed")
                write.done.set()

    async def _flush(self) -> None:
        batch, self._queued = self._queued[: self._max_batch], self._queued[self._max_batch :]
        if not self._queued:
            self._wake = trio.Event()
        if not batch:
            return
        error: ServerError | None = None
        try:
            await self._store.record_operations([(w.record, w.message) for w in batch])
        except ServerError as exc:
            log.error("could not record %d operation writes: %s", len(batch), exc)
            error = exc
        self.flushes += 1
        for write in batch:
            write.error = error
            write.done.set()
            self._room.release()
