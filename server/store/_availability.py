"""What the agent may see: unavailable kinds and the account's watch scope, written once for
both backends (docs/protocol.md §7.4 and §7.5).

Theory of operation. The server shows only what the agent can still watch. When the agent
says a kind of an account is unavailable in a scope (a KindStatus: 403, 404, gone from
discovery), the account's objects of that kind in that scope are deleted (all its
namespaces for the cluster-wide scope ""), its resume points there are forgotten (so the
kind is listed afresh, never resumed, when it comes back) and a row of ``unavailable_kinds``
records why; the REST API answers 403/503 with that reason instead of 404. The row goes when
the agent says the kind is available again, or when a SYNC_END of that (account, group,
kind, scope) completes a listing (``clear_on_sync``). A WatchScope is what the agent watches
for the account now: objects, resume points and marks outside it are deleted, so narrowing
``namespaces`` or ``kinds`` in the agent's config removes what it no longer watches.

Everything runs inside the caller's transaction: ``Exec`` runs one statement with ``?``
placeholders (PostgreSQL's core rewrites them) and returns its rows. ``kind_col`` is the
objects' case-insensitive kind column: SQLite's ``kind`` (COLLATE NOCASE) or PostgreSQL's
``kind_key`` (lower-cased); it is compared with a lower-cased parameter either way. Open
sync brackets are left alone (SQLite mirrors them in memory): the next listing's SYNC_BEGIN
restarts a bracket a 403 cut short.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._leases import Exec
from ._queries import SqlDialect
from ._records import (
    AccountScope,
    AvailabilityOutcome,
    KindChange,
    ObjectRef,
    UnavailableKind,
    group_of,
)

__all__ = [
    "apply_account_scope",
    "apply_kind_changes",
    "clear_on_sync",
    "unavailable_kinds",
]

_MARK_COLUMNS = "account, api_version, kind, scope, code, reason, since_ms"
_MARK_KEY = "account=? AND grp=? AND kind_key=? AND scope=?"
_UPSERT_MARK = (
    "INSERT INTO unavailable_kinds(account, grp, kind_key, scope, api_version, kind, code,"
    " reason, since_ms) VALUES (?,?,?,?,?,?,?,?,?)"
    " ON CONFLICT(account, grp, kind_key, scope) DO UPDATE SET api_version=excluded.api_version,"
    " kind=excluded.kind, code=excluded.code, reason=excluded.reason"
)
_OBJECT_REF = "RETURNING account, api_version, kind, namespace, name"


def unavailable_kinds(x: Exec, account: str | None = None) -> list[UnavailableKind]:
    """The marks of ``account`` (None: of every account), by account, kind and scope."""
    where, params = ("WHERE account=?", (account,)) if account is not None else ("", ())
    rows = x(
        f"SELECT {_MARK_COLUMNS} FROM unavailable_kinds {where}"
        " ORDER BY account, grp, kind_key, scope",
        params,
    )
    return [_mark_of(row) for row in rows]


def apply_kind_changes(
    x: Exec, d: SqlDialect, changes: Sequence[KindChange], now_ms: int
) -> AvailabilityOutcome:
    """Apply a KindStatus's entries in order (see the module docstring)."""
    swept: list[ObjectRef] = []
    marked: list[UnavailableKind] = []
    cleared: list[UnavailableKind] = []
    for change in changes:
        key = (change.account, group_of(change.api_version), change.kind.lower(), change.scope)
        rows = x(f"SELECT {_MARK_COLUMNS} FROM unavailable_kinds WHERE {_MARK_KEY}", key)
        old = _mark_of(rows[0]) if rows else None
        if change.available:
            if old is not None:
                x(f"DELETE FROM unavailable_kinds WHERE {_MARK_KEY}", key)
                cleared.append(old)
            continue
        swept += _remove(x, d, change)
        since = old.since_ms if old is not None else now_ms
        x(_UPSERT_MARK, (*key, change.api_version, change.kind, change.code, change.reason, since))
        if old is None or (old.code, old.reason) != (change.code, change.reason):
            marked.append(
                UnavailableKind(
                    change.account,
                    change.api_version,
                    change.kind,
                    change.scope,
                    change.code,
                    change.reason,
                    since,
                )
            )
    return AvailabilityOutcome(tuple(swept), tuple(marked), tuple(cleared))


