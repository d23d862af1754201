"""Test harness for the data path: a receiver at the end of the budget channel.

``Receiver`` drains a real budget channel, acknowledges every batch, keeps every record, and
applies them the way the server does (sync brackets delete what a full listing did not see;
a kind reported unavailable loses its objects in its scope, a watch scope removes what is
outside it), so tests can assert on the converged view.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from agent._watch_notices import KindNotice, Notice, ScopeNotice
from budget import EventReceiver
from wire import EventRecord, EventType

from .._wait import wait_until

ObjectKey = tuple[str, str, str, str]  # api_version, kind, namespace, name


@dataclass
class Receiver:
    """Collects records from the channel and keeps the server-side view of them."""

    records: list[EventRecord] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    objects: dict[ObjectKey, EventRecord] = field(default_factory=dict)
    _seen: dict[tuple[str, str, str], set[ObjectKey]] = field(default_factory=dict)

    async def drain(self, receive: EventReceiver) -> None:
        while True:
            try:
                batch = await receive.receive_batch()
            except trio.EndOfChannel:
                return
            for entry in batch.entries:
                if isinstance(entry.value, EventRecord):
                    self._apply(entry.value)
                else:
                    assert isinstance(entry.value, KindNotice | ScopeNotice)
                    self._notice(entry.value)
            receive.acknowledge(batch)

    def _notice(self, notice: Notice) -> None:
        self.notices.append(notice)
        if isinstance(notice, KindNotice):
            if not notice.available:
                for key in [k for k in self.objects if k[1] == notice.kind]:
                    if not notice.scope or key[2] == notice.scope:
                        del self.objects[key]
            return
        kinds = {kind for _, kind in notice.kinds}
        for key in list(self.objects):
            namespace = key[2]
            outside = bool(namespace) and (
                namespace in notice.omit_namespaces
                or (bool(notice.namespaces) and namespace not in notice.namespaces)
            )
            if key[1] not in kinds or outside:
                del self.objects[key]

    def kind_notices(self, kind: str) -> list[KindNotice]:
        return [n for n in self.notices if isinstance(n, KindNotice) and n.kind == kind]

    def _apply(self, record: EventRecord) -> None:
        self.records.append(record)
        bracket = (record.api_version, record.kind, record.scope)
        key = (record.api_version, record.kind, record.namespace, record.name)
        if record.type == EventType.SYNC_BEGIN:
            self._seen[bracket] = set()
        elif record.type == EventType.SYNC_END:
            seen = self._seen.pop(bracket, set())
            for old in [k for k in self.objects if k[:2] == bracket[:2]]:
                in_scope = not record.scope or old[2] == record.scope
                if in_scope and old not in seen:
                    del self.objects[old]
        elif record.type in (EventType.ADDED, EventType.MODIFIED):
            self.objects[key] = record
            for seen in self._seen.values():
                seen.add(key)
        elif record.type == EventType.DELETED:
            self.objects.pop(key, None)

    def names(self, kind: str, namespace: str | None = None) -> set[str]:
        return {k[3] for k in self.objects if k[1] == kind and namespace in (None, k[2])}

    async def wait_for(self, predicate: object, *, what: str = "", timeout: float = 60.0) -> None:  # noqa: ASYNC109 (tests/_wait.py)
        """Wait until ``predicate`` (records or reflector state) holds, for ``timeout`` s.

        Polls (tests/_wait.py): the reflector's state changes with no signal a test can see.
        """
        assert callable(predicate)
        await wait_until(predicate, what=what, timeout=timeout)

    def count(self, event_type: EventType, kind: str | None = None) -> int:
        return sum(1 for r in self.records if r.type == event_type and kind in (None, r.kind))
