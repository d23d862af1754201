"""The synchronous PostgreSQL core of the store: every method runs on a connection it is given
(one of the pool's, in a worker thread; see ``_threads``), as one transaction.

The sync-bracket rules are ``_ingest``'s. Unlike SQLite's core, nothing is kept in memory
between calls: the epoch is the ``object_epoch`` sequence and the open brackets are the
``sync_state`` rows, read at the start of each batch, because another connection (or, later,
another server replica) may have moved them. Connections are in autocommit mode, so a read
is one statement and a write is an explicit transaction; a connection is never left inside a
transaction between calls.

Batch ingest: each run of object writes in a batch goes in with a binary COPY into a
temporary table of the connection (not WAL-logged, emptied by the writer) and one INSERT ...
SELECT ... ON CONFLICT DO UPDATE from it. Measured against ``executemany`` of the prepared
upsert in pipeline mode (bench_server's 500 x 4.4 KB batches, alternating rounds on a loaded
2-core machine): COPY 12-23k events/s, executemany 8-15k, and a third less Python CPU: the
server parses one statement, not 500 Bind/Execute pairs, and the rows travel in binary.
(``unnest`` of 12 array parameters instead of the temporary table: 5-6k.) Large values are
compressed with lz4 (``_prefer_lz4``). Objects are keyed by one column (``_okey``): the
upsert's index work is then about half what the five-column key's was.

Every transaction that writes objects ends by appending one row to the change log (the other
replicas' feeds read it: ``_changes``, ``_pg_changes``); it is small (no bodies), one more
statement per batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import errors, pq

from wire import EventRecord

from .._errors import StoreError
from ..views import SearchHits
from . import _availability as availability
from . import _pg_changes as changes
from ._changes import CHANGES_CHANNEL, change_notice
from ._ingest import DeletedKey, SyncKey, apply_prepared
from ._pg_notify import notify
from ._pg_records import PgRecordTables, exec_of
from ._pg_schema import migrate_pg
from ._prepared import UPSERT_COLUMNS, PreparedEvents, prepare_events
from ._queries import (
    POSTGRESQL,
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
from ._url import redact
from ._views import (
    VIEW_COLUMNS,
    SearchRequest,
    ViewQuery,
    ViewRow,
    pg_views_in,
    read_views,
    search_hits,
    upsert_view_if_current_sql,
    upsert_view_sql,
    view_key,
)
from ._views_build import build_views

log = logging.getLogger("server.store")
T = TypeVar("T")
Conn = psycopg.Connection[tuple[Any, ...]]
Cursor = psycopg.Cursor[tuple[Any, ...]]

_ATTEMPTS = 3  # runs of a transaction PostgreSQL aborted for a deadlock or serialization
_CONNECT_TIMEOUT_S = "10"  # libpq waits forever by default; a URL's connect_timeout wins
# A peer that vanished without a word (a failover, a dropped NAT entry) must break the
# connection, not hang a worker or the LISTEN thread in a read forever: TCP keepalives after
# 30 s idle, and unacknowledged data gives up after 60 s (a URL's own settings win; libpq
# ignores them on unix sockets).
_TCP_SETTINGS = {
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
    "tcp_user_timeout": "60000",
}

_UPSERT = (
    f"INSERT INTO objects({', '.join(UPSERT_COLUMNS)})"
    f" VALUES ({','.join(['%s'] * len(UPSERT_COLUMNS))})"
    " ON CONFLICT (okey) DO UPDATE SET"
    " api_version=excluded.api_version, uid=excluded.uid,"
    " resource_version=excluded.resource_version, epoch=excluded.epoch,"
    " updated_at_ms=excluded.updated_at_ms, labels=excluded.labels, body=excluded.body"
)
# Operation results (issue 6): an object the watch already stored in a newer version stays.
# CASE, not OR: SQL does not promise to test the pattern before trying the cast.
_NUMERIC = "'^[0-9]{1,30}$'"
_UPSERT_NEWER = (
    _UPSERT + f" WHERE CASE WHEN objects.resource_version ~ {_NUMERIC}"
    f" AND excluded.resource_version ~ {_NUMERIC}"
    " THEN excluded.resource_version::numeric > objects.resource_version::numeric"
    " ELSE TRUE END"
)
# Batch ingest (see the module's docstring): a batch's objects are COPied (binary) into a
# temporary table of the connection, upserted from at once and emptied (``_Writer.upsert``);
# its space is reclaimed after each such transaction (``_RECLAIM_IN``).
_IN_COLUMNS = {
    "account": "text",
    "grp": "text",
    "kind": "text",
    "namespace": "text",
    "name": "text",
    "api_version": "text",
    "uid": "text",
    "resource_version": "text",
    "epoch": "bigint",
    "updated_at_ms": "bigint",
    "labels": "text",  # JSON text: cast to jsonb by the upsert
    "body": "bytea",
}
assert tuple(_IN_COLUMNS) == UPSERT_COLUMNS
# ord: the row's place in the COPY, which writes them in key order (``_Writer.upsert``).
_IN_TYPES = [*_IN_COLUMNS.values(), "integer"]
_CREATE_IN = (
    "CREATE TEMPORARY TABLE objects_in("
    + ", ".join(f"{c} {t}" for c, t in _IN_COLUMNS.items())
    + ", ord integer)"
)
# From PostgreSQL 14 the ingest tables have no ON COMMIT action: ON COMMIT DELETE ROWS
# truncates their files (heap, TOAST, its index) at every commit, ~10 % of a batch's time in
# bench_server (one session, alternating: 10.0-11.5k against 9.2-10.6k events/s;
# "DataFileTruncate" in pg_stat_activity). The writer deletes the rows it read instead, and
# this VACUUM, which keeps the files' pages (TRUNCATE false) and makes them free for the next
# COPY, holds each table at about one batch's size. From 16 it skips the database-wide
# frozen-xid update (a lock all VACUUMs of the database take in turn). Before 14 a VACUUM of a
# temporary table cannot reclaim rows that any other session's snapshot might still see, so a
# long one (a backup) would let the tables grow: there they are emptied at each commit.
_VACUUM_FROM = 140000
_SKIP_DATABASE_STATS_FROM = 160000
_RECLAIM_IN = "VACUUM (TRUNCATE false) objects_in, views_in"
_RECLAIM_IN_16 = "VACUUM (TRUNCATE false, SKIP_DATABASE_STATS true) objects_in, views_in"
_COPY_IN = f"COPY objects_in ({', '.join(UPSERT_COLUMNS)}, ord) FROM STDIN (FORMAT BINARY)"
_UPSERT_FROM_IN = (
    f"INSERT INTO objects({', '.join(UPSERT_COLUMNS)})"
    f" SELECT {', '.join(c + '::jsonb' if c == 'labels' else c for c in UPSERT_COLUMNS)}"
    # In key order: writers that overlap lock their rows in the same order (fewer deadlocks).
    # A heap read alone is not always that order: the COPY fills pages a VACUUM freed.
    " FROM objects_in ORDER BY ord"
    " ON CONFLICT (okey) DO UPDATE SET"
    " api_version=excluded.api_version, uid=excluded.uid,"
    " resource_version=excluded.resource_version, epoch=excluded.epoch,"
    " updated_at_ms=excluded.updated_at_ms, labels=excluded.labels, body=excluded.body"
)
_DELETE = f"DELETE FROM objects WHERE {POSTGRESQL.key_match()}"
# A watch's DELETED removes only the object of its uid (_ingest: "Deletions by uid").
_DELETE_UID = _DELETE + " AND (%s = '' OR uid = '' OR uid = %s)"
_UPSERT_VIEW = upsert_view_sql("%s")
_CREATE_VIEWS_IN, _COPY_VIEWS_IN, _UPSERT_VIEWS_FROM_IN = pg_views_in()
_UPSERT_VIEW_IF_CURRENT = upsert_view_if_current_sql("%s", POSTGRESQL.key_match())
# The view index is built from the objects once (``_views``), by one replica at a time.
_VIEWS_LOCK = 0x6B75_6265_7376_64


def connect(
    conninfo: str, password_file: str, *, ingest: bool = True, statement_timeout_ms: int = 0
) -> Conn:
    """A new autocommit connection; raises StoreError naming the server (never a password).
    ``ingest``: ready for batch ingest (lz4, the COPY's temporary table); a connection that
    only listens or pings needs neither. ``statement_timeout_ms`` (0: none) is the
    connection's ``statement_timeout``; a URL's own ``options`` come after it, so theirs win."""
    params: dict[str, Any] = {}
    if password_file:
        try:
            # Only the trailing newline an editor or `kubectl create secret` may add.
            params["password"] = Path(password_file).read_text().rstrip("\r\n")
        except OSError as exc:
            raise StoreError(
                f"cannot read the PostgreSQL password file {password_file}: {exc.strerror or exc}"
            ) from exc
    try:
        given = psycopg.conninfo.conninfo_to_dict(conninfo)
        if "connect_timeout" not in given:
            params["connect_timeout"] = _CONNECT_TIMEOUT_S
        if "application_name" not in given:
            params["application_name"] = "kubesvc-server"
        params.update({k: v for k, v in _TCP_SETTINGS.items() if k not in given})
        if statement_timeout_ms > 0:
            ours = f"-c statement_timeout={statement_timeout_ms}"
            params["options"] = f"{ours} {given['options']}" if given.get("options") else ours
        conn: Conn = psycopg.connect(conninfo, autocommit=True, **params)
        try:
            if ingest:
                _prefer_lz4(conn)
                # This connection's own, for batch ingest.
                on_commit = " ON COMMIT DELETE ROWS" if not _vacuums_ingest(conn) else ""
                conn.execute(_CREATE_IN + on_commit)
                conn.execute(_CREATE_VIEWS_IN + on_commit)
        except psycopg.Error:
            conn.close()
            raise
        return conn
    except psycopg.Error as exc:
        raise StoreError(
            f"cannot connect to the PostgreSQL store {redact(conninfo)}: {exc}"
        ) from exc


def _prefer_lz4(conn: Conn) -> None:
    """Compress large values (object bodies) with lz4 rather than pglz, for this session.

    The body of a 4.4 KB object is compressed where it first lands, the COPY's temporary
    table (the upsert copies the compressed value as it is): with pglz that cost about half
    the server's CPU per ingested event; with lz4 bench_server went from ~24k to ~37-41k
    events/s, the database the same size. A server built without lz4 (or older than 14)
    refuses the setting and keeps pglz: slower, not wrong.
    """
    try:
        conn.execute("SET default_toast_compression = lz4")
    except psycopg.Error as exc:
        log.info("PostgreSQL store: no lz4 compression here, pglz it is (%s)", exc)


def _vacuums_ingest(conn: Conn) -> bool:
    """Whether this server's ingest tables are vacuumed after each batch (``_RECLAIM_IN``),
    not emptied at each commit."""
    return conn.info.server_version >= _VACUUM_FROM


def _reclaim_ingest_tables(conn: Conn) -> None:
    """Free the space of the rows a batch left dead in the connection's temporary tables
    (``_RECLAIM_IN``), committed or rolled back. A failure is logged, not raised: the batch's
    outcome stands, and a broken connection is the pool's to replace."""
    if is_broken(conn) or not _vacuums_ingest(conn):
        return
    new = conn.info.server_version >= _SKIP_DATABASE_STATS_FROM
    try:
        conn.execute(_RECLAIM_IN_16 if new else _RECLAIM_IN)
    except psycopg.Error as exc:
        log.warning("PostgreSQL store: could not reclaim the ingest tables' space: %s", exc)


def is_broken(conn: Conn) -> bool:
    """A connection not to reuse: closed, broken, or (after a failure) not idle."""
    return conn.closed or conn.broken or conn.info.transaction_status != pq.TransactionStatus.IDLE


class PgCore(PgRecordTables):
    """The store's operations on a given connection; holds no connection and no state of
    its own, so any number of threads may use it at once (each with its own connection).
    ``writer`` names this store in the change log (its own rows are not read back)."""

    def __init__(self, now_ms: Callable[[], int], writer: str = "") -> None:
        self._now_ms = now_ms
        self.writer = writer

    def migrate(self, conn: Conn) -> int:
        version = migrate_pg(conn, self._now_ms())
        self._build_views(conn)
        return version

    def _build_views(self, conn: Conn) -> None:
        """Index the objects without a view row: all of them once after the migration, and
        at every start those that replicas of an older version wrote meanwhile (a rolling
        upgrade). Replicas starting together wait for the one building it."""
        self.fill_views(conn)

    def fill_views(self, conn: Conn) -> int:
        """Write the view rows of the objects that have none (``_views_build``); how many."""

        def fill(cur: Cursor) -> int:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_VIEWS_LOCK,))
            cur.execute("SELECT built FROM view_state")
            row = cur.fetchone()
            built = bool(row is not None and row[0])

            def read(sql: str, params: Sequence[Any]) -> list[Any]:
                cur.execute(sql, params)
                return cur.fetchall()

            # The first build reads every object without locks (nothing else writes rows
            # yet); a fill locks the few it indexes against a concurrent deletion.
            written = build_views(
                read,
                lambda rows: cur.executemany(_UPSERT_VIEW, rows),
                POSTGRESQL,
                missing_only=built,
                lock="FOR KEY SHARE" if built else "",
            )
            if not built:
                cur.execute("UPDATE view_state SET built = 1")
            elif written:
                log.info("view index: %d objects stored without their view row indexed", written)
            return written

        return self._tx(conn, fill)

    # -- transactions -------------------------------------------------------------------

    def _tx(self, conn: Conn, fn: Callable[[Cursor], T]) -> T:
        """``fn`` in one transaction; any failure rolls it back (StoreError for the driver's).

        A transaction PostgreSQL aborted to break a deadlock (or a serialization failure)
        is run again from the start, up to _ATTEMPTS times in all: two writers of the same
        objects (a session's batch and an operation's result, later two replicas) may lock
        rows in different orders, and the loser's work is still to be done. ``fn`` must be
        safe to run again (every caller here reads what it needs inside the transaction).
        """
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                with conn.transaction(), conn.cursor() as cur:
                    return fn(cur)
            except (errors.DeadlockDetected, errors.SerializationFailure) as exc:
                if attempt == _ATTEMPTS:
                    raise StoreError(f"store write failed {attempt} times in a row: {exc}") from exc
                log.warning("store write aborted (%s), trying again", exc.sqlstate)
            except psycopg.Error as exc:
                raise StoreError(f"store write failed: {exc}") from exc
        raise AssertionError("unreachable")  # the loop returns or raises

    def _read(self, conn: Conn, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"store read failed: {exc}") from exc

    # -- events -------------------------------------------------------------------------

    def apply_events(
        self, conn: Conn, records: Sequence[EventRecord], account: str | None
    ) -> BatchOutcome:
        """Check every record (InvalidRecord names the first bad one, before anything is
        written), then write them in one transaction."""
        prepared = prepare_events(records, account)
        try:
            outcome = self._tx(conn, lambda cur: self._apply(cur, prepared))
        finally:
            if any(row is not None for row in prepared.rows):  # the temporary tables were used
                _reclaim_ingest_tables(conn)
        self._announce(conn, outcome.change_seq)
        return outcome

    def _apply(self, cur: Cursor, prepared: PreparedEvents) -> BatchOutcome:
        accounts = sorted({r.account for r in prepared.records})
        cur.execute(
            "SELECT account, grp, kind, scope, begin_epoch FROM sync_state WHERE account = ANY(%s)",
            (accounts,),
        )
        open_syncs: dict[SyncKey, int] = {(a, g, k, s): e for a, g, k, s, e in cur.fetchall()}
        outcome, _ = apply_prepared(prepared, _Writer(cur), open_syncs, _epoch(cur), self._now_ms())
        # Last, after every object row is locked (``_changes`` says why).
        seq = changes.append_change(cur, self.writer, prepared.records, outcome.swept)
        return replace(outcome, change_seq=seq)

    def apply_operation_objects(self, conn: Conn, records: Sequence[EventRecord]) -> BatchOutcome:
        """Objects an operation returned (issue 6): upsert unless the stored version is newer,
        delete DELETED ones; resume points and sync brackets are left alone."""

        def write(cur: Cursor) -> BatchOutcome:
            rows, gone, views = operation_rows(records, _epoch(cur), self._now_ms())
            if rows:
                cur.executemany(_UPSERT_NEWER, rows)
            if views:
                cur.executemany(_UPSERT_VIEW_IF_CURRENT, views)
            if gone:
                cur.executemany(_DELETE, gone)
            seq = changes.append_change(cur, self.writer, records, ())
            return BatchOutcome(upserted=len(rows), deleted=len(gone), change_seq=seq)

        outcome = self._tx(conn, write)
        self._announce(conn, outcome.change_seq)
        return outcome

    # -- what the agent may see (the SQL is _availability's, shared with SQLite) ---------

    def apply_kind_changes(self, conn: Conn, changes_: Sequence[KindChange]) -> AvailabilityOutcome:
        now = self._now_ms()
        return self._availability(
            conn,
            lambda cur: availability.apply_kind_changes(exec_of(cur), POSTGRESQL, changes_, now),
        )

    def apply_account_scope(self, conn: Conn, scope: AccountScope) -> AvailabilityOutcome:
        return self._availability(
            conn,
            lambda cur: availability.apply_account_scope(exec_of(cur), POSTGRESQL, scope),
        )

    def _availability(
        self, conn: Conn, fn: Callable[[Cursor], AvailabilityOutcome]
    ) -> AvailabilityOutcome:
        """``fn`` in one transaction that ends, like every write of objects, with its change
        row (the objects it removed, for the other replicas' feeds)."""

        def write(cur: Cursor) -> AvailabilityOutcome:
            outcome = fn(cur)
            seq = changes.append_change(cur, self.writer, (), outcome.swept)
            return replace(outcome, change_seq=seq)

        outcome = self._tx(conn, write)
        self._announce(conn, outcome.change_seq)
        return outcome

    def unavailable_kinds(self, conn: Conn, account: str | None) -> list[UnavailableKind]:
        return availability.unavailable_kinds(
            lambda sql, params: self._read(conn, sql.replace("?", "%s"), params), account
        )

    def _announce(self, conn: Conn, seq: int) -> None:
        """NOTIFY the other replicas of the change row ``seq`` just committed (0: none), on
        the same connection right after the commit: no thread hop, no wait for the pool.

        Not inside the write's transaction, on purpose: PostgreSQL serializes the commits of
        transactions that NOTIFY (a global lock held through the commit's WAL flush), which
        would allow every replica's writers one flush at a time. This statement has no
        transaction id and no flush to wait for. A failure is logged, never raised (the write
        is committed; the other replicas' polls cover a missing notification)."""
        if not seq:
            return
        try:
            notify(conn, CHANGES_CHANNEL, change_notice(self.writer, seq))
        except StoreError as exc:
            log.warning("after change %d (the others poll): %s", seq, exc)

    # -- reads (the SQL is _queries', shared with SQLite) -------------------------------

    def get_object(
        self,
        conn: Conn,
        account: str,
        api_version_or_group: str,
        kind: str,
        namespace: str,
        name: str,
    ) -> StoredObject | None:
        rows = self._read(
            conn,
            get_object_sql(POSTGRESQL),
            (account, group_of(api_version_or_group), kind, namespace, name),
        )
        return StoredObject(*rows[0]) if rows else None

    def query_objects(self, conn: Conn, q: ObjectQuery) -> ObjectPage:
        return page_of(self._read(conn, *query_sql(POSTGRESQL, q)), q.limit)

    def count_objects(self, conn: Conn, account: str | None, kind: str | None) -> int:
        rows = self._read(conn, *count_sql(POSTGRESQL, account, kind))
        return int(rows[0][0])

    def kind_overview(self, conn: Conn) -> list[KindOverview]:
        objects, watches = kind_overview_sql(POSTGRESQL)
        return kind_overview(self._read(conn, objects), self._read(conn, watches))

    def resume_points(self, conn: Conn, account: str) -> list[ResumePoint]:
        rows = self._read(conn, resume_points_sql(POSTGRESQL), (account,))
        return [ResumePoint(*row) for row in rows]

    def get_objects(
        self, conn: Conn, keys: Sequence[tuple[str, str, str, str, str]]
    ) -> list[StoredObject]:
        try:
            return changes.get_objects(conn, keys)
        except psycopg.Error as exc:
            raise StoreError(f"store read failed: {exc}") from exc

    # -- Deck's views (``_views``): one snapshot for all the statements of a call ---------

    def read_views(self, conn: Conn, queries: Sequence[ViewQuery]) -> list[list[ViewRow]]:
        return self._snapshot(conn, lambda execute: read_views(POSTGRESQL, execute, queries))

    def search_views(self, conn: Conn, request: SearchRequest) -> SearchHits:
        return self._snapshot(conn, lambda execute: search_hits(POSTGRESQL, execute, request))

    def _snapshot(
        self, conn: Conn, fn: Callable[[Callable[[str, Sequence[Any]], list[Any]]], T]
    ) -> T:
        """``fn(execute)`` in one read-only REPEATABLE READ transaction (one snapshot)."""
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")

                def execute(sql: str, params: Sequence[Any]) -> list[Any]:
                    cur.execute(sql, params)
                    return cur.fetchall()

                return fn(execute)
        except psycopg.Error as exc:
            raise StoreError(f"store read failed: {exc}") from exc

    # -- the change log (``_pg_changes``) -----------------------------------------------

    def read_changes(self, conn: Conn, cursor: ChangeCursor | None, limit: int) -> ChangePage:
        try:
            if cursor is None:
                return ChangePage([], changes.start_cursor(conn))
            return changes.read_changes(conn, cursor, self.writer, limit)
        except psycopg.Error as exc:
            raise StoreError(f"change log read failed: {exc}") from exc

    def trim_changes(self, conn: Conn, keep_ms: int, max_rows: int) -> int:
        return self._tx(conn, lambda cur: changes.trim_changes(cur, keep_ms, max_rows))


