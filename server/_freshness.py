"""Read-your-writes: the versions operations wrote, and the readers waiting for the cache.

Theory of operation. An operation's result carries the objects as the API server answered its
writes (with their resourceVersions) and the objects it deleted; the operations service
writes them into the cache, then calls ``expect(records)``: each becomes a *watermark* for
its object (account, API group, kind, namespace, name): "the cache must show at least this
resourceVersion" (or "must not show the object" for a deletion). The cache can still fall
behind one afterwards: the agent's watch of that kind may deliver, later, events older than
the write (a watch that was slow or reconnecting), and those overwrite the newer object.

Every batch the store commits passes ``observed(records, swept)`` (the change feed calls it
from ``publish``, the one place every committed change goes through): a record at or past
a watermark (a deletion for a deletion watermark) clears it and wakes its waiters, with a
``trio.Event``; nothing polls. A read checks ``caught_up(key, stored)`` on what the store
gave it; when the store is behind, it waits on ``wait(key)`` under its own cancel scope and
reads again (``server.api`` bounds that wait and says, in a header and the log, when it
answers with what it has).

Bounds: at most ``max_entries`` watermarks (the oldest is dropped, waking its waiters, who
answer with what they have); a watermark older than ``ttl_seconds`` is dropped as new ones
come, or when a read meets it (its watch never reported it: a kind not watched). A deletion's
watermark carries the deleted object's uid when the agent says it: an object of that name with
another uid, stored or arriving, was created after the deletion and honours it (a StatefulSet
re-creating the pod Deck deleted). A read that finds the store caught up
leaves the watermark in place: only the watch's own event (or a newer write) shows the cache
will stay caught up; the object the read saw may be the operation's result, and a relist begun
before the write can still sweep it, or an older event overwrite it, after that read (an e2e
listing right after a dynamic-target read saw exactly that). resourceVersions that are not
integers cannot be ordered: they never hold a read back. Sans-I/O apart from the events; one
per server, on the change feed.

Listings (a Spinnaker cluster and its dynamic targets) ask ``pending(...)`` for the watermarks
of one account, kind and namespace: an index by that scope keeps the question off the other
accounts' and kinds' watermarks.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import trio

__all__ = ["Freshness", "FreshnessKey", "ObjectRef", "object_key"]

FreshnessKey = tuple[str, str, str, str, str]  # account, group, kind (lower), namespace, name
_Scope = tuple[str, str, str]  # account, kind (lower), namespace: what a listing reads
_ADDED, _MODIFIED, _DELETED = 1, 2, 3  # wire.EventType values


class ObjectRef(Protocol):
    """An object's identity, read by attribute (a `wire.EventRecord`, a
    `server.store.ObjectRef`); the change feed's records and swept objects are these too."""

    @property
    def account(self) -> str: ...
    @property
    def api_version(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...


class _Record(ObjectRef, Protocol):
    @property
    def type(self) -> int: ...
    @property
    def uid(self) -> str: ...
    @property
    def resource_version(self) -> str: ...


class _Stored(Protocol):
    @property
    def uid(self) -> str: ...
    @property
    def resource_version(self) -> str: ...


def object_key(account: str, group: str, kind: str, namespace: str, name: str) -> FreshnessKey:
    return (account, group, kind.lower(), namespace, name)


def _key(ref: ObjectRef) -> FreshnessKey:
    group = ref.api_version.rpartition("/")[0] if "/" in ref.api_version else ""
    return object_key(ref.account, group, ref.kind, ref.namespace, ref.name)


def _number(resource_version: str) -> int | None:
    return int(resource_version) if resource_version.isdigit() else None


@dataclass(slots=True)
class _Watermark:
    version: int | None  # None: the object was deleted
    since: float
    uid: str = ""  # a deletion's: the object that went ("" when the agent did not say)
    changed: trio.Event = field(default_factory=trio.Event)

    def replaced_by(self, uid: str) -> bool:
        """Whether an object of ``uid`` is a later one of the name than the deletion waited
        for: Kubernetes never reuses a uid, so another uid was created after it went."""
        return self.version is None and bool(self.uid) and bool(uid) and uid != self.uid


class Freshness:
    """The watermarks of one server (see the module docstring)."""

    def __init__(
        self,
        *,
        max_entries: int = 10_000,
        ttl_seconds: float = 300.0,
        wait_seconds: float = 3.0,
    ) -> None:
        self._marks: OrderedDict[FreshnessKey, _Watermark] = OrderedDict()
        self._by_scope: dict[_Scope, set[FreshnessKey]] = {}
        self._max_entries = max_entries
        self._ttl = ttl_seconds
        #: how long a read waits for the cache before answering with what it has
        self.wait_seconds = wait_seconds

    def __len__(self) -> int:
        return len(self._marks)

    def _now(self) -> float:
        try:
            return trio.current_time()
        except RuntimeError:  # outside trio (sync tests): never expire
            return -math.inf

    def _drop(self, key: FreshnessKey) -> None:
        mark = self._marks.pop(key, None)
        if mark is not None:
            mark.changed.set()
            scope = (key[0], key[2], key[3])
            keys = self._by_scope.get(scope)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_scope[scope]

    def expect(self, records: Sequence[_Record]) -> None:
        """An operation wrote (or deleted) these objects: the cache must show them."""
        now = self._now()
        for record in records:
            if record.type == _DELETED:
                version = None
            else:
                version = _number(record.resource_version)
                if version is None:
                    continue
            key = _key(record)
            self._drop(key)  # a waiter on an older watermark re-checks against this one
            uid = record.uid if version is None else ""
            self._marks[key] = _Watermark(version, now, uid)
            self._by_scope.setdefault((key[0], key[2], key[3]), set()).add(key)
        while self._marks:
            key, oldest = next(iter(self._marks.items()))
            fresh = not math.isfinite(now) or now - oldest.since <= self._ttl
            if len(self._marks) <= self._max_entries and fresh:
                break
            self._drop(key)

    def observed(self, records: Sequence[_Record], swept: Sequence[ObjectRef] = ()) -> None:
        """A committed batch: clear (and wake) the watermarks it reaches."""
        if not self._marks:
            return
        for record in records:
            key = _key(record)
            mark = self._marks.get(key)
            if mark is None:
                continue
            version = _number(record.resource_version)
            reached = version is None or mark.version is None or version >= mark.version
            if record.type == _DELETED and reached:
                # Gone after (or as) we wrote it, or the deletion we wait for: either way the
                # cache now says what the cluster says. Not the late DELETED of an earlier
                # object of the name (a Job deleted and run again: its deletion's version is
                # older than the write), which the store does not apply to the new one.
                self._drop(key)
            elif record.type in (_ADDED, _MODIFIED) and mark.version is not None and reached:
                self._drop(key)
            elif record.type in (_ADDED, _MODIFIED) and mark.replaced_by(record.uid):
                # The name was created again after our deletion (a StatefulSet's pod, a Job
                # run again): the cache is past the deletion for good.
                self._drop(key)
        for ref in swept:
            mark = self._marks.get(_key(ref))
            if mark is not None and mark.version is None:
                self._drop(_key(ref))

    def caught_up(self, key: FreshnessKey, stored: _Stored | None) -> bool:
        """Whether what the store gave a read (``stored``, None when absent) honours the
        watermark of ``key``. Leaves the watermark (see the module docstring)."""
        mark = self._marks.get(key)
        if mark is None:
            return True
        now = self._now()
        if math.isfinite(now) and now - mark.since > self._ttl:
            self._drop(key)  # its watch never reported it (a kind not watched): stop waiting
            return True
        if mark.version is None:
            return stored is None or mark.replaced_by(stored.uid)
        if stored is None:
            return False
        version = _number(stored.resource_version)
        return version is None or version >= mark.version

    def pending(
        self, account: str, group: str | None, kind: str, namespace: str
    ) -> list[FreshnessKey]:
        """The watermarks of objects of ``kind`` in ``account`` and ``namespace`` (of
        ``group``; any group when None), in key order: what a listing of that scope must
        honour."""
        keys = self._by_scope.get((account, kind.lower(), namespace))
        if not keys:
            return []
        found = [k for k in keys if group is None or k[1] == group]
        return sorted(found)

    def pending_kinds(self, kinds: Collection[str]) -> list[FreshnessKey]:
        """The watermarks of objects of these (lower-case) kinds, any account or namespace,
        in key order: what a view across applications must honour (Deck's views)."""
        return sorted(k for k in self._marks if k[2] in kinds)

    def watermark(self, key: FreshnessKey) -> str:
        """The watermark of ``key`` as text (for a stale answer's header), "" when none."""
        mark = self._marks.get(key)
        if mark is None:
            return ""
        return "deleted" if mark.version is None else str(mark.version)

    async def wait(self, key: FreshnessKey) -> None:
        """Park until the watermark of ``key`` changes (cleared, replaced or dropped); at
        once when there is none. The caller's cancel scope bounds it."""
        mark = self._marks.get(key)
        if mark is None:
            await trio.lowlevel.checkpoint()
            return
        await mark.changed.wait()
