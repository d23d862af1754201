"""The change log on PostgreSQL: appended by every object write, read by the other replicas'
feed followers, trimmed by housekeeping (the messages: ``_changes``).

Reading in commit order, not seq order. A sequence value is taken at INSERT, not at COMMIT:
transaction T1 may take seq 10 and commit after T2 took 11 and committed, so "seq > the last
seq I saw" would skip 10 for good. Each row also records its transaction's id (``xid``,
``txid_current()``), and a reader reads *windows between two snapshots*, as PgQ does: the
rows of transactions that snapshot ``since`` did not see committed (its in-progress list, or
ids at or past its xmax) and snapshot ``until`` does. Every committed row falls in exactly
one window, however late it commits; a rolled-back one in none; nobody waits on a timer for
a gap to fill, and a long transaction elsewhere in the cluster holds nothing back (only its
own id is looked up, through the index). Within a window rows come in seq order, in pages
(``after_seq``); for any one object seq order is commit order (``_changes``).

Trimming. Housekeeping deletes the rows older than ``keep_ms`` or beyond the newest
``max_rows`` and keeps, in ``change_trims``, the newest ``at_ms`` (the database's clock) and
the newest ``xid`` it deleted. A reader may have lost rows to a trim only if both hold: the
trim deleted a transaction its ``since`` snapshot did not see finished (xid >= its xmin),
and a row inserted after ``since_ms - COMMIT_GRACE_MS`` (a row is inserted just before its
transaction commits, and the reader needs only rows committed after ``since``). Then it is
told (``ChangePage.lagged``) and its subscribers resync instead of silently missing changes.
Either test alone would cry wolf: the xid test while a long transaction anywhere in the
cluster holds every snapshot's xmin back, the time test after a trim of recent rows the
reader had already read.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from wire import EventRecord

from .._errors import StoreError
from ._changes import change_message, read_change_message
from ._okey import okey_of
from ._queries import OBJECT_COLUMNS
from ._records import Change, ChangeCursor, ChangePage, ObjectRef, StoredObject, group_of

if TYPE_CHECKING:
    from ._pg_core import Conn, Cursor

log = logging.getLogger("server.store")

#: How long before its commit a change row may have been inserted (the commit's WAL flush,
#: on a loaded server), for telling a reader that a trim may have cost it changes.
COMMIT_GRACE_MS = 30_000

_DB_NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

_APPEND = "INSERT INTO changes(writer, records, message) VALUES (%s, %s, %b) RETURNING seq"

_START = f"SELECT txid_current_snapshot()::text, {_DB_NOW_MS}"

# One statement per page: the window's end (a new snapshot unless paging through one),
# whether a trim went past the reader, and the window's rows of other writers after
# ``after``, one more than asked. (Written so the planner estimates a handful of rows: a
# join with change_trims, never analyzed, made it guess thousands and JIT-compile the
# query, 30+ ms a read.)
_READ = f"""
SELECT w.snap::text, w.ms,
       (SELECT t.newest_trimmed_xid >= txid_snapshot_xmin(%(since)s::txid_snapshot)
               AND t.newest_trimmed_ms >= %(since_ms)s::bigint - %(grace_ms)s::bigint
        FROM change_trims t WHERE t.id = 1),
       c.seq, c.writer, c.message
FROM (SELECT coalesce(%(until)s::txid_snapshot, txid_current_snapshot()) AS snap,
             coalesce(%(until_ms)s::bigint, {_DB_NOW_MS}) AS ms) w
LEFT JOIN LATERAL (
    SELECT seq, writer, message FROM changes
    WHERE (xid = ANY(ARRAY(SELECT txid_snapshot_xip(%(since)s::txid_snapshot)))
           OR xid >= txid_snapshot_xmax(%(since)s::txid_snapshot))
      AND xid < txid_snapshot_xmax(w.snap) AND txid_visible_in_snapshot(xid, w.snap)
      AND writer <> %(writer)s AND seq > %(after)s
    ORDER BY seq LIMIT %(limit)s
) c ON TRUE
ORDER BY c.seq
"""

# The cut: the older of "beyond the newest max_rows" and "older than keep_ms". The age scan
# walks the primary key from the oldest row to the first young one: what is to be deleted.
_TRIM = f"""
WITH top AS (SELECT coalesce(max(seq), 0) AS seq FROM changes),
young AS (SELECT seq FROM changes WHERE at_ms >= {_DB_NOW_MS} - %(keep_ms)s
          ORDER BY seq LIMIT 1),
cut AS (SELECT greatest(top.seq - %(max_rows)s,
                        coalesce((SELECT seq - 1 FROM young), top.seq)) AS seq FROM top),
