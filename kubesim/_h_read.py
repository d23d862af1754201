"""Reads over HTTP: get, list (paged, streamed out in large chunks) and watch.

A watch is one loop: take every ready event as one chunk from its cursor, send it with one
ASGI send, else wait for the resource's wake-up (or the next bookmark). A second task notices
the client going away, so a quiet watch does not outlive its connection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import trio

from kubesim._cluster import Cluster
from kubesim._faults import WatchFault
from kubesim._http import JSON, META_CT, META_LIST_CT, BodyWriter, Request, Send, respond
from kubesim._resources import ResourceType
from kubesim._selectors import Selector
from kubesim._watch import WatchCursor, WatchOptions

__all__ = ["Wakeups", "WatchDropped", "serve_get", "serve_list", "serve_watch"]

WATCH_CHUNK = 256 * 1024  # bytes of events per ASGI send (DESIGN 7: group ready events)
LIST_CHUNK = 4 * 1024 * 1024  # bytes of a list body per ASGI send


class WatchDropped(Exception):
    """An injected fault: end the watch by cutting its connection (no clean end of body)."""


class Wakeups:
    """One trio.Event per resource, set (and replaced) whenever that resource changes."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, str], trio.Event] = {}

    def notify(self, key: tuple[str, str]) -> None:
        event = self._events.pop(key, None)
        if event is not None:
            event.set()

    async def wait(self, key: tuple[str, str]) -> None:
        event = self._events.get(key)
        if event is None:
            event = self._events[key] = trio.Event()
        await event.wait()


@dataclass(frozen=True, slots=True)
class ReadTarget:
    rtype: ResourceType
    namespace: str | None
    name: str | None


async def serve_get(
    cluster: Cluster, target: ReadTarget, request: Request, send: Send, metadata_only: bool
) -> None:
    assert target.name is not None
    stored = cluster.get_stored(target.rtype, target.namespace or "", target.name)
    if metadata_only:
        await respond(send, 200, stored.meta_raw(), META_CT)
    else:
        await respond(send, 200, stored.raw, JSON)


async def serve_list(
    cluster: Cluster, target: ReadTarget, request: Request, send: Send, metadata_only: bool
) -> None:
    page = cluster.list_page(
        target.rtype,
        namespace=target.namespace,
        selector=Selector.parse(
            request.query.get("labelSelector"), request.query.get("fieldSelector")
        ),
        limit=request.int_param("limit"),
        continue_token=request.query.get("continue") or None,
        resource_version=request.query.get("resourceVersion"),
        resource_version_match=request.query.get("resourceVersionMatch"),
        now=trio.current_time(),
    )
    meta = f'{{"resourceVersion":"{page.resource_version}"'
    if page.continue_token:
        meta += f',"continue":"{page.continue_token}"'
    if page.remaining is not None:
        meta += f',"remainingItemCount":{page.remaining}'
    if metadata_only:
        kind, api_version, content_type = (
            "PartialObjectMetadataList",
            "meta.k8s.io/v1",
            META_LIST_CT,
        )
    else:
        kind, api_version = target.rtype.list_kind, target.rtype.api_version
        content_type = JSON
    head = f'{{"kind":"{kind}","apiVersion":"{api_version}","metadata":{meta}}},"items":['.encode()
    bodies = [s.meta_raw() for s in page.items] if metadata_only else [s.raw for s in page.items]
    total = sum(map(len, bodies))
    if total < LIST_CHUNK:
        # One join, so the page's bytes are copied once here (and once more by h11).
        parts = [head]
        for body in bodies:
            parts.append(body)
            parts.append(b",")
        if bodies:
            parts.pop()
        parts.append(b"]}")
        await respond(send, 200, b"".join(parts), content_type)
        return
    # A big list goes out in ~4 MiB chunks so no single copy of the whole body is made.
    writer = BodyWriter(send)
    await writer.start(200, content_type)
    chunk: list[bytes] = [head]
    size = 0
    for index, body in enumerate(bodies):
        if index:
            chunk.append(b",")
        chunk.append(body)
        size += len(body)
        if size >= LIST_CHUNK:
            await writer.write(b"".join(chunk))
            chunk, size = [], 0
    chunk.append(b"]}")
    await writer.write(b"".join(chunk))
    await writer.end()


