"""The WAL checkpointer: copies committed pages into the database file from its own thread.

In WAL mode every committed page is written twice: into the write-ahead log at COMMIT, and
into the database file by a checkpoint. SQLite's automatic checkpoint runs inside the COMMIT
that crosses its threshold, so the writer (and the session waiting for its Ack) paid for both
copies and the fsync: about a quarter of the writer's time in bench_server's 500 x 4.4 KB
batches. Here a second connection runs PASSIVE checkpoints in a worker thread of its own,
concurrently with the writer (WAL allows one writer and one checkpointer at once; a PASSIVE
checkpoint blocks neither).

Bound. A checkpoint cannot rewind the log while the writer keeps appending: the log restarts
from its beginning only when a write transaction begins with every frame copied. So a write
whose log would be over ``max_log_bytes`` first waits (``admit``) for a pass that began after
the last commit and copied everything; that write then restarts the log. The log's size is
known at each pass; between passes the writers' ``committed(nbytes)`` estimates its growth.
The caller admits one write at a time and runs it before admitting the next (the store holds
a lock across both), so the log stays under the bound plus one transaction (and the
estimate's error). When passes keep failing, a write over the bound fails (StoreError)
rather than letting the log grow without one.

Spacing. After a pass the next waits up to ``MIN_INTERVAL``, so a server taking many small
writes (operations) does not fsync after each one; it starts at once when a writer waits or
a quarter of the bound (at most ``HURRY_BYTES``) was written since the last pass began.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import cast

import apsw
import trio

from .._errors import StoreError

log = logging.getLogger("server.store")

# The log's bound: 160 MiB of frames (pages). Each time a busy writer reaches it, the writer
# waits for the last pass to copy everything (and sync the file) before the log restarts,
# ~35 ms here. At 40 MiB (the 10,000 pages of _sqlite_core.AUTOCHECKPOINT_PAGES, the bound
# this store used before) that wait came every ~10 batches of 500 x 4.4 KB pods: 2.8-3.4 s of
# a 200k-event ingest at 700k-900k objects, against 0.55-0.77 s at 160 MiB (BENCHMARKS.md,
# session 13). The price: up to 160 MiB of disk for the log (120 more than before) plus one
# write group past it, and as much to replay after a crash. AUTOCHECKPOINT_PAGES stays
# 10,000 on purpose: it serves only while the upkeep is not running.
MAX_LOG_BYTES = 160 * 2**20
MIN_INTERVAL = 0.05  # seconds between passes for a writer of small transactions
HURRY_BYTES = 2**20  # written since the last pass: a busy writer, checkpoint now
MAX_FAILURES = 3  # passes failed in a row before a write over the bound is refused
_FRAME_HEADER = 24  # bytes before each page in the log


@dataclass(frozen=True, slots=True)
class PassResult:
    """What one ``PRAGMA wal_checkpoint(PASSIVE)`` reported."""

    busy: bool  # another checkpoint held the lock: nothing was done
    frames: int  # frames in the log
    copied: int  # of those, frames now in the database file

    @property
    def caught_up(self) -> bool:
        return not self.busy and self.copied >= self.frames


class WalCheckpointer:
    """Runs checkpoint passes on its own connection; writers call ``admit`` before and
    ``committed`` after each write. ``SqliteStore.run_upkeep`` runs it and switches SQLite's
    own checkpoint off meanwhile."""

    def __init__(self, path: str, page_size: int, *, max_log_bytes: int = MAX_LOG_BYTES) -> None:
        self._path = path
        self._frame_bytes = page_size + _FRAME_HEADER
        self._max_bytes = max_log_bytes
        self._hurry_bytes = max(1, min(HURRY_BYTES, max_log_bytes // 4))
        self._limiter = trio.CapacityLimiter(1)
        self._conn: apsw.Connection | None = None
        self._commits = 0  # writes committed so far
        self._checked = -1  # the commit count when the last finished pass began
        self._log_bytes = 0  # the log's size at the last pass
        self._unseen = 0  # bytes committed since the last pass began (an estimate)
        self._caught_up = True  # the last pass copied every frame
        self._waiting = 0  # writers blocked in admit
        self._failures = 0  # passes failed in a row
        self._last_error: apsw.Error | None = None
        self._stopped = False
        self._wake = trio.Event()  # something was committed (or a writer waits)
        self._hurry = trio.Event()  # cut the spacing short
        self._progress = trio.Event()  # a pass finished

    def committed(self, nbytes: int = 0) -> None:
        """A write ended (committed or rolled back), having written about ``nbytes``."""
        self._commits += 1
        self._unseen += nbytes
        self._wake.set()
        if self._unseen >= self._hurry_bytes:
            self._hurry.set()

    async def admit(self) -> None:
        """Return when a write may begin: at once while the log is under its bound, else once
        every frame is in the database file (the write then restarts the log).

        Returns at once after the checkpointer has stopped (SQLite's own checkpoint is back
        then). Raises StoreError when the log is over its bound and the last MAX_FAILURES
        passes failed."""
        if self._stopped or self._log_bytes + self._unseen <= self._max_bytes:
            return
        self._waiting += 1
        try:
            while not (self._checked == self._commits and self._caught_up):
                if self._failures >= MAX_FAILURES:
                    raise StoreError(
                        f"the write-ahead log is over its bound of {self._max_bytes} bytes and "
                        f"the last {self._failures} checkpoints failed: {self._last_error}"
                    )
                self._wake.set()
                self._hurry.set()
                await self._progress.wait()
                if self._stopped:
                    return
        finally:
            self._waiting -= 1
        self._log_bytes = 0  # the write about to begin rewinds the log

    async def run(self) -> None:
        """Checkpoint after commits until cancelled. A failed pass is logged (at the start of
        a run of failures) and retried at the next commit or the next waiting writer."""
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                self._hurry = trio.Event()
                began, unseen, self._unseen = self._commits, self._unseen, 0
                try:
                    result = await trio.to_thread.run_sync(self._pass, limiter=self._limiter)
                except apsw.Error as exc:
                    self._passed_not(exc, unseen)
                else:
                    self._passed(began, result)
                self._progress.set()
                self._progress = trio.Event()
                if not self._waiting:
                    with trio.move_on_after(MIN_INTERVAL):
                        await self._hurry.wait()
        finally:
            self._stopped = True
            self._progress.set()  # a writer waiting in admit goes ahead
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._close, limiter=self._limiter)

    def _passed(self, began: int, result: PassResult) -> None:
        if self._failures:
            log.info("WAL checkpoints work again after %d failures", self._failures)
            self._failures = 0
        self._checked = began
        self._log_bytes = result.frames * self._frame_bytes
        self._caught_up = result.caught_up

    def _passed_not(self, exc: apsw.Error, unseen: int) -> None:
        """A pass failed: the log's size is what it was plus what was written meanwhile."""
        if not self._failures:
            log.warning("WAL checkpoint failed (retried at the next write): %s", exc)
        self._failures += 1
        self._last_error = exc
        self._unseen += unseen
        self._caught_up = False

    def _pass(self) -> PassResult:
        if self._conn is None:
            self._conn = apsw.Connection(self._path)
            self._conn.execute("PRAGMA synchronous=NORMAL")
        # fetchall: a statement left unfinished would keep a read lock, and the log could
        # never rewind.
        [row] = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        busy, frames, copied = cast(tuple[int, int, int], row)
        return PassResult(bool(busy), frames, copied)

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
