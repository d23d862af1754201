"""A session's event batches, applied in order, the next one prepared while the store commits.

Theory of operation. Applying a batch has a CPU half (decode the records, check them, parse
each object for its labels, scrub Secrets: pure Python, holding the GIL) and a database half
(the writes, then the COMMIT, which with its WAL write and checkpoints runs in SQLite's C code
without the GIL). Done one after the other, one core idles through each half. Here the
session's receive task prepares batch N+1 while the store's worker thread commits batch N:

- ``submit(seq, produce)`` waits for its *turn*, then calls ``produce()`` (decode, check) and
  ``store.prepare_events``, then hands the prepared batch to ``run``.
- The turn opens when the batch being applied reaches its COMMIT (the store calls back), or
  when nothing is being applied. It does not open earlier on purpose: while the writer binds
  rows it takes the GIL for every row, and a Python-busy receive task would stall it (measured:
  preparing during the writes was slower than not overlapping at all).
- ``run`` applies the batches one at a time in ``seq`` order and calls ``applied`` after each
  commit (the caller acknowledges there: an Ack still means committed).

Bounds: one batch being prepared, one waiting, one being applied. A failure ends ``run``
with the exception ``failed(seq, exc)`` gives; nothing of a failed batch is kept.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import trio

from wire import EventRecord

from ._errors import InvalidRecord, StoreError
from .store import BatchOutcome, PreparedEvents, Store

log = logging.getLogger("server.ingest")

Applied = Callable[[int, Sequence[EventRecord], BatchOutcome | None], Awaitable[None]]
Failed = Callable[[int, InvalidRecord | StoreError], BaseException]
_Item = tuple[int, Sequence[EventRecord], PreparedEvents | None]


class Ingest:
    """Ordered, overlapped application of one session's batches (see the module docstring)."""

    def __init__(self, store: Store, applied: Applied, failed: Failed) -> None:
        self._store = store
        self._applied = applied
        self._failed = failed
        self._send, self._receive = trio.open_memory_channel[_Item](0)
        self._turn = trio.Event()
        self._turn.set()
        self._in_flight = 0
        self._idle = trio.Event()
        self._idle.set()

    async def submit(self, seq: int, produce: Callable[[], Sequence[EventRecord]]) -> None:
        """Queue batch ``seq``: ``produce()`` gives its records (called when it is the batch's
        turn; what it raises propagates). Records that fail the store's checks raise
        ``failed(seq, exc)`` here. An empty batch is acknowledged in order, unwritten."""
        await self._turn.wait()
        self._turn = trio.Event()
        try:
            records = produce()
            prepared = self._store.prepare_events(records) if records else None
        except InvalidRecord as exc:
            self._turn.set()
            raise self._failed(seq, exc) from exc
        except BaseException:
            self._turn.set()
            raise
        self._in_flight += 1
        self._idle = trio.Event()
        await self._send.send((seq, records, prepared))

    async def drain(self) -> None:
        """Wait until every submitted batch is applied and ``applied`` has returned."""
        await self._idle.wait()

    async def run(self) -> None:
        """Apply submitted batches in order, forever (cancel to stop)."""
        async for seq, records, prepared in self._receive:
            # The turn the next submit waits on (made by this batch's submit, before it was
            # handed over): opened at this batch's COMMIT, or once it is done at the latest.
            turn = self._turn
            outcome = None
            if prepared is not None:
                try:
                    outcome = await self._store.apply_prepared(prepared, turn.set)
                except (InvalidRecord, StoreError) as exc:
                    raise self._failed(seq, exc) from exc
            turn.set()
            await self._applied(seq, records, outcome)
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()
