"""How Deck's views read the cache: through the view index (``Store.read_views``), once the
cache honours the operations that succeeded (read-your-writes), into decoded objects.

Read-your-writes. After a task completes, its objects have watermarks (``server._freshness``).
A view spans applications, accounts and namespaces it does not know before it reads, so it
honours every watermark of the kinds the views show: it reads those objects (a handful, by
key) and, while one is behind, waits for the watch's catch-up (an event, no polling),
bounded by ``Freshness.wait_seconds``; past the bound it answers with what the cache has and
the ``X-Kubesvc-Stale`` header, as ``GET /manifests`` does (``_fresh``). The index is written
in the objects' own transactions, so objects caught up means views caught up.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import msgspec
import trio
from starlette.requests import Request
from starlette.responses import JSONResponse

from .._freshness import Freshness, FreshnessKey, object_key
from ..store import Store, StoredObject, ViewQuery, ViewRow
from ..views import INSTANCES, VIEW_KINDS, Resource
from ._context import context
from ._fresh import STALE_HEADER

__all__ = ["ViewJSON", "ViewReads", "collector_paused", "decode_rows", "reads"]

log = logging.getLogger("server.api.views")
_decode = msgspec.json.Decoder(dict[str, object]).decode
_encode = msgspec.json.Encoder().encode


class ViewJSON(JSONResponse):
    """A JSON answer encoded by msgspec (an application's server groups are ~40 KB: the
    standard library's encoder took a fifth of the request)."""

    def render(self, content: object) -> bytes:
        return _encode(content)


class _Container(msgspec.Struct, omit_defaults=True):
    name: object = None
    ready: object = None


class _PodStatus(msgspec.Struct, omit_defaults=True):
    phase: object = None
    containerStatuses: list[_Container] | None = None


class _PodMeta(msgspec.Struct, omit_defaults=True):
    name: object = None
    namespace: object = None
    uid: object = None
    creationTimestamp: object = None
    labels: dict[str, object] | None = None
    annotations: dict[str, object] | None = None
    ownerReferences: list[dict[str, object]] | None = None


class _Pod(msgspec.Struct, omit_defaults=True):
    """What the views read of a pod: its metadata and the state its health comes from."""

    apiVersion: object = None
    kind: object = None
    metadata: _PodMeta | None = None
    status: _PodStatus | None = None


_decode_pod = msgspec.json.Decoder(_Pod).decode
_to_builtins = msgspec.to_builtins


def _decode_body(row: ViewRow) -> dict[str, object]:
    """A row's object; a pod's only as far as the views read it (its spec and the rest of
    its status skipped: a quarter of the time of a full decode, measured on ~4 KB pods)."""
    if row.role == INSTANCES:
        try:
            lean: dict[str, object] = _to_builtins(_decode_pod(row.body))
            return lean
        except msgspec.DecodeError:
            pass  # not shaped as a pod's: read it whole
    return _decode(row.body)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a stretch of synchronous work (no await
    inside: no other task runs meanwhile). Decoding and shaping a view allocates thousands of
    dicts, and a collection of the older generations in the middle of it cost a third of an
    application's server groups (measured: 43 us of the 80 of a pod's health, in GC)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def decode_rows(rows: Sequence[ViewRow]) -> list[Resource]:
    """The objects of rows read with their bodies (a body that is not a JSON object is left
    out: the store keeps only what was valid JSON, so this is defence, not a path)."""
    found: list[Resource] = []
    for row in rows:
        try:
            body = _decode_body(row)
        except msgspec.DecodeError:
            log.warning("view of %s %s/%s in %s: unreadable body", row.kind, row.namespace,
                        row.name, row.account)  # fmt: skip
            continue
        found.append(Resource(row.account, body))
    return found


def _lagging(
    freshness: Freshness, keys: Sequence[FreshnessKey], found: Sequence[StoredObject]
) -> FreshnessKey | None:
    by_key = {object_key(o.account, o.group, o.kind, o.namespace, o.name): o for o in found}
    for key in keys:
        if not freshness.caught_up(key, by_key.get(key)):
            return key
    return None


async def wait_fresh(freshness: Freshness, store: Store) -> dict[str, str]:
    """Wait (bounded) until the cache honours every watermark of the views' kinds; the
    headers to answer with (the stale one when the bound passed)."""
    keys = freshness.pending_kinds(VIEW_KINDS)
    if not keys:
        return {}
    with trio.move_on_after(freshness.wait_seconds):
        while keys:
            lag = _lagging(freshness, keys, await store.get_objects(keys))
            if lag is None:
                return {}
            await freshness.wait(lag)
            keys = freshness.pending_kinds(VIEW_KINDS)
        return {}
    keys = freshness.pending_kinds(VIEW_KINDS)
    lag = _lagging(freshness, keys, await store.get_objects(keys)) if keys else None
    if lag is None:  # caught up as the bound passed
        return {}
    want = freshness.watermark(lag)
    note = f"{lag[2]} {lag[3]}/{lag[4]}: " + (
        "deleted object still cached" if want == "deleted" else f"resourceVersion < {want}"
    )
    log.warning(
        "view in %s: the cache did not catch up with the last write within %.1f s (%s); "
        "answering what it has",
        lag[0],
        freshness.wait_seconds,
        note,
    )
    return {STALE_HEADER: note}


class ViewReads:
    """One request's reads: ``headers`` says whether the answer is stale."""

    def __init__(self, store: Store, headers: dict[str, str]) -> None:
        self.store = store
        self.headers = headers

    async def rows(self, *queries: ViewQuery) -> list[list[ViewRow]]:
        """Each query's rows, all in one store call (one snapshot)."""
        return await self.store.read_views(queries)

    async def resources(self, *queries: ViewQuery) -> list[list[Resource]]:
        """Each query's objects, decoded (queries with bodies)."""
        found = await self.store.read_views(queries)
        with collector_paused():
            return [decode_rows(rows) for rows in found]


async def reads(request: Request) -> ViewReads:
    """The reads of a view request, once the cache honours the operations that succeeded."""
    state = context(request).state
    headers = await wait_fresh(state.feed.freshness, state.store)
    return ViewReads(state.store, headers)
