"""Deck's views (and the object count of /metrics) on SQLite read on connections of their
own, beside the writer's.

The SQLite store runs every call on its one connection, one at a time: a view read waited
for the ingest transactions queued before it (at 1,000 events/s a good part of a request's
time, measured by bench_views). In WAL mode a reader never blocks the writer nor waits for
it: these connections (``READERS``, in worker threads of their own) read the last committed
state, each call in one read transaction (one snapshot for all its statements). What a
committed write changed is in the next read, so read-your-writes holds as on the writer's
connection. An in-memory store has no file to share: its views stay on the writer's
connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apsw

from .._errors import StoreError
from ..views import SearchHits
from ._queries import SQLITE, count_sql
from ._sqlite_core import READER_MMAP_BYTES
from ._views import ClusterKeys, SearchRequest, ViewQuery, ViewRow, read_views, search_hits

__all__ = ["READERS", "ViewReader"]

READERS = 2  # as many reads at once as the machine has cores to give them (2 here)


class ViewReader:
    """One read connection to the store's file (its thread's alone)."""

    def __init__(self, path: str) -> None:
        self._clusters = ClusterKeys()  # this connection's, between its searches
        try:
            self._conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READWRITE)
        except apsw.Error as exc:
            raise StoreError(f"cannot open a reader of the SQLite store {path!r}: {exc}") from exc
        try:
            self._conn.execute("PRAGMA busy_timeout=5000")
            self._conn.execute("PRAGMA query_only=1")
            self._conn.execute(f"PRAGMA mmap_size={READER_MMAP_BYTES}")  # its share
            self._conn.execute("PRAGMA cache_size=-32768")
        except apsw.Error as exc:
            self._conn.close()  # now, not whenever this object is collected (SqliteStore)
            raise StoreError(f"cannot open a reader of the SQLite store {path!r}: {exc}") from exc

    def close(self) -> None:
        self._conn.close()

    def _execute(self, sql: str, params: Sequence[Any]) -> list[Any]:
        return self._conn.execute(sql, params).fetchall()

    def _snapshot(self, fn: Any) -> Any:
        try:
            self._conn.execute("BEGIN")
            try:
                return fn()
            finally:
                self._conn.execute("COMMIT")
        except apsw.Error as exc:
            raise StoreError(f"store read failed: {exc}") from exc

    def count_objects(self, account: str | None, kind: str | None) -> int:
        """How many objects match (``Store.count_objects``), read here beside the writer."""
        try:
            return int(self._conn.execute(*count_sql(SQLITE, account, kind)).get)
        except apsw.Error as exc:
            raise StoreError(f"store read failed: {exc}") from exc

    def read_views(self, queries: Sequence[ViewQuery]) -> list[list[ViewRow]]:
        result: list[list[ViewRow]] = self._snapshot(
            lambda: read_views(SQLITE, self._execute, queries)
        )
        return result

    def search_views(self, request: SearchRequest) -> SearchHits:
        hits: SearchHits = self._snapshot(
            lambda: search_hits(SQLITE, self._execute, request, self._clusters)
        )
        return hits