def watch_options(target: ReadTarget, request: Request, metadata_only: bool) -> WatchOptions:
    send_initial = request.query.get("sendInitialEvents")
    return WatchOptions(
        namespace=target.namespace,
        selector=Selector.parse(
            request.query.get("labelSelector"), request.query.get("fieldSelector")
        ),
        metadata_only=metadata_only,
        resource_version=request.query.get("resourceVersion"),
        resource_version_match=request.query.get("resourceVersionMatch") or None,
        send_initial_events=None if send_initial is None else send_initial.lower() in ("true", "1"),
        allow_bookmarks=request.flag("allowWatchBookmarks"),
    )


async def serve_watch(
    cursor: WatchCursor,
    request: Request,
    send: Send,
    wakeups: Wakeups,
    *,
    bookmark_interval: float,
    fault: WatchFault | None,
) -> None:
    """Stream the watch until timeoutSeconds, the client leaves, or the cursor finishes.

    Raises WatchDropped when an injected fault says to cut the connection.
    """
    timeout = request.int_param("timeoutSeconds", 0)
    writer = BodyWriter(send)
    await writer.start(200, META_CT if cursor.options.metadata_only else JSON)
    dropped = False
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_cancel_on_disconnect, request, nursery.cancel_scope)
        try:
            with trio.move_on_after(timeout if timeout > 0 else math.inf):
                await _watch_loop(cursor, writer, wakeups, bookmark_interval, fault)
        except WatchDropped:
            dropped = True  # raised below, outside the nursery (no exception group)
        nursery.cancel_scope.cancel()
    if dropped:
        raise WatchDropped
    with trio.CancelScope(shield=True), trio.move_on_after(5):
        await writer.end()


async def _cancel_on_disconnect(request: Request, scope: trio.CancelScope) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


async def _watch_loop(
    cursor: WatchCursor,
    writer: BodyWriter,
    wakeups: Wakeups,
    bookmark_interval: float,
    fault: WatchFault | None,
) -> None:
    bookmarks = cursor.options.allow_bookmarks
    next_bookmark = trio.current_time() + bookmark_interval
    key = cursor.rtype.key
    stalled = False
    while not cursor.finished:
        if cursor.ready:
            max_events = None
            if fault is not None and fault.drop_after_events is not None:
                max_events = max(1, fault.drop_after_events - cursor.events_sent)
            chunk = cursor.take(WATCH_CHUNK, max_events)
            if chunk:
                await writer.write(chunk)
            if fault is not None:
                stalled = await _apply_fault(fault, cursor, writer, stalled)
            await trio.lowlevel.checkpoint()
            continue
        with trio.move_on_at(next_bookmark if bookmarks else math.inf):
            await wakeups.wait(key)
        if bookmarks and trio.current_time() >= next_bookmark:
            if cursor.caught_up:
                await writer.write(cursor.bookmark())
            next_bookmark = trio.current_time() + bookmark_interval


async def _apply_fault(
    fault: WatchFault, cursor: WatchCursor, writer: BodyWriter, stalled: bool
) -> bool:
    if fault.drop_after_events is not None and cursor.events_sent >= fault.drop_after_events:
        raise WatchDropped
    if fault.drop_after_bytes is not None and writer.bytes_sent >= fault.drop_after_bytes:
        raise WatchDropped
    if (
        not stalled
        and fault.stall_after_events is not None
        and cursor.events_sent >= fault.stall_after_events
    ):
        await trio.sleep(fault.stall_seconds)
        return True
    return stalled
