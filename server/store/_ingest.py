"""One batch of events applied through a backend's writer: the sync-bracket and resume-point
rules written once, so both backends keep them the same way.

Theory of operation (sync brackets). The store keeps one counter, the *epoch*. Every object
write stamps the object with the current epoch. ``SYNC_BEGIN`` for (account, group, kind,
scope) bumps the epoch and remembers it as that bracket's start; ``SYNC_END`` deletes the
objects of that account, group, kind (and namespace, when the scope is one) whose stamp is
older than the start: nobody saw them in the full listing. A SYNC_END with no open bracket
deletes nothing (logged). While a bracket of (account, group, kind, scope) is open, object
events of that scope do not advance its resume point: the versions of listed objects are
not a watch position; the SYNC_END's own resourceVersion (the list's) is. Kinds compare
case-insensitively.

Deletions by uid. A DELETED event names the object (its uid) that is gone; it removes the
stored object of that name only when the uids agree (or either is unknown, empty). Kubernetes
never reuses a uid and a name holds one object at a time, so a stored object of another uid
was created after the deleted one: an operation result (the delete-and-recreate of a Job of
the same name, written before the watch delivers the old Job's DELETED) or a later listing.
The deletion says nothing about it, and removing it answered 404 for a live object until its
own ADDED arrived. Upserts stay unconditional: an ADDED/MODIFIED of another uid is either the
newer object (the truth after the DELETED the watch already delivered) or a late event of the
older one, and only resourceVersions could tell them apart; they are opaque (an etcd restore
takes them back), and a listed object left unwritten keeps its old epoch and is swept at the
SYNC_END, so a skipped upsert could lose the object rather than briefly show its predecessor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from wire import EventRecord, EventType

from .._errors import StoreError
from ._prepared import EPOCH_SLOT, TIME_SLOT, PreparedEvents
from ._records import BatchOutcome, ObjectRef, UnavailableKind

log = logging.getLogger("server.store")

_ADDED, _MODIFIED, _DELETED = int(EventType.ADDED), int(EventType.MODIFIED), int(EventType.DELETED)
_BOOKMARK, _BEGIN, _END = (
    int(EventType.BOOKMARK),
    int(EventType.SYNC_BEGIN),
    int(EventType.SYNC_END),
)

# (account, group, lower-case kind, scope) -> the epoch its open bracket began at
SyncKey = tuple[str, str, str, str]
# (account, group, kind, namespace, name, uid): a DELETED event's object ("" uid: any)
DeletedKey = tuple[str, str, str, str, str, str]
# (account, group, kind, namespace, name): an operation's delete, of whatever holds the name
ObjectKey = tuple[str, str, str, str, str]


class BatchWriter(Protocol):
    """A backend's statements inside the batch's transaction (they raise the driver's errors;
    the backend translates them at its edge)."""

    def upsert(self, rows: list[Sequence[Any]]) -> None:
        """Insert or replace objects (rows in ``_prepared.UPSERT_COLUMNS`` order), in order."""

    def upsert_views(self, rows: list[tuple[str, ...]]) -> None:
        """Insert or update view_index rows (``_views.VIEW_COLUMNS`` order), in order: those of
        the objects the ``upsert`` just before wrote."""

    def delete(self, keys: list[DeletedKey]) -> None:
        """Delete objects by key, in order, each only if its stored uid is that uid or either
        is empty (absent ones, or ones of another uid, are no error)."""

    def begin_sync(self, r: EventRecord, group: str, now_ms: int) -> int:
        """Bump the epoch, record the bracket as open from it, drop the scope's resume point;
        returns the new epoch."""
        ...

    def end_sync(self, r: EventRecord, group: str, begin_epoch: int) -> list[ObjectRef]:
        """Close the bracket: delete the scope's objects stamped before ``begin_epoch``;
        returns them."""
        ...

    def save_resume_points(self, rows: list[tuple[str, str, str, str, str, int]]) -> None:
        """Insert or replace (account, api_version, kind, scope, resourceVersion, now_ms)."""

    def clear_unavailable(self, r: EventRecord, group: str) -> UnavailableKind | None:
        """A SYNC_END completed a listing: drop the scope's unavailable mark (``_availability``);
        returns it, if there was one."""
        ...


def apply_prepared(
    prepared: PreparedEvents,
    writer: BatchWriter,
    open_syncs: dict[SyncKey, int],
    epoch: int,
    now_ms: int,
) -> tuple[BatchOutcome, int]:
    """Write ``prepared`` through ``writer``; ``open_syncs`` (the open brackets of the batch's
    accounts at least) is updated in place. Returns the outcome and the epoch after it."""
    pending: list[Any] = []
    pending_views: list[tuple[str, ...]] = []  # of the objects in pending, written after them
    pending_is_upsert = True
    rvs: dict[tuple[str, str, str, str], str] = {}
    # Resume points are withheld per (account, group, kind, scope) while that scope's
    # listing is open: a bracket left open in one namespace must not freeze the others.
    syncing = set(open_syncs)
    swept: list[ObjectRef] = []
    restored: list[UnavailableKind] = []
    upserted = deleted = 0

    def flush() -> None:
        if pending:
            if pending_is_upsert:
                writer.upsert(pending)
                if pending_views:
                    writer.upsert_views(pending_views)
                    pending_views.clear()
            else:
                writer.delete(pending)  # their view_index rows go with them (a trigger)
            pending.clear()

    for r, group, row, view in zip(
        prepared.records, prepared.groups, prepared.rows, prepared.views, strict=True
    ):
        t = r.type
        if t in (_ADDED, _MODIFIED, _DELETED):
            is_upsert = row is not None
            if is_upsert is not pending_is_upsert:
                flush()
                pending_is_upsert = is_upsert
            if row is None:
                pending.append((r.account, group, r.kind, r.namespace, r.name, r.uid))
                deleted += 1
            else:
                row[EPOCH_SLOT] = epoch
                row[TIME_SLOT] = now_ms
                pending.append(row)
                if view is not None:
                    pending_views.append(view)
                upserted += 1
            if not syncing or (r.account, group, r.kind.lower(), r.scope) not in syncing:
                rvs[(r.account, r.api_version, r.kind, r.scope)] = r.resource_version
            continue
        scope_key = (r.account, group, r.kind.lower(), r.scope)
        if t == _BOOKMARK:
            if scope_key not in syncing and r.resource_version:
                rvs[(r.account, r.api_version, r.kind, r.scope)] = r.resource_version
        elif t == _BEGIN:
            flush()
            epoch = writer.begin_sync(r, group, now_ms)
            rvs.pop((r.account, r.api_version, r.kind, r.scope), None)
            open_syncs[scope_key] = epoch
            syncing.add(scope_key)
        elif t == _END:
            flush()
            begin = open_syncs.pop(scope_key, None)
            if begin is None:
                log.warning(
                    "SYNC_END for %s %s/%s scope %r without a SYNC_BEGIN: nothing swept",
                    r.account,
                    group,
                    r.kind,
                    r.scope,
                )
            else:
                swept.extend(writer.end_sync(r, group, begin))
            # A completed listing shows the kind is available there (again): the agent
            # could read all of it.
            mark = writer.clear_unavailable(r, group)
            if mark is not None:
                restored.append(mark)
            syncing = set(open_syncs)
            if r.resource_version:
                rvs[(r.account, r.api_version, r.kind, r.scope)] = r.resource_version
    flush()
    points = [(*key, rv, now_ms) for key, rv in rvs.items() if rv]
    if points:
        writer.save_resume_points(points)
    outcome = BatchOutcome(
        upserted=upserted, deleted=deleted, swept=tuple(swept), restored=tuple(restored)
    )
    return outcome, epoch


def apply_groups(
    apply: Callable[[Sequence[EventRecord]], object], groups: Sequence[Sequence[EventRecord]]
) -> list[StoreError | None]:
    """``apply`` (one transaction) to every group at once; if that fails, to each group alone,
    so one operation's bad objects cost no other its cache update. Returns each group's
    error (None when applied)."""
    errors: list[StoreError | None] = [None] * len(groups)
    filled = [i for i, group in enumerate(groups) if group]
    if not filled:
        return errors
    try:
        apply([r for i in filled for r in groups[i]])
        return errors
    except StoreError as exc:
        if len(filled) == 1:
            errors[filled[0]] = exc
            return errors
    for i in filled:
        try:
            apply(groups[i])
        except StoreError as exc:
            errors[i] = exc
    return errors
