"""Group commit of operation records: one store transaction for every write queued meanwhile.

Every store call costs a hop to the store's worker thread, which on a busy server (the GIL held
by the event loop) costs milliseconds, and the store runs one call at a time. Operations write
several records each, so under load the hops, not SQLite, set the throughput. Writers queue
``(record, message)`` pairs here and wait; one flusher task takes everything queued (at most
``max_batch`` records) and writes it with ``store.record_operations`` in one transaction, then
wakes the writers. A write has returned only once it is committed, so "recorded before sent"
holds. At most ``max_pending`` writes wait; further writers wait for room (backpressure).

A write may carry the objects an operation returned (``write_all``): the flusher then applies
every queued write's objects and records in the same hop
(``store.record_operations_and_objects``), so an operation's end costs its task no hop of its
own for the cache either. It may carry notifications too (``notices``: another replica waiting
for this operation's end), sent in the same transaction, so they arrive after the commit, and
operations dispatched to another replica (``dispatches``), which go in with their records.

``create`` is a write that happens only if its first record's id is new (a task's first
operation, keyed by the clientRequestId: of two replicas given one id at once, one creates the
task). The creates queued meanwhile go to the store in one ``store.create_operations`` call,
before the flush's other writes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import trio

from wire import EventRecord

from .._errors import ServerError, StoreError
from ..store import DispatchRecord, Notice, OperationRecord, Store

__all__ = ["OperationJournal"]

log = logging.getLogger("server.operations")


@dataclass(slots=True)
class _Write:
    items: Sequence[tuple[OperationRecord, str]]
    groups: Sequence[Sequence[EventRecord]]
    notices: Sequence[Notice] = ()
    dispatches: Sequence[DispatchRecord] = ()
    create: bool = False  # write only if items[0]'s id is new; ``created`` says if it was
    created: bool = True
    done: trio.Event = field(default_factory=trio.Event)
    error: ServerError | None = None
    group_errors: list[StoreError | None] = field(default_factory=list)


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
        await self.write_all([(record, message)])

    async def write_all(
        self,
        items: Sequence[tuple[OperationRecord, str]],
        groups: Sequence[Sequence[EventRecord]] = (),
        *,
        notices: Sequence[Notice] = (),
        dispatches: Sequence[DispatchRecord] = (),
    ) -> list[StoreError | None]:
        """``write`` for several records, after applying each group of objects to the cache
        (as ``store.apply_operation_objects`` does; a group is one operation's objects), with
        ``dispatches`` inserted and ``notices`` sent once they are committed. Returns each
        group's error (None: applied; the records are written either way); raises when the
        records failed."""
        if self._stopped:
            if not any(groups):
                await self._store.record_operations(items, notices=notices, dispatches=dispatches)
                return [None] * len(groups)
            return await self._store.record_operations_and_objects(
                items, groups, notices=notices, dispatches=dispatches
            )
        write = await self._queue(_Write(items, groups, notices, dispatches))
        return write.group_errors

    async def create(self, items: Sequence[tuple[OperationRecord, str]]) -> bool:
        """Write ``items`` only if no record has ``items[0]``'s id yet (insert-if-absent);
        whether they were written. Raises StoreError when the transaction failed."""
        if not items:
            raise ValueError("create: a first record is needed")
        if self._stopped:
            (created,) = await self._store.create_operations([items])
            return created
        write = await self._queue(_Write(items, (), create=True))
        return write.created

    async def _queue(self, write: _Write) -> _Write:
        await self._room.acquire()
        self._queued.append(write)
        self._wake.set()
        await write.done.wait()
        if write.error is not None:
            raise write.error
        return write

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
        taken, records = 0, 0
        while taken < len(self._queued) and (records < self._max_batch or not taken):
            records += len(self._queued[taken].items)
            taken += 1
        batch, self._queued = self._queued[:taken], self._queued[taken:]
        if not self._queued:
            self._wake = trio.Event()
        if not batch:
            return
        creates = [w for w in batch if w.create]
        writes = [w for w in batch if not w.create]
        try:
            if creates:
                await self._flush_creates(creates)
            if writes:
                await self._flush_writes(writes)
        except BaseException:
            # Cancelled before a store call began (a call, once begun, is finished: its thread
            # is never abandoned): what it did not write goes back first in line, for the
            # shielded last flush in ``run``.
            self._queued[:0] = [w for w in batch if not w.done.is_set()]
            self._wake.set()
            raise
        self.flushes += 1

    def _finished(self, writes: list[_Write]) -> None:
        for write in writes:
            write.done.set()
            self._room.release()

    async def _flush_creates(self, creates: list[_Write]) -> None:
        try:
            created = await self._store.create_operations([w.items for w in creates])
        except ServerError as exc:
            log.error("could not create %d operation tasks: %s", len(creates), exc)
            for write in creates:
                write.error = exc
        else:
            for write, done in zip(creates, created, strict=True):
                write.created = done
        self._finished(creates)

    async def _flush_writes(self, writes: list[_Write]) -> None:
        error: ServerError | None = None
        items = [item for w in writes for item in w.items]
        groups = [g for w in writes for g in w.groups]
        notices = [n for w in writes for n in w.notices]
        dispatches = [d for w in writes for d in w.dispatches]
        errors: list[StoreError | None] = [None] * len(groups)
        try:
            if any(groups):
                errors = await self._store.record_operations_and_objects(
                    items, groups, notices=notices, dispatches=dispatches
                )
            else:
                await self._store.record_operations(items, notices=notices, dispatches=dispatches)
        except ServerError as exc:
            log.error("could not record %d operation writes: %s", len(items), exc)
            error = exc
        for write in writes:
            write.error = error
            write.group_errors, errors = errors[: len(write.groups)], errors[len(write.groups) :]
        self._finished(writes)
