"""Building the view index from the objects already stored: each object of a UI kind gets its
row as if it had just been ingested. All of them once, in a database migrated from before the
index existed; later only those without a row (``missing_only``): on PostgreSQL, replicas of a
version from before the index, still running during a rolling upgrade, ingest objects without
writing their rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from ..views import VIEW_KINDS
from ._prepared import view_of_body
from ._views import object_key_sql

if TYPE_CHECKING:
    from ._queries import SqlDialect

__all__ = ["build_views"]

_PAGE = 1000


def build_views(
    read: Callable[[str, Sequence[Any]], list[Any]],
    write: Callable[[list[tuple[str, ...]]], object],
    d: SqlDialect,
    *,
    missing_only: bool = False,
    lock: str = "",
) -> int:
    """Page through the stored objects of the views' kinds with ``read`` (SQL in the dialect
    ``d``) and ``write`` their view_index rows, inside the caller's transaction. Returns how
    many rows it wrote. ``missing_only``: only the objects without a row; ``lock``: a
    locking clause for the objects read (PostgreSQL's ``FOR KEY SHARE``: a deletion waits
    for the transaction, so that its trigger removes the row written here instead of
    leaving it behind)."""
    kinds = sorted(VIEW_KINDS)
    mark, kind_key = d.mark, d.kind_key
    sql = (
        f"SELECT account, grp, kind, namespace, name, body, {kind_key} FROM objects"
        f" WHERE lower(kind) IN ({','.join([mark] * len(kinds))})"
    )
    if missing_only:
        sql += (
            " AND NOT EXISTS (SELECT 1 FROM view_index v WHERE v.kind_key = lower(objects.kind)"
            f" AND v.search_key = {object_key_sql('objects')} AND v.grp = objects.grp)"
        )
    after: tuple[Any, ...] | None = None
    written = 0
    while True:
        page_sql = sql + (f" AND {d.after_key()}" if after else "")
        page_sql += f" ORDER BY {d.key_order()} LIMIT {_PAGE}" + (f" {lock}" if lock else "")
        rows = read(page_sql, [*kinds, *(after or ())])
        views = []
        for account, group, kind, namespace, name, body, _ in rows:
            try:
                view = view_of_body(account, group, kind, namespace, name, bytes(body))
            except msgspec.DecodeError:
                continue  # not JSON: never ingested as such, nothing to show
            if view is not None:
                views.append(view)
        if views:
            write(views)
            written += len(views)
        if len(rows) < _PAGE:
            return written
        last = rows[-1]
        after = (last[0], last[1], last[6], last[3], last[4])