def _epoch(cur: Cursor) -> int:
    """The current epoch: the sequence's last value (non-transactional, never goes back)."""
    cur.execute("SELECT last_value FROM object_epoch")
    row = cur.fetchone()
    return int(row[0]) if row else 0


class _Writer:
    """``_ingest.BatchWriter`` on a cursor inside the batch's transaction."""

    def __init__(self, cur: Cursor) -> None:
        self._cur = cur

    def upsert(self, rows: list[Sequence[Any]]) -> None:
        """COPY the rows (the last of each object: one statement may not update a row twice)
        into the connection's ``objects_in``, then one INSERT ... SELECT ... ON CONFLICT."""
        last: dict[tuple[Any, ...], Sequence[Any]] = {}
        for row in rows:
            last[(row[0], row[1], row[2].lower(), row[3], row[4])] = row
        cur = self._cur
        with cur.copy(_COPY_IN) as copy:
            copy.set_types(_IN_TYPES)
            # The coordinates' order is the key's (``_okey``).
            for ord_, key in enumerate(sorted(last)):
                copy.write_row([*last[key], ord_])
        cur.execute(_UPSERT_FROM_IN)
        # Emptied now: a batch whose upserts a deletion splits runs this again in the same
        # transaction, and the rows of the run before would be written again (a deleted
        # object back, or "cannot affect row a second time"); and nothing else empties it.
        cur.execute("DELETE FROM objects_in")

    def upsert_views(self, rows: list[tuple[str, ...]]) -> None:
        """As ``upsert``: COPY into ``views_in``, then one INSERT ... SELECT ... ON CONFLICT
        (a row per statement would halve the ingest rate)."""
        # The last row of a key wins (one statement may not update a row twice), in key
        # order as the objects' (``upsert``).
        last = {view_key(row): row for row in rows}
        cur = self._cur
        with cur.copy(_COPY_VIEWS_IN) as copy:
            copy.set_types([*["text"] * len(VIEW_COLUMNS), "integer"])
            for ord_, key in enumerate(sorted(last)):
                copy.write_row([*last[key], ord_])
        cur.execute(_UPSERT_VIEWS_FROM_IN)
        cur.execute("DELETE FROM views_in")  # as objects_in (``upsert``)

    def delete(self, keys: list[DeletedKey]) -> None:
        self._cur.executemany(_DELETE_UID, [(*key, key[5]) for key in keys])

    def begin_sync(self, r: EventRecord, group: str, now_ms: int) -> int:
        cur = self._cur
        cur.execute("SELECT nextval('object_epoch')")
        row = cur.fetchone()
        epoch = int(row[0]) if row else 0
        cur.execute(
            "INSERT INTO sync_state VALUES (%s,%s,lower(%s),%s,%s,%s)"
            " ON CONFLICT (account, grp, kind, scope) DO UPDATE"
            " SET begin_epoch=excluded.begin_epoch, started_at_ms=excluded.started_at_ms",
            (r.account, group, r.kind, r.scope, epoch, now_ms),
        )
        cur.execute(
            "DELETE FROM resource_versions WHERE account=%s AND api_version=%s AND kind=%s"
            " AND scope=%s",
            (r.account, r.api_version, r.kind, r.scope),
        )
        return epoch

    def end_sync(self, r: EventRecord, group: str, begin_epoch: int) -> list[ObjectRef]:
        cur = self._cur
        cur.execute(
            "DELETE FROM sync_state WHERE account=%s AND grp=%s AND kind=lower(%s) AND scope=%s",
            (r.account, group, r.kind, r.scope),
        )
        where, params = stale_objects_where(POSTGRESQL, r, group, begin_epoch)
        cur.execute(
            f"DELETE FROM objects WHERE {where}"
            " RETURNING account, api_version, kind, namespace, name",
            params,
        )
        return [ObjectRef(*row) for row in cur.fetchall()]

    def clear_unavailable(self, r: EventRecord, group: str) -> UnavailableKind | None:
        return availability.clear_on_sync(exec_of(self._cur), r.account, group, r.kind, r.scope)

    def save_resume_points(self, rows: list[tuple[str, str, str, str, str, int]]) -> None:
        self._cur.executemany(
            "INSERT INTO resource_versions VALUES (%s,%s,%s,%s,%s,%s)"
            " ON CONFLICT (account, api_version, kind, scope) DO UPDATE"
            " SET resource_version=excluded.resource_version,"
            " updated_at_ms=excluded.updated_at_ms",
            rows,
        )
