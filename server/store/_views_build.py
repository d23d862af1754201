"""Building the view index from the objects already stored (a database migrated from before
it existed): each object of a UI kind gets its row as if it had just been ingested."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ..views import VIEW_KINDS
from ._prepared import view_of_body

__all__ = ["build_views"]

_PAGE = 1000


def build_views(
    read: Callable[[str, Sequence[Any]], list[Any]],
    write: Callable[[list[tuple[str, ...]]], object],
    mark: str,
    kind_key: str,
) -> int:
    """Page through the stored objects of the views' kinds with ``read`` (SQL with ``mark``
    placeholders; ``kind_key`` the objects' case-insensitive kind column) and ``write`` their
    view_index rows, inside the caller's transaction. Returns how many rows it wrote."""
    kinds = sorted(VIEW_KINDS)
    key = f"account, grp, {kind_key}, namespace, name"
    sql = (
        f"SELECT account, grp, kind, namespace, name, body, {kind_key} FROM objects"
        f" WHERE lower(kind) IN ({','.join([mark] * len(kinds))})"
    )
    after: tuple[Any, ...] | None = None
    written = 0
    while True:
        page_sql = sql + (f" AND ({key}) > ({','.join([mark] * 5)})" if after else "")
        page_sql += f" ORDER BY {key} LIMIT {_PAGE}"
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
