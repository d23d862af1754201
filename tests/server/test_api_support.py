"""Shared parts of the REST API tests: a real SQLite store in a tmp dir, filled through
apply_batch with wire.EventRecords, and an httpx client on the app (in-process ASGI or a real
Hypercorn socket on 127.0.0.1 port 0). No tests here."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import trio
from prometheus_client import CollectorRegistry

from server import ChangeFeed, ServerConfig, open_server_state
from server.api import ApiState, StandaloneState, build_app, serve_api
from server.store import (
    AccountRecord,
    AccountState,
    Store,
    StoreConfig,
    open_sqlite_store,
    sqlite_url,
)
from wire import EventRecord, EventType

ACCOUNT = "acct"


@dataclass
class Harness:
    store: Store
    feed: ChangeFeed
    state: ApiState
    client: httpx.AsyncClient
    port: int | None = None

    async def add(self, *objects: dict[str, Any], account: str = ACCOUNT) -> list[EventRecord]:
        """Store `objects` (ADDED) through apply_batch, as the ingest path does."""
        records = [record(o, account=account) for o in objects]
        await self.store.apply_batch(account, records)
        return records

    async def account(self, name: str = ACCOUNT, **fields: Any) -> AccountRecord:
        rec = AccountRecord(name=name, status=AccountState.ACTIVE, **fields)
        await self.store.upsert_account(rec)
        return rec


def record(
    obj: dict[str, Any], *, account: str = ACCOUNT, type_: EventType = EventType.ADDED
) -> EventRecord:
    md = obj["metadata"]
    return EventRecord(
        type=int(type_),
        account=account,
        api_version=obj["apiVersion"],
        kind=obj["kind"],
        namespace=md.get("namespace", ""),
        name=md["name"],
        uid=md.get("uid", f"uid-{md['name']}"),
        resource_version=md.get("resourceVersion", "1"),
        object=json.dumps(obj).encode(),
    )


def k8s(
    api_version: str, kind: str, name: str, namespace: str = "", **fields: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "uid": f"uid-{kind}-{name}", "resourceVersion": "7"}
    if namespace:
        metadata["namespace"] = namespace
    metadata.update(fields.pop("metadata", {}))
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, **fields}


@asynccontextmanager
async def open_state(
    tmp_path: Path, *, standalone: bool, feed: ChangeFeed | None
) -> AsyncIterator[ApiState]:
    """The real ServerState (registry, sessions, store) over a SQLite file, or the API's own
    StandaloneState over the bare store."""
    path = str(tmp_path / "cache.db")
    if standalone:
        async with open_sqlite_store(path) as store:
            yield StandaloneState(store, feed or ChangeFeed(), server_id="srv-1")
        return
    config = ServerConfig(server_id="srv-1", store=StoreConfig(url=sqlite_url(path)))
    async with open_server_state(config) as state:
        yield state if feed is None else dataclasses.replace(state, feed=feed)


@asynccontextmanager
async def open_api(
    tmp_path: Path,
    *,
    over_socket: bool = False,
    standalone: bool = False,
    feed: ChangeFeed | None = None,
    registry: CollectorRegistry | None = None,
) -> AsyncIterator[Harness]:
    """The API over a fresh SQLite file; in-process (httpx ASGI transport) unless over_socket,
    where serve_api serves it on 127.0.0.1 port 0."""
    async with open_state(tmp_path, standalone=standalone, feed=feed) as state:
        if not over_socket:
            transport = httpx.ASGITransport(app=build_app(state, registry=registry))
            async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
                yield Harness(state.store, state.feed, state, client)
            return
        async with trio.open_nursery() as nursery:
            serve = functools.partial(serve_api, registry=registry)
            port: int = await nursery.start(serve, state, "127.0.0.1", 0)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                yield Harness(state.store, state.feed, state, client, port)
            nursery.cancel_scope.cancel()


def names(items: Sequence[dict[str, Any]]) -> list[str]:
    return [str(i["name"]) for i in items]
