"""The synchronous SQLite core of the store: one connection, used by one thread at a time.

The sync-bracket rules are ``_ingest``'s; here the epoch lives in ``meta`` and, with the open
brackets, is mirrored in memory (one process owns a SQLite file), reloaded after a rollback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import apsw

from wire import EventRecord

from .._errors import StoreError
from ..views import SearchHits
from . import _availability as availability
from ._ingest import DeletedKey, apply_prepared
from ._prepared import UPSERT_COLUMNS, PreparedEvents, prepare_events
from ._queries import (
    SQLITE,
    ObjectQuery,
    count_sql,
    get_object_sql,
    kind_overview,
    kind_overview_sql,
    operation_rows,
    page_of,
    query_sql,
    resume_points_sql,
    stale_objects_where,
)
from ._records import (
    AccountScope,
    AvailabilityOutcome,
    BatchOutcome,
    ChangeCursor,
    ChangePage,
    KindChange,
    KindOverview,
    ObjectPage,
    ObjectRef,
    ResumePoint,
    StoredObject,
    UnavailableKind,
    group_of,
)
from ._schema import migrate
from ._sqlite_records import RecordTables
from ._views import (
    IndexedRows,
    SearchRequest,
    ViewQuery,
    ViewRow,
    read_views,
    search_hits,
    upsert_view_if_current_sql,
    upsert_view_sql,
)
from ._views_build import build_views

log = logging.getLogger("server.store")

_UPSERT = (
    f"INSERT INTO objects({', '.join(UPSERT_COLUMNS)})"
    f" VALUES ({','.join('?' * len(UPSERT_COLUMNS))})"
    " ON CONFLICT(account, grp, kind, namespace, name) DO UPDATE SET"
    # Not kind: it is in objects_key, and naming an indexed column here makes SQLite rewrite
    # the index entry on every update (~6 us a row, bench_server); the conflict matched it.
    " api_version=excluded.api_version, uid=excluded.uid,"
    " resource_version=excluded.resource_version, epoch=excluded.epoch,"
    " updated_at_ms=excluded.updated_at_ms, labels=excluded.labels, body=excluded.body"
)
# Operation results (issue 6): an object the watch already stored in a newer version stays.
_UPSERT_NEWER = (
    _UPSERT + " WHERE NOT (objects.resource_version GLOB '[0-9]*')"
    " OR NOT (excluded.resource_version GLOB '[0-9]*')"
    " OR CAST(excluded.resource_version AS INTEGER) > CAST(objects.resource_version AS INTEGER)"
)
_DELETE = "DELETE FROM objects WHERE account=? AND grp=? AND kind=? AND namespace=? AND name=?"
# A watch's DELETED removes only the object of its uid (_ingest: "Deletions by uid").
_DELETE_UID = (
    "DELETE FROM objects WHERE account=?1 AND grp=?2 AND kind=?3 AND namespace=?4 AND name=?5"
    " AND (?6 = '' OR uid = '' OR uid = ?6)"
)
_UPSERT_VIEW = upsert_view_sql("?")

_UPSERT_VIEW_IF_CURRENT = upsert_view_if_current_sql("?", SQLITE.key_match())
AUTOCHECKPOINT_PAGES = 10_000
# The memory the store's file may take in the server, whatever its size: each connection
# maps at most this much of the file (the rest is read into its page cache, ``cache_size``).
# Every connection's map counts in the process's RSS on its own (three connections that read
# the same 256 MB showed 686 MB), so the writer's and the view readers' (``_sqlite_views``)
# share one budget: 256 MiB of file pages, beside 64 + 2 x 32 MiB of page caches.
# bench_server --objects 1000000: the server's RSS stays there (about 400 MB with 1M objects).
WRITER_MMAP_BYTES = 128 * 2**20
READER_MMAP_BYTES = 64 * 2**20


class SqliteCore(RecordTables):
    """The store's operations on one SQLite connection. Not thread-safe: callers serialize."""

    def __init__(self, path: str, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self.path = path
        try:
            self._conn = apsw.Connection(path)
        except apsw.Error as exc:
            raise StoreError(f"cannot open the SQLite store {path!r}: {exc}") from exc
        try:
            self._set_up(now_ms)
        except BaseException:
            # Closed here, not left to whichever thread collects this object (SqliteStore).
            self._conn.close()
            raise

    def _set_up(self, now_ms: Callable[[], int]) -> None:
        path = self.path
        try:
            # First: another process (a second server) may be opening the same file.
            self._conn.execute("PRAGMA busy_timeout=5000")
            mode = _wal_mode(self._conn)
            # A file database is in WAL mode; an in-memory one keeps its journal in memory.
            self.wal = str(mode).lower() == "wal"
            self.page_size = int(self._conn.execute("PRAGMA page_size").get)
            self._conn.execute("PRAGMA synchronous=NORMAL")
            # SQLite's own checkpoint, inside the COMMIT that crosses this many pages, until
            # the store's upkeep (a WalCheckpointer) takes over. Measured (bench_server):
            # the default 1,000 pages cost about a quarter of the ingest rate.
            self.set_autocheckpoint(AUTOCHECKPOINT_PAGES)
            self._conn.execute(f"PRAGMA mmap_size={WRITER_MMAP_BYTES}")
            self._conn.execute("PRAGMA cache_size=-65536")
            migrate(self._conn, now_ms())
        except apsw.Error as exc:
            raise StoreError(f"cannot open the SQLite store {path!r}: {exc}") from exc
        self.indexed = IndexedRows()
        self._load_sync_state()
        self._build_views()

    def _build_views(self) -> None:
        """Index the objects stored before the view index existed (once: ``view_state``)."""
        if int(self._conn.execute("SELECT built FROM view_state").get):
            return

        def build() -> None:
            if int(self._conn.execute("SELECT built FROM view_state").get):
                return  # another process built it while this one waited for the lock
            self._index_views(missing_only=False)
            self._conn.execute("UPDATE view_state SET built = 1")

        self._write(build)

    def fill_views(self) -> int:
        """Write the view rows of the objects that have none; how many. (One process owns
        the file, so none are missing but after a fault: the same call as PostgreSQL's.)"""
        written: int = self._write(lambda: self._index_views(missing_only=True))
        return written

    def _index_views(self, *, missing_only: bool) -> int:
        return build_views(
            lambda sql, params: self._conn.execute(sql, params).fetchall(),
            lambda rows: self._conn.executemany(_UPSERT_VIEW, rows),
            SQLITE,
            missing_only=missing_only,
        )

    def set_autocheckpoint(self, pages: int) -> None:
        """Let SQLite checkpoint inside the COMMIT that makes the log ``pages`` long (0: never;
        the store's WalCheckpointer does it)."""
        self._conn.execute(f"PRAGMA wal_autocheckpoint={int(pages)}")

    def _load_sync_state(self) -> None:
        self._epoch = int(self._conn.execute("SELECT value FROM meta WHERE key='epoch'").get)
        self._open_syncs: dict[tuple[str, str, str, str], int] = {
            (a, g, k.lower(), s): e
            for a, g, k, s, e in self._conn.execute(
                "SELECT account, grp, kind, scope, begin_epoch FROM sync_state"
            )
        }

    def close(self) -> None:
        """Close the connection, the log copied into the database file first (a clean file:
        the next open has nothing to recover). A checkpoint that fails (another process holds
        the database) is logged: the log is still complete, and the next open replays it."""
        if self.wal:
            try:
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except apsw.Error as exc:
                log.warning("store %s: the checkpoint at close failed: %s", self.path, exc)
        self._conn.close()

    def ping(self) -> None:
        """Read one row of the database file: raises StoreError when it cannot be read."""
        try:
            self._conn.execute("SELECT value FROM meta WHERE key='epoch'").fetchall()
        except apsw.Error as exc:
            raise StoreError(f"the SQLite store {self.path!r} cannot be read: {exc}") from exc

    # -- transactions -------------------------------------------------------------------

    def _write(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` in one write transaction; any failure rolls it back and reloads state."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            result = fn()
            self._conn.execute("COMMIT")
            return result
        except BaseException as exc:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            self._load_sync_state()
            self.indexed.clear()  # it may name rows the rollback took back
            if isinstance(exc, apsw.Error):
                raise StoreError(f"store write failed: {exc}") from exc
            raise

    def _forget_views(self) -> None:
        self.indexed.clear()

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        try:
            return self._conn.execute(sql, params).fetchall()
        except apsw.Error as exc:
            raise StoreError(f"store read failed: {exc}") from exc

    # -- events -------------------------------------------------------------------------

    def apply_events(self, records: Sequence[EventRecord], account: str | None) -> BatchOutcome:
        """Check every record (InvalidRecord names the first bad one, before anything is
        written), then write them in one transaction."""
        prepared = prepare_events(records, account)
        return self._write(lambda: self._apply(prepared))  # type: ignore[no-any-return]

    def _apply(self, prepared: PreparedEvents) -> BatchOutcome:
        outcome, self._epoch = apply_prepared(
            prepared, _Writer(self), self._open_syncs, self._epoch, self._now_ms()
        )
        return outcome

    def apply_operation_objects(self, records: Sequence[EventRecord]) -> BatchOutcome:
        """Objects an operation returned (issue 6): upsert unless the stored version is newer,
        delete DELETED ones; resume points and sync brackets are left alone."""

        def write() -> BatchOutcome:
            rows, gone, views = operation_rows(records, self._epoch, self._now_ms())
            self._conn.executemany(_UPSERT_NEWER, rows)
            self._conn.executemany(_UPSERT_VIEW_IF_CURRENT, views)
            self._conn.executemany(_DELETE, gone)
            # What it wrote may differ from what the ingest path last wrote, or be gone.
            self.indexed.forget(r[:5] for r in gone)
            self.indexed.forget(tuple(v[:5]) for v in views)
            return BatchOutcome(upserted=len(rows), deleted=len(gone))

        return self._write(write)  # type: ignore[no-any-return]

    # -- what the agent may see (the SQL is _availability's, shared with PostgreSQL) -------

    def apply_kind_changes(self, changes: Sequence[KindChange]) -> AvailabilityOutcome:
        outcome: AvailabilityOutcome = self._write(
            lambda: availability.apply_kind_changes(self._exec, SQLITE, changes, self._now_ms())
        )
        return outcome

    def apply_account_scope(self, scope: AccountScope) -> AvailabilityOutcome:
        outcome: AvailabilityOutcome = self._write(
            lambda: availability.apply_account_scope(self._exec, SQLITE, scope)
        )
        return outcome

    def unavailable_kinds(self, account: str | None) -> list[UnavailableKind]:
        return availability.unavailable_kinds(self._read, account)

    # -- reads (the SQL is _queries', shared with PostgreSQL) ---------------------------

    def get_object(
        self, account: str, api_version_or_group: str, kind: str, namespace: str, name: str
    ) -> StoredObject | None:
        rows = self._read(
            get_object_sql(SQLITE),
            (account, group_of(api_version_or_group), kind, namespace, name),
        )
        return StoredObject(*rows[0]) if rows else None

    def query_objects(self, q: ObjectQuery) -> ObjectPage:
        return page_of(self._read(*query_sql(SQLITE, q)), q.limit)

    def count_objects(self, account: str | None, kind: str | None) -> int:
        rows = self._read(*count_sql(SQLITE, account, kind))
        return int(rows[0][0])

    def kind_overview(self) -> list[KindOverview]:
        objects, watches = kind_overview_sql(SQLITE)
        return kind_overview(self._read(objects), self._read(watches))

    def resume_points(self, account: str) -> list[ResumePoint]:
        return [ResumePoint(*row) for row in self._read(resume_points_sql(SQLITE), (account,))]

    def get_objects(self, keys: Sequence[tuple[str, str, str, str, str]]) -> list[StoredObject]:
        found = (self.get_object(*key) for key in keys)
        return [o for o in found if o is not None]

    # -- Deck's views (``_views``): one call, so no write comes between its statements --------

    def read_views(self, queries: Sequence[ViewQuery]) -> list[list[ViewRow]]:
        return read_views(SQLITE, self._read, queries)

    def search_views(self, request: SearchRequest) -> SearchHits:
        return search_hits(SQLITE, self._read, request)

    # -- the change log: PostgreSQL's. One process owns a SQLite file, so its change feed is
    # -- its own ingest and nothing is logged: every read is empty, every trim a no-op.

    def read_changes(self, cursor: ChangeCursor | None, limit: int) -> ChangePage:
        return ChangePage([], cursor or ChangeCursor("", 0))

    def trim_changes(self, keep_ms: int, max_rows: int) -> int:
        return 0


class _Writer:
    """``_ingest.BatchWriter`` on the core's connection, inside its write transaction."""

    def __init__(self, core: SqliteCore) -> None:
        self._core = core
        self._conn = core._conn

    def upsert(self, rows: list[Sequence[Any]]) -> None:
        self._conn.executemany(_UPSERT, rows)

    def upsert_views(self, rows: list[tuple[str, ...]]) -> None:
        fresh = self._core.indexed.changed(rows)
        if fresh:
            self._conn.executemany(_UPSERT_VIEW, fresh)

    def delete(self, keys: list[DeletedKey]) -> None:
        self._conn.executemany(_DELETE_UID, keys)
        self._core.indexed.forget(k[:5] for k in keys)

    def begin_sync(self, r: EventRecord, group: str, now_ms: int) -> int:
        epoch = self._core._epoch + 1
        self._core._epoch = epoch  # rolled back with the transaction (_load_sync_state)
        conn = self._conn
        conn.execute("UPDATE meta SET value=? WHERE key='epoch'", (str(epoch),))
        conn.execute(
            "INSERT OR REPLACE INTO sync_state VALUES (?,?,?,?,?,?)",
            (r.account, group, r.kind, r.scope, epoch, now_ms),
        )
        conn.execute(
            "DELETE FROM resource_versions WHERE account=? AND api_version=? AND kind=?"
            " AND scope=?",
            (r.account, r.api_version, r.kind, r.scope),
        )
        return epoch

    def end_sync(self, r: EventRecord, group: str, begin_epoch: int) -> list[ObjectRef]:
        self._conn.execute(
            "DELETE FROM sync_state WHERE account=? AND grp=? AND kind=? AND scope=?",
            (r.account, group, r.kind, r.scope),
        )
        where, params = stale_objects_where(SQLITE, r, group, begin_epoch)
        rows: list[Any] = self._conn.execute(
            f"DELETE FROM objects WHERE {where} RETURNING account, api_version, kind, namespace,"
            " name",
            params,
        ).fetchall()
        swept = [ObjectRef(*row) for row in rows]
        self._core.indexed.forget(
            (o.account, group_of(o.api_version), o.kind, o.namespace, o.name) for o in swept
        )
        return swept

    def save_resume_points(self, rows: list[tuple[str, str, str, str, str, int]]) -> None:
        self._conn.executemany(
            "INSERT OR REPLACE INTO resource_versions VALUES (?,?,?,?,?,?)", rows
        )

    def clear_unavailable(self, r: EventRecord, group: str) -> UnavailableKind | None:
        return availability.clear_on_sync(self._core._exec, r.account, group, r.kind, r.scope)


_WAL_SWITCH_SECONDS = 5.0


def _wal_mode(conn: apsw.Connection) -> object:
    """``PRAGMA journal_mode=WAL``, retried while another connection holds the file: the
    switch needs an exclusive lock and SQLite answers BUSY at once, without its busy
    handler, when two processes open a new file together (test_store's replicas test found
    it). Returns the mode now in force."""
    deadline = time.monotonic() + _WAL_SWITCH_SECONDS
    while True:
        try:
            return conn.execute("PRAGMA journal_mode=WAL").get
        except apsw.BusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)  # a worker thread: blocking here blocks no trio task


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: resume-point ages must survive restarts."""
    return int(time.time() * 1000)