def _remove(x: Exec, d: SqlDialect, change: KindChange) -> list[ObjectRef]:
    """Delete the objects and resume points of an unavailable (account, kind, scope)."""
    group, kind = group_of(change.api_version), change.kind.lower()
    coordinates = [change.account, group, kind]
    if change.scope:
        coordinates.append(change.scope)
    where, params = d.objects_under(coordinates, "?")
    rows = x(f"DELETE FROM objects WHERE {where} {_OBJECT_REF}", params)
    for api_version, stored_kind, scope in x(
        "SELECT api_version, kind, scope FROM resource_versions WHERE account=? AND lower(kind)=?",
        (change.account, kind),
    ):
        if group_of(api_version) == group and (not change.scope or scope == change.scope):
            _forget_resume_point(x, change.account, api_version, stored_kind, scope)
    return [ObjectRef(*row) for row in rows]


def apply_account_scope(x: Exec, d: SqlDialect, scope: AccountScope) -> AvailabilityOutcome:
    """Delete the account's objects, resume points and marks outside ``scope`` (for a
    shard's scope: those inside the shard and outside ``scope``)."""
    account = scope.account
    wanted = {(group_of(api_version), kind.lower()) for api_version, kind in scope.kinds}

    def holds(group: str, kind: str, namespace: str) -> bool:
        if scope.shard is not None and not scope.shard.owns(kind, namespace):
            return True  # another shard's (or nobody's): not this scope's to remove
        return (group, kind.lower()) in wanted and scope.holds_namespace(namespace)

    swept: list[ObjectRef] = []
    # One pass over the account's index entries (the objects' key starts with account, grp,
    # kind, namespace), then one delete per (kind, namespace) found outside.
    where, params = d.objects_under([account], "?")
    found = d.group_kind_namespace()
    for group, kind, namespace in x(f"SELECT DISTINCT {found} FROM objects WHERE {where}", params):
        if not holds(group, kind, namespace):
            inside, params = d.objects_under([account, group, kind.lower(), namespace], "?")
            rows = x(f"DELETE FROM objects WHERE {inside} {_OBJECT_REF}", params)
            swept += [ObjectRef(*row) for row in rows]
    for api_version, kind, where in x(
        "SELECT api_version, kind, scope FROM resource_versions WHERE account=?", (account,)
    ):
        if not holds(group_of(api_version), kind, where):
            _forget_resume_point(x, account, api_version, kind, where)
    dropped = [m for m in unavailable_kinds(x, account) if not holds(m.group, m.kind, m.scope)]
    for mark in dropped:
        x(
            f"DELETE FROM unavailable_kinds WHERE {_MARK_KEY}",
            (account, mark.group, mark.kind.lower(), mark.scope),
        )
    return AvailabilityOutcome(swept=tuple(swept), dropped=tuple(dropped))


def clear_on_sync(
    x: Exec, account: str, group: str, kind: str, scope: str
) -> UnavailableKind | None:
    """A SYNC_END completed a listing of (account, group, kind, scope): the kind is
    available there again. Returns the mark it cleared, if there was one."""
    rows = x(
        f"DELETE FROM unavailable_kinds WHERE {_MARK_KEY} RETURNING {_MARK_COLUMNS}",
        (account, group, kind.lower(), scope),
    )
    return _mark_of(rows[0]) if rows else None


def _forget_resume_point(x: Exec, account: str, api_version: str, kind: str, scope: str) -> None:
    x(
        "DELETE FROM resource_versions WHERE account=? AND api_version=? AND kind=? AND scope=?",
        (account, api_version, kind, scope),
    )


def _mark_of(row: Sequence[Any]) -> UnavailableKind:
    return UnavailableKind(row[0], row[1], row[2], row[3], int(row[4]), row[5], int(row[6]))
