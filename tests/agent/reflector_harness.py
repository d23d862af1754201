"""Test harness for the data path: an httpx transport at the I/O edge, and a receiver.

``HttpTransport`` is a minimal KubeTransport over httpx (the real client lives in
agent/_kube_client.py; this one keeps these tests independent of its configuration).
``Receiver`` drains a real budget channel, acknowledges every batch, keeps every record, and
applies them the way the server does (sync brackets delete what a full listing did not see),
so tests can assert on the converged view.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
import trio

from agent import KubeConnectionError
from budget import EventReceiver
from wire import EventRecord, EventType

ObjectKey = tuple[str, str, str, str]  # api_version, kind, namespace, name


class _Response:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._chunks = response.aiter_raw()
        self.status_code = response.status_code
        self.headers: Mapping[str, str] = response.headers

    async def receive_some(self) -> bytes:
        try:
            return await self._chunks.__anext__()
        except StopAsyncIteration:
            return b""
        except httpx.TransportError as exc:
            raise KubeConnectionError(f"read failed: {exc!r}") from exc


class HttpTransport:
    """A KubeTransport over one httpx.AsyncClient with a bearer token."""

    def __init__(self, base_url: str, token: str) -> None:
        self._client = httpx.AsyncClient(
            base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=None
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[_Response]:
        try:
            async with self._client.stream(
                method, path, params=dict(params or {}), headers=dict(headers or {})
            ) as response:
                yield _Response(response)
        except httpx.TransportError as exc:
            raise KubeConnectionError(f"{method} {path}: {exc!r}") from exc


@dataclass
class Receiver:
    """Collects records from the channel and keeps the server-side view of them."""

    records: list[EventRecord] = field(default_factory=list)
    objects: dict[ObjectKey, EventRecord] = field(default_factory=dict)
    _seen: dict[tuple[str, str, str], set[ObjectKey]] = field(default_factory=dict)
    changed: trio.Event = field(default_factory=trio.Event)

    async def drain(self, receive: EventReceiver) -> None:
        while True:
            try:
                batch = await receive.receive_batch()
            except trio.EndOfChannel:
                return
            for entry in batch.entries:
                assert isinstance(entry.value, EventRecord)
                self._apply(entry.value)
            receive.acknowledge(batch)
            self.changed.set()
            self.changed = trio.Event()

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

    async def wait_for(self, predicate: object) -> None:
        assert callable(predicate)
        while not predicate():
            await self.changed.wait()

    def count(self, event_type: EventType, kind: str | None = None) -> int:
        return sum(1 for r in self.records if r.type == event_type and kind in (None, r.kind))