gone AS (DELETE FROM changes WHERE seq <= (SELECT seq FROM cut) RETURNING at_ms, xid),
mark AS (UPDATE change_trims
         SET newest_trimmed_ms = greatest(newest_trimmed_ms, (SELECT max(at_ms) FROM gone)),
             newest_trimmed_xid = greatest(newest_trimmed_xid, (SELECT max(xid) FROM gone)),
             trimmed_ms = {_DB_NOW_MS}
         WHERE id = 1 AND (SELECT count(*) FROM gone) > 0)
SELECT count(*) FROM gone
"""

_GET_OBJECTS = (
    "SELECT "
    + ", ".join(f"o.{c.strip()}" for c in OBJECT_COLUMNS.split(","))
    + " FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[])"
    " AS k(account, grp, kind_key, namespace, name)"
    " JOIN objects o ON o.okey = "
    + okey_of("k.account", "k.grp", "k.kind_key", "k.namespace", "k.name")
)


def append_change(
    cur: Cursor, writer: str, records: Sequence[EventRecord], swept: Sequence[ObjectRef]
) -> int:
    """Append the change row of the transaction ``cur`` is in (call it LAST, see
    ``_changes``); its seq, or 0 when the write changed nothing the feed shows."""
    message = change_message(records, swept)
    if message is None:
        return 0
    body, count = message
    cur.execute(_APPEND, (writer, count, body))
    row = cur.fetchone()
    return int(row[0]) if row else 0


def start_cursor(conn: Conn) -> ChangeCursor:
    """A cursor at "now": the changes committed from here on are the reader's."""
    with conn.cursor() as cur:
        cur.execute(_START)
        row = cur.fetchone()
    assert row is not None
    return ChangeCursor(str(row[0]), int(row[1]))


def read_changes(conn: Conn, cursor: ChangeCursor, writer: str, limit: int) -> ChangePage:
    """One page of the changes after ``cursor`` that other writers than ``writer`` made (see
    the module docstring). A row this version cannot read is logged and skipped, and the page
    says ``lagged``: its subscribers resync rather than miss it silently. Raises what psycopg
    raises (the core translates it)."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    params: dict[str, Any] = {
        "until": cursor.until or None,
        "until_ms": cursor.until_ms if cursor.until else None,
        "since": cursor.since,
        "since_ms": cursor.since_ms,
        "grace_ms": COMMIT_GRACE_MS,
        "writer": writer,
        "after": cursor.after_seq,
        "limit": limit + 1,
    }
    with conn.cursor() as cur:
        cur.execute(_READ, params)
        rows = cur.fetchall()
    snap, snap_ms, lagged = str(rows[0][0]), int(rows[0][1]), bool(rows[0][2])
    found = [row for row in rows if row[3] is not None]
    more = len(found) > limit
    changes = []
    for _, _, _, seq, row_writer, message in found[:limit]:
        try:
            records, swept = read_change_message(bytes(message))
        except StoreError as exc:
            log.error("change %s of %s skipped: %s", seq, row_writer, exc)
            lagged = True
            continue
        changes.append(Change(int(seq), str(row_writer), records, swept))
    if more:
        after = int(found[limit - 1][3])
        following = ChangeCursor(cursor.since, cursor.since_ms, snap, snap_ms, after)
    else:
        following = ChangeCursor(snap, snap_ms)
    return ChangePage(changes, following, more=more, lagged=lagged)


def trim_changes(cur: Cursor, keep_ms: int, max_rows: int) -> int:
    """Delete the rows older than ``keep_ms`` or beyond the newest ``max_rows`` (inside the
    caller's transaction); how many."""
    if keep_ms < 0 or max_rows < 0:
        raise ValueError("keep_ms and max_rows must be >= 0")
    cur.execute(_TRIM, {"keep_ms": keep_ms, "max_rows": max_rows})
    row = cur.fetchone()
    return int(row[0]) if row else 0


def get_objects(conn: Conn, keys: Sequence[tuple[str, str, str, str, str]]) -> list[StoredObject]:
    """The stored objects of ``keys`` (account, apiVersion or group, kind, namespace, name),
    the ones that exist, in no order."""
    if not keys:
        return []
    columns: list[list[str]] = [[], [], [], [], []]
    for account, api_version, kind, namespace, name in keys:
        columns[0].append(account)
        columns[1].append(group_of(api_version))
        columns[2].append(kind.lower())
        columns[3].append(namespace)
        columns[4].append(name)
    with conn.cursor() as cur:
        cur.execute(_GET_OBJECTS, columns)
        return [StoredObject(*row) for row in cur.fetchall()]
